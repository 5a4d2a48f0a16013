"""core/recycle.py: large host arrays on kept mappings, reused only when no view of them is
left; a pipeline's batches held by the caller are never written by the batches after them."""
import gc
import os

import numpy as np
import pytest

from detaug import Pipeline, fn
from detaug.core import recycle
from helpers import close_pipelines, track  # noqa: F401 (close_pipelines: autouse fixture)

BIG = (4, 256, 256, 3)  # 768 KiB: over MIN_BYTES


def _span(a):
    lo = a.__array_interface__["data"][0]
    return lo, lo + a.nbytes


@pytest.fixture(autouse=True)
def empty_free_list():
    """Each test starts with an empty free list and no garbage: a pipeline an earlier test left
    unclosed closes when the collector finds it, and its close empties the free list
    (executor: ``recycle.release()``), which made the free-list counts here fail now and then
    under xdist. So garbage is collected first and the automatic collector is off while the test
    runs (its own ``gc.collect()`` calls find only what it made)."""
    gc.collect()
    recycle.release()
    gc.disable()
    try:
        yield
    finally:
        gc.enable()
        recycle.release()


def test_arrays_are_np_empty_alike():
    a = recycle.empty(BIG, np.uint8)
    assert a.shape == BIG and a.dtype == np.uint8 and a.flags.c_contiguous and a.flags.writeable
    b = recycle.empty((300, 400), np.float32)
    assert b.shape == (300, 400) and b.dtype == np.float32
    small = recycle.empty((10, 10, 3))
    assert small.shape == (10, 10, 3) and small.base is None  # np.empty's own


def _apart(a, span):
    lo, hi = _span(a)
    return lo >= span[1] or hi <= span[0]


def test_a_mapping_is_reused_only_when_no_view_is_left():
    a = recycle.empty(BIG)
    first = _span(a)
    a[...] = 1
    views = [a[1:], a.T, np.asarray(a[:, ::-1]), a.reshape(-1)[5:].view(np.int8)]
    del a
    while views:
        gc.collect()
        b = recycle.empty(BIG)  # a view still reads the first mapping: another one
        assert _apart(b, first)
        b[...] = 2
        assert (views[-1] == 1).all()
        del b
        views.pop()
    gc.collect()
    # no view left: the first mapping is free again, and one of the next two takes it
    c, d = recycle.empty(BIG), recycle.empty(BIG)
    assert not (_apart(c, first) and _apart(d, first))


def test_reuse_takes_the_same_pages_and_best_fit():
    a = recycle.empty(BIG)
    at = _span(a)[0]
    del a
    gc.collect()
    assert recycle.empty((4, 250, 256, 3)).__array_interface__["data"][0] == at  # within 2x
    gc.collect()
    assert recycle.free_bytes() > 0
    far = recycle.empty((1, 256, 256, 3))  # 192 KiB: under MIN_BYTES, np.empty
    assert far.base is None


def test_free_list_bounds(monkeypatch):
    monkeypatch.setattr(recycle, "MAX_AGE", 3)
    a = recycle.empty(BIG)
    del a
    gc.collect()
    kept = recycle.free_bytes()
    assert kept >= np.prod(BIG)
    for _ in range(5):  # another size, made and dropped: BIG's mapping ages out, its stays
        recycle.empty((2048, 2048), np.uint8)
    assert recycle.free_bytes() == 4 << 20
    monkeypatch.setattr(recycle, "FREE_BYTES", 1 << 20)
    arrays = [recycle.empty(BIG) for _ in range(3)]
    del arrays
    gc.collect()
    assert recycle.free_bytes() <= 1 << 20


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_a_forked_child_drops_the_free_list():
    a = recycle.empty(BIG)
    del a
    gc.collect()
    assert recycle.free_bytes() > 0
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: report its free bytes, leave at once
        os.write(w, str(recycle.free_bytes()).encode())
        os._exit(0)
    os.close(w)
    got = os.read(r, 64)
    os.close(r)
    os.waitpid(pid, 0)
    assert got == b"0"
    assert recycle.free_bytes() > 0  # the parent's own list is kept


def _root(a):
    while isinstance(a, np.ndarray) and a.base is not None:
        a = a.base
    return a


def test_batches_held_are_not_overwritten_by_later_batches():
    """A CPU pipeline's outputs (over MIN_BYTES, from kept mappings) held across later runs keep
    their values: each batch of a second pipeline of the same seed, run one batch at a time and
    dropped, equals the held one."""
    rng = np.random.default_rng(5)
    images = [rng.integers(0, 256, (192, 256, 3), np.uint8) for _ in range(8)]

    def make():
        pipe = track(Pipeline(batch_size=4, num_threads=1, seed=3))
        with pipe:
            img = fn.external_source(source=lambda info: images[info.idx_in_epoch % 8],
                                     batch=False)
            img = fn.rotate(img, angle=fn.random.uniform(range=(-30, 30)), fill_value=0.0,
                            keep_size=True)
            pipe.set_outputs(fn.hsv(img, hue=fn.random.uniform(range=(-20, 20))))
        return pipe

    pipe = make()
    held = [np.asarray(pipe.run()[0].data) for _ in range(4)]
    assert all(isinstance(_root(h), memoryview) for h in held)  # kept mappings
    copies = [h.copy() for h in held]
    for _ in range(4):
        pipe.run()
    for h, c in zip(held, copies):
        np.testing.assert_array_equal(h, c)
    other = make()
    for h in held:
        np.testing.assert_array_equal(np.asarray(other.run()[0].data), h)
