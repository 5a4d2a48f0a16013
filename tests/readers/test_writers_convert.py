"""Writers, round trips and the detaug-convert CLI."""
import json
import os
import subprocess
import sys

import numpy as np
import pytest

from detaug.cli.convert import main
from readers import (Dataset, DetectionRecord, read_coco, read_voc, read_yolo, write_coco,
                     write_voc, write_yolo)
from readers.writers import voc_integer_boxes
from helpers.reader_files import (COCO_MINI, REPO, VOC_MINI, crowd_rle_coco,  # noqa: F401
                              difficult_voc, voc_xml, write_image, write_voc as make_voc)

COCO_JSON = os.path.join(COCO_MINI, "annotations.json")


def _by_image(ds, key=lambda r: os.path.basename(r.path)):
    return {key(r): r for r in ds}


def test_voc_coco_voc_round_trip_is_exact(tmp_path):
    src = read_voc(VOC_MINI)
    report = write_coco(src, tmp_path / "c" / "annotations.json", images_dir=tmp_path / "c" / "img")
    assert (report.images, report.boxes, report.classes) == (40, 89, 20)
    assert report.max_shift_px == 0
    mid = read_coco(tmp_path / "c" / "annotations.json", tmp_path / "c" / "img")
    assert mid[0].fields["truncated"].dtype == np.uint8
    write_voc(mid, tmp_path / "v")
    back = read_voc(tmp_path / "v")
    assert back.class_names == src.class_names and len(back) == len(src)
    for a, b in zip(src, back, strict=True):
        assert (a.image_id, a.width, a.height) == (b.image_id, b.width, b.height)
        np.testing.assert_array_equal(a.boxes, b.boxes)
        np.testing.assert_array_equal(a.labels, b.labels)
        for name in ("difficult", "truncated"):
            np.testing.assert_array_equal(a.fields[name], b.fields[name])


def test_difficult_rides_through_coco(tmp_path, difficult_voc):
    write_coco(read_voc(difficult_voc), tmp_path / "a.json", images_dir=tmp_path / "img")
    with open(tmp_path / "a.json") as f:
        anns = json.load(f)["annotations"]
    assert [(a["difficult"], a["truncated"]) for a in anns] == [(1, 0), (0, 1)]
    back = read_voc(write_voc(read_coco(tmp_path / "a.json", tmp_path / "img"),
                              tmp_path / "v").path)
    assert back[0].fields["difficult"].tolist() == [1, 0]


def test_coco_voc_coco_round_trip_within_one_pixel(tmp_path):
    src = read_coco(COCO_JSON, os.path.join(COCO_MINI, "images"))
    report = write_voc(src, tmp_path / "v")
    assert 0 < report.max_shift_px <= 0.5
    assert report.not_held["segmentation on annotations"] == 335
    assert report.not_held["annotation ids"] == 335
    mid = read_voc(tmp_path / "v", classes=src.class_names)
    write_coco(mid, tmp_path / "c" / "annotations.json", images_dir=tmp_path / "c" / "images")
    back = read_coco(tmp_path / "c" / "annotations.json", tmp_path / "c" / "images")
    assert back.class_names == src.class_names
    a, b = _by_image(src), _by_image(back)
    assert a.keys() == b.keys()
    for name, r in a.items():
        np.testing.assert_array_equal(r.labels, b[name].labels)
        assert np.abs(r.boxes - b[name].boxes).max(initial=0) <= 0.5 + 1e-4
        assert (r.width, r.height) == (b[name].width, b[name].height)


def test_write_coco_content(tmp_path, crowd_rle_coco):
    src = read_coco(*crowd_rle_coco)
    report = write_coco(src, tmp_path / "out.json")
    with open(tmp_path / "out.json") as f:
        out = json.load(f)
    assert out["categories"] == [{"id": 1, "name": "cat"}, {"id": 3, "name": "dog"}]
    assert out["images"] == [{"id": 1, "file_name": "0001.jpg", "width": 100, "height": 80}]
    a0, a1 = out["annotations"]
    assert a0["bbox"] == [10, 10, 20, 20] and a0["area"] == 400 and a0["iscrowd"] == 0
    assert a1["iscrowd"] == 1 and a1["category_id"] == 3 and a1["id"] == 2
    assert a1["segmentation"] == {"counts": [100, 20, 60, 20, 7800], "size": [80, 100]}
    assert report.not_held == {}


