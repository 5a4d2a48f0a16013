"""on_error='skip' with images from an external source.

A per-sample callable that returns a truncated JPEG is skipped like a reader's bad file: the
sample is replaced by the next one of the epoch (the callable is asked for that sample's own
``idx_in_epoch``), the batch keeps its size, and each bad sample is counted once, named by its
index in the epoch. Whole batches fed by an iterable cannot be replaced: a named SampleError at
once (it used to re-run the batch once per record of the epoch, then say every record failed).
"""
import gc
import io
import warnings

import numpy as np
import pytest
from helpers import fresh_seed
from PIL import Image

from detaug import Pipeline, fn
from detaug.core.errors import SampleError


def _png(value):
    buf = io.BytesIO()
    Image.new("RGB", (6, 4), (value, value, value)).save(buf, "PNG")
    return np.frombuffer(buf.getvalue(), np.uint8)


def _truncated_jpeg():
    buf = io.BytesIO()
    Image.new("RGB", (16, 12), 77).save(buf, "JPEG")
    data = buf.getvalue()
    return np.frombuffer(data[:len(data) // 2], np.uint8)


def _callable_pipe(bad, size, on_error="skip", num_threads=1, batch_size=2, scale=10):
    def source(info):
        return _truncated_jpeg() if info.idx_in_epoch in bad else _png(scale * info.idx_in_epoch)

    pipe = Pipeline(batch_size=batch_size, num_threads=num_threads, seed=0, on_error=on_error)
    with pipe:
        pipe.set_outputs(fn.decoders.image(fn.external_source(source=source, batch=False,
                                                              size=size)))
    return pipe


@pytest.mark.parametrize("num_threads", [1, 2])
def test_truncated_jpeg_from_a_callable_is_skipped(num_threads):
    """Bad samples 1 and 3 (the same place, 1, of batches 0 and 1): each is replaced by the
    next sample of the epoch, and both are counted (named by their index in the epoch)."""
    pipe = _callable_pipe({1, 3}, 8, num_threads=num_threads)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        got = [[int(np.asarray(im)[0, 0, 0]) for im in out.data] for (out,) in pipe]
    pipe.close()
    assert got == [[0, 20], [20, 40], [40, 50], [60, 70]]
    assert pipe.stats["skipped"] == 2
    assert [p for p, _ in pipe.stats["skipped_files"]] == ["<decoders.image_1 sample index 1>",
                                                            "<decoders.image_1 sample index 3>"]
    assert "Truncated" in pipe.stats["skipped_files"][0][1]


def test_a_long_run_of_bad_samples_from_a_callable_is_skipped():
    pipe = _callable_pipe(set(range(1, 71)), 76, batch_size=4, scale=1)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        got = [[int(np.asarray(im)[0, 0, 0]) for im in out.data] for (out,) in pipe]
    pipe.close()
    assert len(got) == 19 and all(len(b) == 4 for b in got)
    assert got[0] == [0, 71, 71, 71] and got[-1] == [72, 73, 74, 75]
    assert pipe.stats["skipped"] == 70


def test_bad_sample_from_a_callable_under_raise_names_it():
    pipe = _callable_pipe({3}, 8, on_error="raise")
    pipe.run()
    with pytest.raises(SampleError, match=r"<decoders.image_1 sample index 3>: cannot decode"):
        pipe.run()
    pipe.close()


def _iterable_skip_pipe(size, device="cpu"):
    data = [[_png(0), _png(10)], [_png(20), _truncated_jpeg()], [_png(40), _png(50)]]
    pipe = Pipeline(batch_size=2, num_threads=1, seed=0, on_error="skip",
                    device_id=0 if device == "mixed" else None)
    with pipe:
        pipe.set_outputs(fn.decoders.image(fn.external_source(source=data, size=size), device=device))
    return pipe


@pytest.mark.parametrize("size", [None, 10_000])
def test_bad_sample_in_an_iterable_batch_under_skip_is_a_named_error_at_once(size):
    pipe = _iterable_skip_pipe(size)
    (first,) = pipe.run()
    assert [int(np.asarray(im)[0, 0, 0]) for im in first.data] == [0, 10]
    with pytest.raises(SampleError, match=r"sample index 3>: cannot decode .*fed by an iterable "
                                          r"or feed_input, whose samples cannot be replaced"):
        pipe.run()
    pipe.close()


@pytest.mark.gpu
@pytest.mark.parametrize("size", [None, 10_000])
def test_bad_sample_in_an_iterable_batch_under_skip_on_the_gpu_is_a_named_error_at_once(size):
    """The same with the GPU decoder (a truncated JPEG goes to the CPU decoder, which raises)."""
    pytest.importorskip("nvidia.nvimgcodec")
    pipe = _iterable_skip_pipe(size, "mixed")
    (first,) = pipe.run()
    assert [int(np.asarray(im.get())[0, 0, 0]) for im in first.data] == [0, 10]
    with pytest.raises(SampleError, match=r"sample index 3>: cannot decode .*fed by an iterable "
                                          r"or feed_input, whose samples cannot be replaced"):
        pipe.run()
    pipe.close()
    del first  # (its images go now, while the pipeline and its streams exist)
    # the error's traceback must not keep decoded images: collected together with the pipeline,
    # they could be freed after its streams, and the process died (a segmentation fault in 5 of
    # 6 runs of this file on the device, at the next test's garbage collection, before images
    # were dropped ahead of the pipeline)
    del pipe
    gc.collect()


@pytest.mark.parametrize("seed", [0, fresh_seed()])
def test_a_retry_gives_a_replaced_sample_its_records_place(seed):
    """BatchMaking.make_ctx with a retry's indices: a replaced sample's position is its record's
    place in the (shuffled) epoch order; the other samples keep theirs."""
    pipe = Pipeline(batch_size=4, num_threads=1, seed=seed, host_processes=0)
    with pipe:
        pipe.set_outputs(fn.external_source(source=lambda info: np.zeros((2, 2, 3), np.uint8),
                                            batch=False, size=11))
    pipe.build()
    order = pipe.schedule.shard_order(1)
    ctx = pipe._batches.make_ctx((1, 1, 1), {}, None)
    assert list(ctx.positions) == [4, 5, 6, 7] and list(ctx.sample_index) == list(order[4:8])
    indices = ctx.sample_index.copy()
    indices[1], indices[3] = order[9], order[10]  # two samples replaced by later records
    retry = pipe._batches.make_ctx((1, 1, 1), {}, None, indices)
    assert list(retry.positions) == [4, 9, 6, 10]
    assert list(retry.sample_index) == list(indices)
    pipe.close()
