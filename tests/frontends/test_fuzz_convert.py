"""Fuzzing the converter: random mutations of valid VOC XML, COCO JSON and YOLO label files
through ``detaug-convert``'s library entry point (``detaug.cli.convert.convert``), to COCO, VOC,
YOLO and TFRecord, with and without ``--skip-bad``, onto a new or (with ``--overwrite``) an
existing destination.

Every example, under a wall-clock bound: the only exception that may escape is
``readers.DatasetError`` naming the mutated file (or an image or class file it names); a
failed conversion leaves the destination as it was (absent, or the previous dataset byte for
byte) and no temporary folder beside it; a successful one leaves a complete dataset (the
previous one gone), which the target format's reader reads back with ``on_error="raise"``,
holding the images, boxes and classes the summary counts; the source is never changed.
Bounded and derandomized as tests/readers/test_fuzz_readers.py (``FUZZ_EXAMPLES`` / ``FUZZ_RANDOM``
to fuzz longer). Inputs that once failed live in
``tests/fuzz_corpus/convert-*/`` and run first, every time.
"""
import hashlib
import json
import os
import shutil
import tempfile
import warnings

import pytest
from hypothesis import given, settings, strategies as st

import readers
from detaug.cli.convert import convert, parse_args
from readers import DatasetError
from helpers.reader_files import COCO_MINI, VOC_MINI
from helpers.fuzz import (COCO_BYTES, CORPUS, EXAMPLES, FUZZ, NASTY_STRINGS, VOC_ID,
                          YOLO_LABELS, byte_mutation, coco_mutation, time_bound,
                          voc_mutation, yolo_mutation)