def test_write_coco_float_box_and_string_ids(tmp_path):
    write_image(str(tmp_path / "im" / "x.jpg"), 100, 80)
    rec = DetectionRecord(str(tmp_path / "im" / "x.jpg"), 100, 80, [[10.5, 20, 40.5, 60]], [0],
                          image_id="x")
    report = write_coco(Dataset([rec], ["a"]), tmp_path / "o.json")
    with open(tmp_path / "o.json") as f:
        out = json.load(f)
    assert out["annotations"][0]["bbox"] == [10.5, 20, 30, 40]
    assert out["images"][0]["id"] == 1 and out["images"][0]["file_name"] == "x.jpg"
    assert any("renumbered" in n for n in report.notes)


def test_voc_integer_rounding_and_widening():
    ints, widened = voc_integer_boxes([[10.4, 20.6, 30.5, 40.49], [5.2, 5, 5.4, 9]], 100, 80)
    assert ints.tolist() == [[11, 22, 30, 40], [6, 6, 6, 9]] and widened == 1


def test_write_voc_reports_crowd_and_rounding(tmp_path, crowd_rle_coco):
    src = read_coco(*crowd_rle_coco)
    src.records[0].boxes[0] = [10.3, 10, 30, 30.2]
    report = write_voc(src, tmp_path / "v")
    assert report.max_shift_px == pytest.approx(0.3, abs=1e-5)
    assert report.not_held["iscrowd=1 on annotations (written as difficult=1)"] == 1
    assert report.not_held["segmentation on annotations"] == 2
    back = read_voc(tmp_path / "v", classes=src.class_names)
    assert back[0].fields["difficult"].tolist() == [0, 1]
    np.testing.assert_array_equal(back[0].boxes[0], [10, 10, 30, 30])


def test_yolo_round_trip(tmp_path):
    src = read_voc(VOC_MINI, classes="discover")
    report = write_yolo(src, tmp_path / "y", split="train")
    # voc-mini: 89 <pose> (one per object), 40 <source> and 40 <segmented> (one per file),
    # which YOLO cannot hold and names (a deliberate change: they used to go unmentioned)
    assert report.max_shift_px < 1e-2 and report.not_held == {
        "truncated (non-zero) on annotations": 38, "pose on annotations": 89,
        "source on images": 40, "segmented on images": 40}
    back = read_yolo(tmp_path / "y", split="train")
    assert back.class_names == src.class_names and len(back) == len(src) == 40
    for a, b in zip(src, back, strict=True):
        assert b.image_id == a.image_id and (a.width, a.height) == (b.width, b.height)
        np.testing.assert_allclose(a.boxes, b.boxes, atol=1e-2)
        np.testing.assert_array_equal(a.labels, b.labels)


# --- converter ---------------------------------------------------------------------------------

@pytest.mark.parametrize("src_fmt,dst_fmt", [("voc", "coco"), ("voc", "yolo"), ("coco", "voc"),
                                             ("coco", "yolo")])
def test_convert_every_direction_and_back(tmp_path, capsys, src_fmt, dst_fmt):
    src = VOC_MINI if src_fmt == "voc" else COCO_JSON
    mid, back = tmp_path / "mid", tmp_path / "back"
    assert main([src, str(mid), "--from", src_fmt, "--to", dst_fmt]) == 0
    target = str(mid / "annotations.json") if dst_fmt == "coco" else str(mid)
    assert main([target, str(back), "--from", dst_fmt, "--to", src_fmt]) == 0
    out = capsys.readouterr().out
    n_images, n_boxes = (40, 89) if src_fmt == "voc" else (68, 335)
    assert f"wrote {n_images} images, {n_boxes} boxes" in out
    assert "boxes clipped to their image: 0" in out and "largest rounding shift" in out
    if src_fmt == "coco" and dst_fmt == "voc":
        assert "segmentation on annotations: 335 not written as such: VOC cannot hold it" in out
    reread = (read_voc(back, classes="discover") if src_fmt == "voc" else
              read_coco(back / "annotations.json", back / "images"))
    assert len(reread) == n_images and sum(r.num_boxes for r in reread) == n_boxes


