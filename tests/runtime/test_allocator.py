"""The device threads' allocator (detaug/runtime/gpu/allocator.py): CUDA's stream-ordered pool by
default, cupy's default pool on request, the same batches from both."""
from __future__ import annotations

import os

import numpy as np
import pytest

from detaug import Pipeline, fn
from detaug.runtime.gpu import allocator
from helpers import COCO, close_pipelines, to_np, track  # noqa: F401  (autouse fixture)


def test_mode_reads_the_environment(monkeypatch):
    monkeypatch.delenv(allocator.ENV, raising=False)
    assert allocator.mode() == "async"
    monkeypatch.setenv(allocator.ENV, " Pool ")
    assert allocator.mode() == "pool"
    assert allocator.device_allocator(0) is None  # cupy's default pool: nothing to set
    monkeypatch.setenv(allocator.ENV, "managed")
    with pytest.raises(ValueError, match="DETAUG_DEVICE_ALLOCATOR='managed'"):
        allocator.mode()


def _pipe():
    pipe = Pipeline(batch_size=8, num_threads=2, seed=5, device_id=0, prefetch_queue_depth=2)
    with pipe:
        enc, boxes = fn.readers.coco(file_root=os.path.join(COCO, "images"),
                                     annotations_file=os.path.join(COCO, "annotations.json"),
                                     random_shuffle=True)
        img = fn.decoders.image(enc, device="mixed")
        img, boxes = fn.random_iou_crop(img, boxes)
        img, boxes = fn.flip(img, boxes, horizontal=fn.random.coin_flip())
        img, boxes = fn.resize(img, boxes, size=(96, 128))
        pipe.set_outputs(img, fn.pad_boxes(boxes, max_boxes=32))
    return track(pipe)


def _take(pipe, n):
    out = []
    for _ in range(n):
        img, boxes = pipe.run()
        out.append((to_np(img.data), {k: to_np(v) for k, v in boxes.items()}, img.data))
    return out


@pytest.mark.gpu
def test_outputs_come_from_the_chosen_pool_with_the_same_values(monkeypatch):
    """By default a launch's outputs are stream-ordered allocations (cupy's ``MemoryAsync``);
    with DETAUG_DEVICE_ALLOCATOR=pool they come from cupy's default pool; pixels and boxes are
    the same, batch for batch."""
    import cupy as cp

    pytest.importorskip("nvidia.nvimgcodec")
    monkeypatch.delenv(allocator.ENV, raising=False)
    got_async = _take(_pipe(), 4)
    assert all(isinstance(a[2].data.mem, cp.cuda.memory.MemoryAsync) for a in got_async)
    assert allocator.device_pool(0).used_bytes() > 0
    monkeypatch.setenv(allocator.ENV, "pool")
    got_pool = _take(_pipe(), 4)
    assert all(not isinstance(a[2].data.mem, cp.cuda.memory.MemoryAsync) for a in got_pool)
    for (ia, ba, _), (ip, bp, _) in zip(got_async, got_pool, strict=True):
        np.testing.assert_array_equal(ia, ip)
        assert ba.keys() == bp.keys()
        for k in ba:
            np.testing.assert_array_equal(ba[k], bp[k])
