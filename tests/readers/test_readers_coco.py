"""read_coco: mapping, options, real sample, quirks and bad input."""
import json
import math
import os

import numpy as np
import pytest

from readers import DatasetError, read_coco
from helpers.reader_files import (COCO_MINI, ann, big_annotation_ids_coco, crowd_rle_coco,  # noqa: F401
                              empty_images_coco, grayscale_jpeg, image, tiny_boxes_coco,
                              write_coco)


def test_bbox_xywh_maps_to_xyxy(tmp_path):
    path, root = write_coco(tmp_path, [image(1)], [ann(7, 1, [10.5, 20, 30, 40])])
    ds = read_coco(path, root)
    np.testing.assert_array_equal(ds[0].boxes, [[10.5, 20, 40.5, 60]])
    assert ds[0].boxes.dtype == np.float32
    assert (ds[0].width, ds[0].height, ds[0].image_id) == (100, 80, 1)
    assert ds[0].path == os.path.join(os.path.realpath(root), "0001.jpg")


def test_labels_are_contiguous_in_ascending_category_id_order(tmp_path):
    cats = [{"id": 90, "name": "zebra"}, {"id": 3, "name": "car"}, {"id": 17, "name": "cat"}]
    anns = [ann(1, 1, [1, 1, 5, 5], 90), ann(2, 1, [1, 1, 5, 5], 3), ann(3, 1, [1, 1, 5, 5], 17)]
    path, root = write_coco(tmp_path, [image(1)], anns, cats)
    ds = read_coco(path, root)
    assert ds.class_names == ["car", "cat", "zebra"] and ds.category_ids == [3, 17, 90]
    assert ds[0].labels.tolist() == [2, 0, 1]
    assert read_coco(path, root, keep_original_ids=True)[0].labels.tolist() == [90, 3, 17]


def test_categories_subset_by_name_or_id(tmp_path):
    anns = [ann(1, 1, [1, 1, 5, 5], 1), ann(2, 1, [2, 2, 5, 5], 3)]
    path, root = write_coco(tmp_path, [image(1)], anns)
    for wanted in (["dog"], [3]):
        ds = read_coco(path, root, categories=wanted)
        assert ds.class_names == ["dog"] and ds.category_ids == [3]
        assert ds[0].labels.tolist() == [0] and ds[0].fields["annotation_id"].tolist() == [2]
        assert ds.dropped == {"boxes of categories not selected": 1}
    with pytest.raises(DatasetError, match="'bird' is not in the file"):
        read_coco(path, root, categories=["bird"])


def test_real_coco_mini_matches_the_json():
    path = os.path.join(COCO_MINI, "annotations.json")
    with open(path) as f:
        raw = json.load(f)
    ds = read_coco(path, os.path.join(COCO_MINI, "images"))
    assert len(ds) == len(raw["images"]) == 68
    assert sum(r.num_boxes for r in ds) == len(raw["annotations"])
    assert ds.category_ids == sorted(c["id"] for c in raw["categories"])
    by_id = {a["id"]: a for a in raw["annotations"]}
    for record in ds:
        for box, label, aid in zip(record.boxes, record.labels, record.fields["annotation_id"]):
            x, y, w, h = by_id[int(aid)]["bbox"]
            np.testing.assert_allclose(box, [x, y, x + w, y + h], rtol=0, atol=1e-4)
            assert ds.category_ids[label] == by_id[int(aid)]["category_id"]
            assert by_id[int(aid)]["image_id"] == record.image_id
    assert all(len(r.extra["segmentation"]) == r.num_boxes for r in ds)
    assert ds.skipped == [] and ds.clipped == 0


def test_crowd_rle_kept_flagged_or_removed(crowd_rle_coco):
    path, root = crowd_rle_coco
    r = read_coco(path, root)[0]
    assert r.fields["iscrowd"].tolist() == [0, 1] and r.fields["iscrowd"].dtype == np.uint8
    assert r.extra["segmentation"][1] == {"counts": [100, 20, 60, 20, 7800], "size": [80, 100]}
    assert r.extra["segmentation"][0] == [[10, 10, 30, 10, 30, 30]]
    ds = read_coco(path, root, include_iscrowd=False)
    assert ds[0].fields["iscrowd"].tolist() == [0] and len(ds[0].extra["segmentation"]) == 1
    assert ds.dropped == {"crowd boxes (include_iscrowd=False)": 1}


def test_annotation_ids_above_2_31(big_annotation_ids_coco):
    r = read_coco(*big_annotation_ids_coco)[0]
    assert r.fields["annotation_id"].dtype == np.int64
    assert r.fields["annotation_id"].tolist() == [2**31 + 5, 2**40 + 1]


def test_empty_images_kept_unless_skip_empty(empty_images_coco):
    ds = read_coco(*empty_images_coco)
    assert [r.num_boxes for r in ds] == [1, 0, 1] and ds[1].boxes.shape == (0, 4)
    ds = read_coco(*empty_images_coco, skip_empty=True)
    assert [r.image_id for r in ds] == [1, 3]
    assert ds.dropped == {"empty images (skip_empty)": 1}


def test_boxes_under_2px_kept_and_size_threshold(tiny_boxes_coco):
    r = read_coco(*tiny_boxes_coco)[0]
    np.testing.assert_allclose(r.boxes[:2], [[5, 5, 6.5, 5.8], [7, 7, 8, 8]], atol=1e-6)
    ds = read_coco(*tiny_boxes_coco, size_threshold=2)
    assert ds[0].fields["annotation_id"].tolist() == [3]
    assert ds.dropped == {"boxes under size_threshold=2": 2}


