"""The start-up timeline of a pipeline: where the seconds between a fresh process and its first
batch go (``pipe.stats['startup']``).

Every pipeline records, once, the phases of its start: the interpreter's own start (from the
process's start time in ``/proc``, Linux), ``import detaug``, then ``build()``'s phases (graph,
readers' index, planning, decode processes, CUDA) and the first ``run()``'s (host workers, the
first launch's host stage, decode, device work, the batch out). ``pipe.stats['startup']`` is a
list of dicts in the order the phases began::

    {"phase": "build.readers", "start": 0.912, "end": 1.134, "seconds": 0.222}

``start`` and ``end`` are seconds since the process started (since ``import detaug`` began
where the process's start time cannot be read). The list is taken at build and at the first
batch: a background phase still running then (``build.kernels``) is not in it. Phases may overlap (the decode processes start
while the readers index; the first launch is made while the host workers start), and a gap
between two phases is the caller's own time (defining the graph, its code between build() and
run()). :func:`table` prints them. The phases of a pipeline built later in a long process start
late: the timeline is the process's, not the pipeline's.

``DETAUG_EARLY_START=0`` turns the start-up order off (:func:`early`): the phases are then those
of the plain order (decode processes started after the index, the first launch in a worker).

Phases (those that apply; a CPU pipeline has no decode processes, no CUDA):

* ``interpreter``: process start -> ``import detaug`` began.
* ``import``: ``import detaug``.
* ``build``: the whole ``build()`` call, and inside it ``build.graph`` (validation),
  ``build.gpu_check`` (cupy imported, a GPU seen), ``build.decode_processes.spawn`` (the decode
  processes started: they import and make their CUDA context while the readers index),
  ``build.cuda_context`` and ``build.kernels`` (in a background thread: this process's CUDA
  context, then the CUDA modules used before on this machine, loaded; ``build.kernels`` may end
  after the build), ``build.readers`` (the sources made: the readers' index), ``build.plan``
  (multi-sample levels, planning ahead), ``build.decode_processes`` (the plan: their rings sent),
  ``build.cuda`` (device and streams), ``build.decode_processes.ready`` (their handshakes, sent
  once their decoders are warm: waited for here, or, with the pipeline's own decoder for the
  first launches, in the background, ending after the build), ``build.early_decoder`` (in a
  background thread from the spawn on: nvImageCodec imported, this process's decoder made and
  warmed; runtime/gpu/early_decode.py, off with ``DETAUG_EARLY_DECODE=0``).
* ``run.host_workers``: the host worker processes forked (at the first run()).
* ``first_launch.host``: the first launch's host stage (reading, CPU decode and ops; a GPU
  pipeline's plan), made in this process's threads while the workers start.
* ``first_launch.device``: its device stage until its outputs exist on the device, in two parts:
  ``first_launch.decode`` (until its decode requests are answered: the decode processes' first
  decoders are made in here) and ``first_launch.outputs`` (the kernels, with the first compile
  or load of those not loaded ahead, until synchronised).
* ``first_batch``: ``build()`` called -> the first batch handed out by ``run()`` (its device work
  synchronised where a GPU made it).
"""
from __future__ import annotations

import contextlib
import os
import sys
import threading
import time

_IMPORT = {}  # "start", "end": perf_counter of ``import detaug`` (set by detaug/__init__.py)


def early() -> bool:
    """The start-up order (on unless ``DETAUG_EARLY_START=0``, for before/after comparisons):
    decode processes spawned before the readers index and without the main script, the first
    launch made in this process while the host workers wait, kernels loaded ahead."""
    return os.environ.get("DETAUG_EARLY_START", "1") != "0"


def import_began() -> None:
    _IMPORT.setdefault("start", time.perf_counter())


def import_ended() -> None:
    _IMPORT.setdefault("end", time.perf_counter())


now = time.perf_counter


def warm_gpu(device_id: int, timeline: "Timeline") -> threading.Event:
    """In a background thread, while the readers index: this process's CUDA context on
    ``device_id`` (phase ``build.cuda_context``), then the CUDA modules this machine used before
    (``build.kernels``: detaug/kernels/launch.py ``preload``). The event is set once the context
    exists (or failed to: build then makes it, and says why)."""
    ready = threading.Event()

    def work():
        try:
            timeline.begin("build.cuda_context")
            import cupy as cp

            with cp.cuda.Device(device_id):
                cp.cuda.runtime.free(0)  # (makes the context)
            timeline.end("build.cuda_context")
        except Exception:
            pass
        finally:
            ready.set()
        from ..kernels import launch

        timeline.begin("build.kernels")
        t = launch.preload(device_id, lambda: timeline.end("build.kernels"))
        if t is None:
            timeline.end("build.kernels")
        else:
            t.join()

    threading.Thread(target=work, daemon=True, name="detaug-cuda-warm").start()
    return ready


