"""detaug-convert never harms the user's data, and answers every mistake in one line."""
import json
import os
import shutil

import pytest

import readers.writers
from detaug.cli.convert import main
from helpers.reader_files import COCO_MINI, VOC_MINI, voc_xml, write_image  # noqa: F401
from helpers.reader_files import write_voc as make_voc


def snapshot(folder):
    """{relative path: (bytes, mtime_ns)} of every file under ``folder``."""
    out = {}
    for dirpath, _, files in os.walk(folder):
        for name in files:
            path = os.path.join(dirpath, name)
            with open(path, "rb") as f:
                out[os.path.relpath(path, folder)] = (f.read(), os.stat(path).st_mtime_ns)
    return out


def _guarded_copy(src, root):
    """A copy of ``src`` at ``root``, checked unchanged (bytes and mtimes) at teardown."""
    shutil.copytree(src, root)
    before = snapshot(root)
    yield root
    assert snapshot(root) == before, "the source was modified"


@pytest.fixture
def voc(tmp_path):
    """A copy of examples/data/voc-mini, checked unchanged at teardown."""
    yield from _guarded_copy(VOC_MINI, tmp_path / "voc")


@pytest.fixture
def coco(tmp_path):
    """A copy of examples/data/coco-mini, checked unchanged at teardown."""
    yield from _guarded_copy(COCO_MINI, tmp_path / "coco")


def _err(capsys):
    err = capsys.readouterr().err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("detaug-convert: error: "), err
    assert "Traceback" not in err
    return lines[0]


def _no_temp_left(parent):
    assert not [n for n in os.listdir(parent) if "detaug-convert" in n]


# --- destination safety --------------------------------------------------------------------

def test_destination_equal_to_source_is_refused(voc, capsys):
    assert main([str(voc), str(voc), "--from", "voc", "--to", "voc"]) == 2
    assert "is the source folder" in _err(capsys)
    # also with --overwrite, and through a different spelling of the same path
    assert main([str(voc), str(voc / "Annotations" / ".."), "--from", "voc", "--to", "voc",
                 "--overwrite"]) == 2
    assert "is the source folder" in _err(capsys)


def test_destination_inside_source_is_refused(voc, capsys):
    assert main([str(voc), str(voc / "out"), "--from", "voc", "--to", "yolo"]) == 2
    assert "inside the source folder" in _err(capsys)
    assert not (voc / "out").exists()


def test_coco_destination_beside_its_json_is_refused(coco, capsys):
    assert main([str(coco / "annotations.json"), str(coco), "--from", "coco", "--to", "coco",
                 "--overwrite"]) == 2
    assert "is the source folder" in _err(capsys)


def test_source_inside_destination_is_refused(tmp_path, voc, capsys):
    assert main([str(voc), str(tmp_path), "--from", "voc", "--to", "yolo", "--overwrite"]) == 2
    assert "is inside the destination" in _err(capsys)


def test_non_empty_destination_needs_overwrite(tmp_path, voc, capsys):
    dst = tmp_path / "dst"
    dst.mkdir()
    (dst / "keep.txt").write_text("mine")
    assert main([str(voc), str(dst), "--from", "voc", "--to", "yolo"]) == 2
    assert "is not empty (1 entries): give --overwrite" in _err(capsys)
    assert os.listdir(dst) == ["keep.txt"]
    assert main([str(voc), str(dst), "--from", "voc", "--to", "yolo", "--overwrite"]) == 0
    assert sorted(os.listdir(dst)) == ["classes.txt", "images", "labels"]  # replaced, not mixed
    assert len(os.listdir(dst / "labels")) == 40
    _no_temp_left(tmp_path)


def test_empty_existing_destination_is_used(tmp_path, voc, capsys):
    dst = tmp_path / "dst"
    dst.mkdir()
    assert main([str(voc), str(dst), "--from", "voc", "--to", "coco"]) == 0
    assert sorted(os.listdir(dst)) == ["annotations.json", "images"]
    assert f"as COCO to {dst / 'annotations.json'}" in capsys.readouterr().out
    _no_temp_left(tmp_path)


class Boom(RuntimeError):
    pass


