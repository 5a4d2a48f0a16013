"""The columnar ``read_voc`` against the reader it replaced (tests/helpers/voc_reader_before.py, frozen
at 050ee4a): on the sample data, on the benchmark's generated trees, and on fresh random trees
full of odd files, both readers must give the same records (paths, sizes, boxes, labels,
difficult / truncated, ids, extra keys), the same faults in the same order naming the same
files, the same counts (clipped, dropped, emptied), the same warning and the same progress
calls; under ``on_error="raise"`` the same first fault. (The reference is independent of the
new code: it parses each file to a tuple per object and checks every record in its
constructor.)"""
from __future__ import annotations

import importlib.util
import os
import warnings

import numpy as np
import pytest
from PIL import Image

from helpers import voc_reader_before as before
from helpers import REPO, SHARED_DATA, VOC as VOC_MINI
from readers import DatasetError, read_voc
from readers.voc import VOC_CLASSES

# the project's shared copy of the VOC sample (shared/ beside the clone, as on CI), read as a
# second tree laid out by another hand; absent from a plain clone
SHARED_VOC = os.path.join(SHARED_DATA, "voc-mini")


def run(reader, root, **kw):
    """(dataset or (file, reason) of the DatasetError, warnings' texts, progress calls)."""
    calls = []
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            out = reader(root, progress=lambda d, t: calls.append((d, t)), **kw)
        except DatasetError as exc:
            out = (exc.file, exc.reason)
    return out, [str(w.message) for w in caught], calls


def assert_same(root, **kw):
    got, want = run(read_voc, root, **kw), run(before.read_voc, root, **kw)
    assert got[1:] == want[1:], kw  # warnings and progress
    got, want = got[0], want[0]
    if isinstance(want, tuple):
        assert got == want, kw
        return None
    assert not isinstance(got, tuple), (got, kw)
    for key in ("class_names", "category_ids", "root", "skipped", "clipped", "dropped",
                "emptied", "extra"):
        assert getattr(got, key) == getattr(want, key), (key, kw)
    assert len(got.records) == len(want.records), kw
    for r, w in zip(got.records, want.records):
        assert (r.path, r.width, r.height, r.image_id) == (w.path, w.width, w.height, w.image_id)
        assert type(r.width) is type(w.width) is int and type(r.height) is int
        for a, b in ((r.boxes, w.boxes), (r.labels, w.labels)):
            assert a.dtype == b.dtype and a.shape == b.shape, (r.path, kw)
            np.testing.assert_array_equal(a, b, err_msg=r.path)
        assert list(r.fields) == list(w.fields), (r.path, kw)
        for name in w.fields:
            assert r.fields[name].dtype == w.fields[name].dtype, (r.path, name)
            np.testing.assert_array_equal(r.fields[name], w.fields[name], err_msg=r.path)
        assert r.extra == w.extra and list(r.extra) == list(w.extra), (r.path, kw)
    return got


@pytest.mark.parametrize("root", [VOC_MINI, SHARED_VOC], ids=["examples", "shared"])
@pytest.mark.parametrize("kw", [{}, {"check_images": False}, {"skip_difficult": True},
                                {"classes": "discover", "on_error": "skip"},
                                {"classes": ["person", "dog", "cat"], "on_error": "skip"}])
def test_sample_data(root, kw):
    if not os.path.isdir(root):
        pytest.skip(f"{root} is absent (the shared data beside the clone, ../shared/data, or "
                    f"DETAUG_SHARED_DATA); the examples' copy runs")
    ds = assert_same(root, **kw)
    if ds is not None and "classes" not in kw:
        assert len(ds) > 0 and sum(r.num_boxes for r in ds) > 0


def test_benchmark_trees(tmp_path):
    spec = importlib.util.spec_from_file_location(
        "bench_readers", os.path.join(REPO, "benchmarks", "bench_readers.py"))
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    seed = int(np.random.SeedSequence().entropy % 2**32)
    root = bench.make_voc(str(tmp_path / "voc"), 300, np.random.default_rng(seed))
    ds = assert_same(root)
    assert len(ds) == 300 and all(r.extra["box_keys"] for r in ds), seed
    assert_same(root, skip_difficult=True, check_images=False)


# --- random trees of odd files ---------------------------------------------------------------

NAMES = ["dog", "cat", "person", " car ", "caf\u00e9", "\u732b", "alien", "", "  "]
NUMBERS = ["12", " 30 ", "12.5", "1e1", "-4", "0", "400", "nan", "inf", "", "  ", "abc",
           "\u0661\u0662", "1_0", "+7", "9999"]
FLAGS = ["0", "1", " 1 ", "2", "", "  ", "yes", "0.0"]
SIZES = ["300", "0", "", "300.0", "300.5", "abc", "-5", " 200 ", "+100", "1e2", "99999999999"]


