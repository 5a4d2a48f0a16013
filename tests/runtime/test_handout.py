"""detaug/runtime/gpu/handout.py: the memory of a batch handed out goes back to the pool at the
first poll after the caller has dropped the batch, and only behind a device-side wait, on each
stream its outputs were allocated on, for events recorded then on the caller's
streams (stand-in arrays, streams and
events; the GPU tests are test_gpu_pipeline's
test_a_dropped_batch_is_not_reused_while_the_callers_queued_work_may_read_it and
test_graph_never_waits_for_the_device)."""
import sys
import threading
import weakref

import numpy as np
import pytest
from helpers import fresh_seed

from detaug.core.batch import ImageBatch
from detaug.runtime.gpu.handout import HeldOutputs, device_arrays


class _Stream:
    """A stand-in CUDA stream: the operations queued on it, in order."""

    def __init__(self):
        self.ops = []


class _Streams(dict):
    def __missing__(self, ptr):
        self[ptr] = _Stream()
        return self[ptr]


class _Event:
    def __init__(self, stream_ptr, log):
        self.stream, self.waited = stream_ptr, False
        log.append(self)

    def synchronize(self):
        self.waited = True


class _Mem:  # what keeps a stand-in array's memory allocated
    pass


class _Array:
    def __init__(self):
        self.__cuda_array_interface__ = {}
        self.mem = _Mem()


def _held(log, streams=None, synced=None):
    streams = _Streams() if streams is None else streams

    def record(ptr):
        if ptr == "gone":  # a stream the caller has destroyed
            raise RuntimeError("invalid resource handle")
        ev = _Event(ptr, log)
        streams[ptr].ops.append(ev)
        return ev

    def wait(ptr, ev):
        streams[ptr].ops.append(("wait", ev))

    return HeldOutputs(record=record, wait=wait, memory_of=lambda a: a.mem,
                       sync_all=lambda: (synced if synced is not None else []).append(1))


def _batch():
    """Outputs as a pipeline hands them out: an image batch and a padded-boxes dict."""
    a, b, c = _Array(), _Array(), _Array()
    return (ImageBatch(a, "gpu", "CHW"), {"boxes": b, "counts": c}), [weakref.ref(x.mem) for x in (a, b, c)]


def _waits(stream):
    return [op[1] for op in stream.ops if isinstance(op, tuple) and op[0] == "wait"]


def test_device_arrays_finds_each_array_once():
    a, b = _Array(), _Array()
    outs = (ImageBatch([a, b, a], "gpu", "HWC"), {"x": b, "y": np.zeros(2)}, a)
    assert [id(x) for x in device_arrays(outs)] == [id(a), id(b)]


def test_memory_goes_at_the_first_poll_after_the_drop_behind_a_device_wait():
    log, streams = [], _Streams()
    h = _held(log, streams)
    outs, mems = _batch()
    h.hold(outs, [7, 0, 7], (5, 6))
    seen = []  # what the made-on streams held when the memory went
    weakref.finalize(outs[0].data.mem, lambda: seen.append([list(_waits(streams[p])) for p in (5, 6)]))
    assert h.poll() == 0 and not log  # the caller holds the batch: nothing fenced
    images = outs[0].data
    del outs  # the caller keeps one array (a tensor over it, say)
    assert h.poll() == 0 and not log and all(m() is not None for m in mems)
    del images
    assert h.poll() == 1 and len(h) == 0
    assert [e.stream for e in log] == [7, 0]  # one event per caller stream, recorded at that poll
    assert all(m() is None for m in mems)  # nothing else kept the memory
    # each stream the outputs were allocated on waits for both events, queued before the memory went
    assert seen == [[[log[0], log[1]], [log[0], log[1]]]]  # (one free, two streams)
    assert not any(e.waited for e in log)  # and no host thread waited
    assert h.poll() == 0 and len(log) == 2


def test_a_loop_that_fetches_ahead_is_fenced_after_its_step():
    """Lightning's fetcher asks for batch k+1 before the step on batch k is queued: the fence of
    batch k, and the output stream's wait for it, must come after that step (they came before it
    when the fence was made at the next request)."""
    log, streams = [], _Streams()
    h = _held(log, streams)
    held = []
    for k in range(6):
        outs, _ = _batch()
        h.hold(outs, [0], (9,))  # request k
        held.append((k, outs))
        h.poll()
        if len(held) == 2:  # the step on the batch fetched before this one
            j, prev = held.pop(0)
            streams[0].ops.append(("step", j))
            del prev
    ops = streams[0].ops
    fences = [i for i, op in enumerate(ops) if isinstance(op, _Event)]
    steps = [i for i, op in enumerate(ops) if isinstance(op, tuple)]
    assert len(fences) == 4 == len(steps) - 1  # the last step's batch is dropped after the poll
    assert all(f > s for f, s in zip(fences, steps))
    assert _waits(streams[9]) == [ops[f] for f in fences]


def test_poll_never_waits_on_the_host_where_the_streams_are_known():
    log, streams = [], _Streams()
    h = _held(log, streams)
    kept, _ = _batch()
    h.hold(kept, [1], (8,))
    outs, mems = _batch()
    h.hold(outs, [2], (8,))
    odd, odd_mems = _batch()
    h.hold(odd, [3], None)  # made on streams not known: its fence is waited for on the host
    del outs, odd
    assert h.poll() == 2 and len(h) == 1  # the kept batch stays, unfenced
    assert [(e.stream, e.waited) for e in log] == [(2, False), (3, True)]
    assert _waits(streams[8]) == [log[0]]
    assert all(m() is None for m in mems + odd_mems)