def test_grayscale_image_size_from_header_when_missing(tmp_path, grayscale_jpeg):
    im = {"id": 1, "file_name": os.path.basename(grayscale_jpeg), "width": 0}
    path, _ = write_coco(tmp_path, [im], [ann(1, 1, [1, 1, 5, 5])], make_files=False)
    r = read_coco(path, os.path.dirname(grayscale_jpeg))[0]
    assert (r.width, r.height) == (64, 48)


def test_flag_keys_read_back_into_fields(tmp_path):
    anns = [ann(1, 1, [1, 1, 5, 5], difficult=1, truncated=0), ann(2, 1, [1, 1, 5, 5])]
    r = read_coco(*write_coco(tmp_path, [image(1)], anns))[0]
    assert r.fields["difficult"].tolist() == [1, 0] and r.fields["truncated"].tolist() == [0, 0]


def test_box_past_edge_is_clipped_and_counted(tmp_path):
    path, root = write_coco(tmp_path, [image(1)], [ann(1, 1, [90, 70, 20, 20]),
                                                   ann(2, 1, [0, 0, 100, 80])])
    ds = read_coco(path, root)
    np.testing.assert_array_equal(ds[0].boxes, [[90, 70, 100, 80], [0, 0, 100, 80]])
    assert ds.clipped == 1


# --- bad input ---------------------------------------------------------------------------------

def test_malformed_json_names_file(tmp_path):
    path = tmp_path / "bad.json"
    path.write_text('{"images": [')
    with pytest.raises(DatasetError, match=r"bad\.json: malformed JSON"):
        read_coco(path, tmp_path, on_error="skip")  # a broken file cannot be skipped around


def test_not_coco_json(tmp_path):
    path = tmp_path / "x.json"
    path.write_text("[1, 2]")
    with pytest.raises(DatasetError, match="not a COCO instances file"):
        read_coco(path, tmp_path)


def test_missing_image_raises_or_skips(tmp_path):
    path, root = write_coco(tmp_path, [image(1), image(2)], [ann(1, 2, [1, 1, 5, 5])])
    os.remove(os.path.join(root, "0002.jpg"))
    with pytest.raises(DatasetError, match=r"0002\.jpg: image file not found"):
        read_coco(path, root)
    with pytest.warns(UserWarning, match="skipped 2 bad item"):
        ds = read_coco(path, root, on_error="skip")
    assert [r.image_id for r in ds] == [1]
    assert ds.skipped[0][0].endswith("0002.jpg") and "not found" in ds.skipped[0][1]
    assert "refers to an image that is not listed or was skipped" in ds.skipped[1][1]


BAD_BOXES = [
    ([10, 10, -5, 5], "x1 < x0"),
    ([10, 10, 0, 5], "zero width or height"),
    ([10, 10, math.nan, 5], "non-finite"),
    ([200, 10, 5, 5], "wholly outside the 100x80 image"),
    ([10, -50, 5, 20], "wholly outside"),
]


@pytest.mark.parametrize("bbox,fault", BAD_BOXES)
def test_bad_box_raises_or_is_skipped(tmp_path, bbox, fault):
    path, root = write_coco(tmp_path, [image(1)], [ann(1, 1, [1, 1, 5, 5]), ann(9, 1, bbox)])
    with pytest.raises(DatasetError, match=fault) as info:
        read_coco(path, root)
    assert str(info.value).startswith(path) and "annotation id 9" in str(info.value)
    with pytest.warns(UserWarning, match="skipped 1 bad item"):
        ds = read_coco(path, root, on_error="skip")
    assert ds[0].fields["annotation_id"].tolist() == [1]
    assert len(ds.skipped) == 1 and fault in ds.skipped[0][1]


def test_malformed_annotation_entry_goes_to_policy(tmp_path):
    anns = [ann(1, 1, [1, 1, 5, 5]), {"id": 2, "image_id": 1, "category_id": 1, "bbox": [1, 2]}]
    path, root = write_coco(tmp_path, [image(1)], anns)
    with pytest.raises(DatasetError, match="'bbox' must be 4 numbers"):
        read_coco(path, root)
    with pytest.warns(UserWarning):
        ds = read_coco(path, root, on_error="skip")
    assert ds[0].fields["annotation_id"].tolist() == [1] and len(ds.skipped) == 1


def test_unknown_category_id(tmp_path):
    path, root = write_coco(tmp_path, [image(1)], [ann(1, 1, [1, 1, 5, 5], category_id=42)])
    with pytest.raises(DatasetError, match="unknown category id 42"):
        read_coco(path, root)


def test_file_name_outside_root_is_refused(tmp_path):
    images = [image(1), image(2, name="../../etc/passwd")]
    path, root = write_coco(tmp_path, images, [], make_files=False)
    with pytest.raises(DatasetError, match="points outside the dataset root"):
        read_coco(path, root, check_images=False)
    with pytest.warns(UserWarning):
        ds = read_coco(path, root, on_error="skip", check_images=False)
    assert [r.image_id for r in ds] == [1] and "../../etc/passwd" in ds.skipped[0][1]


@pytest.mark.parametrize("bad", [{"id": 2**70}, {"iscrowd": 300}, {"image_id": None},
                                 {"bbox": None}, {"difficult": 7}])
def test_malformed_annotation_values(tmp_path, bad):
    anns = [ann(1, 1, [1, 1, 5, 5]), ann(2, 1, [1, 1, 5, 5], difficult=0) | bad]
    path, root = write_coco(tmp_path, [image(1)], anns)
    with pytest.raises(DatasetError, match=r"annotation #1 \(id"):
        read_coco(path, root)
    with pytest.warns(UserWarning):
        ds = read_coco(path, root, on_error="skip")
    assert ds[0].fields["annotation_id"].tolist() == [1] and len(ds.skipped) == 1
