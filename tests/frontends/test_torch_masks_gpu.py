"""DetaugIterator with fn.instance_masks in the graph: the masks made on the device ride the
boxes to torchvision's targets as CUDA tensors (list: each sample's (n, H, W) on its own canvas;
padded: (B, M, H, W), 0 past the boxes) and equal the CPU pipeline's. GPU only."""
import os

import pytest

torch = pytest.importorskip("torch")

from helpers import COCO as COCO_MINI  # noqa: E402
from detaug import Pipeline, fn  # noqa: E402
from detaug.adapters.torch import DetaugIterator  # noqa: E402

ROOT, ANN = os.path.join(COCO_MINI, "images"), os.path.join(COCO_MINI, "annotations.json")


def _pipe(device):
    pipe = Pipeline(batch_size=3, num_threads=1, seed=4, device_id=0 if device == "gpu" else None)
    with pipe:
        enc, boxes = fn.readers.coco(file_root=ROOT, annotations_file=ANN, polygons=True)
        img = fn.decoders.image(enc, device="mixed" if device == "gpu" else "cpu")
        img, boxes = fn.scale_jitter(img, boxes, size=(256, 256), scale_range=(0.3, 1.5))
        img, boxes = fn.flip(img, boxes, horizontal=fn.random.coin_flip())
        pipe.set_outputs(img, fn.instance_masks(fn.prune_boxes(boxes, min_size=1.0)))
    return pipe


@pytest.mark.gpu
@pytest.mark.parametrize("boxes_format", ["list", "padded"])
def test_instance_masks_reach_torch_on_the_device(boxes_format):
    kw = dict(output_map=["images", "targets"], boxes_format=boxes_format)
    cpu = next(iter(DetaugIterator(_pipe("cpu"), **kw)))
    gpu = next(iter(DetaugIterator(_pipe("gpu"), **kw)))
    if boxes_format == "list":
        pairs = [(g["masks"], w["masks"]) for g, w in zip(gpu["targets"], cpu["targets"])]
    else:
        pairs = [(gpu["targets_masks"], cpu["targets_masks"])]
    for got, want in pairs:
        assert got.is_cuda and got.dtype == torch.uint8
        assert torch.equal(got.cpu(), want)
    assert any(w.any() for _, w in pairs)