def _process_start() -> float | None:
    """The perf_counter value at which this process started (Linux: /proc), or None."""
    try:
        with open("/proc/self/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        ticks = os.sysconf("SC_CLK_TCK")
        with open("/proc/uptime") as f:
            uptime = float(f.read().split()[0])
        now = time.perf_counter()
        # fields[0] is the state (field 3): starttime is field 22
        return now - (uptime - int(fields[19]) / ticks)
    except (OSError, ValueError, IndexError):
        return None


class Timeline:
    """Phases of one pipeline's start, each recorded once (the first time it happens)."""

    def __init__(self):
        self._lock = threading.Lock()
        self._phases = {}  # name -> [start, end]
        start = _process_start()
        imp = _IMPORT.get("start")
        self.origin = start if start is not None and (imp is None or start <= imp) else imp
        if self.origin is None:
            self.origin = time.perf_counter()
        if imp is not None:
            if start is not None and start <= imp:
                self._phases["interpreter"] = [start, imp]
            if "end" in _IMPORT:
                self._phases["import"] = [imp, _IMPORT["end"]]

    def begin(self, name: str) -> None:
        with self._lock:
            self._phases.setdefault(name, [time.perf_counter(), None])

    def end(self, name: str) -> None:
        with self._lock:
            span = self._phases.get(name)
            if span is not None and span[1] is None:
                span[1] = time.perf_counter()

    def record(self, name: str, start: float, end: float) -> None:
        with self._lock:
            self._phases.setdefault(name, [start, end])

    def has(self, name: str) -> bool:
        return name in self._phases

    def start_of(self, name: str) -> float | None:
        span = self._phases.get(name)
        return None if span is None else span[0]

    @contextlib.contextmanager
    def phase(self, name: str):
        self.begin(name)
        try:
            yield
        finally:
            self.end(name)

    def first_batch(self) -> list:
        """The first batch is out: ``first_batch`` (build() called -> now) ends the timeline,
        once (where build began). Returns :meth:`as_list`."""
        start = self.start_of("build")
        if start is not None:
            self.record("first_batch", start, now())
        return self.as_list()

    def as_list(self) -> list:
        """The phases that ended, in the order they began (see the module's docstring)."""
        with self._lock:
            spans = [(n, s, e) for n, (s, e) in self._phases.items() if e is not None]
        spans.sort(key=lambda p: (p[0] == "first_batch", p[1]))  # (the sum of them: last)
        return [{"phase": n, "start": round(s - self.origin, 6), "end": round(e - self.origin, 6),
                 "seconds": round(e - s, 6)} for n, s, e in spans]


def table(phases: list) -> str:
    """``pipe.stats['startup']`` as a table: phase, start, end, seconds (one line each)."""
    width = max([len(p["phase"]) for p in phases] + [5])
    lines = [f"{'phase':<{width}}  {'start s':>8}  {'end s':>8}  {'seconds':>8}"]
    for p in phases:
        lines.append(f"{p['phase']:<{width}}  {p['start']:8.3f}  {p['end']:8.3f}  {p['seconds']:8.3f}")
    return "\n".join(lines)


@contextlib.contextmanager
def without_main():
    """Around ``Process.start()`` of a ``spawn`` context: the child is not told of this process's
    ``__main__`` (spawn would run the main script again in it, as ``__mp_main__``: every import
    at its top, torch's included, seconds before a decode process can start). Only for children
    that unpickle nothing defined there (detaug's decode processes: a function of detaug, a
    pipe, numbers)."""
    main = sys.modules.get("__main__") if early() else None
    saved = {k: main.__dict__[k] for k in ("__file__", "__spec__") if main is not None and k in main.__dict__}
    try:
        for k in saved:
            if k == "__spec__":
                main.__spec__ = None
            else:
                del main.__dict__[k]
        yield
    finally:
        if main is not None:
            main.__dict__.update(saved)
