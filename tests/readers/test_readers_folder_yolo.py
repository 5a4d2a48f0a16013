"""read_folder, read_file_list and read_yolo."""
import os

import numpy as np
import pytest

from readers import DatasetError, read_file_list, read_folder, read_yolo
from readers.yolo import yaml_names
from helpers.reader_files import grayscale_jpeg, write_image  # noqa: F401


def test_read_folder_sorted_classes_and_images(tmp_path):
    for rel in ("zebra/b.jpg", "zebra/a.png", "ant/x.jpg", "ant/sub/y.jpg"):
        write_image(str(tmp_path / rel), 8, 8)
    (tmp_path / "ant" / "notes.txt").write_text("not an image")
    ds = read_folder(tmp_path)
    assert ds.class_names == ["ant", "zebra"] and len(ds) == 4
    rel = [os.path.relpath(p, os.path.realpath(tmp_path)) for p in ds.paths]
    assert rel == ["ant/sub/y.jpg", "ant/x.jpg", "zebra/a.png", "zebra/b.jpg"]
    assert ds.labels.tolist() == [0, 0, 1, 1] and ds.labels.dtype == np.int64


def test_read_file_list(tmp_path):
    write_image(str(tmp_path / "imgs" / "a b.jpg"), 8, 8)
    write_image(str(tmp_path / "imgs" / "c.jpg"), 8, 8)
    lst = tmp_path / "list.txt"
    lst.write_text("# comment\nimgs/a b.jpg 2\n\nimgs/c.jpg 0\n")
    ds = read_file_list(lst)
    assert [os.path.basename(p) for p in ds.paths] == ["a b.jpg", "c.jpg"]
    assert ds.labels.tolist() == [2, 0] and ds.class_names == ["0", "1", "2"]


@pytest.mark.parametrize("line,fault", [
    ("imgs/missing.jpg 1", "image file not found"),
    ("../../etc/passwd 1", "points outside the dataset root"),
    ("imgs/c.jpg one", "non-negative int label"),
])
def test_read_file_list_bad_lines(tmp_path, line, fault):
    write_image(str(tmp_path / "imgs" / "c.jpg"), 8, 8)
    lst = tmp_path / "list.txt"
    lst.write_text(f"imgs/c.jpg 0\n{line}\n")
    with pytest.raises(DatasetError, match=fault):
        read_file_list(lst)
    with pytest.warns(UserWarning, match="skipped 1"):
        ds = read_file_list(lst, on_error="skip")
    assert len(ds) == 1 and fault in ds.skipped[0][1]


def _yolo(tmp_path, labels, classes="cat\ndog\n", size=(100, 50)):
    for stem, text in labels.items():
        write_image(str(tmp_path / "images" / f"{stem}.jpg"), *size)
        if text is not None:
            os.makedirs(tmp_path / "labels", exist_ok=True)
            (tmp_path / "labels" / f"{stem}.txt").write_text(text)
    if classes is not None:
        (tmp_path / "classes.txt").write_text(classes)
    return tmp_path


def test_yolo_normalised_centre_maps_to_xyxy(tmp_path):
    root = _yolo(tmp_path, {"a": "1 0.5 0.5 0.2 0.4\n0 0.1 0.1 0.2 0.2\n", "b": None})
    ds = read_yolo(root)
    assert ds.class_names == ["cat", "dog"] and [r.image_id for r in ds] == ["a", "b"]
    np.testing.assert_allclose(ds[0].boxes, [[40, 15, 60, 35], [0, 0, 20, 10]], atol=1e-5)
    assert ds[0].labels.tolist() == [1, 0] and (ds[0].width, ds[0].height) == (100, 50)
    assert ds[1].num_boxes == 0 and ds.clipped == 0


def test_yolo_grayscale_image_header(tmp_path, grayscale_jpeg):
    os.makedirs(tmp_path / "y" / "images")
    os.replace(grayscale_jpeg, tmp_path / "y" / "images" / "g.jpg")
    (tmp_path / "y" / "classes.txt").write_text("a\n")
    r = read_yolo(tmp_path / "y")[0]
    assert (r.width, r.height) == (64, 48) and r.num_boxes == 0


@pytest.mark.parametrize("text,names", [
    ("path: .\nnames: ['a', \"b\", c]\n", ["a", "b", "c"]),
    ("names:\n  - a\n  - b\nnc: 2\n", ["a", "b"]),
    ("nc: 2\nnames:\n  0: person\n  1: traffic light\n", ["person", "traffic light"]),
])
def test_yaml_names(text, names):
    assert yaml_names(text) == names


def test_yolo_classes_from_data_yaml(tmp_path):
    root = _yolo(tmp_path, {"a": "1 0.5 0.5 0.2 0.4\n"}, classes=None)
    (tmp_path / "data.yaml").write_text("names:\n  0: cat\n  1: dog\n")
    assert read_yolo(root).class_names == ["cat", "dog"]


def test_yolo_without_class_list(tmp_path):
    root = _yolo(tmp_path, {"a": ""}, classes=None)
    with pytest.raises(DatasetError, match="class list not found"):
        read_yolo(root)


@pytest.mark.parametrize("line,fault", [
    ("5 0.5 0.5 0.1 0.1", "unknown class 5"),
    ("0 0.5 0.5 0.1", "expected 5 values"),
    ("0 0.5 0.5 zero 0.1", "'zero' is not a decimal number"),
    ("0 0.5 0.5 0 0.1", "zero width or height"),
    ("0 3.0 3.0 0.1 0.1", "wholly outside"),
])
def test_yolo_bad_lines(tmp_path, line, fault):
    root = _yolo(tmp_path, {"a": f"0 0.5 0.5 0.2 0.2\n{line}\n"})
    with pytest.raises(DatasetError, match=fault) as info:
        read_yolo(root)
    assert "a.txt" in str(info.value) and "line 2" in str(info.value)
    with pytest.warns(UserWarning, match="skipped 1"):
        ds = read_yolo(root, on_error="skip")
    assert ds[0].num_boxes == 1 and fault in ds.skipped[0][1]


def test_yolo_box_past_edge_clipped_and_orphan_label(tmp_path):
    root = _yolo(tmp_path, {"a": "0 0.95 0.5 0.2 0.2\n"})
    (tmp_path / "labels" / "ghost.txt").write_text("0 0.5 0.5 0.1 0.1\n")
    with pytest.raises(DatasetError, match="label file has no image"):
        read_yolo(root)
    with pytest.warns(UserWarning):
        ds = read_yolo(root, on_error="skip")
    np.testing.assert_allclose(ds[0].boxes, [[85, 20, 100, 30]], atol=1e-5)
    assert ds.clipped == 1 and ds.skipped[0][0].endswith("ghost.txt")
