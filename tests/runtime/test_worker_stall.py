"""A host worker that stops (SIGSTOP, a debugger) or dies while it owes batches: run() raises
WorkerDied naming the worker and why, instead of waiting forever."""
import os
import sys

import pytest

from helpers.bounded import run_bounded

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="host workers: Linux")

SCRIPT = """
    import os, signal, time, numpy as np
    from detaug import Pipeline, fn
    from detaug.runtime import host_workers as H
    H.STOPPED_S = 1.0
    imgs = [np.full((16, 16, 3), k, np.uint8) for k in range(64)]
    p = Pipeline(batch_size=2, num_threads=2, seed=0, host_processes=2, prefetch_queue_depth=1)
    with p:
        x = fn.external_source(source=lambda info: imgs[info.idx_in_epoch], batch=False, size=64)
        p.set_outputs(fn.flip(x))
    p.run()
    pids = p._executor.workers.pids
    for pid in pids:
        os.kill(pid, signal.{sig})
    t, err = time.time(), None
    try:
        for _ in range(40):
            p.run()
    except H.WorkerDied as e:
        err = e
    print("raised" if err else "no error", round(time.time() - t, 1))
    print(err)
    p.close()
    for pid in pids:
        try:
            os.kill(pid, 0)
            state = open(f"/proc/{{pid}}/stat").read().rsplit(")", 1)[1].split()[0]
            print("left", pid, state)
        except (OSError, FileNotFoundError):
            pass
"""


@pytest.mark.parametrize("sig", ["SIGSTOP", "SIGKILL"])
def test_stopped_or_killed_worker_fails_its_batches_by_name(sig):
    proc = run_bounded(SCRIPT.format(sig=sig), mem_mb=2000, timeout=90)
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = proc.stdout.splitlines()
    assert lines[0].startswith("raised"), proc.stdout
    assert float(lines[0].split()[1]) < 30
    assert "host worker" in lines[1] and "while making batch" in lines[1], lines[1]
    if sig == "SIGSTOP":
        assert "stopped" in lines[1]
    assert not [l for l in lines if l.startswith("left") and not l.endswith("Z")], proc.stdout


def test_proc_state_reads_this_process():
    from detaug.runtime.host_workers import _proc_state

    assert _proc_state(os.getpid()) in ("R", "S")
    assert _proc_state(2 ** 22 + 12345) == ""
