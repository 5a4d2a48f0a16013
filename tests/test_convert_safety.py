"""detaug-convert never harms the user's data, and answers every mistake in one line."""
import json
import os
import shutil

import pytest

import readers.writers
from detaug.cli.convert import main
from readers_fixtures import COCO_MINI, VOC_MINI, voc_xml, write_image  # noqa: F401
from readers_fixtures import write_voc as make_voc


def snapshot(folder):
    """{relative path: (bytes, mtime_ns)} of every file under ``folder``."""
    out = {}
    for dirpath, _, files in os.walk(folder):
        for name in files:
            path = os.path.join(dirpath, name)
            with open(path, "rb") as f:
                out[os.path.relpath(path, folder)] = (f.read(), os.stat(path).st_mtime_ns)
    return out


@pytest.fixture
def voc(tmp_path):
    """A copy of examples/data/voc-mini and its snapshot (checked unchanged at teardown)."""
    root = tmp_path / "voc"
    shutil.copytree(VOC_MINI, root)
    before = snapshot(root)
    yield root
    assert snapshot(root) == before, "the source was modified"


@pytest.fixture
def coco(tmp_path):
    root = tmp_path / "coco"
    shutil.copytree(COCO_MINI, root)
    before = snapshot(root)
    yield root
    assert snapshot(root) == before, "the source was modified"


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
