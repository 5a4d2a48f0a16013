"""A pipeline that has run once, used in a child of os.fork (the child once hung forever;
a dropped pipeline's __del__ ran in later pipelines' forked workers): a CPU pipeline works in
the child from the same cursor and gives the parent's batches; a GPU one raises by name."""
import dataclasses
import os
import pickle
import select
import signal
import sys

import numpy as np
import pytest

from helpers.bounded import run_bounded
from detaug import Pipeline, fn
from helpers import close_pipelines, track  # noqa: F401 (fixture)

pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
IMAGES = [np.random.default_rng(i).integers(0, 256, (24 + i, 40 - i, 3), np.uint8) for i in range(12)]


def _pipe(host_processes=0, seed=3):
    def src(info):
        return IMAGES[info.idx_in_epoch]

    pipe = track(Pipeline(batch_size=2, num_threads=2, seed=seed, host_processes=host_processes))
    with pipe:
        x = fn.external_source(source=src, batch=False, size=len(IMAGES))
        x = fn.rotate(x, angle=fn.random.uniform(range=(-30, 30)), expand=False)
        pipe.set_outputs(fn.noise(x, std=5.0))
    return pipe


def _arrays(batch):
    return [np.asarray(a).copy() for a in batch[0].data] if hasattr(batch[0], "data") else batch


def in_child(work, timeout=60):
    """Run ``work()`` in a child of os.fork; its pickled result, or the exception it raised
    (as ``('error', type name, message)``). Fails the test if the child takes over ``timeout``."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: never return into pytest
        os.close(r)
        signal.alarm(timeout + 5)
        try:
            out = ("ok", work())
        except BaseException as e:  # noqa: BLE001 (reported to the parent)
            out = ("error", type(e).__name__, str(e))
        with os.fdopen(w, "wb") as f:
            pickle.dump(out, f)
        os._exit(0)
    os.close(w)
    ready, _, _ = select.select([r], [], [], timeout)
    if not ready:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
        os.close(r)
        pytest.fail(f"the forked child hung for {timeout} s")
    with os.fdopen(r, "rb") as f:
        data = f.read()
    os.waitpid(pid, 0)
    return pickle.loads(data)


@pytest.mark.parametrize("host_processes", [0, 2])
def test_child_of_fork_continues_from_the_same_cursor(host_processes):
    pipe = _pipe(host_processes)
    first = _arrays(pipe.run())
    got = in_child(lambda: [_arrays(pipe.run()) for _ in range(3)])
    assert got[0] == "ok", got
    expected = [_arrays(pipe.run()) for _ in range(3)]  # the parent's own next batches
    for a, b in zip(got[1], expected):
        for x, y in zip(a, b):
            np.testing.assert_array_equal(x, y)
    fresh = _pipe(host_processes)
    np.testing.assert_array_equal(first[0], _arrays(fresh.run())[0])


def test_child_random_access_and_reset_work():
    pipe = _pipe(2)
    pipe.run()
    want = _arrays(pipe.run_batch(4, epoch=1))
    got = in_child(lambda: (_arrays(pipe.run_batch(4, epoch=1)), pipe.reset(), _arrays(pipe.run())))
    assert got[0] == "ok", got
    for x, y in zip(got[1][0], want):
        np.testing.assert_array_equal(x, y)
    pipe.reset()
    for x, y in zip(got[1][2], _arrays(pipe.run())):
        np.testing.assert_array_equal(x, y)


def test_multiprocessing_fork_pool_workers_run_batches():
    """A daemonic worker (multiprocessing 'fork' Pool) may not start host workers: same batches
    from threads."""
    import multiprocessing as mp

    pipe = _pipe(2)
    pipe.run()
    want = [_arrays(pipe.run_batch(i, epoch=0)) for i in range(4)]
    _POOL_PIPE[:] = [pipe]
    with mp.get_context("fork").Pool(2) as pool:
        got = pool.map_async(_pool_batch, range(4)).get(timeout=60)
    for a, b in zip(got, want):
        for x, y in zip(a, b):
            np.testing.assert_array_equal(x, y)


_POOL_PIPE = []


def _pool_batch(i):
    return _arrays(_POOL_PIPE[0].run_batch(i, epoch=0))


def test_torch_dataloader_fork_workers():
    torch = pytest.importorskip("torch")

    pipe = _pipe(0)
    pipe.run()

    class Batches(torch.utils.data.Dataset):
        def __len__(self):
            return 6

        def __getitem__(self, i):  # sample i % 2 of batch i // 2
            return _arrays(pipe.run_batch(i // 2, epoch=0))[i % 2]

    loader = torch.utils.data.DataLoader(Batches(), batch_size=None, num_workers=2,
                                         multiprocessing_context="fork", timeout=60)
    got = [np.asarray(t) for t in loader]
    want = [a for i in range(3) for a in _arrays(pipe.run_batch(i, epoch=0))]
    for x, y in zip(got, want):
        np.testing.assert_array_equal(x, y)


def test_gpu_pipeline_in_a_fork_raises_by_name(monkeypatch):
    """CUDA does not survive a fork: a pipeline with a GPU stage says so (and what to do) in the
    child, instead of hanging or crashing. (Faked on the host: the flag the reset reads.)"""
    pipe = _pipe(0)
    pipe.build()  # (not run: no thread of it reads the flag meanwhile)
    built = pipe.build_plan  # (a record with a device op: what has_device_stage reads)
    monkeypatch.setattr(pipe, "build_plan", dataclasses.replace(built, device_ops=built.host_ops[:1]))
    assert pipe.has_device_stage
    got = in_child(lambda: pipe.run())
    monkeypatch.setattr(pipe, "build_plan", built)
    assert got[0] == "error" and got[1] == "ForkedPipelineError", got
    assert "spawn" in got[2] and str(os.getpid()) in got[2]
    np.testing.assert_array_equal(_arrays(pipe.run())[0], _arrays(_pipe(0).run())[0])


def test_dropped_pipeline_is_not_finalised_in_a_forked_child():
    """A pipeline dropped (in a reference cycle, not yet collected) before a fork: the child's
    garbage collection must not stop the parent's workers (it raised 'can only test a child
    process' there) nor run anything of it."""
    proc = run_bounded("""
        import gc, os, numpy as np
        from detaug import Pipeline, fn
        gc.disable()
        imgs = [np.zeros((8, 8, 3), np.uint8)] * 4
        for k in range(3):
            p = Pipeline(batch_size=2, num_threads=2, seed=k, host_processes=2)
            with p:
                x = fn.external_source(source=lambda info: imgs[info.idx_in_epoch], batch=False, size=4)
                p.set_outputs(fn.flip(x))
            p.run()
            p.cycle = p  # garbage, but only for the collector
            del p
        live = Pipeline(batch_size=2, num_threads=2, seed=9, host_processes=2)
        with live:
            x = fn.external_source(source=lambda info: imgs[info.idx_in_epoch], batch=False, size=4)
            live.set_outputs(fn.flip(x))
        live.run()  # forks its workers while the dropped pipelines are still in memory
        pid = os.fork()
        if pid == 0:
            gc.collect()
            os._exit(0)
        os.waitpid(pid, 0)
        gc.collect()
        live.run()
        live.close()
        print("done")
    """, mem_mb=2000, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "done" in proc.stdout
    assert "can only test a child process" not in proc.stderr, proc.stderr[-3000:]
    assert "Exception ignored" not in proc.stderr, proc.stderr[-3000:]
