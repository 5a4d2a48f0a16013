"""DetaugIterator's list targets carry Mask R-CNN's masks (polygons rasterised on the output
canvas) and Keypoint R-CNN's keypoints: masks equal pycocotools' annToMask where no op moved
them, and the flipped masks where a flip did."""
import os

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from pycocotools.coco import COCO  # noqa: E402

from helpers import COCO as COCO_MINI  # noqa: E402
from detaug import Pipeline, fn  # noqa: E402
from detaug.adapters.torch import DetaugIterator  # noqa: E402

ROOT, ANN = os.path.join(COCO_MINI, "images"), os.path.join(COCO_MINI, "annotations.json")


def _pipe(flip):
    pipe = Pipeline(batch_size=2, num_threads=1, seed=0)
    with pipe:
        enc, boxes = fn.readers.coco(file_root=ROOT, annotations_file=ANN, polygons=True)
        img = fn.decoders.image(enc)
        if flip:
            img, boxes = fn.flip(img, boxes, horizontal=1)
        pipe.set_outputs(img, boxes)
    return pipe


@pytest.mark.parametrize("flip", [False, True])
def test_masks_are_cocos(flip):
    api = COCO(ANN)
    it = DetaugIterator(_pipe(flip), output_map=["images", "targets"], boxes_format="list")
    batch = next(iter(it))
    for target in batch["targets"]:
        masks = target["masks"].numpy()
        assert masks.dtype == np.uint8 and masks.shape[0] == len(target["boxes"])
        for mask, ann_id in zip(masks, target["annotation_id"].tolist()):
            ref = api.annToMask(api.anns[ann_id])
            ref = ref[:, ::-1] if flip else ref
            if flip:  # a mirrored polygon rasterises to the mirrored mask up to edge pixels
                assert np.mean(mask != ref) < 0.01
            else:
                assert np.array_equal(mask, ref)


def test_padded_targets_carry_polygons_row_for_row():
    """boxes_format='padded': ``targets_polygons`` (B, M, P, 2), NaN past each sample's boxes, its rows the
    list targets' polygons in order (ops/instance_fields.pad_fields)."""
    padded = next(iter(DetaugIterator(_pipe(True), output_map=["images", "targets"])))
    listed = next(iter(DetaugIterator(_pipe(True), output_map=["images", "targets"],
                                      boxes_format="list")))["targets"]
    polys = padded["targets_polygons"].numpy()
    for b, target in enumerate(listed):
        n = len(target["boxes"])
        assert int(padded["targets_counts"][b]) == n
        ref = target["polygons"].numpy()
        assert np.array_equal(np.nan_to_num(polys[b, :n, :ref.shape[1]], nan=-1),
                              np.nan_to_num(ref, nan=-1))
        assert np.isnan(polys[b, :n, ref.shape[1]:]).all() and np.isnan(polys[b, n:]).all()
