"""DetaugIterator's Mask / Keypoint R-CNN targets from a GPU pipeline: ``masks``, ``keypoints`` and
``polygons`` are CUDA tensors and equal the CPU pipeline's (list and padded forms). GPU only."""
import os

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from helpers import COCO as COCO_MINI  # noqa: E402
from detaug import Pipeline, fn  # noqa: E402
from detaug.adapters.torch import DetaugIterator  # noqa: E402

ROOT, ANN = os.path.join(COCO_MINI, "images"), os.path.join(COCO_MINI, "annotations.json")


def _coco_pipe(device):
    pipe = Pipeline(batch_size=2, num_threads=1, seed=3, device_id=0 if device == "gpu" else None)
    with pipe:
        enc, boxes = fn.readers.coco(file_root=ROOT, annotations_file=ANN, polygons=True)
        img = fn.decoders.image(enc, device="mixed" if device == "gpu" else "cpu")
        if device == "gpu":
            boxes = boxes.gpu()
        img, boxes = fn.flip(img, boxes, horizontal=1)
        img, boxes = fn.rotate(img, boxes, angle=fn.random.uniform(range=(-20, 20)), expand=False)
        pipe.set_outputs(img, boxes)
    return pipe


def _keypoint_pipe(device, rng):
    n, h, w = 2, 40, 60
    imgs = [rng.integers(0, 256, (h, w, 3), np.uint8) for _ in range(n)]
    kps = [np.concatenate([rng.uniform(0, w, (3, 4, 1)), rng.uniform(0, h, (3, 4, 1)),
                           rng.integers(1, 3, (3, 4, 1))], 2).astype(np.float32)
           for _ in range(n)]

    def src(info):
        i = info.idx_in_epoch
        return imgs[i], {"boxes": np.array([[5, 5, 30, 30], [10, 2, 50, 20], [0, 0, 59, 39]],
                                           np.float32),
                         "labels": np.arange(3), "keypoints": kps[i],
                         "keypoint_flip": np.tile([1, 0, 3, 2], (3, 1))}

    pipe = Pipeline(batch_size=n, num_threads=1, seed=1, device_id=0 if device == "gpu" else None)
    with pipe:
        img, bx = fn.external_source(source=src, batch=False, num_outputs=2, size=n)
        if device == "gpu":
            img, bx = img.gpu(), bx.gpu()
        img, bx = fn.flip(img, bx, horizontal=1)
        img, bx = fn.crop(img, bx, window=(4, 2, 50, 36))
        pipe.set_outputs(img, bx)
    return pipe


def _first(pipe, **kw):
    return next(iter(DetaugIterator(pipe, output_map=["images", "targets"], **kw)))


@pytest.mark.gpu
def test_mask_targets_are_cuda_tensors_equal_to_the_cpus():
    cpu = _first(_coco_pipe("cpu"), boxes_format="list")["targets"]
    gpu = _first(_coco_pipe("gpu"), boxes_format="list")["targets"]
    for want, got in zip(cpu, gpu):
        assert got["masks"].is_cuda and got["polygons"].is_cuda
        assert torch.equal(got["masks"].cpu(), want["masks"])
        np.testing.assert_allclose(got["polygons"].cpu().numpy(), want["polygons"].numpy(),
                                   rtol=0, atol=1e-6)  # NaN rows where the CPU's are


@pytest.mark.gpu
@pytest.mark.parametrize("boxes_format", ["list", "padded"])
def test_keypoint_targets_are_cuda_tensors_equal_to_the_cpus(boxes_format):
    cpu = _first(_keypoint_pipe("cpu", np.random.default_rng(2)), boxes_format=boxes_format)
    gpu = _first(_keypoint_pipe("gpu", np.random.default_rng(2)), boxes_format=boxes_format)
    if boxes_format == "list":
        pairs = [(g["keypoints"], w["keypoints"]) for g, w in zip(gpu["targets"], cpu["targets"])]
    else:
        pairs = [(gpu["targets_keypoints"], cpu["targets_keypoints"])]
    for got, want in pairs:
        assert got.is_cuda
        np.testing.assert_allclose(got.cpu().numpy(), want.numpy(), rtol=0, atol=1e-4)
    assert any((w[..., 2] > 0).any() and (w[..., 2] == 0).any() for _, w in pairs)
