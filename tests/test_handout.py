"""detaug/handout.py: the memory of a batch handed out is kept until the caller has dropped the
batch and the work it had queued on its streams by then has run (stand-in arrays and events; the
GPU test is test_gpu_pipeline's
test_a_dropped_batch_is_not_reused_while_the_callers_queued_work_may_read_it)."""
import threading
import weakref

import numpy as np
import pytest

from detaug.batch import ImageBatch
from detaug.handout import HeldOutputs, device_arrays


class _Stream:
    """A stand-in CUDA stream: the operations queued on it, in order."""

    def __init__(self):
        self.ops = []


class _Event:
    def __init__(self, stream_ptr, log):
        self.stream, self.done, self.waited = stream_ptr, False, False
        log.append(self)

    def synchronize(self):
        self.waited = self.done = True


class _Mem:  # what keeps a stand-in array's memory allocated
    pass


class _Array:
    def __init__(self):
        self.__cuda_array_interface__ = {}
        self.mem = _Mem()


def _held(log, streams=None):
    def record(ptr):
        ev = _Event(ptr, log)
        if streams is not None:
            streams[ptr].ops.append(ev)
        return ev
    return HeldOutputs(record=record, memory_of=lambda a: a.mem)


def _batch():
    """Outputs as a pipeline hands them out: an image batch and a padded-boxes dict."""
    a, b, c = _Array(), _Array(), _Array()
    return (ImageBatch(a, "gpu", "CHW"), {"boxes": b, "counts": c}), [weakref.ref(x.mem) for x in (a, b, c)]


def test_device_arrays_finds_each_array_once():
    a, b = _Array(), _Array()
    outs = (ImageBatch([a, b, a], "gpu", "HWC"), {"x": b, "y": np.zeros(2)}, a)
    assert [id(x) for x in device_arrays(outs)] == [id(a), id(b)]


def test_memory_goes_only_after_the_drop_and_the_work_queued_by_then():
    log = []
    h = _held(log)
    outs, mems = _batch()
    h.hold(outs, [7, 0, 7])
    assert h.poll() == 0 and not log  # the caller holds the batch: nothing fenced
    images = outs[0].data
    del outs  # the caller keeps one array (a tensor over it, say)
    assert h.poll() == 0 and not log
    del images
    assert h.poll() == 0 and [e.stream for e in log] == [7, 0]  # one event per stream
    assert all(m() is not None for m in mems)
    log[0].done = True
    assert h.poll() == 0 and all(m() is not None for m in mems)
    log[1].done = True
    assert h.poll() == 1 and len(h) == 0
    assert all(m() is None for m in mems)  # nothing else kept the memory


def test_a_loop_that_fetches_ahead_is_fenced_after_its_step():
    """Lightning's fetcher asks for batch k+1 before the step on batch k is queued: the fence of
    batch k must come after that step on the stream (it came before it when the fence was made
    at the next request)."""
    log = []
    streams = {0: _Stream()}
    h = _held(log, streams)
    held = []
    for k in range(6):
        outs, _ = _batch()
        h.hold(outs, [0])  # request k
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


def test_poll_waits_only_when_asked_and_only_for_dropped_batches():
    log = []
    h = _held(log)
    kept, _ = _batch()
    h.hold(kept, [1])
    outs, mems = _batch()
    h.hold(outs, [2])
    del outs
    assert h.poll() == 0 and [e.stream for e in log] == [2] and not log[0].waited
    assert h.poll(wait=True) == 1 and log[0].waited  # a device worker, before making outputs
    assert all(m() is None for m in mems) and len(h) == 1  # the kept batch stays, unfenced
    assert len(log) == 1


def test_drain_fences_everything_and_waits():
    log = []
    h = _held(log)
    kept, mems = _batch()
    h.hold(kept, [3])
    h.drain([3, 4])
    assert len(h) == 0 and sorted(e.stream for e in log) == [3, 4] and all(e.waited for e in log)
    del kept
    assert all(m() is None for m in mems)


def test_workers_polling_never_free_a_batch_early():
    """Device workers poll (and wait) while the caller's thread holds and drops batches, and the
    GPU completes events: every batch's memory goes exactly once, each only after it was dropped
    and its fence (on its own stream) had completed."""
    log = []
    h = _held(log)
    dropped = set()
    freed = []
    lock = threading.Lock()

    def on_free(k):
        with lock:
            fences = [e for e in log if e.stream == k]
            freed.append((k, k in dropped, bool(fences) and all(e.done for e in fences)))

    stop = threading.Event()

    def worker(wait):
        while not stop.is_set():
            h.poll(wait=wait)

    threads = [threading.Thread(target=worker, args=(w,)) for w in (True, False, False)]
    for t in threads:
        t.start()
    alive = []
    rng = np.random.default_rng(0)
    for k in range(1500):
        outs, mems = _batch()
        weakref.finalize(outs[0].data.mem, on_free, k)
        h.hold(outs, [k])
        alive.append((k, outs))
        del outs, mems
        while len(alive) > rng.integers(1, 4):
            with lock:
                dropped.add(alive[0][0])  # (marked before the drop: a worker may free it at once)
            del alive[0]
        for e in list(log):
            if rng.random() < 0.3:
                e.done = True
    with lock:
        dropped.update(k for k, _ in alive)
    alive.clear()
    stop.set()
    for t in threads:
        t.join()
    h.poll(wait=True)
    assert len(h) == 0
    assert sorted(k for k, _, _ in freed) == list(range(1500))
    assert all(d and f for _, d, f in freed)


@pytest.mark.parametrize("seed", [0, 1, 2, np.random.SeedSequence().entropy % 2**32])
def test_random_interleavings_match_a_reference_model(seed):
    """Random hand-outs, drops, completions and polls against a model written apart: a batch's
    fence is recorded at the first poll after the caller dropped it, and its memory goes at the
    first poll at which that fence has completed."""
    rng = np.random.default_rng(seed)
    log = []
    h = _held(log)
    user = {}            # batch -> outs the caller still holds
    mems = {}            # batch -> weakrefs to its memory
    model = {}           # batch -> "held" | "dropped" | list of its events | "gone"
    n = 0
    for _ in range(500):
        op = rng.integers(0, 4)
        if op == 0:
            outs, mems[n] = _batch()
            h.hold(outs, [n, -1])  # its own stream, and one every batch shares
            user[n] = outs
            del outs
            model[n] = "held"
            n += 1
        elif op == 1 and user:
            k = list(user)[rng.integers(0, len(user))]
            del user[k]
            model[k] = "dropped"
        elif op == 2 and log:
            log[rng.integers(0, len(log))].done = True
        else:
            before = len(log)
            h.poll()
            new = log[before:]
            assert len(new) % 2 == 0
            for own, shared in zip(new[::2], new[1::2]):  # a batch's streams, in its order
                k = own.stream
                assert shared.stream == -1 and model[k] == "dropped", (seed, k)
                model[k] = [own, shared]
            assert not [k for k, st in model.items() if st == "dropped"], seed  # all fenced
            for k, state in model.items():
                if isinstance(state, list) and all(e.done for e in state):
                    model[k] = "gone"
        for k, state in model.items():
            assert (mems[k][0]() is None) == (state == "gone"), (seed, k, state)
