"""Small dataset builders and the named real-data-quirk fixtures for the readers tests; a
decompression-bomb PNG; a random COCO file (tests/readers/test_coco_reference.py's draw).

Test modules import the fixtures they use by name (pytest finds fixtures in module globals);
every file is written under ``tmp_path``.
"""
from __future__ import annotations

import json
import math
import os
import struct
import zlib

import numpy as np
import pytest
from PIL import Image

from helpers import COCO as COCO_MINI, REPO, VOC as VOC_MINI  # noqa: F401  (other tests import them from here)

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


def crowd_coco(folder, every, plain=True):
    """The COCO sample with every ``every``-th polygon object rewritten as a crowd RLE (its
    polygons merged by pycocotools: the mask COCO's tools give it), compressed; with ``plain``
    the first of them as an uncompressed counts list. Writes ``folder``/crowd.json; returns
    (its path, {annotation id: mask})."""
    from pycocotools import mask as coco_mask

    from readers.segments import rle_from_string

    with open(os.path.join(COCO_MINI, "annotations.json")) as f:
        doc = json.load(f)
    sizes = {im["id"]: (im["height"], im["width"]) for im in doc["images"]}
    want = {}
    for k, a in enumerate(doc["annotations"]):
        if k % every or not isinstance(a["segmentation"], list):
            continue
        h, w = sizes[a["image_id"]]
        rle = coco_mask.merge(coco_mask.frPyObjects(a["segmentation"], h, w))
        want[a["id"]] = coco_mask.decode(rle)
        counts = rle["counts"].decode("ascii")
        if plain and len(want) == 1:
            counts = [int(v) for v in rle_from_string(counts)]
        a["segmentation"], a["iscrowd"] = {"size": [h, w], "counts": counts}, 1
    os.makedirs(str(folder), exist_ok=True)
    path = os.path.join(str(folder), "crowd.json")
    with open(path, "w") as f:
        json.dump(doc, f)
    return path, want


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


def bomb_png(width=30_000, height=30_000) -> bytes:
    """A PNG whose IHDR declares width x height (8-bit RGB) with a tiny IDAT: a few dozen
    bytes on disk, 2.7 GB if decoded."""
    def chunk(kind, data):
        return struct.pack(">I", len(data)) + kind + data + \
            struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)
    ihdr = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + \
        chunk(b"IDAT", zlib.compress(b"\x00" * 64)) + chunk(b"IEND", b"")


def random_file(tmp_path, rng):
    n_images = int(rng.integers(1, 30))
    cat_ids = sorted(rng.choice(np.arange(1, 40), size=int(rng.integers(1, 8)),
                                replace=False).tolist())
    categories = [{"id": c, "name": f"c{c}", **({"supercategory": "s"} if c % 2 else {})}
                  for c in rng.permutation(cat_ids).tolist()]
    images, root = [], tmp_path / "img"
    root.mkdir()
    literal = bool(rng.integers(2))  # a true / null somewhere: no longer a "plain" file
    for i in range(n_images):
        w, h = int(rng.integers(1, 500)), int(rng.integers(1, 500))
        im = {"id": int(rng.integers(0, 10**6)) * 100 + i, "file_name": f"{i}.jpg",
              "width": w, "height": h}
        if rng.random() < 0.3:
            im["license"] = int(rng.integers(5))
        if literal and rng.random() < 0.2:
            im["flickr_url"] = None
        images.append(im)
        if rng.random() > 0.05:  # else the image file is missing: it is skipped
            (root / im["file_name"]).write_bytes(b"")
    flags = [k for k in ("difficult", "truncated") if rng.random() < 0.4]
    note_rate = rng.choice([0.0, 0.2])  # "area" alone, or beside "note": the two box_keys paths
    anns = []
    for j in range(int(rng.integers(0, 120))):
        im = images[int(rng.integers(n_images))]
        W, H = im["width"], im["height"]
        x, y = rng.uniform(-0.3, 1.1) * W, rng.uniform(-0.3, 1.1) * H
        bw, bh = rng.uniform(0.01, 0.8) * W, rng.uniform(0.01, 0.8) * H
        r = rng.random()
        if r < 0.04:
            bw = -bw
        elif r < 0.06:
            bh = 0.0
        elif r < 0.08:
            x = float("nan")
        bbox = [round(x, 3), round(y, 3), round(bw, 3), round(bh, 3)]
        if rng.random() < 0.3:
            bbox = [int(round(v)) if math.isfinite(v) else v for v in bbox]
        a = {"id": j + 1, "image_id": im["id"], "category_id": int(rng.choice(cat_ids)),
             "bbox": bbox, "area": round(abs(bw * bh), 2), "iscrowd": int(rng.random() < 0.15)}
        if rng.random() < 0.05:
            del a["id"]
        if rng.random() < 0.05:
            a["image_id"] = 10**9 + j  # no such image
        if rng.random() < 0.05:
            a["category_id"] = 99  # no such category
        if rng.random() < 0.2:
            a["segmentation"] = [[1, 2, 3, 4, 5, 6]] if rng.random() < 0.7 else []
        if rng.random() < note_rate:
            a["note"] = "x" if not literal else bool(rng.integers(2))
        for k in flags:
            if rng.random() < 0.8:
                a[k] = int(rng.integers(2))
        if rng.random() < 0.1:
            del a["area"]
        anns.append(a)
    if rng.random() < 0.3:
        anns.sort(key=lambda a: a["image_id"])
    if anns and rng.random() < 0.15:
        anns[int(rng.integers(len(anns)))]["bbox"] = ["1", 2, 3, 4]  # not 4 numbers
    doc = {"info": {"year": 2026}, "images": images, "annotations": anns,
           "categories": categories}
    path = tmp_path / "ann.json"
    path.write_text(json.dumps(doc))
    return path, root, doc


def write_detection_shard(path, n, payload=40):
    """A TFRecord shard of ``n`` detection examples (Object Detection API keys): example k's
    image bytes are a JPEG marker then ``payload`` bytes of value k % 256, one box of class 1
    'cat' on a 64 x 48 image. Returns ``path``."""
    from readers import tfrecord as T

    def example(k):
        return T.serialize_example({
            "image/encoded": T.bytes_feature([b"\xff\xd8" + bytes([k % 256]) * payload]),
            "image/filename": T.bytes_feature([f"{k}.jpg".encode()]),
            "image/width": T.int64_feature([64]), "image/height": T.int64_feature([48]),
            "image/object/bbox/xmin": T.float_feature([0.1]),
            "image/object/bbox/ymin": T.float_feature([0.1]),
            "image/object/bbox/xmax": T.float_feature([0.5]),
            "image/object/bbox/ymax": T.float_feature([0.6]),
            "image/object/class/label": T.int64_feature([1]),
            "image/object/class/text": T.bytes_feature([b"cat"])})

    T.write_records(path, [example(k) for k in range(n)])
    return path
