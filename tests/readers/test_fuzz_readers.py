"""Fuzzing the readers: random mutations of valid VOC XML, COCO JSON and YOLO label files.

The only exception that may escape ``read_voc`` / ``read_coco`` / ``read_yolo`` is
``readers.DatasetError`` naming the mutated file (or the image/split file it was about), under
both ``on_error="raise"`` and ``"skip"``; each example runs under a wall-clock bound (SIGALRM)
so a hang fails the test instead of stalling CI.

Bounded (``max_examples`` from ``FUZZ_EXAMPLES``, 100; no deadline, a SIGALRM bound per
example) and derandomized so CI stays fast. To fuzz longer, with fresh randomness:
``FUZZ_EXAMPLES=5000 FUZZ_RANDOM=1 KERAS_BACKEND=torch python -m pytest tests/*/test_fuzz_*.py``.
Inputs that once escaped live in ``tests/fuzz_corpus/`` (helpers/fuzz.py: the budget, the
mutations) and run first, every time.
"""
import os
import shutil
import tempfile

import pytest
from hypothesis import given, settings

import readers
from readers import DatasetError
from helpers.fuzz import (CORPUS, EXAMPLES, FUZZ, VOC_ID, YOLO_LABELS, byte_mutation, coco_mutation,
                          time_bound, voc_mutation, yolo_mutation)
from helpers.reader_files import COCO_MINI, VOC_MINI


def check_reader(read, named):
    """Run ``read(on_error)`` under both policies: nothing but a DatasetError naming one of
    the ``named`` paths may escape."""
    for on_error in ("raise", "skip"):
        with time_bound():
            try:
                import warnings

                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    read(on_error)
            except DatasetError as exc:
                assert any(n in exc.file for n in named), (exc.file, named, str(exc))
                assert str(exc).startswith(exc.file)


# ---------------------------------------------------------------- VOC


@pytest.fixture(scope="module")
def voc_copy():
    tmp = tempfile.mkdtemp(prefix="fuzz-voc-")
    root = os.path.join(tmp, "voc")
    os.makedirs(os.path.join(root, "ImageSets", "Main"))
    os.makedirs(os.path.join(root, "Annotations"))
    shutil.copytree(os.path.join(VOC_MINI, "JPEGImages"), os.path.join(root, "JPEGImages"))
    with open(os.path.join(root, "ImageSets", "Main", "trainval.txt"), "w") as f:
        f.write(VOC_ID + "\n")
    yield root
    shutil.rmtree(tmp)


def _check_voc(root, xml: bytes):
    path = os.path.join(root, "Annotations", VOC_ID + ".xml")
    with open(path, "wb") as f:
        f.write(xml)
    check_reader(lambda on_error: readers.read_voc(root, on_error=on_error),
                 [path, os.path.join(root, "JPEGImages")])


@FUZZ
@given(xml=voc_mutation())
def test_fuzz_voc(voc_copy, xml):
    _check_voc(voc_copy, xml)


# ---------------------------------------------------------------- COCO


@pytest.fixture(scope="module")
def coco_dir():
    tmp = tempfile.mkdtemp(prefix="fuzz-coco-")
    yield tmp
    shutil.rmtree(tmp)


def _check_coco(folder, doc: bytes):
    path = os.path.join(folder, "annotations.json")
    with open(path, "wb") as f:
        f.write(doc)
    images = os.path.join(COCO_MINI, "images")
    check_reader(lambda on_error: readers.read_coco(path, images, on_error=on_error),
                 [path, os.path.realpath(images)])


@FUZZ
@given(doc=coco_mutation())
def test_fuzz_coco(coco_dir, doc):
    _check_coco(coco_dir, doc)


# ---------------------------------------------------------------- YOLO


@pytest.fixture(scope="module")
def yolo_root():
    from PIL import Image

    tmp = tempfile.mkdtemp(prefix="fuzz-yolo-")
    os.makedirs(os.path.join(tmp, "images"))
    os.makedirs(os.path.join(tmp, "labels"))
    Image.new("RGB", (64, 48), 90).save(os.path.join(tmp, "images", "a.jpg"))
    with open(os.path.join(tmp, "classes.txt"), "w") as f:
        f.write("cat\ndog\nbird\n")
    yield tmp
    shutil.rmtree(tmp)


def _check_yolo(root, labels: bytes, classes: bytes = None):
    path = os.path.join(root, "labels", "a.txt")
    with open(path, "wb") as f:
        f.write(labels)
    named = [path]
    if classes is not None:
        named.append(os.path.join(root, "classes.txt"))
        with open(named[-1], "wb") as f:
            f.write(classes)
    check_reader(lambda on_error: readers.read_yolo(root, on_error=on_error), named)


@FUZZ
@given(labels=yolo_mutation())
def test_fuzz_yolo(yolo_root, labels):
    _check_yolo(yolo_root, labels)


@settings(FUZZ, max_examples=max(EXAMPLES // 3, 10))
@given(classes=byte_mutation(b"cat\ndog\nbird\n"))
def test_fuzz_yolo_class_list(yolo_root, classes):
    try:
        _check_yolo(yolo_root, YOLO_LABELS, classes)
    finally:
        with open(os.path.join(yolo_root, "classes.txt"), "w") as f:
            f.write("cat\ndog\nbird\n")


# ---------------------------------------------------------------- seed corpus

def _corpus(prefix):
    folder = os.path.join(CORPUS, prefix)
    if not os.path.isdir(folder):
        return []
    return sorted(os.path.join(folder, n) for n in os.listdir(folder))


@pytest.mark.parametrize("case", _corpus("voc"), ids=os.path.basename)
def test_corpus_voc(voc_copy, case):
    with open(case, "rb") as f:
        _check_voc(voc_copy, f.read())


@pytest.mark.parametrize("case", _corpus("coco"), ids=os.path.basename)
def test_corpus_coco(coco_dir, case):
    with open(case, "rb") as f:
        _check_coco(coco_dir, f.read())


@pytest.mark.parametrize("case", _corpus("yolo"), ids=os.path.basename)
def test_corpus_yolo(yolo_root, case):
    with open(case, "rb") as f:
        _check_yolo(yolo_root, f.read())
