"""A progress line for the command-line tools, without a dependency: ``callable(done, total)`` as
detaug's readers and writers call it.

On a terminal it redraws one line in place (``\\r``), at most ``refresh`` seconds apart and at the
end; anywhere else (a redirected log, CI) it writes whole lines, at most one every ``interval``
seconds, and a last line when it wrote any before, so that a log holds no ``\\r`` and a short run
writes nothing. Every line has the count, the percentage, the rate and the time left (or, at the
end, the time taken):

    writing: 3400/10000  34% | 1133.3 items/s | ETA 0:05
    writing: 10000/10000 100% | 1142.9 items/s | 0:08

(tqdm does the same; detaug's CLIs need only this much, so it is not a dependency.)
"""
from __future__ import annotations

import sys
import time
from typing import Callable, TextIO


def format_seconds(s: float) -> str:
    """``m:ss``, or ``h:mm:ss`` from an hour up (rounded to the second)."""
    s = int(round(max(s, 0.0)))
    h, rest = divmod(s, 3600)
    m, sec = divmod(rest, 60)
    return f"{h}:{m:02d}:{sec:02d}" if h else f"{m}:{sec:02d}"


class Progress:
    """Progress of ``label`` on ``stream`` (stderr), called as ``progress(done, total)``.

    Args:
        label: what is counted ('reading', 'writing').
        stream: where to write (default ``sys.stderr``); a terminal (``isatty()``) gets the
            redrawn line, anything else plain lines.
        interval: seconds between plain lines (not a terminal).
        refresh: seconds between redraws (a terminal).
        unit: the counted things' name in the rate.
        clock: the time source (``time.monotonic``; tests pass their own).
    """

    def __init__(self, label: str, stream: TextIO | None = None, *, interval: float = 10.0,
                 refresh: float = 0.1, unit: str = "items",
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.label, self.stream, self.unit, self.clock = label, stream or sys.stderr, unit, clock
        isatty = getattr(self.stream, "isatty", None)
        self.tty = bool(isatty and isatty())
        self.every = refresh if self.tty else interval
        self.start = clock()
        self.last = None  # when the last line was written (None: nothing written yet)

    @property
    def shown(self) -> bool:
        """Whether a line has been written."""
        return self.last is not None

    def line(self, done: int, total: int, now: float) -> str:
        """The progress text for ``done`` of ``total`` at time ``now`` (no line ending)."""
        elapsed = now - self.start
        rate = done / elapsed if elapsed > 0 else 0.0
        pct = 100 * done // total if total else 100
        text = f"{self.label}: {done}/{total} {pct:3d}% | {rate:.1f} {self.unit}/s"
        if done >= total:
            return text + f" | {format_seconds(elapsed)}"
        eta = format_seconds((total - done) / rate) if rate > 0 else "?"
        return text + f" | ETA {eta}"

    def __call__(self, done: int, total: int) -> None:
        now = self.clock()
        end = done >= total
        due = (now - (self.start if self.last is None else self.last)) >= self.every
        if self.tty:
            if not (due or end or self.last is None):
                return
            self.stream.write("\r" + self.line(done, total, now) + ("\n" if end else ""))
        else:
            if not (due or (end and self.shown)):
                return
            self.stream.write(self.line(done, total, now) + "\n")
        self.last = now
        self.stream.flush()
