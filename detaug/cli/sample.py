"""The demo's own sample data set, generated where the repository's ``examples/data`` is absent
(after ``pip install detaug``): JPEG images of coloured shapes on textured backgrounds, each shape
a box of its class, written as Pascal VOC or COCO by detaug's own writers.

The images are drawn from a fixed seed, so every machine generates the same files; the box of a
shape is the rectangle its pixels fill (continuous coordinates: pixels x0..x1 give [x0, x1 + 1)).
"""
from __future__ import annotations

import os
import shutil
import tempfile
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from readers.records import Dataset

CLASSES = ("square", "circle", "triangle", "diamond")
VERSION = 1  # bump when the generated content changes: the cache folder is named after it


def cache_root() -> str:
    """Where generated samples are kept: ``$DETAUG_CACHE``, else ``$XDG_CACHE_HOME/detaug``, else
    ``~/.cache/detaug``."""
    base = os.environ.get("DETAUG_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache"), "detaug")
    return base


def _background(rng, h: int, w: int) -> np.ndarray:
    """A smooth two-colour gradient with mild noise (so the colour ops have something to change)."""
    a, b = rng.integers(30, 226, (2, 3))
    t = np.linspace(0.0, 1.0, w)[None, :, None] * 0.6 + np.linspace(0.0, 1.0, h)[:, None, None] * 0.4
    img = a * (1 - t) + b * t + rng.normal(0, 8, (h, w, 3))
    return np.clip(img, 0, 255).astype(np.uint8)


def _shape(draw, kind: str, box: tuple, color) -> None:
    x0, y0, x1, y1 = box  # inclusive pixel corners
    if kind == "square":
        draw.rectangle(box, fill=color)
    elif kind == "circle":
        draw.ellipse(box, fill=color)
    elif kind == "triangle":
        draw.polygon([(x0, y1), ((x0 + x1) // 2, y0), (x1, y1)], fill=color)
        draw.line([(x0, y1), (x1, y1)], fill=color)  # the base row reaches both corners
    else:
        cx, cy = (x0 + x1) // 2, (y0 + y1) // 2
        draw.polygon([(cx, y0), (x1, cy), (cx, y1), (x0, cy)], fill=color)
        draw.point([(cx, y0), (x1, cy), (cx, y1), (x0, cy)], fill=color)


def make_images(folder: str, n: int = 40, seed: int = 0) -> "Dataset":
    """Draw ``n`` JPEGs into ``folder``; returns the readers' Dataset of them (boxes measured from
    the drawn pixels)."""
    from PIL import Image, ImageDraw

    from readers.records import Dataset, DetectionRecord

    rng = np.random.default_rng(seed)
    records = []
    for i in range(n):
        h, w = int(rng.integers(240, 361)), int(rng.integers(300, 481))
        im = Image.fromarray(_background(rng, h, w))
        draw = ImageDraw.Draw(im)
        boxes, labels = [], []
        for _ in range(int(rng.integers(1, 5))):
            label = int(rng.integers(len(CLASSES)))
            bw, bh = int(rng.integers(w // 8, w // 2)), int(rng.integers(h // 8, h // 2))
            x0, y0 = int(rng.integers(0, w - bw)), int(rng.integers(0, h - bh))
            color = tuple(int(v) for v in rng.integers(0, 256, 3))
            mask = Image.new("L", im.size, 0)
            _shape(ImageDraw.Draw(mask), CLASSES[label], (x0, y0, x0 + bw - 1, y0 + bh - 1), 255)
            _shape(draw, CLASSES[label], (x0, y0, x0 + bw - 1, y0 + bh - 1), color)
            ys, xs = np.nonzero(np.asarray(mask))
            boxes.append([xs.min(), ys.min(), xs.max() + 1, ys.max() + 1])
            labels.append(label)
        path = os.path.join(folder, f"shapes_{i:03d}.jpg")
        im.save(path, quality=92)
        records.append(DetectionRecord(path, w, h, np.asarray(boxes, np.float32), labels,
                                       image_id=f"shapes_{i:03d}"))
    return Dataset(records, list(CLASSES))


def generate(root: str, data: str, n: int = 40, seed: int = 0) -> str:
    """Write the sample as ``data`` ('voc' or 'coco') into ``root`` (created, complete or absent:
    it is built in a temporary folder beside it and renamed). Returns ``root``."""
    from readers.writers import write_coco, write_voc

    parent = os.path.dirname(os.path.abspath(root))
    os.makedirs(parent, exist_ok=True)
    tmp = tempfile.mkdtemp(prefix=".sample-", dir=parent)
    try:
        src = os.path.join(tmp, "drawn")
        os.makedirs(src)
        ds = make_images(src, n, seed)
        out = os.path.join(tmp, "out")
        if data == "voc":
            write_voc(ds, out, split="trainval", link=True)
        else:
            write_coco(ds, os.path.join(out, "annotations.json"),
                       images_dir=os.path.join(out, "images"), link=True)
        try:
            os.rename(out, root)
        except OSError:  # another process finished first: keep its copy
            if not os.path.isdir(root):
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return root


def sample_root(data: str) -> str:
    """The generated sample's folder for ``data``, generated on first use."""
    root = os.path.join(cache_root(), f"sample-{data}-v{VERSION}")
    return root if os.path.isdir(root) else generate(root, data)
