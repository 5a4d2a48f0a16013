"""Small dataset builders and the named real-data-quirk fixtures for the readers tests.

Test modules import the fixtures they use by name (pytest finds fixtures in module globals);
every file is written under ``tmp_path``.
"""
from __future__ import annotations

import json
import os

import pytest
from PIL import Image

from conftest import COCO as COCO_MINI, REPO, VOC as VOC_MINI  # noqa: F401  (other tests import them from here)
SECRET = "TOP-SECRET-4f1c9a"


def write_image(path, width, height, mode="RGB"):
    """A real (tiny) JPEG of the given size and mode."""
    os.makedirs(os.path.dirname(path), exist_ok=True)
    Image.new(mode, (width, height), 128).save(path, "JPEG")
    return str(path)


def write_coco(folder, images, annotations, categories=None, make_files=True):
    """Write ``annotations.json`` and (optionally) the listed images; return (json, image dir).

    ``images``: dicts with id, file_name, width, height (files get that size);
    ``categories`` default to ids 1 and 3 named "cat" and "dog".
    """
    folder = str(folder)
    image_dir = os.path.join(folder, "images")
    os.makedirs(image_dir, exist_ok=True)
    if make_files:
        for im in images:
            write_image(os.path.join(image_dir, im["file_name"]),
                        im.get("width") or 40, im.get("height") or 30)
    categories = categories or [{"id": 1, "name": "cat"}, {"id": 3, "name": "dog"}]
    path = os.path.join(folder, "annotations.json")
    with open(path, "w") as f:
        json.dump({"images": images, "annotations": annotations, "categories": categories}, f)
    return path, image_dir


def image(i, width=100, height=80, name=None):
    return {"id": i, "file_name": name or f"{i:04d}.jpg", "width": width, "height": height}


def ann(i, image_id, bbox, category_id=1, **extra):
    return {"id": i, "image_id": image_id, "category_id": category_id, "bbox": bbox,
            "area": bbox[2] * bbox[3], "iscrowd": 0, **extra}


def voc_xml(filename, size, objects, doctype=""):
    """One VOC annotation; ``objects`` are (name, xmin, ymin, xmax, ymax[, difficult[, trunc]])."""
    size_xml = "" if size is None else (
        f"<size><width>{size[0]}</width><height>{size[1]}</height><depth>3</depth></size>")
    parts = []
    for o in objects:
        flags = "".join(f"<{k}>{v}</{k}>" for k, v in zip(("difficult", "truncated"), o[5:]))
        parts.append(f"<object><name>{o[0]}</name>{flags}<bndbox><xmin>{o[1]}</xmin>"
                     f"<ymin>{o[2]}</ymin><xmax>{o[3]}</xmax><ymax>{o[4]}</ymax></bndbox></object>")
    name = "" if filename is None else f"<filename>{filename}</filename>"
    return f"{doctype}<annotation>{name}{size_xml}{''.join(parts)}</annotation>"


def write_voc(root, docs, images=None, split="trainval"):
    """Write a VOC tree: ``docs`` maps id -> XML text; ``images`` maps file name -> (w, h, mode)
    (default: ``<id>.jpg`` of 100x80 for each id). ``split=None`` writes no split file."""
    root = str(root)
    for sub in ("Annotations", "JPEGImages", os.path.join("ImageSets", "Main")):
        os.makedirs(os.path.join(root, sub), exist_ok=True)
    for image_id, text in docs.items():
        with open(os.path.join(root, "Annotations", image_id + ".xml"), "w") as f:
            f.write(text)
    images = images if images is not None else {f"{i}.jpg": (100, 80) for i in docs}
    for name, spec in images.items():
        write_image(os.path.join(root, "JPEGImages", name), *spec)
    if split:
        with open(os.path.join(root, "ImageSets", "Main", f"{split}.txt"), "w") as f:
            f.writelines(i + "\n" for i in docs)
    return root


# --- named real-data quirks -------------------------------------------------------------------

@pytest.fixture
def grayscale_jpeg(tmp_path):
    """A mode "L" JPEG of 64x48."""
    path = write_image(str(tmp_path / "gray" / "g.jpg"), 64, 48, mode="L")
    assert Image.open(path).mode == "L"
    return path


@pytest.fixture
def crowd_rle_coco(tmp_path):
    """A COCO file with a polygon annotation and a crowd annotation carrying an RLE mask."""
    rle = {"counts": [100, 20, 60, 20, 7800], "size": [80, 100]}
    anns = [ann(1, 1, [10, 10, 20, 20], segmentation=[[10, 10, 30, 10, 30, 30]]),
            dict(ann(2, 1, [40, 30, 20, 25], category_id=3, segmentation=rle), iscrowd=1)]
    return write_coco(tmp_path, [image(1)], anns)


@pytest.fixture
def big_annotation_ids_coco(tmp_path):
    """Annotation ids above 2**31 (real sets have them; int32 would wrap)."""
    anns = [ann(2**31 + 5, 1, [1, 1, 5, 5]), ann(2**40 + 1, 1, [2, 2, 5, 5])]
    return write_coco(tmp_path, [image(1)], anns)


@pytest.fixture
def empty_images_coco(tmp_path):
    """Three images, of which the second has no annotations."""
    anns = [ann(1, 1, [1, 1, 5, 5]), ann(2, 3, [1, 1, 5, 5])]
    return write_coco(tmp_path, [image(1), image(2), image(3)], anns)


@pytest.fixture
def tiny_boxes_coco(tmp_path):
    """Boxes under 2 px (1.5 x 0.8 and 1 x 1) beside a normal one."""
    anns = [ann(1, 1, [5, 5, 1.5, 0.8]), ann(2, 1, [7, 7, 1, 1]), ann(3, 1, [10, 10, 30, 30])]
    return write_coco(tmp_path, [image(1)], anns)


@pytest.fixture
def difficult_voc(tmp_path):
    """A VOC tree with one difficult=1 object beside an ordinary, truncated one."""
    return write_voc(tmp_path / "voc", {"a": voc_xml("a.jpg", (100, 80), [
        ("dog", 1, 1, 10, 20, 1, 0), ("cat", 5, 5, 50, 40, 0, 1)])})


@pytest.fixture
def edge_boxes_voc(tmp_path):
    """Boxes ending exactly at the image edge (xmax == width, ymax == height)."""
    return write_voc(tmp_path / "voc", {"e": voc_xml("e.jpg", (100, 80), [
        ("dog", 1, 1, 100, 80), ("cat", 50, 40, 100, 60)])})