def pick(rng, items):
    return items[int(rng.integers(len(items)))]


def maybe(rng, p):
    return rng.random() < p


def random_object(rng):
    parts = []
    if not maybe(rng, 0.05):
        parts.append(f"<name>{pick(rng, NAMES)}</name>")
    if maybe(rng, 0.04):
        parts.append(f"<name>{pick(rng, NAMES)}</name>")  # twice
    if maybe(rng, 0.5):
        parts.append(pick(rng, ["<pose>Unspecified</pose>", "<pose> Left<!-- c -->x</pose>"]))
    for flag in ("truncated", "difficult"):
        for _ in range(int(rng.choice([0, 1, 1, 1, 1, 2], p=[.15, .2, .2, .2, .2, .05]))):
            parts.append(f"<{flag}>{pick(rng, FLAGS) if maybe(rng, 0.2) else int(rng.integers(2))}"
                         f"</{flag}>")
    if maybe(rng, 0.1):
        parts.append("<!-- note --><occluded>1</occluded><occluded>0</occluded>")
    if maybe(rng, 0.05):
        parts.append("<xmin>1</xmin>")  # a stray coordinate outside the bndbox
    for _ in range(int(rng.choice([0, 1, 2], p=[0.05, 0.9, 0.05]))):
        x0, y0 = int(rng.integers(-10, 300)), int(rng.integers(-10, 300))
        dx, dy = (-1 if maybe(rng, 0.05) else int(rng.integers(-5, 200)) for _ in "xy")
        coords = {"xmin": x0, "ymin": y0, "xmax": x0 + dx, "ymax": y0 + dy}  # -1: zero size
        box = []
        for key, v in coords.items():
            for _ in range(int(rng.choice([0, 1, 2], p=[0.03, 0.94, 0.03]))):
                text = pick(rng, NUMBERS) if maybe(rng, 0.1) else \
                    f"{v + 0.5}" if maybe(rng, 0.1) else str(v)
                box.append(f"<{key}>{text}</{key}>" if text else f"<{key}/>")
        if maybe(rng, 0.1):
            box.insert(int(rng.integers(len(box) + 1)), "<extra>x</extra><!--c-->")
        if maybe(rng, 0.1):
            rng.shuffle(box)
        parts.append("<bndbox>" + "".join(box) + "</bndbox>")
    if maybe(rng, 0.1):
        parts.append("<part><name>hand</name><bndbox><xmin>1</xmin></bndbox></part>"
                     "<part><name>head</name></part>")
    if maybe(rng, 0.1):
        rng.shuffle(parts)
    return "<object>" + "".join(parts) + "</object>" if maybe(rng, 0.97) else "<object/>"


def random_annotation(rng, image_id, image_name, size):
    parts = ["<folder>VOC</folder>"]
    for _ in range(int(rng.choice([0, 1, 2], p=[0.1, 0.85, 0.05]))):
        parts.append(f"<filename>{image_name}</filename>")
    if size is not None:
        w, h = size
        inner = [f"<width>{w}</width>", f"<height>{h}</height>", "<depth>3</depth>"]
        if maybe(rng, 0.03):
            inner.append(f"<width>{w}</width>")
        if maybe(rng, 0.03):
            inner = inner[1:]  # no width
        parts.append("<size>" + "".join(inner) + "</size>")
        if maybe(rng, 0.02):
            parts.append(parts[-1])  # <size> twice
    if maybe(rng, 0.4):
        parts.append("<source><!-- c --><database>x</database><image>flickr</image></source>"
                     "<owner><name>someone \u00e9</name></owner>")
    if maybe(rng, 0.2):
        parts.append("<?pi data?><!-- c --><segmented>1</segmented><segmented>0</segmented>")
    for _ in range(int(rng.integers(0, 6))):
        parts.append(random_object(rng))
    if maybe(rng, 0.1):
        rng.shuffle(parts)
    return "<annotation>\n  " + "\n  ".join(parts) + "\n</annotation>\n"


ODD_FILES = {
    "malformed": b"<annotation><object><name>dog</name></annotation>",
    "wrong root": b"<voc><object/></voc>",
    "empty": b"",
    "latin-1": ('<?xml version="1.0" encoding="ISO-8859-1"?><annotation><size><width>50'
                '</width><height>40</height></size><object><name>caf\u00e9</name><bndbox>'
                '<xmin>1</xmin><ymin>1</ymin><xmax>9</xmax><ymax>9</ymax></bndbox></object>'
                '</annotation>').encode("latin-1"),
    "entity": (b'<?xml version="1.0"?><!DOCTYPE annotation [<!ENTITY e "dog">]><annotation>'
               b'<size><width>50</width><height>40</height></size><object><name>&e;</name>'
               b'<bndbox><xmin>1</xmin><ymin>1</ymin><xmax>9</xmax><ymax>9</ymax></bndbox>'
               b'</object><object><name><![CDATA[cat]]></name><bndbox><xmin>2</xmin><ymin>2'
               b'</ymin><xmax>9</xmax><ymax>9</ymax></bndbox></object></annotation>'),
    "undefined entity": b"<annotation><object><name>&nope;</name></object></annotation>",
    "bad utf-8": b"<annotation><object><name>\xff\xfe</name></object></annotation>",
    "outside filename": b"<annotation><filename>../../etc/passwd</filename></annotation>",
}


