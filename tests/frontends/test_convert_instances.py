"""detaug-convert between the instance formats: COCO <-> YOLO-seg polygons, COCO keypoints <->
YOLO-pose, DOTA <-> YOLO-OBB; round trips change no value; a target that cannot hold the shapes
refuses, or with --drop-masks writes the boxes and counts what it left out."""
import json
import os

import numpy as np

from detaug.cli.convert import main
from readers.coco_instances import read_coco_instances
from readers.dota import read_dota
from readers.yolo_tasks import read_yolo_task
from helpers.reader_files import write_coco, write_image

NAMES = ["nose", "left_eye", "right_eye"]
CATS = [{"id": 1, "name": "person", "keypoints": NAMES, "skeleton": [[1, 2], [1, 3]]},
        {"id": 2, "name": "dog", "keypoints": NAMES, "skeleton": [[1, 2], [1, 3]]}]


def _coco(tmp_path, rng, n_images=3):
    images, anns = [], []
    for i in range(1, n_images + 1):
        images.append({"id": i, "file_name": f"{i}.jpg", "width": 64, "height": 48})
        for _ in range(int(rng.integers(1, 4))):
            x, y = (float(v) for v in np.round(rng.uniform(2, 30, 2), 2))
            poly = [x, y, round(x + 20, 2), y, round(x + 10.25, 2), round(y + 15.5, 2)]
            kps = []
            for _ in NAMES:
                v = int(rng.integers(0, 3))
                kps += [0, 0, 0] if v == 0 else [int(rng.integers(0, 64)), int(rng.integers(0, 48)), v]
            anns.append({"id": len(anns) + 1, "image_id": i, "category_id": int(rng.integers(1, 3)),
                         "bbox": [x, y, 20, 15.5], "iscrowd": 0, "segmentation": [poly],
                         "keypoints": kps, "num_keypoints": sum(v > 0 for v in kps[2::3])})
    return write_coco(tmp_path / "coco", images, anns, CATS)


def _run(*argv):
    assert main([str(a) for a in argv]) == 0


def test_coco_keypoints_to_yolo_pose_and_back(tmp_path, rng, capsys):
    path, root = _coco(tmp_path, rng)
    src = read_coco_instances(path, root)
    _run(path, tmp_path / "pose", "--from", "coco", "--to", "yolo-pose", "--drop-masks")
    assert "polygon masks left out (--drop-masks)" in capsys.readouterr().out
    pose = read_yolo_task(tmp_path / "pose", "pose")
    assert pose.instances["flip_index"] == [0, 2, 1]
    for a, b in zip(src, pose):
        assert np.array_equal(a.fields["keypoints"], b.fields["keypoints"])
    _run(tmp_path / "pose", tmp_path / "back", "--from", "yolo-pose", "--to", "coco")
    anns = json.load(open(tmp_path / "back" / "annotations.json"))["annotations"]
    orig = json.load(open(path))["annotations"]
    assert [a["keypoints"] for a in anns] == [a["keypoints"] for a in orig]
    assert [a["num_keypoints"] for a in anns] == [a["num_keypoints"] for a in orig]


def test_coco_polygons_to_yolo_seg_and_back(tmp_path, rng):
    path, root = _coco(tmp_path, rng)
    _run(path, tmp_path / "seg", "--from", "coco", "--to", "yolo-seg", "--drop-masks")
    seg = read_yolo_task(tmp_path / "seg", "segment")
    _run(tmp_path / "seg", tmp_path / "back", "--from", "yolo-seg", "--to", "coco")
    anns = json.load(open(tmp_path / "back" / "annotations.json"))["annotations"]
    orig = json.load(open(path))["annotations"]
    assert [a["segmentation"] for a in anns] == [a["segmentation"] for a in orig]
    again = read_coco_instances(tmp_path / "back" / "annotations.json",
                                tmp_path / "back" / "images")
    for a, b in zip(seg, again):  # (through normalised coordinates: within an ulp)
        pa, pb = a.fields["polygons"], b.fields["polygons"]
        assert np.array_equal(pa.offsets, pb.offsets)
        assert np.array_equal(pa.values.offsets, pb.values.offsets)
        assert np.allclose(pa.values.values, pb.values.values, rtol=1e-15, atol=0)


