"""A decode service whose handshake failed (detaug/runtime/gpu/decode_proc.py: ``connect`` stops
every process and closes its ends) can still be closed and asked its pids: the process objects
closed there are not joined or read again. Real spawned processes, started early (no ring: they
wait for the plan before any CUDA), one killed before its handshake, so no GPU is needed."""
from __future__ import annotations

import os
from multiprocessing import resource_tracker

import pytest

from detaug.runtime.gpu.decode_proc import DecodeService

pytestmark = pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="counts /proc/self/fd")


def test_close_after_a_failed_handshake():
    resource_tracker.ensure_running()  # (the first spawn starts it, and keeps its pipe open)
    baseline = len(os.listdir("/proc/self/fd"))
    svc = DecodeService(2, 0, None)  # started early: waiting for the plan
    first, second = svc.workers
    pids = [first.proc.pid, second.proc.pid]
    first.proc.terminate()
    first.proc.join(10)
    with pytest.raises(RuntimeError, match="did not start"):
        svc.connect()
    # both stopped, joined and their ends closed, their exit status kept
    assert [w.exited for w in (first, second)] == [(p, -15) for p in pids]
    assert svc.pids() == {}  # none is alive
    assert "killed by signal 15" in str(second.death(3))
    svc.close()  # no join of a closed process object
    assert svc.workers == [] and len(os.listdir("/proc/self/fd")) == baseline
