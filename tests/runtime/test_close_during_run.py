"""``close()`` from another thread while ``run()`` waits for its batch ("other silent
faults"): close shut the executor down under the running call, so the batch in flight was lost
(``cannot schedule new futures after shutdown``, ``deque mutated during iteration`` in close
itself, or ``WorkerDied: the pipeline was closed``), and the calls after it failed. Now close
takes the cursor lock as run does: the batch in flight is handed out, close then stops the
workers, and the next ``run()`` starts them again at the next batch: every batch once, in order,
with the values of a pipeline never closed.
"""
import threading
import time

import numpy as np
import pytest

import detaug
from detaug import fn

from helpers import close_pipelines, track  # noqa: F401  (autouse fixture)

BATCH, N = 2, 40


def make(num_threads, gate=None, host_processes=0):
    """A per-sample source whose samples of batch 2 wait for ``gate`` (while run() waits for
    them); the sample's value is its index in the epoch."""
    def source(info):
        if gate is not None and info.idx_in_epoch // BATCH == 2:
            gate["asked"].set()
            assert gate["go"].wait(10), "the test never let batch 2 be made"
        return np.full((3, 2, 1), info.idx_in_epoch, np.uint8)

    # host stage in threads of this process (the gate's events are this process's)
    pipe = detaug.Pipeline(batch_size=BATCH, num_threads=num_threads, seed=3,
                           prefetch_queue_depth=2, host_processes=host_processes)
    with pipe:
        pipe.set_outputs(fn.external_source(source=source, batch=False, size=N))
    return track(pipe)


def values(out):
    return np.asarray(out[0].as_tensor())[:, 0, 0, 0].tolist()


@pytest.mark.parametrize("num_threads", [1, 2])
def test_close_during_run_loses_no_batch(num_threads):
    for _ in range(3):  # (a race: before the fix, most trials lost the batch, not every one)
        close_while_run_waits(num_threads)


def close_while_run_waits(num_threads):
    gate = {"asked": threading.Event(), "go": threading.Event()}
    pipe = make(num_threads, gate)
    got, errors = [], []

    def consume():
        for _ in range(6):
            try:
                got.append(values(pipe.run()))
            except Exception as e:  # noqa: BLE001 (the test reports what the caller saw)
                errors.append(repr(e))

    consumer = threading.Thread(target=consume)
    consumer.start()
    assert gate["asked"].wait(10)  # batch 2 is being made, and waits on the source
    for _ in range(200):  # until the consumer has batches 0 and 1: it then waits in run()
        if len(got) + len(errors) >= 2:
            break
        time.sleep(0.01)
    time.sleep(0.1)
    closer = threading.Thread(target=pipe.close)
    closer.start()
    closer.join(0.3)  # close waits for the batch in flight (before: it tore it down)
    gate["go"].set()
    closer.join(10)
    consumer.join(30)
    assert not closer.is_alive() and not consumer.is_alive()
    assert errors == []
    want = [list(range(b * BATCH, (b + 1) * BATCH)) for b in range(6)]
    assert got == want
    reference = make(num_threads, host_processes=None)  # never closed, default workers
    assert [values(reference.run()) for _ in range(6)] == want
    pipe.close()
    reference.close()


def test_close_then_run_resumes_at_the_next_batch():
    pipe = make(1)
    first = [values(pipe.run()) for _ in range(3)]
    pipe.close()
    rest = [values(pipe.run()) for _ in range(2)]
    assert first + rest == [list(range(b * BATCH, (b + 1) * BATCH)) for b in range(5)]
