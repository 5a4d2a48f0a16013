"""read_voc: mapping, options, real sample, quirks and bad input (XXE included)."""
import os

import numpy as np
import pytest
from PIL import Image

from readers import VOC_CLASSES, DatasetError, read_voc
from helpers.reader_files import (SECRET, VOC_MINI, difficult_voc, edge_boxes_voc,  # noqa: F401
                              voc_xml, write_voc)


def test_one_based_inclusive_maps_to_continuous(tmp_path):
    root = write_voc(tmp_path, {"a": voc_xml("a.jpg", (100, 80), [("dog", 1, 1, 10, 20)])})
    ds = read_voc(root)
    r = ds[0]
    np.testing.assert_array_equal(r.boxes, [[0, 0, 10, 20]])
    assert r.labels.tolist() == [VOC_CLASSES.index("dog")] and r.image_id == "a"
    assert (r.width, r.height) == (100, 80) and ds.class_names == list(VOC_CLASSES)
    assert r.path == os.path.join(os.path.realpath(root), "JPEGImages", "a.jpg")
    assert r.fields["difficult"].dtype == np.uint8 and r.fields["truncated"].tolist() == [0]


def test_box_ending_at_image_edge_is_not_clipped(edge_boxes_voc):
    ds = read_voc(edge_boxes_voc)
    np.testing.assert_array_equal(ds[0].boxes, [[0, 0, 100, 80], [49, 39, 100, 60]])
    assert ds.clipped == 0 and ds.skipped == []


def test_difficult_flag_and_skip_difficult(difficult_voc):
    r = read_voc(difficult_voc)[0]
    assert r.fields["difficult"].tolist() == [1, 0] and r.fields["truncated"].tolist() == [0, 1]
    ds = read_voc(difficult_voc, skip_difficult=True)
    assert ds[0].labels.tolist() == [VOC_CLASSES.index("cat")]
    assert ds.dropped == {"difficult objects (skip_difficult)": 1}


def test_real_voc_mini():
    ds = read_voc(VOC_MINI)
    assert len(ds) == 40 and sum(r.num_boxes for r in ds) == 89
    assert sum(int(r.fields["truncated"].sum()) for r in ds) == 38
    assert sum(int(r.fields["difficult"].sum()) for r in ds) == 0
    assert ds.skipped == [] and ds.clipped == 0
    for r in ds[:5]:
        assert Image.open(r.path).size == (r.width, r.height)
    # 2007_000676: sheep, xmin 59 ymin 94 xmax 472 ymax 270 in the XML
    assert ds[0].image_id == "2007_000676"
    np.testing.assert_array_equal(ds[0].boxes, [[58, 93, 472, 270]])
    assert ds.class_names[ds[0].labels[0]] == "sheep"


def test_classes_given_and_discovered(tmp_path):
    root = write_voc(tmp_path, {"a": voc_xml("a.jpg", (100, 80), [
        ("zebra", 1, 1, 10, 10), ("ant", 2, 2, 9, 9)])})
    ds = read_voc(root, classes="discover")
    assert ds.class_names == ["ant", "zebra"] and ds[0].labels.tolist() == [1, 0]
    assert read_voc(root, classes=["zebra", "ant"])[0].labels.tolist() == [0, 1]


def test_no_split_file_reads_every_xml_sorted(tmp_path):
    docs = {i: voc_xml(f"{i}.jpg", (100, 80), [("dog", 1, 1, 5, 5)]) for i in ("b", "a", "c")}
    root = write_voc(tmp_path, docs, split=None)
    assert [r.image_id for r in read_voc(root, split="train")] == ["a", "b", "c"]


def test_split_file_order_is_kept(tmp_path):
    docs = {i: voc_xml(f"{i}.jpg", (100, 80), []) for i in ("b", "a")}
    assert [r.image_id for r in read_voc(write_voc(tmp_path, docs))] == ["b", "a"]


def test_size_from_header_when_missing_or_zero(tmp_path):
    root = write_voc(tmp_path, {"g": voc_xml("g.jpg", None, [("dog", 1, 1, 5, 5)]),
                                "z": voc_xml("z.jpg", (0, 0), [])},
                     images={"g.jpg": (64, 48, "L"), "z.jpg": (30, 20)})
    ds = read_voc(root)
    assert [(r.width, r.height) for r in ds] == [(64, 48), (30, 20)]


def test_missing_filename_falls_back_to_id_jpg(tmp_path):
    root = write_voc(tmp_path, {"x": voc_xml(None, (100, 80), [])})
    assert read_voc(root)[0].path.endswith(os.path.join("JPEGImages", "x.jpg"))


# --- bad input ---------------------------------------------------------------------------------

