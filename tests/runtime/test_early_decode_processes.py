"""The decode processes started early (before the readers index: detaug/runtime/gpu/device_stage.py
``spawn_decode_service``) are never more than the plan wants, and a process the plan stops
before its CUDA context exits without one (detaug/runtime/gpu/decode_worker.py ``_plan_waiting``):
a process started early takes its CUDA context and decoders at once, and one the plan then stopped
held them, memory no plan counted (the YOLO recipe with partners drawn over the epoch started 3
processes for a plan of 1). CPU only: the processes are recorded, not started."""
from __future__ import annotations

import multiprocessing as mp
import sys

import pytest

from helpers import load_benchmark
from helpers.cases import BuildStopped, plan_stops_build

bench_gpu = load_benchmark("bench_gpu")
bench_yolo = load_benchmark("bench_yolo")


@pytest.fixture
def started(monkeypatch):
    """build() without a GPU: ``started`` records the processes started early (``early``) and
    each plan's (processes, threads) (``plans``); the build stops at the plan (or the early ones
    are closed where it is refused)."""
    from detaug.runtime import startup
    from detaug.runtime.gpu import early_decode

    log = plan_stops_build(monkeypatch)
    monkeypatch.setattr(early_decode, "EarlyDecoder", lambda *a, **k: None)
    monkeypatch.setattr(startup, "warm_gpu", lambda *a, **k: None)
    monkeypatch.delenv("DETAUG_DEVICE_MEMORY_BUDGET", raising=False)
    monkeypatch.delenv("DETAUG_DECODE_PROCESSES", raising=False)
    monkeypatch.delenv("DETAUG_EARLY_START", raising=False)
    return log


@pytest.fixture(scope="module")
def yolo_data(tmp_path_factory):
    root = str(tmp_path_factory.mktemp("yolo_early"))
    bench_gpu.make_dataset(root, 24, 1)
    return root


@pytest.mark.parametrize("partners", ["batch", "pool", "epoch"])
def test_no_process_is_started_early_that_the_plan_stops(yolo_data, started, partners):
    """The YOLO recipe of benchmarks/bench_yolo.py at the budget it builds at (the default, or
    the figure it is refused with there), as tests/runtime/test_yolo_budget.py builds it."""
    from detaug.runtime.gpu import memory_plan

    budget = None
    for _ in range(2):
        started.pop("early", None)
        started["plans"].clear()
        pipe = bench_yolo.detaug_pipe(yolo_data, 640, 64, "gpu", 0, partners, 0.5, budget=budget)
        try:
            pipe.build()
        except memory_plan.BudgetError as e:
            assert budget is None
            assert started.get("early", 0) <= 1  # (at most the one any plan has, then closed)
            budget = e.need
            continue
        except BuildStopped:
            break
    assert started["plans"] and started["plans"][-1][0] == pipe.build_plan.decode.processes
    assert 1 <= started["early"] <= started["plans"][-1][0], started


def test_a_process_stopped_before_its_context_makes_no_cuda_call(monkeypatch):
    """A decode process started early whose plan (stop) came while it started: it returns before
    importing cupy (here made unimportable), so it never takes a CUDA context."""
    from detaug.runtime.gpu import decode_worker

    monkeypatch.setitem(sys.modules, "cupy", None)  # an import of cupy raises ImportError
    ours, theirs = mp.Pipe()
    ours.send(("stop",))
    decode_worker._worker(theirs, 0, None, 2, 3)  # returns: no import, no context
    assert theirs.closed
    # its pipeline's process gone before the plan came: the same
    ours, theirs = mp.Pipe()
    ours.close()
    decode_worker._worker(theirs, 0, None, 2, 3)
    assert theirs.closed


def test_configure_stops_the_processes_the_plan_does_not_want_and_close_reaps_them(monkeypatch):
    """DecodeService.configure: the processes past the plan's number are sent stop, kept (named
    in ``pids()`` while they live) and joined at close, where one still alive is terminated."""
    from detaug.runtime.gpu import decode_proc

    class Proc:
        def __init__(self, pid):
            self.pid, self.exitcode, self.joined, self.terminated = pid, None, 0, False

        def join(self, timeout=None):
            self.joined += 1
            if self.pid != 12:  # (12 hangs at its exit)
                self.exitcode = 0

        def terminate(self):
            self.terminated = True

    pids = iter(range(10, 20))

    class Worker:
        exited = None  # (its process object never closed here)

        def __init__(self, mp_ctx, device_id, ring_bytes, threads=1, slots=3):
            self.proc, self.sent, self.alive = Proc(next(pids)), [], False

        def join(self, timeout):
            self.proc.join(timeout)

        def configure(self, ring_bytes, threads, slots, warm_first=False):
            self.sent.append("stop" if ring_bytes is None else ("ring", ring_bytes, threads))

        def send(self, msg):
            self.sent.append(msg[0])

        def unmap(self):
            pass

        def close_ends(self):
            self.closed = True

    monkeypatch.setattr(decode_proc, "_Worker", Worker)
    svc = decode_proc.DecodeService(3, 0, None, 2)  # started early: no ring yet
    first, *rest = svc.workers
    svc.configure(1, 64 << 20, 2, 3)
    assert svc.workers == [first] and svc.stopped == rest
    assert first.sent == [("ring", 64 << 20, 2)] and [w.sent for w in rest] == [["stop"], ["stop"]]
    assert svc.pids() == {10: "decode process", 11: "decode process stopped by the plan",
                          12: "decode process stopped by the plan"}
    svc.close()
    assert [w.proc.joined for w in rest] == [1, 1] and [w.proc.terminated for w in rest] == [False, True]
    assert all(getattr(w, "closed", False) for w in [first, *rest])  # their ends closed
    assert svc.workers == [] and svc.stopped == []
