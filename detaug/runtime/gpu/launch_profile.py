"""Where a GPU pipeline's launches spend their time (benchmarks): with ``DETAUG_LAUNCH_PROFILE=1``
each launch's passage through the stages below is stamped, and at exit one line per pipeline
goes to stderr: the mean time from each stage to the next one stamped, and how many launches
were between the two on average (the time summed over the launches, divided by the span). Off, a stamp
costs one dict lookup.

Stages, in order: ``submitted`` (queued by the executor), ``picked`` (a device worker takes it),
``planned`` (its host result is in: a worker's plan, or the host stage), ``ring`` (its decode
admitted), ``decoded``, ``output`` (its output slot admitted), ``made`` (outputs collected),
``popped`` (handed out)."""
from __future__ import annotations

import atexit
import os
import sys
import threading
import time

ON = os.environ.get("DETAUG_LAUNCH_PROFILE") == "1"
STAGES = ("submitted", "picked", "planned", "ring", "decoded", "output", "made", "popped")
_marks = {}   # (owner id, seq) -> {stage: time}
_lock = threading.Lock()


def mark(owner, seq, stage: str):
    """Stamp launch ``seq`` of ``owner`` (anything that lives as long as its launches) at
    ``stage``."""
    if ON and seq is not None:
        with _lock:
            _marks.setdefault((id(owner), seq), {})[stage] = time.perf_counter()


def stamp(admit, stage: str):
    """Stamp the launch of an executor's admission tickets (detaug/runtime/executor.py ``_Admit``)."""
    if ON:
        mark(getattr(admit, "slots", None), getattr(admit, "seq", None), stage)


def summary(marks: list) -> str:
    """The report of launches' stamps ``marks`` (dicts stage -> time): pure, tested on the CPU."""
    full = [m for m in marks if "submitted" in m and "popped" in m]
    if not full:
        return "no launch was handed out"
    span = max(m["popped"] for m in full) - min(m["submitted"] for m in full)
    gaps = {}  # (stage, next stage stamped) -> durations
    for m in full:
        present = [st for st in STAGES if st in m]
        for a, b in zip(present, present[1:]):
            gaps.setdefault((a, b), []).append(m[b] - m[a])
    order = {st: k for k, st in enumerate(STAGES)}
    parts = [f"{a}->{b} {1e3 * sum(g) / len(g):.2f} ms (x{sum(g) / span if span > 0 else 0:.1f})"
             for (a, b), g in sorted(gaps.items(), key=lambda kv: (order[kv[0][0]], order[kv[0][1]]))]
    total = sum(m["popped"] - m["submitted"] for m in full) / len(full)
    return f"{len(full)} launches, {1e3 * total:.1f} ms each in flight: " + ", ".join(parts)


@atexit.register
def _report():
    if not ON or not _marks:
        return
    by_owner = {}
    for (owner, _), m in list(_marks.items()):
        by_owner.setdefault(owner, []).append(m)
    for owner, marks in by_owner.items():
        print(f"detaug launch profile: {summary(marks)}", file=sys.stderr, flush=True)