def _fail_after(monkeypatch, n, exc=Boom):
    """Make the writers' image copy raise after ``n`` images."""
    real, calls = readers.writers.place_image, []

    def place(src, dst, link=False):
        calls.append(dst)
        if len(calls) > n:
            raise exc("disk on fire")
        real(src, dst, link)
    monkeypatch.setattr(readers.writers, "place_image", place)
    return calls


@pytest.mark.parametrize("to", ["voc", "yolo", "coco"])
def test_failure_midway_leaves_no_destination(tmp_path, voc, monkeypatch, to):
    calls = _fail_after(monkeypatch, 5)
    with pytest.raises(Boom):
        main([str(voc), str(tmp_path / "dst"), "--from", "voc", "--to", to])
    assert len(calls) == 6                       # it did write 5 images somewhere
    assert not (tmp_path / "dst").exists()
    _no_temp_left(tmp_path)


def test_failure_midway_keeps_old_destination(tmp_path, voc, monkeypatch, capsys):
    dst = tmp_path / "dst"
    assert main([str(voc), str(dst), "--from", "voc", "--to", "yolo"]) == 0
    old = snapshot(dst)
    _fail_after(monkeypatch, 3, OSError)
    assert main([str(voc), str(dst), "--from", "voc", "--to", "coco", "--overwrite"]) == 2
    assert "disk on fire" in _err(capsys)
    assert snapshot(dst) == old
    monkeypatch.undo()
    _fail_after(monkeypatch, 3, KeyboardInterrupt)
    assert main([str(voc), str(dst), "--from", "voc", "--to", "coco", "--overwrite"]) == 130
    assert "interrupted" in capsys.readouterr().err
    assert snapshot(dst) == old
    _no_temp_left(tmp_path)


