"""YOLO segment / pose / OBB and DOTA labels (readers/yolo_tasks.py, readers/dota.py): values
by hand, bad lines named, and write-then-read round trips that change no value."""
import os

import numpy as np
import pytest

from readers.dota import read_dota, write_dota
from readers.errors import DatasetError
from readers.yolo_tasks import read_yolo_task, write_yolo_task
from helpers.reader_files import write_image

W, H = 64, 48


def _tree(root, lines, names=("a", "b"), yaml=None, stem="img"):
    write_image(os.path.join(root, "images", stem + ".jpg"), W, H)
    os.makedirs(os.path.join(root, "labels"), exist_ok=True)
    with open(os.path.join(root, "labels", stem + ".txt"), "w") as f:
        f.write("\n".join(lines) + "\n")
    with open(os.path.join(root, "classes.txt"), "w") as f:
        f.write("\n".join(names) + "\n")
    if yaml is not None:
        with open(os.path.join(root, "data.yaml"), "w") as f:
            f.write(yaml)
    return str(root)


def test_segment_values_and_box(tmp_path):
    root = _tree(tmp_path, ["1 0.25 0.5 0.75 0.25 0.5 1.0", "0 0.5 0.5 0.25 0.5"])
    ds = read_yolo_task(root, "segment")
    r = ds.records[0]
    assert list(r.labels) == [1, 0]
    assert np.allclose(r.boxes[0], [16, 12, 48, 48])
    polys = r.fields["polygons"]
    assert list(polys.counts) == [1, 0]
    assert np.allclose(polys.values[0], [[16, 24], [48, 12], [32, 48]])


def test_pose_values_flip_idx_and_unlabelled(tmp_path):
    yaml = "names: [a, b]\nkpt_shape: [3, 3]\nflip_idx: [0, 2, 1]\n"
    root = _tree(tmp_path, ["0 0.5 0.5 0.5 0.5 0.25 0.5 2 0 0 0 0.75 0.25 1"], yaml=yaml)
    ds = read_yolo_task(root, "pose")
    assert ds.instances == {"kpt_shape": [3, 3], "flip_index": [0, 2, 1]}
    assert np.allclose(ds.records[0].fields["keypoints"][0],
                       [[16, 24, 2], [0, 0, 0], [48, 12, 1]])


def test_obb_values(tmp_path):
    root = _tree(tmp_path, ["1 0.1 0.1 0.5 0.1 0.5 0.5 0.1 0.5"])
    r = read_yolo_task(root, "obb").records[0]
    assert np.allclose(r.fields["obb"][0], [[6.4, 4.8], [32, 4.8], [32, 24], [6.4, 24]])
    assert np.allclose(r.boxes[0], [6.4, 4.8, 32, 24])


@pytest.mark.parametrize("task,line,message", [
    ("segment", "0 0.1 0.2 0.3 0.4 0.5", "odd count"),
    ("segment", "0 0.1 0.2 0.3 0.4", None),  # 4 values: a box line, not a fault
    ("segment", "0 0.1 0.2 0.3 0.4 0.5 0.6 0.7", "odd count"),
    ("segment", "0 0.1 0.2 0.3 0.4 0.5 nan", "not a decimal number"),
    ("segment", "0 0.1 0.1 0.1 0.1 0.1 0.1", "zero width"),
    ("obb", "0 0.1 0.1 0.5 0.1 0.5 0.5", "expected 8 values"),
    ("pose", "0 0.5 0.5 0.5 0.5 0.1 0.1 3 0.2 0.2 2", "visibility"),
    ("pose", "0 0.5 0.5 0.5 0.5 0.1 0.1 2", "expected 10 values"),
    ("segment", "5 0.1 0.2 0.3 0.4 0.5 0.6", "unknown class"),
])
def test_bad_lines_are_named(tmp_path, task, line, message):
    yaml = "names: [a, b]\nkpt_shape: [2, 3]\n" if task == "pose" else None
    root = _tree(tmp_path, [line, "1 0.2 0.2 0.6 0.2 0.6 0.6 0.2 0.6" if task != "pose"
                            else "1 0.5 0.5 0.2 0.2 0.5 0.5 2 0.5 0.6 2"], yaml=yaml)
    if message is None:
        assert read_yolo_task(root, task).records[0].num_boxes == 2
        return
    with pytest.raises(DatasetError, match=message) as info:
        read_yolo_task(root, task)
    assert "line 1" in str(info.value) and "img.txt" in str(info.value)
    assert "dropped" not in str(info.value)  # the line's fault, not the file's
    with pytest.warns(UserWarning):
        ds = read_yolo_task(root, task, on_error="skip")
    assert list(ds.records[0].labels) == [1]


def test_pose_needs_kpt_shape(tmp_path):
    root = _tree(tmp_path, ["0 0.5 0.5 0.5 0.5"], yaml="names: [a, b]\n")
    with pytest.raises(DatasetError, match="kpt_shape"):
        read_yolo_task(root, "pose")
    huge = _tree(tmp_path / "h", ["0 0.5 0.5 0.5 0.5"],
                 yaml="names: [a, b]\nkpt_shape: [1000000000, 3]\n")
    with pytest.raises(DatasetError, match="K from 1 to"):
        read_yolo_task(huge, "pose")
    root2 = _tree(tmp_path / "x", ["0 0.5 0.5 0.5 0.5 0.1 0.1 2"],
                  yaml="names: [a, b]\nkpt_shape: [1, 3]\nflip_idx: [1]\n")
    with pytest.raises(DatasetError, match="flip"):
        read_yolo_task(root2, "pose")


