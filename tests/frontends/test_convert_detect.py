"""detaug-convert tells the source's format from its layout when --from is left out,
and says what it chose (detaug/cli/detect.py)."""
import os

import pytest

from detaug.cli import convert
from detaug.cli.detect import UndetectedFormat, detect_format
from helpers.reader_files import REPO, VOC_MINI

COCO_JSON = os.path.join(REPO, "examples", "data", "coco-mini", "annotations.json")


def test_each_layout_names_its_format(tmp_path):
    assert detect_format(VOC_MINI)[0] == "voc"
    assert detect_format(COCO_JSON)[0] == "coco"
    yolo = tmp_path / "yolo"
    (yolo / "images").mkdir(parents=True)
    (yolo / "labels").mkdir()
    assert detect_format(str(yolo)) == ("yolo", "a folder with images/ and labels/ (YOLO)")
    rec = tmp_path / "recs"
    rec.mkdir()
    (rec / "train-00000-of-00001.tfrecord").write_bytes(b"")
    assert detect_format(str(rec))[0] == "tfrecord"
    assert detect_format(str(rec / "train-00000-of-00001.tfrecord"))[0] == "tfrecord"
    assert detect_format(str(rec / "*.tfrecord"))[0] == "tfrecord"


def test_what_names_no_format_is_one_clear_error(tmp_path):
    with pytest.raises(UndetectedFormat, match="give the JSON itself as SRC .*annotations.json"):
        detect_format(os.path.dirname(COCO_JSON))
    (tmp_path / "notes.txt").write_text("x")
    with pytest.raises(UndetectedFormat, match="neither .json .* give --from"):
        detect_format(str(tmp_path / "notes.txt"))
    with pytest.raises(UndetectedFormat, match="no Annotations/ .* give --from"):
        detect_format(str(tmp_path))
    with pytest.raises(UndetectedFormat, match="does not exist"):
        detect_format(str(tmp_path / "nope"))


def test_convert_without_from_says_what_it_chose(tmp_path, capsys):
    rc = convert.main([VOC_MINI, str(tmp_path / "out"), "--to", "coco", "--dry-run"])
    err = capsys.readouterr().err
    assert rc == 0, err
    assert f"--from not given: reading {VOC_MINI} as voc (a folder with Annotations/ (Pascal VOC))" in err
    rc = convert.main([os.path.dirname(COCO_JSON), str(tmp_path / "out2"), "--to", "voc"])
    err = capsys.readouterr().err
    assert rc == 2 and err.count("\n") == 1 and "give the JSON itself as SRC" in err