def test_dota_to_yolo_obb_and_back(tmp_path, rng):
    root = tmp_path / "dota"
    write_image(root / "images" / "P1.png", 200, 150)
    lines = []
    for _ in range(5):
        c = rng.uniform(20, 130, 2)
        d = rng.uniform(3, 15, 2)
        pts = np.round([c - d, c + [d[0], -d[1]], c + d, c + [-d[0], d[1]]], 1)
        lines.append(" ".join(str(v) for v in pts.reshape(-1)) + " plane " + str(int(rng.integers(0, 2))))
    os.makedirs(root / "labelTxt")
    (root / "labelTxt" / "P1.txt").write_text("\n".join(lines) + "\n")
    src = read_dota(root)
    _run(root, tmp_path / "obb", "--from", "dota", "--to", "yolo-obb")
    _run(tmp_path / "obb", tmp_path / "back", "--from", "yolo-obb", "--to", "dota")
    back = read_dota(tmp_path / "back", classes=src.class_names)
    assert np.array_equal(back.records[0].fields["obb"], src.records[0].fields["obb"])
    assert np.array_equal(back.records[0].labels, src.records[0].labels)


def test_targets_that_cannot_hold_shapes_refuse(tmp_path, rng, capsys):
    path, root = _coco(tmp_path, rng)
    _run(path, tmp_path / "pose", "--from", "coco", "--to", "yolo-pose", "--drop-masks")
    capsys.readouterr()
    assert main([str(tmp_path / "pose"), str(tmp_path / "voc"), "--from", "yolo-pose",
                 "--to", "voc"]) == 2
    err = capsys.readouterr().err
    assert "voc cannot hold the keypoints" in err and "--drop-masks" in err
    assert not os.path.exists(tmp_path / "voc")
    _run(tmp_path / "pose", tmp_path / "voc", "--from", "yolo-pose", "--to", "voc", "--drop-masks")
    out = capsys.readouterr().out
    assert "keypoints left out (--drop-masks)" in out
    assert main([str(path), str(tmp_path / "seg"), "--from", "coco", "--to", "yolo-seg"]) == 2
    assert "cannot hold the keypoints" in capsys.readouterr().err


def test_multi_polygon_instances_are_merged_for_yolo_seg(tmp_path, rng, capsys):
    """An instance of two polygons becomes one YOLO-seg polygon, as Ultralytics' converter
    writes it (tests/readers/test_merge_segments.py checks the merge); the summary says so."""
    from readers.yolo_tasks import merge_polygons

    images = [{"id": 1, "file_name": "1.jpg", "width": 64, "height": 48}]
    polys = [[2, 2, 12, 2, 7, 12], [20, 20, 32, 20, 26, 32]]
    anns = [{"id": 1, "image_id": 1, "category_id": 1, "bbox": [2, 2, 30, 30], "iscrowd": 0,
             "segmentation": polys}]
    path, _ = write_coco(tmp_path / "c", images, anns, CATS)
    _run(path, tmp_path / "seg", "--from", "coco", "--to", "yolo-seg")
    assert "merged into one (Ultralytics' merge_multi_segment: not round-trip exact)" in \
        capsys.readouterr().out
    line = (tmp_path / "seg" / "labels" / "1.txt").read_text().split()
    got = np.array(line[1:], np.float64).reshape(-1, 2) * [64, 48]
    assert np.allclose(got, merge_polygons([np.reshape(p, (-1, 2)) for p in polys]))
    assert len(got) == 3 + 1 + 3 + 1  # each polygon closed, joined by a zero-width bridge


def test_dota_to_coco_refuses_oriented_boxes_unless_dropped(tmp_path, capsys):
    root = tmp_path / "dota"
    write_image(root / "images" / "P1.png", 100, 80)
    os.makedirs(root / "labelTxt")
    (root / "labelTxt" / "P1.txt").write_text("10 10 30 10 30 20 10 20 ship 0\n")
    assert main([str(root), str(tmp_path / "coco"), "--from", "dota", "--to", "coco"]) == 2
    assert "coco cannot hold the oriented boxes of 1 boxes" in capsys.readouterr().err
    _run(root, tmp_path / "coco", "--from", "dota", "--to", "coco", "--drop-masks")
    ann = json.load(open(tmp_path / "coco" / "annotations.json"))["annotations"][0]
    assert ann["bbox"] == [10.0, 10.0, 20.0, 10.0] and "obb" not in ann