def _two_files(tmp_path, bad_xml):
    return write_voc(tmp_path, {"good": voc_xml("good.jpg", (100, 80), [("dog", 1, 1, 5, 5)]),
                                "bad": bad_xml})


def test_malformed_xml_raises_or_drops_the_image(tmp_path):
    root = _two_files(tmp_path, "<annotation><object></annotation>")
    with pytest.raises(DatasetError, match=r"bad\.xml: malformed XML"):
        read_voc(root)
    with pytest.warns(UserWarning, match="skipped 1 bad item"):
        ds = read_voc(root, on_error="skip")
    assert [r.image_id for r in ds] == ["good"]
    assert ds.skipped[0][0].endswith("bad.xml") and "malformed XML" in ds.skipped[0][1]


def test_missing_annotation_file(tmp_path):
    root = _two_files(tmp_path, voc_xml("bad.jpg", (100, 80), []))
    os.remove(os.path.join(root, "Annotations", "bad.xml"))
    with pytest.raises(DatasetError, match="annotation file not found"):
        read_voc(root)


def test_missing_image_raises_or_drops_the_image(tmp_path):
    root = _two_files(tmp_path, voc_xml("bad.jpg", (100, 80), [("dog", 1, 1, 5, 5)]))
    os.remove(os.path.join(root, "JPEGImages", "bad.jpg"))
    with pytest.raises(DatasetError, match=r"bad\.jpg: image file not found"):
        read_voc(root)
    with pytest.warns(UserWarning):
        ds = read_voc(root, on_error="skip")
    assert [r.image_id for r in ds] == ["good"] and len(ds.skipped) == 1


@pytest.mark.parametrize("coords,fault", [
    ((20, 1, 10, 5), "x1 < x0"),
    ((5, 5, 4, 9), "zero width or height"),   # xmax = xmin - 1: 0 px wide
    (("nan", 1, 5, 5), "non-finite"),
    ((150, 1, 160, 5), "wholly outside the 100x80 image"),
    (("a", 1, 5, 5), "bndbox is not 4 numbers"),
])
def test_bad_box_raises_or_is_dropped(tmp_path, coords, fault):
    root = _two_files(tmp_path, voc_xml("bad.jpg", (100, 80), [("cat", 1, 1, 5, 5),
                                                                ("dog", *coords)]))
    with pytest.raises(DatasetError, match=fault) as info:
        read_voc(root)
    assert "bad.xml" in str(info.value) and "'dog'" in str(info.value)
    with pytest.warns(UserWarning, match="skipped 1 bad item"):
        ds = read_voc(root, on_error="skip")
    assert [r.num_boxes for r in ds] == [1, 1] and fault in ds.skipped[0][1]


def test_box_past_edge_is_clipped_and_counted(tmp_path):
    root = write_voc(tmp_path, {"a": voc_xml("a.jpg", (100, 80), [("dog", 90, 70, 120, 95)])})
    ds = read_voc(root)
    np.testing.assert_array_equal(ds[0].boxes, [[89, 69, 100, 80]])
    assert ds.clipped == 1


def test_unknown_class_raises_or_is_dropped(tmp_path):
    root = _two_files(tmp_path, voc_xml("bad.jpg", (100, 80), [("unicorn", 1, 1, 5, 5)]))
    with pytest.raises(DatasetError, match="'unicorn': unknown class"):
        read_voc(root)
    with pytest.warns(UserWarning):
        ds = read_voc(root, on_error="skip")
    assert [r.num_boxes for r in ds] == [1, 0]
    with pytest.raises(DatasetError, match="unknown class"):
        read_voc(root, classes=["dog"])


def test_filename_outside_root_is_refused(tmp_path):
    root = _two_files(tmp_path, voc_xml("../../etc/passwd", (100, 80), []))
    with pytest.raises(DatasetError, match="points outside the dataset root"):
        read_voc(root)
    with pytest.warns(UserWarning):
        ds = read_voc(root, on_error="skip")
    assert [r.image_id for r in ds] == ["good"] and "../../etc/passwd" in ds.skipped[0][1]


def test_external_entity_is_not_expanded(tmp_path):
    secret = tmp_path / "secret.txt"
    secret.write_text(SECRET)
    doctype = f'<!DOCTYPE annotation [<!ENTITY xxe SYSTEM "file://{secret}">]>'
    root = _two_files(tmp_path, voc_xml("bad.jpg", (100, 80), [("&xxe;", 1, 1, 5, 5)],
                                        doctype=doctype))
    with pytest.raises(DatasetError) as info:
        read_voc(root)
    assert SECRET not in str(info.value)
    with pytest.warns(UserWarning):
        ds = read_voc(root, on_error="skip", classes="discover")
    assert SECRET not in repr(ds.class_names) + repr(ds.skipped)
    assert all(SECRET not in name for name in ds.class_names)