def test_dry_run_writes_nothing(tmp_path, voc, coco, capsys):
    dst = tmp_path / "dst"
    assert main([str(voc), str(dst), "--from", "voc", "--to", "yolo", "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "read 40 images, 89 boxes" in out and "wrote 40 images, 89 boxes" in out
    assert out.strip().endswith("dry run: nothing was written")
    for to in ("voc", "coco"):
        assert main([str(coco / "annotations.json"), str(dst), "--from", "coco", "--to", to,
                     "--dry-run"]) == 0
        assert "wrote 68 images, 335 boxes" in capsys.readouterr().out
    assert sorted(os.listdir(tmp_path)) == ["coco", "voc"]


def test_source_files_never_change_in_a_round(tmp_path, voc, coco):
    """Every direction, also with --link and --overwrite (the fixtures check bytes and mtimes)."""
    for n, (src, fmt) in enumerate([(str(voc), "voc"), (str(coco / "annotations.json"), "coco")]):
        for to in ("voc", "coco", "yolo"):
            dst = str(tmp_path / f"o{n}{to}")
            assert main([src, dst, "--from", fmt, "--to", to, "--link"]) == 0
            assert main([src, dst, "--from", fmt, "--to", to, "--overwrite"]) == 0


# --- user mistakes: one line, exit 2 -------------------------------------------------------

def test_coco_source_given_a_folder(tmp_path, coco, capsys):
    assert main([str(coco), str(tmp_path / "o"), "--from", "coco", "--to", "voc"]) == 2
    assert "is a folder: --from coco needs the annotations JSON file" in _err(capsys)


def test_voc_source_given_a_file_and_missing_source(tmp_path, voc, capsys):
    split_file = voc / "ImageSets" / "Main" / "trainval.txt"
    assert main([str(split_file), str(tmp_path / "o"), "--from", "voc", "--to", "coco"]) == 2
    assert "is not a folder" in _err(capsys)
    assert main([str(tmp_path / "nope"), str(tmp_path / "o"), "--from", "voc",
                 "--to", "coco"]) == 2
    assert "does not exist" in _err(capsys)


def test_destination_that_is_a_file(tmp_path, voc, capsys):
    (tmp_path / "f").write_text("x")
    for extra in ([], ["--overwrite"]):
        assert main([str(voc), str(tmp_path / "f"), "--from", "voc", "--to", "yolo"] + extra) == 2
        assert "is a file, not a folder" in _err(capsys)
    assert (tmp_path / "f").read_text() == "x"


def test_split_that_names_no_file(tmp_path, voc, capsys):
    assert main([str(voc), str(tmp_path / "o"), "--from", "voc", "--to", "yolo",
                 "--split", "foo"]) == 2
    assert "--split foo: no file" in _err(capsys) and not (tmp_path / "o").exists()
    assert main([str(voc), str(tmp_path / "y"), "--from", "voc", "--to", "yolo",
                 "--split", "trainval"]) == 0
    assert main([str(tmp_path / "y"), str(tmp_path / "o"), "--from", "yolo", "--to", "voc",
                 "--split", "val"]) == 2
    assert "--split val: no folder" in _err(capsys)


@pytest.mark.parametrize("flags", [["--from", "pascal", "--to", "coco"],
                                   ["--from", "voc", "--to", "yaml"], ["--from", "voc"]])
def test_unknown_format_is_one_line(tmp_path, voc, capsys, flags):
    with pytest.raises(SystemExit) as exc:
        main([str(voc), str(tmp_path / "o")] + flags)
    assert exc.value.code == 2
    _err(capsys)


def test_class_file_not_utf8(tmp_path, voc, capsys):
    (tmp_path / "names.txt").write_bytes(b"dog\n\xff\xfe\n")
    assert main([str(voc), str(tmp_path / "o"), "--from", "voc", "--to", "yolo",
                 "--classes", str(tmp_path / "names.txt")]) == 2
    assert "not UTF-8" in _err(capsys)


# --- nothing dropped silently ----------------------------------------------------------------

def _coco_source(tmp_path):
    """A COCO file with every key the records do not model, and a crowd box."""
    folder = tmp_path / "c"
    write_image(str(folder / "images" / "a.jpg"), 100, 80)
    write_image(str(folder / "images" / "b.jpg"), 50, 40)
    data = {
        "info": {"year": 2017, "description": "tiny"},
        "licenses": [{"id": 4, "name": "CC", "url": "http://x"}],
        "images": [{"id": 7, "file_name": "a.jpg", "width": 100, "height": 80, "license": 4,
                    "coco_url": "http://x/a.jpg", "date_captured": "2013-11-18"},
                   {"id": 9, "file_name": "b.jpg", "width": 50, "height": 40}],
        "annotations": [
            {"id": 1, "image_id": 7, "category_id": 2, "bbox": [10, 10, 20, 20],
             "area": 123.5, "iscrowd": 0, "segmentation": [[10, 10, 30, 10, 30, 30]]},
            {"id": 2, "image_id": 7, "category_id": 5, "bbox": [40, 30, 20, 25], "area": 300,
             "iscrowd": 1, "segmentation": {"counts": [100, 20], "size": [80, 100]}},
            {"id": 3, "image_id": 9, "category_id": 2, "bbox": [1, 1, 10, 10], "area": 100,
             "iscrowd": 0, "score_note": "x"}],
        "categories": [{"id": 2, "name": "cat", "supercategory": "animal"},
                       {"id": 5, "name": "crowd", "supercategory": "people"}],
    }
    path = folder / "annotations.json"
    path.write_text(json.dumps(data))
    return path, data


def test_coco_to_coco_passes_unmodelled_keys_through(tmp_path):
    src, data = _coco_source(tmp_path)
    assert main([str(src), str(tmp_path / "o"), "--from", "coco", "--to", "coco"]) == 0
    out = json.loads((tmp_path / "o" / "annotations.json").read_text())
    assert out["info"] == data["info"] and out["licenses"] == data["licenses"]
    assert out["categories"] == data["categories"]
    assert out["images"] == data["images"]
    assert out["annotations"] == data["annotations"]  # area 123.5, not 20 * 20; segmentation


def test_coco_mini_to_coco_keeps_every_key(tmp_path, coco):
    assert main([str(coco / "annotations.json"), str(tmp_path / "o"), "--from", "coco",
                 "--to", "coco"]) == 0
    src = json.loads((coco / "annotations.json").read_text())
    out = json.loads((tmp_path / "o" / "annotations.json").read_text())
    for key in set(src) - {"images", "annotations"}:
        assert out[key] == src[key], key
    by_id = {a["id"]: a for a in out["annotations"]}
    for a in src["annotations"]:
        b = by_id[a["id"]]
        assert set(b) == set(a) and b["area"] == a["area"]
        assert b["segmentation"] == a["segmentation"]
    assert sorted(out["images"], key=lambda i: i["id"]) == \
        sorted(src["images"], key=lambda i: i["id"])


def test_coco_to_voc_and_yolo_name_what_they_cannot_hold(tmp_path, capsys):
    src, _ = _coco_source(tmp_path)
    assert main([str(src), str(tmp_path / "y"), "--from", "coco", "--to", "yolo"]) == 0
    out = capsys.readouterr().out
    for line in ("area on annotations: 3 not written", "license on images: 1 not written",
                 "coco_url on images: 1 not written", "info: 1 not written",
                 "licenses: 1 not written", "supercategory on categories: 2 not written",
                 "score_note on annotations: 1 not written",
                 "bitmap masks (COCO RLE) not written (yolo holds boxes): 1 boxes",
                 "crowd boxes (iscrowd=1): 1 written as boxes (--skip-crowd leaves them out)"):
        assert line in out, line
    assert len((tmp_path / "y" / "labels" / "a.txt").read_text().splitlines()) == 2
    assert main([str(src), str(tmp_path / "v"), "--from", "coco", "--to", "voc"]) == 0
    out = capsys.readouterr().out
    # text keys are written as VOC elements, numbers are named
    assert "license on images: 1 not written" in out and "coco_url on images" not in out
    assert "bitmap masks (COCO RLE) not written (voc holds boxes): 1 boxes" in out
    xml = (tmp_path / "v" / "Annotations" / "a.xml").read_text()
    assert "<coco_url>http://x/a.jpg</coco_url>" in xml and "<score_note>" not in xml


def test_skip_crowd_drops_boxes_with_their_masks(tmp_path, capsys):
    src, data = _coco_source(tmp_path)
    assert main([str(src), str(tmp_path / "y"), "--from", "coco", "--to", "yolo",
                 "--skip-crowd"]) == 0
    out = capsys.readouterr().out
    assert "dropped by option: crowd boxes (iscrowd=1) (--skip-crowd): 1" in out
    assert "wrote 2 images, 2 boxes" in out
    assert (tmp_path / "y" / "labels" / "a.txt").read_text().startswith("0 0.2")
    assert main([str(src), str(tmp_path / "cc"), "--from", "coco", "--to", "coco",
                 "--skip-crowd"]) == 0
    anns = json.loads((tmp_path / "cc" / "annotations.json").read_text())["annotations"]
    assert anns == [data["annotations"][0], data["annotations"][2]]


VOC_RICH = """<annotation><folder>VOC2012</folder><filename>r.jpg</filename>
<source><database>The VOC2007 Database</database><image>flickr</image></source>
<owner><flickrid>someone</flickrid></owner>
<size><width>100</width><height>80</height><depth>3</depth></size><segmented>1</segmented>
<object><name>person</name><pose>Left</pose><truncated>0</truncated><occluded>1</occluded>
<difficult>0</difficult><bndbox><xmin>11</xmin><ymin>11</ymin><xmax>60</xmax><ymax>70</ymax>
</bndbox><part><name>head</name><bndbox><xmin>20</xmin><ymin>12</ymin><xmax>30</xmax>
<ymax>22</ymax></bndbox></part><part><name>hand</name><bndbox><xmin>40</xmin><ymin>40</ymin>
<xmax>45</xmax><ymax>45</ymax></bndbox></part></object>
<object><name>dog</name><pose>Frontal</pose><truncated>1</truncated><difficult>1</difficult>
<bndbox><xmin>61</xmin><ymin>21</ymin><xmax>90</xmax><ymax>60</ymax></bndbox></object>
</annotation>"""


def _voc_fields(xml_path):
    from lxml import etree

    ann = etree.parse(str(xml_path)).getroot()
    objects = ann.findall("object")
    return {
        "source": ann.findtext("source/database"), "owner": ann.findtext("owner/flickrid"),
        "segmented": ann.findtext("segmented"), "depth": ann.findtext("size/depth"),
        "pose": [o.findtext("pose") for o in objects],
        "occluded": [o.findtext("occluded") for o in objects],
        "parts": [[p.findtext("name") for p in o.findall("part")] for o in objects],
        "part_box": [[p.findtext("bndbox/xmin") for p in o.findall("part")] for o in objects],
        "difficult": [o.findtext("difficult") for o in objects],
    }


EXPECTED_RICH = {"source": "The VOC2007 Database", "owner": "someone", "segmented": "1",
                 "depth": "3", "pose": ["Left", "Frontal"], "occluded": ["1", None],
                 "parts": [["head", "hand"], []], "part_box": [["20", "40"], []],
                 "difficult": ["0", "1"]}


@pytest.fixture
def rich_voc(tmp_path):
    root = make_voc(tmp_path / "rich", {"r": VOC_RICH})
    (tmp_path / "rich" / "classes.txt").write_text("person\ndog\n")
    return root


def test_voc_to_voc_carries_pose_source_segmented_occluded_owner_parts(tmp_path, rich_voc):
    assert main([rich_voc, str(tmp_path / "v"), "--from", "voc", "--to", "voc"]) == 0
    assert _voc_fields(tmp_path / "v" / "Annotations" / "r.xml") == EXPECTED_RICH
    # and through COCO, where they ride as extra keys
    assert main([rich_voc, str(tmp_path / "c"), "--from", "voc", "--to", "coco"]) == 0
    data = json.loads((tmp_path / "c" / "annotations.json").read_text())
    assert data["images"][0]["segmented"] == "1" and data["annotations"][0]["pose"] == "Left"
    assert main([str(tmp_path / "c" / "annotations.json"), str(tmp_path / "v2"), "--from",
                 "coco", "--to", "voc"]) == 0
    assert _voc_fields(tmp_path / "v2" / "Annotations" / "r.xml") == EXPECTED_RICH


def test_voc_to_yolo_names_what_it_drops_and_difficult_policy(tmp_path, rich_voc, capsys):
    assert main([rich_voc, str(tmp_path / "y"), "--from", "voc", "--to", "yolo"]) == 0
    out = capsys.readouterr().out
    for line in ("pose on annotations: 2", "occluded on annotations: 1",
                 "part on annotations: 1", "source on images: 1", "owner on images: 1",
                 "segmented on images: 1",
                 "difficult boxes: 1 written as boxes (--skip-difficult leaves them out)"):
        assert line in out, line
    assert main([rich_voc, str(tmp_path / "y2"), "--from", "voc", "--to", "yolo",
                 "--skip-difficult"]) == 0
    out = capsys.readouterr().out
    assert "dropped by option: difficult boxes (--skip-difficult): 1" in out
    assert (tmp_path / "y2" / "labels" / "r.txt").read_text().splitlines() == \
        ["0 0.350000 0.500000 0.500000 0.750000"]
    # person (11, 11, 60, 70) is [10, 10, 60, 70] on 100x80: cx 70/200, cy 80/160, w 50/100,
    # h 60/80


def test_grayscale_image_gets_depth_1(tmp_path):
    root = make_voc(tmp_path / "g", {"g": voc_xml("g.jpg", (64, 48), [("dog", 1, 1, 10, 10)]),
                                     "c": voc_xml("c.jpg", (64, 48), [("dog", 1, 1, 10, 10)])},
                    images={"g.jpg": (64, 48, "L"), "c.jpg": (64, 48)})
    assert main([root, str(tmp_path / "v"), "--from", "voc", "--to", "voc"]) == 0
    assert "<depth>1</depth>" in (tmp_path / "v" / "Annotations" / "g.xml").read_text()
    assert "<depth>3</depth>" in (tmp_path / "v" / "Annotations" / "c.xml").read_text()


def test_skip_bad_counts_images_left_without_boxes(tmp_path, capsys):
    root = make_voc(tmp_path / "b", {
        "a": voc_xml("a.jpg", (100, 80), [("dog", 1, 1, 10, 10)]),
        "b": voc_xml("b.jpg", (100, 80), [("dog", 20, 1, 10, 10)]),           # x1 < x0
        "c": voc_xml("c.jpg", (100, 80), [("dog", 20, 1, 10, 10), ("dog", 1, 1, 5, 5)])})
    with pytest.warns(UserWarning):
        assert main([root, str(tmp_path / "o"), "--from", "voc", "--to", "yolo",
                     "--classes", "dog", "--skip-bad"]) == 0
    out = capsys.readouterr().out
    assert "skipped 2 bad items" in out
    assert "images left with no boxes, every box of theirs bad and skipped: 1" in out
    assert (tmp_path / "o" / "labels" / "b.txt").read_text() == ""


# --- image sizes against the headers ---------------------------------------------------------

def test_size_mismatch_is_an_error_or_a_counted_skip(tmp_path, capsys):
    root = make_voc(tmp_path / "s", {"a": voc_xml("a.jpg", (100, 80), [("dog", 1, 1, 10, 10)]),
                                     "w": voc_xml("w.jpg", (640, 80), [("dog", 1, 1, 10, 10)])})
    before = snapshot(root)
    assert main([root, str(tmp_path / "o"), "--from", "voc", "--to", "yolo",
                 "--classes", "dog"]) == 2
    line = _err(capsys)
    assert "w.jpg: the annotation gives the size 640x80, the image header 100x80" in line
    assert not (tmp_path / "o").exists()
    assert main([root, str(tmp_path / "o"), "--from", "voc", "--to", "yolo",
                 "--classes", "dog", "--skip-bad"]) == 0
    out = capsys.readouterr().out
    assert "skipped 1 bad items:" in out and "w.jpg: the annotation gives the size" in out
    assert "wrote 1 images, 1 boxes" in out
    assert sorted(os.listdir(tmp_path / "o" / "images")) == ["a.jpg"]
    assert snapshot(root) == before


def test_truncated_image_header_is_an_error_or_a_counted_skip(tmp_path, capsys):
    root = make_voc(tmp_path / "t", {"a": voc_xml("a.jpg", (100, 80), [("dog", 1, 1, 10, 10)]),
                                     "t": voc_xml("t.jpg", (100, 80), [("dog", 1, 1, 10, 10)])})
    path = tmp_path / "t" / "JPEGImages" / "t.jpg"
    path.write_bytes(path.read_bytes()[:20])   # SOI and part of APP0: no frame header
    assert main([root, str(tmp_path / "o"), "--from", "voc", "--to", "coco",
                 "--classes", "dog"]) == 2
    assert "t.jpg: cannot read the image header" in _err(capsys)
    assert main([root, str(tmp_path / "o"), "--from", "voc", "--to", "coco",
                 "--classes", "dog", "--skip-bad"]) == 0
    out = capsys.readouterr().out
    assert "skipped 1 bad items:" in out and "wrote 1 images" in out


@pytest.mark.parametrize("to", ["coco", "voc", "yolo"])
def test_every_image_skipped_still_writes_a_dataset_that_reads_back(tmp_path, capsys, to):
    """--skip-bad that skips every image writes an empty dataset its reader reads (found by
    the converter fuzzer: COCO had no images/ and YOLO no images/ or labels/, and their
    readers refused the folder)."""
    import readers

    root = make_voc(tmp_path / "e", {"a": "<annotation><filename>a.jpg"})  # truncated XML
    with pytest.warns(UserWarning):
        assert main([root, str(tmp_path / "o"), "--from", "voc", "--to", to, "--classes", "dog",
                     "--skip-bad"]) == 0
    assert "read 0 images" in capsys.readouterr().out
    out = str(tmp_path / "o")
    back = (readers.read_coco(os.path.join(out, "annotations.json"), os.path.join(out, "images"))
            if to == "coco" else readers.read_voc(out, classes=["dog"]) if to == "voc"
            else readers.read_yolo(out))
    assert len(back) == 0 and back.class_names == ["dog"]


def _noisy_jpeg(path, size=(320, 240)):
    import numpy as np
    from PIL import Image

    rng = np.random.default_rng(7)
    Image.fromarray(rng.integers(0, 256, (size[1], size[0], 3), np.uint8)).save(path, quality=90)


@pytest.mark.parametrize("fmt", ["jpg", "png"])
def test_image_truncated_after_its_header_is_an_error_or_a_counted_skip(tmp_path, capsys, fmt):
    """A JPEG cut to 1,000 bytes (its header reads: 320x240) or a PNG without its end is not
    copied as if whole: it lacks its end marker and does not decode."""
    root = make_voc(tmp_path / "t", {"a": voc_xml("a.jpg", (320, 240), [("dog", 1, 1, 10, 10)]),
                                     "t": voc_xml(f"t.{fmt}", (320, 240), [("dog", 1, 1, 9, 9)])},
                    images={"a.jpg": (320, 240)})
    path = tmp_path / "t" / "JPEGImages" / f"t.{fmt}"
    _noisy_jpeg(path)
    if fmt == "png":
        from PIL import Image

        Image.open(path).save(path, "PNG")
    path.write_bytes(path.read_bytes()[:1000])
    assert main([root, str(tmp_path / "o"), "--from", "voc", "--to", "yolo",
                 "--classes", "dog"]) == 2
    assert f"t.{fmt}: the image data is truncated or corrupt" in _err(capsys)
    assert not (tmp_path / "o").exists()
    assert main([root, str(tmp_path / "o"), "--from", "voc", "--to", "yolo",
                 "--classes", "dog", "--skip-bad"]) == 0
    out = capsys.readouterr().out
    assert "skipped 1 bad items:" in out and "wrote 1 images" in out
    assert sorted(os.listdir(tmp_path / "o" / "images")) == ["a.jpg"]


def test_jpeg_with_data_after_its_end_marker_is_kept(tmp_path, capsys):
    """Bytes after the end-of-image marker (some cameras append a trailer) decode: kept."""
    root = make_voc(tmp_path / "d", {"a": voc_xml("a.jpg", (320, 240), [("dog", 1, 1, 10, 10)])},
                    images={})
    path = tmp_path / "d" / "JPEGImages" / "a.jpg"
    _noisy_jpeg(path)
    path.write_bytes(path.read_bytes() + b"TRAILER" * 20)
    assert main([root, str(tmp_path / "o"), "--from", "voc", "--to", "coco",
                 "--classes", "dog"]) == 0
    assert "wrote 1 images" in capsys.readouterr().out


def test_fifo_or_bomb_image_in_a_coco_source_is_refused(tmp_path, capsys):
    """read_coco takes sizes from the JSON (no header read); the converter's header check
    must still not open a FIFO (it blocked) and must refuse a decompression bomb by name."""
    import signal

    from helpers.reader_files import bomb_png

    folder = tmp_path / "c"
    (folder / "images").mkdir(parents=True)
    write_image(str(folder / "images" / "a.jpg"), 40, 30)
    os.mkfifo(folder / "images" / "f.jpg")
    (folder / "images" / "b.png").write_bytes(bomb_png())
    images = [{"id": 1, "file_name": "a.jpg", "width": 40, "height": 30},
              {"id": 2, "file_name": "f.jpg", "width": 40, "height": 30},
              {"id": 3, "file_name": "b.png", "width": 30000, "height": 30000}]
    (folder / "annotations.json").write_text(json.dumps(
        {"images": images, "annotations": [], "categories": [{"id": 1, "name": "dog"}]}))
    argv = [str(folder / "annotations.json"), str(tmp_path / "o"), "--from", "coco", "--to",
            "yolo"]

    def boom(*_):
        raise TimeoutError("blocked on the FIFO")
    old = signal.signal(signal.SIGALRM, boom)
    signal.alarm(20)
    try:
        assert main(argv) == 2
        assert "f.jpg: image file is not a regular file" in _err(capsys)
        assert main(argv + ["--skip-bad"]) == 0
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)
    out = capsys.readouterr().out
    assert "skipped 2 bad items:" in out and "f.jpg: image file is not a regular file" in out
    assert "b.png: image header declares too many pixels" in out
    assert os.listdir(tmp_path / "o" / "images") == ["a.jpg"]


# --- class names a target cannot hold --------------------------------------------------------

CLASS_NAME_CASES = {  # COCO category names -> the fault the converter names for VOC / YOLO
    "nul": (["a\x00b"], {"voc": "a character XML cannot"}),
    "line break": (["a\nb"], {"voc": "line break", "yolo": "line break"}),
    "line separator": (["a\u2028b"], {"voc": "line break", "yolo": "line break"}),
    "empty": ([""], {"voc": "an empty name", "yolo": "an empty name"}),
    "spaces": ([" a "], {"voc": "ending with whitespace", "yolo": "ending with whitespace"}),
    "same name twice": (["a", "a"], {"voc": "the same name as class 0"}),
}


@pytest.mark.parametrize("case", sorted(CLASS_NAME_CASES))
@pytest.mark.parametrize("to", ["voc", "yolo", "coco", "tfrecord"])
def test_class_names_a_target_cannot_hold_are_refused_by_name(tmp_path, capsys, case, to):
    """COCO names that a VOC or YOLO class list would change (a YOLO class list is split into
    lines and stripped; VOC objects name their class, so two classes of one name merge) are a
    one-line error naming the source, with nothing written; COCO and TFRecord keep them."""
    import readers
    from readers.tfrecord_od import read_tfrecord
    from helpers.reader_files import ann, image, write_coco

    names, faults = CLASS_NAME_CASES[case]
    cats = [{"id": k + 1, "name": n} for k, n in enumerate(names)]
    path, _ = write_coco(tmp_path / "c", [image(1)],
                         [ann(k + 1, 1, [5 * k, 1, 4, 4], k + 1) for k in range(len(names))], cats)
    out = tmp_path / "o"
    code = main([path, str(out), "--from", "coco", "--to", to])
    if to in faults:
        assert code == 2
        line = _err(capsys)
        assert line.startswith(f"detaug-convert: error: {path}: class ") and faults[to] in line
        assert not out.exists() and not [n for n in os.listdir(tmp_path) if "detaug" in n]
        return
    assert code == 0
    back = (readers.read_yolo(out) if to == "yolo" else
            readers.read_coco(out / "annotations.json", out / "images") if to == "coco" else
            read_tfrecord(out, label_map=out / "label_map.pbtxt") if to == "tfrecord" else
            readers.read_voc(out, classes=readers.read_voc_classes(out / "classes.txt")))
    assert back.class_names == names
    assert [back.class_names[i] for i in back.records[0].labels] == names


def test_writers_refuse_class_names_they_cannot_hold(tmp_path):
    import readers

    ds = readers.Dataset([], ["a", "a"])
    with pytest.raises(readers.DatasetError, match=r"classes\.txt: class 1 \('a'\): the same name"):
        readers.write_voc(ds, tmp_path / "v")
    readers.write_yolo(ds, tmp_path / "y")  # a YOLO label is an index: two names 'a' are fine
    ds = readers.Dataset([], ["a\nb"])
    with pytest.raises(readers.DatasetError, match=r"classes\.txt: class 0 \('a\\nb'\): a line"):
        readers.write_yolo(ds, tmp_path / "y2")
    assert not (tmp_path / "v").exists() and not (tmp_path / "y2").exists()


def test_voc_classes_listed_twice(tmp_path, capsys):
    import readers

    root = make_voc(tmp_path / "d", {"a": voc_xml("a.jpg", (100, 80), [("dog", 1, 1, 10, 10)])})
    with pytest.raises(ValueError, match=r"\['dog'\] more than once"):
        readers.read_voc(root, classes=["dog", "cat", "dog"])
    assert main([root, str(tmp_path / "o"), "--from", "voc", "--to", "coco",
                 "--classes", "dog,cat,dog"]) == 2
    assert "VOC classes ['dog'] are listed twice" in _err(capsys)


def test_error_naming_a_file_with_a_line_break_is_one_line(tmp_path, capsys):
    from helpers.reader_files import ann, image, write_coco

    path, _ = write_coco(tmp_path / "c", [image(1, name="a\nb.jpg")], [ann(1, 1, [1, 1, 4, 4])])
    assert main([path, str(tmp_path / "o"), "--from", "coco", "--to", "voc"]) == 2
    assert "a\\nb" in _err(capsys)