def random_tree(root, rng):
    for sub in ("Annotations", "JPEGImages", os.path.join("ImageSets", "Main")):
        os.makedirs(os.path.join(root, sub))
    images = os.path.join(root, "JPEGImages")
    os.makedirs(os.path.join(images, "sub"))
    lines = []
    for i in range(int(rng.integers(1, 25))):
        image_id = pick(rng, [f"2012_{i:04d}", f"im {i}", f"\u00e9t\u00e9_{i}"]) \
            if maybe(rng, 0.3) else f"2012_{i:04d}"
        lines.append(image_id if maybe(rng, 0.9) else f"{image_id}  1")
        if maybe(rng, 0.04):
            lines.append(image_id)  # listed twice
        xml = os.path.join(root, "Annotations", image_id + ".xml")
        if maybe(rng, 0.03):
            continue  # no annotation file
        if maybe(rng, 0.02):
            os.makedirs(xml)  # a folder in its place
            continue
        if maybe(rng, 0.12):
            with open(xml, "wb") as f:
                f.write(pick(rng, list(ODD_FILES.values())))
            name = image_id + ".jpg"
        else:
            name = pick(rng, [image_id + ".jpg", image_id + ".png", "sub/" + image_id + ".png"])
            size = None if maybe(rng, 0.08) else \
                (pick(rng, SIZES), pick(rng, SIZES)) if maybe(rng, 0.15) else \
                (int(rng.integers(20, 400)), int(rng.integers(20, 400)))
            with open(xml, "w", encoding="utf-8") as f:
                f.write(random_annotation(rng, image_id, name, size))
        image = os.path.join(images, name)
        if maybe(rng, 0.05):
            continue  # no image
        if maybe(rng, 0.5):  # a real image (its header gives a size where <size> does not)
            Image.new("RGB", (int(rng.integers(5, 300)), int(rng.integers(5, 300)))).save(
                image, "PNG")
        else:
            open(image, "wb").close()
        if name != image_id + ".jpg" and maybe(rng, 0.5):  # the id's own .jpg as well
            open(os.path.join(images, image_id + ".jpg"), "wb").close()
    if maybe(rng, 0.9):
        with open(os.path.join(root, "ImageSets", "Main", "trainval.txt"), "w",
                  encoding="utf-8") as f:
            f.write("\n".join(lines) + "\n")


@pytest.mark.parametrize("seed", [0, 1, 2, 3, 4, 5, 6, 7] + [None] * 8)
def test_random_odd_trees(tmp_path, seed):
    seed = int(np.random.SeedSequence().entropy % 2**32) if seed is None else seed
    rng = np.random.default_rng(seed)
    root = str(tmp_path / "voc")
    random_tree(root, rng)
    for _ in range(3):
        classes = pick(rng, [None, "discover", ["dog", "cat", "car", "caf\u00e9", "\u732b"],
                             list(VOC_CLASSES[::-1])])
        kw = {"classes": classes, "skip_difficult": maybe(rng, 0.5),
              "check_images": maybe(rng, 0.7)}
        for on_error in ("skip", "raise"):
            try:
                assert_same(root, on_error=on_error, **kw)
            except AssertionError as exc:
                raise AssertionError(f"seed {seed}, {on_error}, {kw}: {exc}") from None


def test_random_trees_exercise_every_fault(tmp_path):
    """The odd files above do reach the faults the comparison is meant to cover."""
    reasons = []
    for seed in range(20):
        root = str(tmp_path / f"voc{seed}")
        random_tree(root, np.random.default_rng(seed))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            ds = read_voc(root, classes=["dog", "cat", "car"], on_error="skip")
        reasons += [reason for _, reason in ds.skipped]
    text = "\n".join(reasons)
    for fault in ("malformed XML", "not <annotation>", "annotation file not found",
                  "not a regular file", "image file not found", "is given twice",
                  "object without a <name>", "bndbox is not 4 numbers", "not 0 or 1",
                  "unknown class", "zero width or height", "x1 < x0", "non-finite",
                  "lies wholly outside", "points outside", "not a whole number", "listed twice",
                  "cannot read the image header"):
        assert fault in text, fault
