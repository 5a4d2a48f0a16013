"""Ragged per-box fields and COCO's run-length codec (readers/segments.py), against plain
Python lists and pycocotools' own mask API."""
import numpy as np
import pytest
from pycocotools import mask as coco_mask

from readers.records import DetectionRecord
from readers.segments import (Ragged, flip_index_from_names, polygons_box, polygons_field,
                              polygons_rle, rle_decode, rle_encode, rle_from_string,
                              rle_to_string)


def _random_lists(rng, n):
    return [rng.normal(size=(int(rng.integers(0, 4)), 2)).astype(np.float32) for _ in range(n)]


def test_ragged_indexing_matches_lists(rng):
    items = _random_lists(rng, 9)
    r = Ragged.from_lists(items, np.float32, 2)
    assert len(r) == 9
    for i in range(9):
        assert np.array_equal(r[i], items[i])
    mask = rng.random(9) < 0.5
    sub = r[mask]
    kept = [x for x, m in zip(items, mask) if m]
    assert len(sub) == len(kept) and all(np.array_equal(sub[i], kept[i]) for i in range(len(kept)))
    idx = rng.integers(0, 9, 5)
    taken = r[idx]
    assert all(np.array_equal(taken[k], items[i]) for k, i in enumerate(idx))
    sl = r[2:7]
    assert all(np.array_equal(sl[k], items[2 + k]) for k in range(5))
    both = Ragged.concat([r[:4], r[4:]])
    assert both == r and not (both == r[mask])


def test_nested_polygons_follow_their_boxes(rng):
    per_box = [[rng.random((int(rng.integers(3, 6)), 2)) for _ in range(int(rng.integers(0, 3)))]
               for _ in range(7)]
    polys = polygons_field(per_box)
    keep = np.array([1, 0, 1, 1, 0, 0, 1], bool)
    sub = polys[keep]
    kept = [b for b, k in zip(per_box, keep) if k]
    assert list(sub.counts) == [len(b) for b in kept]
    for i, box in enumerate(kept):
        lo = int(sub.offsets[i])
        for j, p in enumerate(box):
            assert np.allclose(sub.values[lo + j], p.astype(np.float32))
    boxes = polygons_box(polys)
    for i, box in enumerate(per_box):
        if box:
            pts = np.concatenate(box).astype(np.float32)
            assert np.allclose(boxes[i], [*pts.min(0), *pts.max(0)])
        else:
            assert np.isnan(boxes[i]).all()


def test_record_subset_drops_instance_fields_with_boxes(rng):
    polys = polygons_field([[np.ones((3, 2))], [], [np.zeros((4, 2)), np.ones((3, 2))]])
    kps = rng.random((3, 5, 3)).astype(np.float32)
    rec = DetectionRecord("a.jpg", 10, 10, [[0, 0, 1, 1], [1, 1, 2, 2], [2, 2, 3, 3]], [0, 1, 2],
                          {"polygons": polys, "keypoints": kps})
    sub = rec.subset([True, False, True])
    assert list(sub.labels) == [0, 2]
    assert list(sub.fields["polygons"].counts) == [1, 2]
    assert np.array_equal(sub.fields["keypoints"], kps[[0, 2]])


@pytest.mark.parametrize("shape", [(7, 5), (1, 1), (32, 17)])
def test_rle_codec_matches_pycocotools(rng, shape):
    for density in (0.0, 0.3, 0.9, 1.0):
        mask = (rng.random(shape) < density).astype(np.uint8)
        ref = coco_mask.encode(np.asfortranarray(mask))
        runs = rle_encode(mask)
        assert rle_to_string(runs) == ref["counts"].decode()
        assert np.array_equal(rle_from_string(ref["counts"].decode()), runs)
        assert np.array_equal(rle_decode(runs, *shape), mask)


def test_rle_string_hand_case():
    # a 2 x 2 mask, column-major [0, 1, 1, 0]: runs 1, 2, 1
    mask = np.array([[0, 1], [1, 0]], np.uint8)
    assert list(rle_encode(mask)) == [1, 2, 1]
    assert np.array_equal(rle_decode([1, 2, 1], 2, 2), mask)
    with pytest.raises(ValueError, match="not 2 x 2"):
        rle_decode([1, 2], 2, 2)
    with pytest.raises(ValueError, match="ends inside"):
        rle_from_string("0" + chr(48 + 0x20))


def test_polygon_raster_is_cocos(rng):
    poly = rng.uniform(0, 20, (6, 2))
    ref = coco_mask.decode(coco_mask.frPyObjects([poly.reshape(-1).tolist()], 24, 22)[0])
    assert np.array_equal(rle_decode(polygons_rle([poly], 24, 22), 24, 22), ref)


def test_flip_index_pairs_left_and_right():
    names = ["nose", "left_eye", "right_eye", "left_ear", "right_ear", "head_left", "head_right"]
    assert flip_index_from_names(names) == [0, 2, 1, 4, 3, 6, 5]
