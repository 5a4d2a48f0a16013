"""detaug/handout.py: batches handed out are held until the caller's work queued before a later
request has run (stand-in events; the GPU test is test_gpu_pipeline's
test_a_dropped_batch_is_not_reused_while_the_callers_queued_work_may_read_it)."""
import gc
import threading
import weakref

import numpy as np
import pytest

from detaug.handout import HeldOutputs


class _Event:
    def __init__(self, log, stream):
        self.stream, self.done, self.waited = stream, False, False
        log.append(self)

    def synchronize(self):
        self.waited = self.done = True


class _Batch:  # a stand-in for a tuple of outputs, which a weakref can watch
    def __init__(self, k):
        self.k = k


def _held(log):
    return HeldOutputs(record=lambda ptr: _Event(log, ptr))


def test_a_batch_goes_only_after_the_fence_of_a_later_request_has_run():
    log = []
    h = _held(log)
    a = _Batch(0)
    gone = weakref.ref(a)
    h.hold(a)
    del a
    gc.collect()
    assert h.poll() == 0 and gone() is not None  # no later request yet: no fence, kept
    h.fence([7, 0, 7])  # the caller asks for the next batch, working on streams 7 and 0
    assert [e.stream for e in log] == [7, 0]  # one event per stream
    h.hold(_Batch(1))
    assert h.poll() == 0 and gone() is not None  # the caller's work has not run
    log[0].done = True
    assert h.poll() == 0 and gone() is not None  # stream 0's work has not run either
    log[1].done = True
    assert h.poll() == 1 and len(h) == 1
    gc.collect()
    assert gone() is None  # the pipeline no longer keeps it


def test_one_fence_covers_every_batch_held_since_the_last_one_and_none_after():
    log = []
    h = _held(log)
    for k in range(3):
        h.hold(_Batch(k))
    h.fence([1])
    h.fence([1])  # nothing new held: no second event
    assert len(log) == 1
    h.hold(_Batch(3))
    h.fence([1])
    assert len(log) == 2
    log[1].done = True  # the later fence ran first (another stream order): the oldest still wait
    assert h.poll() == 0
    log[0].done = True
    assert h.poll() == 4 and len(h) == 0 and h.peak == 4


def test_drain_waits_for_every_fence_and_fences_what_had_none():
    log = []
    h = _held(log)
    h.hold(_Batch(0))
    h.fence([3])
    h.hold(_Batch(1))
    h.drain([3, 4])
    assert len(h) == 0 and [e.stream for e in log] == [3, 3, 4] and all(e.waited for e in log)


def test_poll_from_worker_threads_while_the_caller_hands_out():
    """The device workers poll before they make a launch's outputs, while the caller's thread
    fences and holds: nothing is lost or let go early."""
    log = []
    h = _held(log)
    stop = threading.Event()
    gone = []

    def worker():
        while not stop.is_set():
            gone.append(h.poll())

    threads = [threading.Thread(target=worker) for _ in range(3)]
    for t in threads:
        t.start()
    for k in range(2000):
        h.fence([0])
        h.hold(_Batch(k))
        if k % 7 == 0:
            for e in list(log):
                e.done = True
    stop.set()
    for t in threads:
        t.join()
    for e in log:
        e.done = True
    h.fence([0])
    log[-1].done = True
    gone.append(h.poll())
    assert sum(gone) == 2000 and len(h) == 0


@pytest.mark.parametrize("seed", [0, 1, 2, np.random.SeedSequence().entropy % 2**32])
def test_random_interleavings_match_a_reference_model(seed):
    """Random holds, requests (fences on random streams), completions and polls against a model
    written apart: a batch is let go exactly when it and every batch before it has a fence whose
    events have all completed."""
    rng = np.random.default_rng(seed)
    log = []
    h = _held(log)
    refs = {}          # batch number -> weakref
    model = []         # [batch number, list of events or None]
    released = set()
    n = 0
    for _ in range(400):
        op = rng.integers(0, 4)
        if op == 0:
            b = _Batch(n)
            refs[n] = weakref.ref(b)
            h.hold(b)
            del b  # the caller drops it at once: only the holder keeps it
            model.append([n, None])
            n += 1
        elif op == 1:
            streams = [int(s) for s in rng.integers(0, 3, rng.integers(1, 4))]
            before = len(log)
            h.fence(streams)
            new = log[before:]
            if model and model[-1][1] is None:
                assert sorted(e.stream for e in new) == sorted(set(streams))
                for entry in model:
                    if entry[1] is None:
                        entry[1] = new
            else:
                assert not new
        elif op == 2 and log:
            log[rng.integers(0, len(log))].done = True
        else:
            h.poll()
            while model and model[0][1] is not None and all(e.done for e in model[0][1]):
                released.add(model.pop(0)[0])
        assert len(h) == len(model)
        for k, r in refs.items():
            assert (r() is None) == (k in released), (seed, k)
