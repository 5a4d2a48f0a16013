"""COCO polygons, RLE masks and keypoints as instance fields (readers/coco_instances.py):
masks against pycocotools' COCO API on the same file, keypoints by hand, every bad input
named, and the COCO writer's round trip."""
import json
import os

import numpy as np
import pytest
from pycocotools import mask as coco_mask
from pycocotools.coco import COCO

from readers.coco_instances import read_coco_instances
from readers.errors import DatasetError
from readers.segments import instance_masks
from readers.writers import write_coco
from helpers.reader_files import write_coco as write_coco_files

NAMES = ["nose", "left_eye", "right_eye", "left_wrist", "right_wrist"]
PERSON = {"id": 1, "name": "person", "keypoints": NAMES,
          "skeleton": [[1, 2], [1, 3], [4, 5]]}
DOG = {"id": 3, "name": "dog"}


def _image(i, w=40, h=30):
    return {"id": i, "file_name": f"{i}.jpg", "width": w, "height": h}


def _ann(i, image_id, bbox, cat=1, **kw):
    return {"id": i, "image_id": image_id, "category_id": cat, "bbox": bbox, "iscrowd": 0, **kw}


def _dataset(tmp_path, rng):
    w, h = 40, 30
    crowd = (rng.random((h, w)) < 0.4).astype(np.uint8)
    compressed = coco_mask.encode(np.asfortranarray(crowd))
    other = (rng.random((h, w)) < 0.2).astype(np.uint8)
    from readers.segments import rle_encode
    anns = [
        _ann(1, 1, [2, 3, 10, 12], segmentation=[[2, 3, 12, 3, 12, 15, 2, 15],
                                                  [20.5, 1.25, 25, 1.25, 22, 6]],
             keypoints=[4, 5, 2, 0, 0, 0, 7, 8, 1, 10, 11, 2, 3, 14, 2], num_keypoints=4),
        _ann(2, 1, [0, 0, 40, 30], iscrowd=1,
             segmentation={"size": [h, w], "counts": compressed["counts"].decode()}),
        _ann(3, 2, [5, 5, 10, 10], cat=3,
             segmentation={"size": [h, w], "counts": rle_encode(other).tolist()}),
        _ann(4, 2, [1, 1, 5, 5], keypoints=[0] * 15, num_keypoints=0),
    ]
    path, root = write_coco_files(tmp_path, [_image(1), _image(2)], anns, [PERSON, DOG])
    return path, root, anns


def test_masks_equal_pycocotools(tmp_path, rng):
    path, root, anns = _dataset(tmp_path, rng)
    ds = read_coco_instances(path, root)
    api = COCO(path)
    for record in ds.records:
        masks = instance_masks(record)
        for mask, ann_id in zip(masks, record.fields["annotation_id"]):
            ann = api.anns[int(ann_id)]
            if "segmentation" not in ann:
                assert not mask.any()
                continue
            assert np.array_equal(mask, api.annToMask(ann)), ann_id
    r0 = ds.records[0]
    assert list(r0.fields["polygons"].counts) == [2, 0]
    assert list(r0.fields["rle"].counts > 0) == [False, True]
    assert "segmentation" not in r0.extra


def test_keypoints_pixel_centres_and_spec(tmp_path, rng):
    path, root, _ = _dataset(tmp_path, rng)
    ds = read_coco_instances(path, root)
    kps = ds.records[0].fields["keypoints"]
    assert kps.shape == (2, 5, 3)
    assert np.array_equal(kps[0], [[4.5, 5.5, 2], [0, 0, 0], [7.5, 8.5, 1], [10.5, 11.5, 2],
                                   [3.5, 14.5, 2]])
    assert not kps[1].any()  # the crowd box has none
    assert ds.instances == {"keypoint_names": NAMES, "skeleton": [[0, 1], [0, 2], [3, 4]],
                            "flip_index": [0, 2, 1, 4, 3]}
    assert all("keypoints" not in (k or {}) for r in ds for k in r.extra.get("box_keys", []))


def test_round_trip_through_the_writer(tmp_path, rng):
    path, root, anns = _dataset(tmp_path, rng)
    ds = read_coco_instances(path, root)
    out = tmp_path / "out" / "annotations.json"
    write_coco(ds, out)
    written = {a["id"]: a for a in json.load(open(out))["annotations"]}
    for a in anns:
        b = written[a["id"]]
        if isinstance(a.get("segmentation"), list):
            assert b["segmentation"] == a["segmentation"]
        elif "segmentation" in a:
            h, w = a["segmentation"]["size"]
            counts = a["segmentation"]["counts"]
            src = {"size": [h, w], "counts": counts.encode()} if isinstance(counts, str) else \
                coco_mask.frPyObjects(a["segmentation"], h, w)
            ref = coco_mask.decode(src)
            got = {"size": [h, w], "counts": b["segmentation"]["counts"].encode()}
            assert np.array_equal(coco_mask.decode(got), ref)
        if "keypoints" in a:
            assert b["keypoints"] == a["keypoints"] and b["num_keypoints"] == a["num_keypoints"]
    cats = json.load(open(out))["categories"]
    assert cats[0]["keypoints"] == NAMES and cats[0]["skeleton"] == PERSON["skeleton"]
    again = read_coco_instances(out, root)
    for r1, r2 in zip(ds, again):
        for name in ("polygons", "rle", "keypoints"):
            a, b = r1.fields[name], r2.fields[name]
            assert (a == b) if not isinstance(a, np.ndarray) else np.array_equal(a, b)


