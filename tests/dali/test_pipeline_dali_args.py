"""DALI's Pipeline arguments and feed_input as ported programs use them."""
import warnings

import numpy as np
import pytest

import detaug
from detaug import fn


def _fed_pipe(**kw):
    pipe = detaug.Pipeline(batch_size=2, num_threads=1, seed=0, **kw)
    with pipe:
        x = fn.external_source(name="x")
        pipe.set_outputs(fn.flip(x, horizontal=1))
    return pipe.build()


def test_exec_switches_and_dict_queue_depth():
    pipe = _fed_pipe(prefetch_queue_depth={"cpu_size": 3, "gpu_size": 2}, exec_pipelined=False,
                     exec_async=False)
    assert pipe.prefetch_queue_depth == 3
    with pytest.raises(ValueError, match="cpu_size"):
        detaug.Pipeline(batch_size=2, prefetch_queue_depth={"cpu": 2})


def test_feed_before_each_run_without_iter_setup():
    """DALI's external-source tutorial feeds, then runs, batch after batch, without iter_setup:
    the prefetcher waits for the next feed instead of failing; nothing fed at all is an error."""
    rng = np.random.default_rng(0)
    pipe = _fed_pipe()
    for k in range(4):
        batch = [rng.integers(0, 255, (int(rng.integers(2, 6)), 4, 3), dtype=np.uint8) for _ in range(2)]
        pipe.feed_input("x", batch, layout="HWC")
        out = pipe.run()[0]
        for a, b in zip(out.data, batch):
            np.testing.assert_array_equal(a, b[:, ::-1])
    with pytest.raises(RuntimeError, match="x: no data fed"):
        pipe.run()


def test_split_batches_cuts_per_sample_lists():
    """Outputs that are plain lists of per-sample arrays (DALI-style ops) split with their batch
    when several batches run as one launch."""
    from detaug.core.batch import split_batches

    rng = np.random.default_rng(2)
    samples = [rng.random((int(rng.integers(0, 4)), 4)).astype(np.float32) for _ in range(7)]
    labels = np.arange(7)
    parts = split_batches((samples, labels), [3, 3, 1])
    assert [len(p[0]) for p in parts] == [3, 3, 1]
    for p, lo in zip(parts, (0, 3, 6)):
        for k, a in enumerate(p[0]):
            assert a is samples[lo + k]
        np.testing.assert_array_equal(p[1], labels[lo:lo + len(p[0])])


def test_dali_tuning_arguments_warn_and_others_are_refused():
    """DALI's executor tuning (set_affinity, py_num_workers, exec_dynamic, ...) is accepted with
    a warning, through pipeline_def too, and gives the same batches; checkpointing and unknown
    names are refused by name."""
    batches = []
    for kw in ({}, {"set_affinity": True, "max_streams": 2, "py_num_workers": 4,
                    "exec_dynamic": True}):
        @detaug.pipeline_def(batch_size=2, num_threads=1, seed=3)
        def flips():
            x = fn.external_source(source=lambda i: np.full((2, 3, 3), i.idx_in_epoch, np.uint8),
                                   batch=False, size=4)
            return fn.flip(x, horizontal=fn.random.coin_flip()), fn.random.uniform(shape=2)

        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            pipe = flips(**kw)
        assert sorted(k for k in kw if any(f"{k}=" in str(w.message) for w in caught)) == sorted(kw)
        batches.append([pipe.run() for _ in range(2)])
    for a, b in zip(*batches):
        for x, y in zip(a, b):
            np.testing.assert_array_equal(np.asarray(x.data if hasattr(x, "data") else x),
                                          np.asarray(y.data if hasattr(y, "data") else y))
    with pytest.raises(NotImplementedError, match="enable_checkpointing"):
        detaug.Pipeline(batch_size=2, enable_checkpointing=True)
    with pytest.raises(TypeError, match="unknown argument.*bogus"):
        detaug.Pipeline(batch_size=2, bogus=1)