def test_drain_fences_everything_and_waits():
    log = []
    h = _held(log)
    kept, mems = _batch()
    h.hold(kept, [3], (8,))
    gone, _ = _batch()
    h.hold(gone, [5], (8,))
    del gone
    assert h.poll() == 1  # let go behind a device-side wait only
    h.drain([3, 4])
    # every caller stream ever seen is waited for on the host, the let-go batch's too
    assert len(h) == 0 and sorted(e.stream for e in log[1:]) == [3, 4, 5]
    assert all(e.waited for e in log[1:])
    del kept
    assert all(m() is None for m in mems)
    h.drain([4])  # nothing held: the streams are still waited for
    assert sorted(e.stream for e in log[4:]) == [3, 4, 5] and all(e.waited for e in log[4:])


def test_a_fence_that_cannot_be_made_waits_for_the_whole_device():
    """A caller's stream already destroyed: the batch still goes (nothing is lost or held for
    ever), after a host wait for the whole device; the other batches of the poll are fenced."""
    log, synced = [], []
    h = _held(log, synced=synced)
    a, mems_a = _batch()
    h.hold(a, ["gone"], (8,))
    b, mems_b = _batch()
    h.hold(b, [2], (8,))
    del a, b
    assert h.poll() == 2 and len(h) == 0 and synced == [1]
    assert [e.stream for e in log] == [2]
    assert all(m() is None for m in mems_a + mems_b)


def test_workers_polling_never_free_a_batch_early():
    """Device workers poll while the caller's thread holds and drops batches: every batch's
    memory goes exactly once, each only after it was dropped, and only once each stream it was
    made on holds a wait for an event recorded on its caller stream after the drop."""
    log, streams = [], _Streams()
    h = _held(log, streams)
    dropped = set()
    after_drop = {}  # event id -> its stream's batch was dropped when it was recorded
    freed = []
    lock = threading.Lock()

    def record(ptr, _rec=h._record):
        ev = _rec(ptr)
        with lock:
            after_drop[id(ev)] = ptr in dropped
        return ev

    h._record = record

    def on_free(k, made_on):
        with lock:
            fenced = all(any(e.stream == k and after_drop[id(e)] for e in _waits(streams[p]))
                         for p in made_on)
            freed.append((k, k in dropped, fenced))

    stop = threading.Event()

    def worker():
        while not stop.is_set():
            h.poll()

    threads = [threading.Thread(target=worker) for _ in range(3)]
    switch = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # threads switch often: a drop lands inside a poll
    for t in threads:
        t.start()
    alive = []
    rng = np.random.default_rng(0)
    try:
        for k in range(1500):
            outs, mems = _batch()
            made_on = (-1 - k % 3, -9)
            weakref.finalize(outs[0].data.mem, on_free, k, made_on)
            h.hold(outs, [k], made_on)
            alive.append((k, outs))
            del outs, mems
            while len(alive) > rng.integers(1, 4):
                with lock:
                    dropped.add(alive[0][0])  # (marked before the drop: a worker may free it now)
                del alive[0]
    finally:
        sys.setswitchinterval(switch)
    with lock:
        dropped.update(k for k, _ in alive)
    alive.clear()
    stop.set()
    for t in threads:
        t.join()
    h.poll()
    assert len(h) == 0
    assert sorted(k for k, _, _ in freed) == list(range(1500))
    assert all(d and f for _, d, f in freed)
    assert not any(e.waited for e in log)


@pytest.mark.parametrize("seed", [0, 1, 2, fresh_seed()])
def test_random_interleavings_match_a_reference_model(seed):
    """Random hand-outs, drops and polls against a model written apart: a batch's memory goes at
    the first poll after the caller dropped it; at that poll one event is recorded on each of its
    caller streams, in order, and each stream it was made on waits for those events."""
    rng = np.random.default_rng(seed)
    log, streams = [], _Streams()
    h = _held(log, streams)
    user = {}            # batch -> outs the caller still holds
    mems = {}            # batch -> weakrefs to its memory
    model = {}           # batch -> "held" | "dropped" | "gone"
    made = {}            # batch -> the streams it was made on
    n = 0
    for _ in range(500):
        op = rng.integers(0, 3)
        if op == 0:
            outs, mems[n] = _batch()
            made[n] = (-100 - int(rng.integers(0, 3)),)
            h.hold(outs, [n, -1], made[n])  # its own stream, and one every batch shares
            user[n] = outs
            del outs
            model[n] = "held"
            n += 1
        elif op == 1 and user:
            k = list(user)[rng.integers(0, len(user))]
            del user[k]
            model[k] = "dropped"
        else:
            before = {p: len(_waits(streams[p])) for p in (-100, -101, -102)}
            start = len(log)
            h.poll()
            new = log[start:]
            assert len(new) % 2 == 0
            fenced = []
            for own, shared in zip(new[::2], new[1::2]):  # a batch's streams, in its order
                k = own.stream
                assert shared.stream == -1 and model[k] == "dropped", (seed, k)
                model[k] = "gone"
                fenced.append((k, own, shared))
            assert "dropped" not in model.values(), seed  # all let go
            for p in (-100, -101, -102):
                want = [e for k, own, shared in fenced if made[k] == (p,) for e in (own, shared)]
                assert _waits(streams[p])[before[p]:] == want, (seed, p)
        for k, state in model.items():
            assert (mems[k][0]() is None) == (state == "gone"), (seed, k, state)
    assert not any(e.waited for e in log)