def _random_tree(root, rng, task, n=4):
    lines = []
    for _ in range(n):
        c = int(rng.integers(0, 2))
        if task == "segment":
            pts = rng.uniform(0.05, 0.95, (int(rng.integers(3, 8)), 2))
            lines.append(f"{c} " + " ".join(f"{v:.7f}" for v in pts.reshape(-1)))
        elif task == "obb":
            pts = rng.uniform(0.05, 0.95, (4, 2))
            lines.append(f"{c} " + " ".join(f"{v:.6f}" for v in pts.reshape(-1)))
        else:
            box = [rng.uniform(0.3, 0.7), rng.uniform(0.3, 0.7), 0.2, 0.2]
            kp = []
            for _ in range(3):
                v = int(rng.integers(0, 3))
                kp += [0, 0, 0] if v == 0 else [rng.uniform(0, 1), rng.uniform(0, 1), v]
            lines.append(f"{c} " + " ".join(f"{v:.6f}" for v in box) + " "
                         + " ".join(f"{v:.6f}" if isinstance(v, float) else str(v) for v in kp))
    yaml = "names: [a, b]\nkpt_shape: [3, 3]\nflip_idx: [0, 2, 1]\n" if task == "pose" else None
    return _tree(root, lines, yaml=yaml)


_FIELD = {"segment": "polygons", "pose": "keypoints", "obb": "obb"}


def _same(a, b):
    """Equal values; polygons (float64 pixels from normalised text): within an ulp, and the
    text they are written as (test_yolo_task_round_trip_is_exact) identical."""
    if isinstance(a, np.ndarray):
        return np.array_equal(a, b)
    return (np.array_equal(a.offsets, b.offsets) and np.array_equal(a.values.offsets, b.values.offsets)
            and np.allclose(a.values.values, b.values.values, rtol=1e-15, atol=0))


@pytest.mark.parametrize("task", ["segment", "pose", "obb"])
def test_yolo_task_round_trip_is_exact(tmp_path, rng, task):
    src = _random_tree(tmp_path / "src", rng, task)
    ds = read_yolo_task(src, task)
    write_yolo_task(ds, tmp_path / "out", task)
    back = read_yolo_task(tmp_path / "out", task)
    write_yolo_task(back, tmp_path / "again", task)
    for name in os.listdir(tmp_path / "out" / "labels"):  # the text itself comes back
        assert (tmp_path / "out" / "labels" / name).read_text() == \
            (tmp_path / "again" / "labels" / name).read_text()
    assert back.instances == ds.instances
    for r1, r2 in zip(ds, back):
        assert _same(r1.fields[_FIELD[task]], r2.fields[_FIELD[task]])
        assert np.array_equal(r1.labels, r2.labels)


def _dota_tree(root, lines, stem="P0001"):
    write_image(os.path.join(root, "images", stem + ".png"), W, H)
    os.makedirs(os.path.join(root, "labelTxt"), exist_ok=True)
    with open(os.path.join(root, "labelTxt", stem + ".txt"), "w") as f:
        f.write("\n".join(lines) + "\n")
    return str(root)


def test_dota_values_header_and_round_trip(tmp_path):
    lines = ["imagesource:GoogleEarth", "gsd:0.146343590398",
             "10 5 30 5 30 20 10 20 plane 0", "40.5 30 70 30 70 50 40.5 50 small-vehicle 1"]
    root = _dota_tree(tmp_path / "d", lines)
    ds = read_dota(root)
    r = ds.records[0]
    assert [ds.class_names[k] for k in r.labels] == ["plane", "small-vehicle"]
    assert list(r.fields["difficult"]) == [0, 1]
    assert np.allclose(r.boxes, [[10, 5, 30, 20], [40.5, 30, 64, 48]])  # clipped box
    assert np.allclose(r.fields["obb"][1, 1], [70, 30])  # corners kept as given
    assert r.extra["image_keys"] == {"imagesource": "GoogleEarth", "gsd": "0.146343590398"}
    write_dota(ds, tmp_path / "out")
    back = read_dota(tmp_path / "out")
    assert np.array_equal(back.records[0].fields["obb"], r.fields["obb"])
    assert back.records[0].extra == r.extra
    write_yolo_task(back, tmp_path / "obb", "obb")
    via = read_yolo_task(tmp_path / "obb", "obb")
    assert np.array_equal(via.records[0].fields["obb"], r.fields["obb"])


@pytest.mark.parametrize("line,message", [
    ("10 5 30 5 30 20 10 20", "expected"),
    ("10 5 30 5 30 20 10 20 boat 0", "unknown class"),
    ("10 5 30 5 30 20 10 20 plane 2", "difficult"),
    ("10 5 30 5 30 nan 10 20 plane 0", "not a decimal"),
    ("100 5 130 5 130 20 100 20 plane 0", "outside"),
])
def test_dota_bad_lines_are_named(tmp_path, line, message):
    root = _dota_tree(tmp_path, [line, "1 1 9 1 9 9 1 9 ship 0"])
    with pytest.raises(DatasetError, match=message) as info:
        read_dota(root)
    assert "P0001.txt" in str(info.value) and "line 1" in str(info.value)
    with pytest.warns(UserWarning):
        assert read_dota(root, on_error="skip").records[0].num_boxes == 1
