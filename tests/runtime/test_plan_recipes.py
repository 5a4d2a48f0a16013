"""The random geometric recipes (perspective, scale_jitter, random_shortest_size, warp_affine)
plan on the host as the other geometric ops do: a GPU pipeline's launch planned on a machine
without a GPU (its build's GPU parts stood in for) holds one deferred warp, pickles whole, gives
the CPU pipeline's boxes bit for bit and, run by warp.cu's kernel (emulated on the CPU) on the
images Pillow decodes, the CPU pipeline's pixels (the float64 twin) within 1e-3, for batches of
two epochs."""
from __future__ import annotations

import os

import numpy as np
import pytest

from helpers import COCO
from helpers.cases import plan_without_cupy, stand_in_gpu
from helpers.warp import MEAN, STD, _build_emulation

from detaug import Pipeline, fn  # noqa: E402
from detaug.core.batch import DeferredWarp  # noqa: E402
from detaug.kernels import warp as W  # noqa: E402

CHAINS = {
    "perspective": lambda i, b: fn.perspective(i, b, distortion_scale=0.4, p=0.8),
    "scale_jitter": lambda i, b: fn.scale_jitter(i, b, size=(96, 96), scale_range=(0.3, 1.7)),
    "random_shortest_size": lambda i, b: fn.random_shortest_size(i, b, min_size=(40, 64),
                                                                 max_size=120),
    "warp_affine": lambda i, b: fn.warp_affine(i, b, matrix=[0.9, 0.1, 3, -0.1, 1.1, 2],
                                               fill_value=0.0),
}


@pytest.fixture(scope="module")
def emulated_kernels(tmp_path_factory):
    return _build_emulation(tmp_path_factory)


def _graph(pipe, device, chain):
    with pipe:
        enc, boxes = fn.readers.coco(file_root=os.path.join(COCO, "images"),
                                     annotations_file=os.path.join(COCO, "annotations.json"),
                                     random_shuffle=True)
        img = fn.decoders.image(enc, device=device)
        img, boxes = CHAINS[chain](img, boxes)
        img, boxes = fn.resize(img, boxes, size=(48, 64))
        pipe.set_outputs(fn.normalize(img, mean=list(MEAN), std=list(STD), output_layout="CHW"),
                         fn.pad_boxes(fn.prune_boxes(boxes, min_size=1), max_boxes=24))


@pytest.mark.parametrize("chain", sorted(CHAINS))
def test_a_recipe_plans_and_equals_the_cpu_pipeline(emulated_kernels, monkeypatch, chain):
    from detaug.core import backend
    from detaug.ops.decode import decode_pillow
    from detaug.ops.sources import read_files

    stand_in_gpu(monkeypatch, emulated_kernels, W)
    gpu = Pipeline(batch_size=6, seed=5, device_id=0, host_processes=0, decode_processes=1)
    _graph(gpu, "mixed", chain)
    gpu.build()
    backend.set_cpu_warp("reference")
    cpu = Pipeline(batch_size=6, seed=5, num_threads=1, host_processes=0)
    try:
        assert gpu.plan_ahead and gpu.build_plan.ahead.rest_ops == ()
        _graph(cpu, "cpu", chain)
        for epoch, b in ((0, 0), (0, 2), (1, 1)):
            key = (epoch, b, 1)
            plan = plan_without_cupy(gpu, key)  # a worker never imports cupy
            ref_img, ref_boxes = cpu.run_batch(b, epoch=epoch)
            img_key, box_key = [(o.op.id, o.index) for o in gpu._outputs]
            boxes = plan.values[box_key]
            for k in ref_boxes:
                np.testing.assert_array_equal(boxes[k], ref_boxes[k], err_msg=k)
            warp = plan.values[img_key].raw
            assert isinstance(warp, DeferredWarp)
            pixels = [decode_pillow(buf) for buf in read_files(warp.source.enc.paths)]
            got = W.launch_warp(warp.launch, [p.ctypes.data for p in pixels])
            assert got.shape == ref_img.data.shape == (6, 3, 48, 64)
            assert np.abs(got - ref_img.data).max() <= 1e-3
    finally:
        backend.set_cpu_warp("opencv")
        cpu.close()
        gpu.close()
