"""Bitmap masks read into a pipeline (readers.coco / readers.voc(bitmasks=True)): each box's run
lengths decoded into the per-box field ``bitmasks`` (core/instances.py ``rle_planes``, all boxes
at once) equal pycocotools' ``decode`` of the same RLE, on fresh random RLEs and on the COCO
sample's objects written as crowd RLEs (compressed strings and plain count lists); VOC's
SegmentationObject indices come out as each object's mask."""
import os

import numpy as np
import pytest
from PIL import Image
from pycocotools import mask as coco_mask

from detaug import Pipeline, fn
from detaug.core.instances import rle_planes
from helpers import COCO, fresh_seed
from helpers.reader_files import crowd_coco, voc_xml, write_voc
from readers.segments import rle_from_string

ROOT = os.path.join(COCO, "images")


def _runs(mask):
    """COCO run lengths of a mask through pycocotools' own encoder (compressed string)."""
    rle = coco_mask.encode(np.asfortranarray(mask.astype(np.uint8)))
    return np.asarray(rle_from_string(rle["counts"].decode("ascii")), np.uint32)


@pytest.mark.parametrize("seed", [3, fresh_seed()])
def test_rle_planes_equal_pycocotools_decode(seed):
    rng = np.random.default_rng(seed)
    n = 12
    canvas = rng.integers(1, 30, (n, 2))
    masks = [rng.random(tuple(hw)) < rng.uniform(0, 1) for hw in canvas]
    masks[0][:] = True   # one run of zeros (length 0), then all ones
    masks[1][:] = False  # all zeros
    runs = [_runs(m) for m in masks]
    runs[2] = np.zeros(0, np.uint32)  # no RLE: no mask
    offsets = np.concatenate([[0], np.cumsum([len(r) for r in runs])])
    plane = canvas.max(0) + [2, 3]
    got = rle_planes(np.concatenate(runs), offsets, canvas, plane)
    assert got.shape == (n, *plane) and got.dtype == np.uint8
    for i, ((h, w), r) in enumerate(zip(canvas, runs)):
        want = np.zeros(plane, np.uint8)
        if len(r):
            rle = {"size": [int(h), int(w)], "counts": r.tolist()}
            want[:h, :w] = coco_mask.decode(coco_mask.frPyObjects(rle, int(h), int(w)))
        np.testing.assert_array_equal(got[i], want, err_msg=f"box {i}")


def test_rle_planes_refuse_runs_that_miss_the_canvas():
    with pytest.raises(ValueError, match=r"box 1: .*sum to 11, not its image's 3 x 4"):
        rle_planes([12, 5, 6], [0, 1, 3], [[3, 4], [3, 4]], (3, 4))


def _boxes(ann, n=16, **kw):
    pipe = Pipeline(batch_size=n, num_threads=1, seed=0, prefetch_queue_depth=1)
    with pipe:
        _, boxes = fn.readers.coco(file_root=ROOT, annotations_file=ann, **kw)
        pipe.set_outputs(boxes)
    (out,) = pipe.run()
    pipe.close()
    return out


def test_coco_crowd_masks_are_pycocotools(tmp_path):
    """No op: each crowd box's bitmask is pycocotools' decode of its RLE on its image, every
    other box's is empty; the plane is the batch's largest canvas, cut per sample."""
    ann, want = crowd_coco(tmp_path, every=3)
    out = _boxes(ann, bitmasks=True)
    assert out.fields["bitmasks"].shape[1:] == tuple(out.canvas.max(0))
    seen = 0
    for got, (h, w) in zip(out.per_sample(), out.canvas):
        assert got["bitmasks"].shape == (len(got["boxes"]), h, w)
        for mask, ann_id, crowd in zip(got["bitmasks"], got["annotation_id"], got["iscrowd"]):
            if int(ann_id) in want:
                np.testing.assert_array_equal(mask, want[int(ann_id)])
                assert crowd == 1
                seen += 1
            else:
                assert not mask.any()
    assert seen >= 10


def test_without_bitmasks_rle_is_counted_as_dropped(tmp_path):
    from readers.coco_instances import read_coco_shapes

    ann, want = crowd_coco(tmp_path, every=3)
    ds = read_coco_shapes(ann, ROOT, polygons=True)
    assert sum(ds.dropped.values()) == sum(int(m.size > 0) for m in want.values())
    both = read_coco_shapes(ann, ROOT, polygons=True, bitmasks=True)
    assert not both.dropped
    r = both.records[0]
    assert {"polygons", "rle"} <= set(r.fields)
    # crowd boxes have runs and no polygon; the others polygons and no runs
    assert ((r.fields["rle"].counts > 0) != (r.fields["polygons"].counts > 0)).all()
    alone = read_coco_shapes(ann, ROOT, bitmasks=True)
    assert "polygons" not in alone.records[0].fields and "rle" in alone.records[0].fields


def test_dali_mode_refuses_bitmasks(tmp_path):
    ann, _ = crowd_coco(tmp_path, every=3)
    pipe = Pipeline(batch_size=2, num_threads=1, seed=0)
    with pytest.raises(ValueError, match="bitmasks="):
        with pipe:
            outs = fn.readers.coco(file_root=ROOT, annotations_file=ann, bitmasks=True,
                                   ltrb=True)
            pipe.set_outputs(*outs[1:])
        pipe.build()


def test_voc_segmentation_object_masks(tmp_path, rng):
    objects = [("dog", 1, 1, 50, 40), ("cat", 20, 20, 90, 70)]
    root = write_voc(tmp_path, {"a": voc_xml("a.jpg", (100, 80), objects),
                                "b": voc_xml("b.jpg", (60, 50), objects[:1])})
    index = rng.integers(0, 3, (80, 100))
    index[rng.random((80, 100)) < 0.1] = 255  # VOC's outline: no object's
    os.makedirs(os.path.join(root, "SegmentationObject"))
    im = Image.fromarray(index.astype(np.uint8), "P")
    im.putpalette([0, 0, 0, 128, 0, 0, 0, 128, 0] + [0] * 759)
    im.save(os.path.join(root, "SegmentationObject", "a.png"))
    pipe = Pipeline(batch_size=2, num_threads=1, seed=0)
    with pipe:
        _, boxes = fn.readers.voc(root=root, bitmasks=True)
        pipe.set_outputs(boxes)
    (out,) = pipe.run()
    pipe.close()
    a, b = out.per_sample()
    assert a["bitmasks"].shape == (2, 80, 100) and b["bitmasks"].shape == (1, 50, 60)
    for k in range(2):
        np.testing.assert_array_equal(a["bitmasks"][k], index == k + 1)
    assert not b["bitmasks"].any()  # no PNG: no mask
