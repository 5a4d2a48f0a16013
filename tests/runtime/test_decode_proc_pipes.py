"""The decode processes' ends in the pipeline's process (detaug/runtime/gpu/decode_proc.py) close
as soon as a process is stopped or joined: the pipe of a process the plan stops closes when it is
sent its stop (which it still reads: it exits cleanly, before any CUDA), and every process's pipe
and sentinel close once close() has joined it; no file descriptor is left open. Real spawned
processes, started early (no ring: they wait for the plan before any CUDA), so no GPU is needed."""
from __future__ import annotations

import os
from multiprocessing import resource_tracker

import pytest

from detaug.runtime.gpu.decode_proc import DecodeService

pytestmark = pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="counts /proc/self/fd")


def _fds() -> int:
    return len(os.listdir("/proc/self/fd"))


@pytest.fixture
def baseline():
    resource_tracker.ensure_running()  # (the first spawn starts it, and keeps its pipe open)
    return _fds()


def test_a_process_the_plan_stops_has_its_pipe_closed_at_once(baseline):
    svc = DecodeService(2, 0, None)  # started early: waiting for the plan
    stopped = list(svc.workers)
    assert _fds() > baseline and not any(w.conn.closed for w in stopped)
    svc.configure(0, 1 << 20, 1, 1)  # the plan wants none: both sent stop
    assert svc.workers == [] and svc.stopped == stopped
    assert all(w.conn.closed for w in stopped)
    pids = [w.proc.pid for w in stopped]
    svc.close()  # joins them: their sentinels close too
    # exit code 0: each read its stop on a pipe already closed here
    assert [w.exited for w in stopped] == [(p, 0) for p in pids]
    assert _fds() == baseline


def test_close_joins_a_process_and_closes_its_ends(baseline):
    svc = DecodeService(1, 0, None)
    (w,) = svc.workers
    svc.close()  # a stop, then the join
    assert w.conn.closed and w.exited is not None and w.exited[1] == 0
    with pytest.raises(ValueError):  # the process object is closed: no sentinel held
        w.proc.is_alive()
    assert "exit code 0" in str(w.death(7))  # its status still told
    assert _fds() == baseline
