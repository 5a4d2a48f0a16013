"""detaug-convert refuses a destination that any path of the source reaches, links resolved
(once, a VOC JPEGImages linking to DST/images had its unlisted images deleted by
--overwrite, rc 0)."""
import os

import pytest

from detaug.cli.convert import main
from helpers.reader_files import image, voc_xml, write_coco, write_image
from helpers.reader_files import write_voc as make_voc


def _files(folder):
    return sorted(os.path.relpath(os.path.join(d, n), folder)
                  for d, _, names in os.walk(folder) for n in names)


def _err(capsys):
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("detaug-convert: error: "), err
    return err[0]


@pytest.fixture
def dst_with_images(tmp_path):
    """A destination holding images a source will link to (an earlier conversion's output)."""
    dst = tmp_path / "dst"
    for name in ("a.jpg", "b.jpg", "unlisted.jpg"):
        write_image(str(dst / "images" / name), 100, 80)
    return dst


def test_voc_images_linked_into_destination_are_never_removed(tmp_path, dst_with_images, capsys):
    src = tmp_path / "voc"
    make_voc(src, {"a": voc_xml("a.jpg", (100, 80), [("person", 1, 1, 50, 50)])}, images={})
    os.rmdir(src / "JPEGImages")
    os.symlink(dst_with_images / "images", src / "JPEGImages")
    before = _files(dst_with_images)
    rc = main([str(src), str(dst_with_images), "--from", "voc", "--to", "coco", "--overwrite"])
    assert rc == 2
    line = _err(capsys)
    assert "JPEGImages" in line and "destination" in line
    assert _files(dst_with_images) == before  # nothing removed, the unlisted image included
    assert os.path.exists(src / "JPEGImages" / "unlisted.jpg")


def test_voc_single_image_linked_into_destination(tmp_path, dst_with_images, capsys):
    src = tmp_path / "voc"
    make_voc(src, {"a": voc_xml("a.jpg", (100, 80), [("person", 1, 1, 50, 50)])}, images={})
    os.symlink(dst_with_images / "images" / "a.jpg", src / "JPEGImages" / "a.jpg")
    rc = main([str(src), str(dst_with_images), "--from", "voc", "--to", "yolo", "--overwrite"])
    assert rc == 2
    assert "a.jpg" in _err(capsys)
    assert os.path.isfile(dst_with_images / "images" / "a.jpg")


def test_yolo_split_folder_linked_into_destination(tmp_path, dst_with_images, capsys):
    src = tmp_path / "yolo"
    (src / "images").mkdir(parents=True)
    os.symlink(dst_with_images / "images", src / "images" / "train")
    (src / "labels" / "train").mkdir(parents=True)
    for stem in ("a", "b", "unlisted"):
        (src / "labels" / "train" / f"{stem}.txt").write_text("0 0.5 0.5 0.2 0.2\n")
    (src / "classes.txt").write_text("person\n")
    before = _files(dst_with_images)
    rc = main([str(src), str(dst_with_images), "--from", "yolo", "--to", "voc", "--overwrite",
               "--split", "train"])
    assert rc == 2
    assert "destination" in _err(capsys)
    assert _files(dst_with_images) == before


def test_destination_reached_through_a_source_link_is_refused(tmp_path, capsys):
    """DST lies inside a folder the source reads through a link: writing there writes the source."""
    elsewhere = tmp_path / "elsewhere"
    src = tmp_path / "voc"
    make_voc(src, {"a": voc_xml("a.jpg", (100, 80), [("person", 1, 1, 50, 50)])}, images={})
    os.rmdir(src / "JPEGImages")
    write_image(str(elsewhere / "a.jpg"), 100, 80)
    os.symlink(elsewhere, src / "JPEGImages")
    rc = main([str(src), str(elsewhere / "out"), "--from", "voc", "--to", "coco"])
    assert rc == 2
    assert "inside the source folder" in _err(capsys)
    assert not os.path.exists(elsewhere / "out")


def test_coco_image_file_linked_into_destination(tmp_path, dst_with_images, capsys):
    js, images = write_coco(tmp_path / "coco", [image(1, name="a.jpg")], [], make_files=False)
    os.symlink(dst_with_images / "images" / "a.jpg", os.path.join(images, "a.jpg"))
    rc = main([js, str(dst_with_images), "--from", "coco", "--to", "voc", "--overwrite"])
    assert rc == 2
    assert "a.jpg" in _err(capsys)
    assert os.path.isfile(dst_with_images / "images" / "a.jpg")


def test_coco_image_root_linked_into_destination(tmp_path, dst_with_images, capsys):
    js, _ = write_coco(tmp_path / "coco", [image(1, name="a.jpg")], [], make_files=False)
    link = tmp_path / "root_link"
    os.symlink(dst_with_images / "images", link)
    rc = main([js, str(dst_with_images), "--from", "coco", "--to", "yolo", "--overwrite",
               "--image-root", str(link)])
    assert rc == 2
    _err(capsys)
    assert os.path.isfile(dst_with_images / "images" / "unlisted.jpg")


def test_links_outside_the_destination_still_convert(tmp_path, capsys):
    """A source whose images are links to a third folder converts (no false refusal)."""
    store = tmp_path / "store"
    write_image(str(store / "a.jpg"), 100, 80)
    src = tmp_path / "voc"
    make_voc(src, {"a": voc_xml("a.jpg", (100, 80), [("person", 1, 1, 50, 50)])}, images={})
    os.symlink(store / "a.jpg", src / "JPEGImages" / "a.jpg")
    dst = tmp_path / "out"
    assert main([str(src), str(dst), "--from", "voc", "--to", "coco"]) == 0
    assert os.path.isfile(dst / "annotations.json")
    assert os.path.isfile(store / "a.jpg")


def test_class_list_file_inside_the_destination_is_refused(tmp_path, dst_with_images, capsys):
    src = tmp_path / "voc"
    make_voc(src, {"a": voc_xml("a.jpg", (100, 80), [("person", 1, 1, 50, 50)])})
    classes = dst_with_images / "classes.txt"
    classes.write_text("person\n")
    rc = main([str(src), str(dst_with_images), "--from", "voc", "--to", "coco", "--overwrite",
               "--classes", str(classes)])
    assert rc == 2
    assert "classes.txt" in _err(capsys)
    assert classes.read_text() == "person\n"