CONVERT_FUZZ = settings(FUZZ, max_examples=max(EXAMPLES // 4, 10))  # a conversion and a read-back each
TARGETS = ("coco", "voc", "yolo", "tfrecord")


def tree_digest(folder):
    """{relative path: sha1 of the bytes} of every file under ``folder`` (None: absent)."""
    if not os.path.exists(folder):
        return None
    out = {}
    for base, dirs, files in os.walk(folder):
        dirs.sort()
        for name in sorted(files):
            path = os.path.join(base, name)
            with open(path, "rb") as f:
                out[os.path.relpath(path, folder)] = hashlib.sha1(f.read()).hexdigest()
    return out


def read_back(fmt, dst):
    """The written dataset, read by the target format's reader (faults raise)."""
    if fmt == "coco":
        return readers.read_coco(os.path.join(dst, "annotations.json"),
                                 os.path.join(dst, "images"))
    if fmt == "voc":
        sidecar = os.path.join(dst, "classes.txt")  # as write_voc leaves
        return readers.read_voc(dst, classes=readers.read_voc_classes(sidecar)
                                if os.path.isfile(sidecar) else None)
    if fmt == "tfrecord":
        from readers.tfrecord_od import read_tfrecord

        return read_tfrecord(dst, label_map=os.path.join(dst, "label_map.pbtxt"))
    return readers.read_yolo(dst)


def check_convert(src, src_fmt, dst_fmt, skip_bad, overwrite, named, extra=()):
    """Convert ``src`` under the promises of the module docstring."""
    parent = tempfile.mkdtemp(prefix="fuzz-convert-dst-")
    dst = os.path.join(parent, "out")
    try:
        if overwrite:  # a previous dataset that a failed run must leave as it was
            os.makedirs(os.path.join(dst, "images"))
            with open(os.path.join(dst, "annotations.json"), "w") as f:
                json.dump({"images": [], "annotations": [], "categories": []}, f)
        before_dst, before_src = tree_digest(dst), tree_digest(os.path.dirname(src)
                                                              if os.path.isfile(src) else src)
        argv = [src, dst, "--from", src_fmt, "--to", dst_fmt, *extra]
        argv += ["--skip-bad"] if skip_bad else []
        argv += ["--overwrite"] if overwrite else []
        error = None
        with time_bound(10), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            try:
                lines = convert(parse_args(argv))
            except DatasetError as exc:
                error = exc
        assert tree_digest(os.path.dirname(src) if os.path.isfile(src) else src) == before_src
        if error is not None:
            assert any(n in error.file for n in named), (error.file, named, str(error))
            assert str(error).startswith(error.file)
            assert tree_digest(dst) == before_dst, "a failed conversion changed the destination"
            assert os.listdir(parent) == (["out"] if overwrite else []), os.listdir(parent)
            return error
        assert os.listdir(parent) == ["out"], os.listdir(parent)
        if overwrite and dst_fmt != "coco":  # the previous dataset is gone, not mixed in
            assert "annotations.json" not in os.listdir(dst)
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # the written dataset has no fault to skip
            back = read_back(dst_fmt, dst)
        wrote = next(line for line in lines if line.startswith("wrote ")).split()
        n_images, n_boxes, n_classes = int(wrote[1]), int(wrote[3]), int(wrote[5])
        assert n_images == int(lines[0].split()[1]), lines  # every image read is written
        assert (len(back), sum(r.num_boxes for r in back.records), back.num_classes) == \
            (n_images, n_boxes, n_classes), lines
        return back
    finally:
        shutil.rmtree(parent)


options = st.tuples(st.sampled_from(TARGETS), st.booleans(), st.booleans())


# ---------------------------------------------------------------- VOC source

@pytest.fixture(scope="module")
def voc_src():
    tmp = tempfile.mkdtemp(prefix="fuzz-convert-voc-")
    root = os.path.join(tmp, "voc")
    os.makedirs(os.path.join(root, "ImageSets", "Main"))
    os.makedirs(os.path.join(root, "Annotations"))
    os.makedirs(os.path.join(root, "JPEGImages"))
    ann = os.path.join(VOC_MINI, "Annotations", VOC_ID + ".xml")
    from lxml import etree

    filename = etree.parse(ann).findtext("filename") or VOC_ID + ".jpg"
    shutil.copy(os.path.join(VOC_MINI, "JPEGImages", filename),
                os.path.join(root, "JPEGImages", filename))
    with open(os.path.join(root, "ImageSets", "Main", "trainval.txt"), "w") as f:
        f.write(VOC_ID + "\n")
    yield root
    shutil.rmtree(tmp)


def _convert_voc(root, xml, target, skip_bad, overwrite):
    path = os.path.join(root, "Annotations", VOC_ID + ".xml")
    with open(path, "wb") as f:
        f.write(xml)
    return check_convert(root, "voc", target, skip_bad, overwrite,
                         [path, os.path.join(root, "JPEGImages")])


@CONVERT_FUZZ
@given(xml=voc_mutation(), opts=options)
def test_fuzz_convert_voc(voc_src, xml, opts):
    _convert_voc(voc_src, xml, *opts)


# ---------------------------------------------------------------- COCO source

@pytest.fixture(scope="module")
def coco_src():
    tmp = tempfile.mkdtemp(prefix="fuzz-convert-coco-")
    yield os.path.join(tmp, "annotations.json")
    shutil.rmtree(tmp)


def _convert_coco(path, doc, target, skip_bad, overwrite):
    with open(path, "wb") as f:
        f.write(doc)
    images = os.path.join(COCO_MINI, "images")
    return check_convert(path, "coco", target, skip_bad, overwrite,
                         [path, os.path.realpath(images)], ["--image-root", images])


@CONVERT_FUZZ
@given(doc=coco_mutation(), opts=options)
def test_fuzz_convert_coco(coco_src, doc, opts):
    _convert_coco(coco_src, doc, *opts)


# ---------------------------------------------------------------- YOLO source

@pytest.fixture(scope="module")
def yolo_src():
    from PIL import Image

    tmp = tempfile.mkdtemp(prefix="fuzz-convert-yolo-")
    root = os.path.join(tmp, "yolo")
    os.makedirs(os.path.join(root, "images"))
    os.makedirs(os.path.join(root, "labels"))
    Image.new("RGB", (64, 48), 90).save(os.path.join(root, "images", "a.jpg"))
    Image.new("RGB", (40, 30), 20).save(os.path.join(root, "images", "b.jpg"))
    with open(os.path.join(root, "labels", "b.txt"), "w") as f:
        f.write("2 0.5 0.5 0.5 0.5\n")
    with open(os.path.join(root, "classes.txt"), "w") as f:
        f.write("cat\ndog\nbird\n")
    yield root
    shutil.rmtree(tmp)


def _convert_yolo(root, labels, target, skip_bad, overwrite):
    path = os.path.join(root, "labels", "a.txt")
    with open(path, "wb") as f:
        f.write(labels)
    return check_convert(root, "yolo", target, skip_bad, overwrite, [path])


@CONVERT_FUZZ
@given(labels=yolo_mutation(), opts=options)
def test_fuzz_convert_yolo(yolo_src, labels, opts):
    _convert_yolo(yolo_src, labels, *opts)


@settings(CONVERT_FUZZ, max_examples=max(EXAMPLES // 4, 10))
@given(classes=byte_mutation(b"cat\ndog\nbird\n") | st.lists(
    st.sampled_from(NASTY_STRINGS), min_size=1, max_size=4).map(
        lambda names: "\n".join(names).encode("utf-8", "surrogatepass")), opts=options)
def test_fuzz_convert_yolo_class_list(yolo_src, classes, opts):
    path = os.path.join(yolo_src, "classes.txt")
    with open(path, "wb") as f:
        f.write(classes)
    try:
        check_convert(yolo_src, "yolo", opts[0], opts[1], opts[2],
                      [path, os.path.join(yolo_src, "labels")])
    finally:
        with open(path, "w") as f:
            f.write("cat\ndog\nbird\n")


# ---------------------------------------------------------------- the unmutated seeds

@pytest.mark.parametrize("target", TARGETS)
def test_seeds_convert_and_read_back(voc_src, coco_src, yolo_src, target):
    """The fuzzers' seeds convert cleanly (so a fuzz example that fails is the mutation's)."""
    def ok(back):
        assert not isinstance(back, DatasetError), str(back)
        return back

    with open(os.path.join(VOC_MINI, "Annotations", VOC_ID + ".xml"), "rb") as f:
        back = ok(_convert_voc(voc_src, f.read(), target, False, False))
    assert len(back) == 1 and back.records[0].num_boxes >= 1
    back = ok(_convert_coco(coco_src, COCO_BYTES, target, False, True))
    assert len(back) == 3 and sum(r.num_boxes for r in back.records) == len(
        json.loads(COCO_BYTES)["annotations"])
    back = ok(_convert_yolo(yolo_src, YOLO_LABELS, target, False, False))
    assert len(back) == 2 and sorted(r.num_boxes for r in back.records) == [1, 3]


# ---------------------------------------------------------------- seed corpus

def _corpus(kind):
    folder = os.path.join(CORPUS, f"convert-{kind}")
    if not os.path.isdir(folder):
        return []
    return sorted(os.path.join(folder, n) for n in os.listdir(folder))


def _corpus_case(case):
    """A corpus file's bytes and its options: ``<name>.<target>[.skip][.overwrite].<ext>``."""
    parts = os.path.basename(case).split(".")
    with open(case, "rb") as f:
        return f.read(), parts[1], "skip" in parts, "overwrite" in parts


@pytest.mark.parametrize("case", _corpus("voc"), ids=os.path.basename)
def test_corpus_convert_voc(voc_src, case):
    _convert_voc(voc_src, *_corpus_case(case))


@pytest.mark.parametrize("case", _corpus("coco"), ids=os.path.basename)
def test_corpus_convert_coco(coco_src, case):
    _convert_coco(coco_src, *_corpus_case(case))


@pytest.mark.parametrize("case", _corpus("yolo"), ids=os.path.basename)
def test_corpus_convert_yolo(yolo_src, case):
    _convert_yolo(yolo_src, *_corpus_case(case))