BAD = [
    ({"segmentation": [[1, 2, 3, 4, 5]]}, "odd number of coordinates"),
    ({"segmentation": [[1, 2, 3, 4]]}, "needs 3 at least"),
    ({"segmentation": [[1, 2, 3, 4, 5, "x"]]}, "not a finite number"),
    ({"segmentation": {"size": [30, 41], "counts": [1200]}}, "not the image's"),
    ({"segmentation": {"size": [30, 40], "counts": [1199]}}, "cover 1199 pixels"),
    ({"segmentation": {"size": [30, 40], "counts": "!!"}}, "RLE counts"),
    ({"keypoints": [1, 2, 2] * 4, "num_keypoints": 4}, "the category names 5"),
    ({"keypoints": [1, 2, 3] * 5, "num_keypoints": 5}, "visibility 3"),
    ({"keypoints": [1, 2, 2] * 5, "num_keypoints": 3}, "'num_keypoints' is 3"),
    ({"keypoints": [1, 2] * 5, "num_keypoints": 5}, "not a multiple of 3"),
]


@pytest.mark.parametrize("extra,message", BAD)
def test_bad_shapes_are_named(tmp_path, extra, message):
    anns = [_ann(7, 1, [1, 1, 5, 5], **extra), _ann(8, 1, [2, 2, 5, 5])]
    path, root = write_coco_files(tmp_path, [_image(1)], anns, [PERSON, DOG])
    with pytest.raises(DatasetError, match=message) as info:
        read_coco_instances(path, root)
    assert "annotation id 7" in str(info.value) and str(path) in str(info.value)
    with pytest.warns(UserWarning, match="skipped 1"):
        ds = read_coco_instances(path, root, on_error="skip")
    assert list(ds.records[0].fields["annotation_id"]) == [8]
    assert "annotation id 7" in ds.skipped[-1][1]


def test_nan_keypoint_is_refused(tmp_path):
    text = json.dumps({"images": [_image(1)], "categories": [PERSON],
                       "annotations": [_ann(9, 1, [1, 1, 5, 5], keypoints=[0] * 15,
                                            num_keypoints=0)]})
    text = text.replace("[0, 0, 0, 0, 0", "[NaN, 0, 2, 0, 0", 1)
    os.makedirs(tmp_path / "images", exist_ok=True)
    from helpers.reader_files import write_image
    write_image(tmp_path / "images" / "1.jpg", 40, 30)
    (tmp_path / "a.json").write_text(text)
    with pytest.raises(DatasetError, match="not a list of finite numbers"):
        read_coco_instances(tmp_path / "a.json", tmp_path / "images")


def _slow(path, root, **kw):
    """read_coco_instances annotation by annotation (its fallback path), for comparison."""
    import readers.coco_instances as ci

    saved = ci.fast_records
    ci.fast_records = lambda *a: None
    try:
        return read_coco_instances(path, root, **kw)
    finally:
        ci.fast_records = saved


@pytest.mark.parametrize("which", ["mini", "fixture"])
@pytest.mark.parametrize("segmentation,keypoints", [(True, True), (False, True), (True, False)])
def test_fast_path_equals_annotation_by_annotation(tmp_path, rng, which, segmentation, keypoints):
    if which == "mini":
        from helpers import COCO as MINI
        path, root = os.path.join(MINI, "annotations.json"), os.path.join(MINI, "images")
    else:
        path, root, _ = _dataset(tmp_path, rng)
    kw = dict(segmentation=segmentation, keypoints=keypoints)
    fast, slow = read_coco_instances(path, root, **kw), _slow(path, root, **kw)
    assert len(fast.records) == len(slow.records)
    for a, b in zip(fast, slow):
        assert set(a.fields) == set(b.fields) and a.extra == b.extra
        for name, v in a.fields.items():
            w = b.fields[name]
            assert (np.array_equal(v, w) if isinstance(v, np.ndarray) else v == w), name


def test_category_keypoint_count_is_bounded(tmp_path):
    cat = {"id": 1, "name": "person", "keypoints": [f"k{i}" for i in range(5000)]}
    path, root = write_coco_files(tmp_path, [_image(1)], [_ann(1, 1, [1, 1, 5, 5])], [cat])
    with pytest.raises(DatasetError, match="names 5000 keypoints"):
        read_coco_instances(path, root)
