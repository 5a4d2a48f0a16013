"""The device stage's parts wired together without a GPU: a GPU pipeline whose launches are
planned ahead (detaug/runtime/gpu/plan_ahead.py), run through its DeviceStage (decode, warp
launch, upload, collection with its event) on cupy faked over host arrays (warp.cu's kernel
emulated, the decode stood in for by Pillow), gives the CPU pipeline's batches: random access and
iteration alike. The GPU runs of the same flow are the ``gpu``-marked tests of test_plan_ahead.py
and test_gpu_pipeline.py."""
from __future__ import annotations

import os

import numpy as np
import pytest

from detaug import Pipeline, fn
from detaug.kernels import warp as W
from helpers import COCO, to_np
from helpers.cases import device_stage_stand_in
from helpers.warp import MEAN, STD, emulated_kernels  # noqa: F401 (a fixture)


def _graph(pipe, device):
    with pipe:
        enc, boxes = fn.readers.coco(file_root=os.path.join(COCO, "images"),
                                     annotations_file=os.path.join(COCO, "annotations.json"),
                                     random_shuffle=True)
        img = fn.decoders.image(enc, device=device)
        img, boxes = fn.flip(img, boxes, horizontal=fn.random.coin_flip())
        img, boxes = fn.resize(img, boxes, size=(40, 48))
        pipe.set_outputs(fn.normalize(img, mean=list(MEAN), std=list(STD), output_layout="CHW"),
                         fn.pad_boxes(boxes, max_boxes=24))


def _same(got, ref):
    (img, boxes), (ref_img, ref_boxes) = got, ref
    assert boxes.keys() == ref_boxes.keys()
    for k in ref_boxes:
        np.testing.assert_array_equal(to_np(boxes[k]), to_np(ref_boxes[k]), err_msg=k)
    np.testing.assert_allclose(np.stack([np.asarray(a) for a in img.data]),
                               np.stack([np.asarray(a) for a in ref_img.data]), atol=1e-3)


def test_a_planned_pipeline_runs_through_its_device_stage(emulated_kernels, monkeypatch):
    from detaug.core import backend

    device_stage_stand_in(monkeypatch, emulated_kernels, W)
    # one launch in flight, one device thread: the emulation runs one launch at a time
    gpu = Pipeline(batch_size=4, seed=7, device_id=0, host_processes=0, decode_processes=1,
                   prefetch_queue_depth=1, device_workers=1)
    _graph(gpu, "mixed")
    gpu.build()
    assert gpu.plan_ahead and gpu.has_device_stage and gpu._paths_only
    assert gpu._streams == gpu._device.streams and gpu._stream is gpu._device.streams[0]
    backend.set_cpu_warp("reference")
    try:
        cpu = Pipeline(batch_size=4, seed=7, num_threads=1, host_processes=0)
        _graph(cpu, "cpu")
        _same(gpu.run_batch(3, epoch=1), cpu.run_batch(3, epoch=1))  # random access
        for _ in range(2):  # iteration: the executor's device thread, the output slots
            _same(gpu.run(), cpu.run())
        assert gpu._output_budget.launch_bytes is not None  # (None: no launch measured yet)
    finally:
        backend.set_cpu_warp("opencv")
        gpu.close()  # (while cupy is faked: the device stage lets go of its streams)