def test_convert_skip_bad_and_error_exit(tmp_path, capsys):
    root = make_voc(tmp_path / "v", {"good": voc_xml("good.jpg", (100, 80), [("dog", 1, 1, 5, 5)]),
                                     "bad": "<annotation><object></annotation>"})
    assert main([root, str(tmp_path / "o"), "--from", "voc", "--to", "coco"]) == 2
    assert "bad.xml: malformed XML" in capsys.readouterr().err
    with pytest.warns(UserWarning):
        assert main([root, str(tmp_path / "o"), "--from", "voc", "--to", "coco",
                     "--skip-bad"]) == 0
    out = capsys.readouterr().out
    assert "skipped 1 bad items:" in out and "bad.xml: malformed XML" in out
    assert "wrote 1 images, 1 boxes" in out


def test_convert_clipped_count_and_classes_option(tmp_path, capsys):
    root = make_voc(tmp_path / "v", {"a": voc_xml("a.jpg", (100, 80), [("dog", 90, 70, 120, 95)])})
    assert main([root, str(tmp_path / "o"), "--from", "voc", "--to", "yolo",
                 "--classes", "dog,cat"]) == 0
    out = capsys.readouterr().out
    assert "boxes clipped to their image: 1" in out and "2 classes" in out
    assert (tmp_path / "o" / "classes.txt").read_text() == "dog\ncat\n"


def test_convert_as_module_subprocess(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "detaug.cli.convert", VOC_MINI,
                           str(tmp_path / "o"), "--from", "voc", "--to", "coco"],
                          cwd=REPO, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "wrote 40 images, 89 boxes, 20 classes as COCO" in proc.stdout
    with open(tmp_path / "o" / "annotations.json") as f:
        assert len(json.load(f)["annotations"]) == 89
    assert len(os.listdir(tmp_path / "o" / "images")) == 40


def test_link_hard_links_instead_of_copying(tmp_path):
    write_yolo(read_voc(VOC_MINI, classes="discover"), tmp_path / "y", link=True)
    src = os.path.join(VOC_MINI, "JPEGImages", "2007_000676.jpg")
    assert os.path.samefile(src, tmp_path / "y" / "images" / "2007_000676.jpg")
    write_voc(read_voc(VOC_MINI), tmp_path / "v")
    dst = tmp_path / "v" / "JPEGImages" / "2007_000676.jpg"
    assert not os.path.samefile(src, dst) and dst.read_bytes() == open(src, "rb").read()


def test_progress_counter_in_a_log_has_no_carriage_returns():
    """convert's progress is detaug.cli.progress.Progress: in a log (not a terminal) a short set
    prints nothing, a long one plain lines with rate and ETA, never a ``\\r``."""
    import io

    from detaug.cli.convert import Progress

    clock = iter(range(1000000)).__next__  # one second an item
    stream = io.StringIO()
    progress = Progress("reading", stream, interval=10, clock=lambda: float(clock()))
    for i in range(1, 10):
        progress(i, 9)           # 9 s, under the interval: silent
    assert stream.getvalue() == ""
    progress = Progress("reading", stream, interval=10, clock=lambda: float(clock()))
    for i in range(1, 26):
        progress(i, 25)
    assert stream.getvalue().splitlines() == [
        "reading: 10/25  40% | 1.0 items/s | ETA 0:15",
        "reading: 20/25  80% | 1.0 items/s | ETA 0:05",
        "reading: 25/25 100% | 1.0 items/s | 0:25"]


def test_readers_import_no_engine():
    code = "import readers, sys; bad = [m for m in sys.modules if m.split('.')[0] in " \
           "('detaug', 'cupy')]; assert not bad, bad"
    subprocess.run([sys.executable, "-c", code], cwd=REPO, check=True, timeout=60)
