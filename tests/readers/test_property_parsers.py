"""Property-based tests (hypothesis) over the annotation parsers: COCO JSON, VOC XML, YOLO
label files, ``classes.txt`` and ``data.yaml``, TFRecord Examples and label maps.

The property, for any mutation of a valid file, under ``on_error="raise"`` and ``"skip"``:
the reader returns a *valid* dataset or raises a DatasetError naming the mutated file (or a
file it names). Valid is checked here from the definitions, not from the readers' code:
every box finite, ``x0 < x1``, ``y0 < y1``, inside its ``W x H`` image; labels in
``0 .. num_classes - 1``; per-box fields one value a box; class names distinct-id strings;
and no more boxes than the file has well-formed box entries (so that nothing is read as
something else: 8 numbers are not two boxes, two 2-number arrays not one).

Budgets: each test runs ``PROPERTY_EXAMPLES`` examples (default 60), derandomized (the same
examples on every run, as CI needs), each under a 5 s deadline and a wall-clock bound.
``PROPERTY_EXAMPLES=2000 FUZZ_RANDOM=1`` explores further.
"""
import datetime
import json
import os
import re
import shutil
import tempfile
import warnings

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

import readers
import readers.voc
from lxml import etree
from readers import DatasetError
from readers import tfrecord as T
from readers.label_map import read_label_map
from readers.tfrecord_od import read_tfrecord
from helpers.fuzz import (COCO_BYTES, NASTY_NUMBERS, NASTY_STRINGS, VOC_ID, byte_mutation,
                          coco_mutation, time_bound, voc_mutation, yolo_mutation)
from helpers.reader_files import VOC_MINI

EXAMPLES = int(os.environ.get("PROPERTY_EXAMPLES", "60"))
PROPERTY = settings(max_examples=EXAMPLES, deadline=datetime.timedelta(seconds=5),
                    derandomize=not os.environ.get("FUZZ_RANDOM"), database=None,
                    suppress_health_check=list(HealthCheck))


def assert_valid(ds):
    """The dataset invariants, from the definitions in docs/design.md."""
    assert all(isinstance(n, str) for n in ds.class_names)
    assert len(ds.category_ids) == ds.num_classes == len(set(ds.category_ids))
    for r in ds.records:
        assert isinstance(r.width, int) and isinstance(r.height, int)
        assert 0 < r.width < 2**31 and 0 < r.height < 2**31, (r.width, r.height)
        b = np.asarray(r.boxes)
        assert b.dtype == np.float32 and b.shape == (r.num_boxes, 4)
        assert np.isfinite(b).all()
        assert ((b[:, 0] < b[:, 2]) & (b[:, 1] < b[:, 3])).all(), b
        assert ((b >= 0) & (b <= [r.width, r.height, r.width, r.height])).all(), b
        labels = np.asarray(r.labels)
        assert labels.dtype == np.int64 and labels.shape == (r.num_boxes,)
        assert ((labels >= 0) & (labels < ds.num_classes)).all()
        for name, values in r.fields.items():
            assert len(values) == r.num_boxes, name
    for item in ds.skipped:
        assert isinstance(item[0], str) and isinstance(item[1], str)


def check(read, named, max_boxes=None, exact=None):
    """``read(on_error)`` under both policies: a valid dataset with at most ``max_boxes``
    boxes (and exactly ``exact`` under ``"raise"``, where nothing may be dropped), or a
    DatasetError naming one of ``named``."""
    for on_error in ("raise", "skip"):
        with time_bound(), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            try:
                ds = read(on_error)
            except DatasetError as exc:
                assert any(n in exc.file for n in named), (exc.file, named, str(exc))
                assert str(exc).startswith(exc.file)
                continue
        assert_valid(ds)
        boxes = sum(r.num_boxes for r in ds.records)
        if max_boxes is not None:
            assert boxes <= max_boxes
        if exact is not None and on_error == "raise":
            assert boxes == exact, "a box entry was dropped without a fault"


@pytest.fixture(scope="module")
def tmp():
    folder = tempfile.mkdtemp(prefix="property-")
    yield folder
    shutil.rmtree(folder)


# ---------------------------------------------------------------- COCO

def _coco_box_entries(doc: bytes):
    """(annotations whose bbox is a list of exactly 4 JSON numbers, all annotations);
    (None, None) when the file is not JSON."""
    try:
        data = json.loads(doc)
    except (ValueError, RecursionError):
        return None, None
    anns = data.get("annotations") if isinstance(data, dict) else None
    if not isinstance(anns, list):
        return 0, 0
    return sum(1 for a in anns if isinstance(a, dict) and type(a.get("bbox")) is list
               and len(a["bbox"]) == 4
               and all(type(v) in (int, float) for v in a["bbox"])), len(anns)


@st.composite
def coco_bbox_mutation(draw):
    """A valid document whose bboxes hold 0..12 numbers, or strings, bools, nulls, lists;
    every bbox alike in half the examples (numpy's reshape fitted 8 numbers, or 2 + 2, into
    boxes), and one or two annotations in half."""
    doc = json.loads(COCO_BYTES)
    if draw(st.booleans()):
        doc["annotations"] = doc["annotations"][:draw(st.integers(1, 2))]
    number = st.sampled_from([0, 1, 3, 5, 7, 12.5])
    odd = st.sampled_from(["4", True, None, [1, 2], 1e308, {}])
    size = st.sampled_from([0, 2, 3, 4, 5, 8, 12])

    def bbox():
        return draw(size.flatmap(lambda n: st.lists(number, min_size=n, max_size=n)))

    uniform = bbox() if draw(st.booleans()) else None
    for a in doc["annotations"]:
        a["bbox"] = list(uniform) if uniform is not None else bbox()
        if draw(st.integers(0, 3)) == 0:  # one odd value
            if a["bbox"]:
                a["bbox"][draw(st.integers(0, len(a["bbox"]) - 1))] = draw(odd)
            else:
                a["bbox"] = draw(odd)
    return json.dumps(doc).encode()


@PROPERTY
@given(doc=coco_mutation() | coco_bbox_mutation())
def test_property_coco(tmp, doc):
    folder = os.path.join(tmp, "coco")
    os.makedirs(folder, exist_ok=True)
    path = os.path.join(folder, "annotations.json")
    with open(path, "wb") as f:
        f.write(doc)
    from helpers.reader_files import COCO_MINI
    images = os.path.join(COCO_MINI, "images")
    well_formed, total = _coco_box_entries(doc)
    check(lambda on_error: readers.read_coco(path, images, on_error=on_error),
          [path, os.path.realpath(images)], well_formed, total)


# ---------------------------------------------------------------- VOC

@pytest.fixture(scope="module")
def voc_root(tmp):
    root = os.path.join(tmp, "voc")
    os.makedirs(os.path.join(root, "ImageSets", "Main"))
    os.makedirs(os.path.join(root, "Annotations"))
    shutil.copytree(os.path.join(VOC_MINI, "JPEGImages"), os.path.join(root, "JPEGImages"))
    with open(os.path.join(root, "ImageSets", "Main", "trainval.txt"), "w") as f:
        f.write(VOC_ID + "\n")
    return root


@PROPERTY
@given(xml=voc_mutation())
def test_property_voc(voc_root, xml):
    path = os.path.join(voc_root, "Annotations", VOC_ID + ".xml")
    with open(path, "wb") as f:
        f.write(xml)
    objects = len(re.findall(rb"<object[\s>]", xml))
    try:
        exact = len(etree.fromstring(xml, readers.voc.safe_parser()).findall("object"))
    except (etree.XMLSyntaxError, ValueError, AttributeError):
        exact = None
    check(lambda on_error: readers.read_voc(voc_root, on_error=on_error),
          [path, os.path.join(voc_root, "JPEGImages")], objects, exact)


# ---------------------------------------------------------------- YOLO: labels, classes

@pytest.fixture(scope="module")
def yolo_root(tmp):
    from PIL import Image

    root = os.path.join(tmp, "yolo")
    os.makedirs(os.path.join(root, "images"))
    os.makedirs(os.path.join(root, "labels"))
    Image.new("RGB", (64, 48), 90).save(os.path.join(root, "images", "a.jpg"))
    return root


def _yolo_files(root, labels, classes=None, data_yaml=None):
    for name, data in (("labels/a.txt", labels), ("classes.txt", classes),
                       ("data.yaml", data_yaml)):
        path = os.path.join(root, name)
        if data is None:
            if os.path.exists(path):
                os.remove(path)
        else:
            with open(path, "wb") as f:
                f.write(data)


def _label_lines(labels: bytes):
    """(lines of 5 tokens, lines that are not blank)."""
    try:
        text = labels.decode("utf-8-sig")
    except UnicodeDecodeError:
        return 0, None
    lines = [line.split() for line in text.split("\n")]
    return sum(len(t) == 5 for t in lines), sum(len(t) > 0 for t in lines)


@PROPERTY
@given(labels=yolo_mutation(), classes=byte_mutation(b"cat\ndog\nbird\n") | st.just(
    b"cat\ndog\nbird\n"))
def test_property_yolo_labels_and_classes_txt(yolo_root, labels, classes):
    _yolo_files(yolo_root, labels, classes)
    check(lambda on_error: readers.read_yolo(yolo_root, on_error=on_error),
          [os.path.join(yolo_root, "labels", "a.txt"), os.path.join(yolo_root, "classes.txt")],
          *_label_lines(labels))


DATA_YAML = b"path: .\ntrain: images\nnc: 3\nnames:\n  0: cat\n  1: dog\n  2: bird\n"
yaml_value = st.sampled_from([
    "cat", "'traffic, light'", "yes", "no", "null", "~", "1.5", "0x10", "[a, b]", "{a: 1}",
    "&x a", "*x", "!!python/object:os.system ['true']", "'a # b'", "a # b", "''", '"\\ud800"',
    "|\n    block", "- x", "'", '"', "\t", "!!binary aGk=", "2001-01-01", "<<: *x",
    *NASTY_NUMBERS])


@st.composite
def data_yaml_mutation(draw):
    if draw(st.booleans()):
        return draw(byte_mutation(DATA_YAML))
    style = draw(st.sampled_from(["flow", "block", "keyed"]))
    values = draw(st.lists(yaml_value, max_size=5))
    if style == "flow":
        names = "names: [" + ", ".join(values) + "]\n"
    elif style == "block":
        names = "names:\n" + "".join(f"  - {v}\n" for v in values)
    else:
        keys = draw(st.lists(st.sampled_from(["0", "1", "2", "-1", "'0'", "1.0", "3"]),
                             min_size=len(values), max_size=len(values)))
        names = "names:\n" + "".join(f"  {k}: {v}\n" for k, v in zip(keys, values))
    extra = draw(st.sampled_from(["", "nc: 2\n", "names: [x]\n", "nc: two\n", "path: .\n"]))
    return (names + extra).encode("utf-8", "surrogatepass")


@PROPERTY
@given(data_yaml=data_yaml_mutation())
def test_property_yolo_data_yaml(yolo_root, data_yaml):
    _yolo_files(yolo_root, b"0 0.5 0.5 0.2 0.3\n", None, data_yaml)
    path = os.path.join(yolo_root, "data.yaml")
    named = [path, os.path.join(yolo_root, "labels", "a.txt"),
             os.path.join(yolo_root, "classes.txt")]
    check(lambda on_error: readers.read_yolo(yolo_root, on_error=on_error), named, 1, 1)
    try:
        names = readers.read_yolo(yolo_root, on_error="skip").class_names
    except DatasetError:
        return
    import yaml  # the definition: what a YAML parser reads from the file

    doc = yaml.safe_load(data_yaml.decode("utf-8"))
    want = doc["names"] if isinstance(doc["names"], list) else \
        [doc["names"][k] for k in range(len(doc["names"]))]
    assert names == want and all(isinstance(n, str) and n.strip() == n != "" for n in names)


# ---------------------------------------------------------------- TFRecord

def _jpeg():
    import io

    from PIL import Image

    out = io.BytesIO()
    Image.new("RGB", (32, 24), 9).save(out, "JPEG")
    return out.getvalue()


JPEG = _jpeg()
GOOD_FEATURES = {
    "image/encoded": ("bytes", [JPEG]), "image/filename": ("bytes", [b"a.jpg"]),
    "image/source_id": ("bytes", [b"17"]), "image/width": ("int", [32]),
    "image/height": ("int", [24]), "image/format": ("bytes", [b"jpeg"]),
    "image/object/bbox/xmin": ("float", [0.1, 0.5]), "image/object/bbox/ymin": ("float", [0.1, 0.2]),
    "image/object/bbox/xmax": ("float", [0.4, 0.9]), "image/object/bbox/ymax": ("float", [0.6, 0.8]),
    "image/object/class/label": ("int", [1, 2]), "image/object/class/text": ("bytes", [b"cat", b"dog"]),
    "image/object/difficult": ("int", [0, 1]), "image/object/area": ("float", [10.0, 20.0]),
}
feature_values = {
    "bytes": st.lists(st.sampled_from([b"", b"cat", b"dog", b"\xff\xfe", b"17", b"007", JPEG,
                                       b"png", "\u00e9".encode()]), max_size=3),
    "int": st.lists(st.sampled_from([0, 1, 2, 3, -1, 2**63 - 1, -2**63, 32, 24, 0]), max_size=3),
    "float": st.lists(st.sampled_from([0.0, 0.1, 0.5, 1.0, 1.5, -0.2, float("nan"),
                                       float("inf"), 1e30]), max_size=3),
}


def _encode(features):
    make = {"bytes": T.bytes_feature, "int": T.int64_feature, "float": T.float_feature}
    return T.serialize_example({k: make[kind](v) for k, (kind, v) in features.items()})


@st.composite
def example_mutation(draw):
    feats = dict(GOOD_FEATURES)
    if draw(st.integers(0, 3)) == 0:
        return draw(byte_mutation(_encode(feats)))
    for _ in range(draw(st.integers(1, 4))):
        name = draw(st.sampled_from(sorted(GOOD_FEATURES)))
        op = draw(st.sampled_from(["delete", "kind", "values", "values"]))
        if op == "delete":
            feats.pop(name, None)
        else:
            kind = draw(st.sampled_from(["bytes", "int", "float"])) if op == "kind" \
                else GOOD_FEATURES[name][0]
            feats[name] = (kind, draw(feature_values[kind]))
    return _encode(feats)


@PROPERTY
@given(records=st.lists(example_mutation(), min_size=1, max_size=2),
       label_map=st.sampled_from([None, {1: "cat", 2: "dog"}, {1: "cat", 2: "dog", 3: "x"}]))
def test_property_tfrecord(tmp, records, label_map):
    path = os.path.join(tmp, "p.tfrecord")
    T.write_records(path, records)
    max_boxes = 3 * len(records)  # a box feature holds 2 values, or at most 3 once mutated
    try:
        exact = sum(len(T.parse_example(r).floats("image/object/bbox/xmin")) for r in records)
    except T.ProtoError:
        exact = None
    check(lambda on_error: read_tfrecord(path, label_map=label_map, on_error=on_error),
          [path], max_boxes, exact)


# ---------------------------------------------------------------- label map

LABEL_MAP = (b"# classes\nitem {\n  id: 1\n  name: 'cat'\n}\nitem {\n  id: 2\n"
             b"  name: \"dog\"\n  display_name: 'Dog'\n}\n")
pbtxt_token = st.sampled_from(["item", "{", "}", "id", "name", "display_name", ":", "1", "2",
                               "-1", "0x1", "1.5", "'a'", '"b"', "'\\xff'", "'\\n'", "#c\n",
                               ",", ";", "9223372036854775808", "'", "\n"])


@st.composite
def label_map_mutation(draw):
    if draw(st.booleans()):
        return draw(byte_mutation(LABEL_MAP))
    return " ".join(draw(st.lists(pbtxt_token, max_size=20))).encode()


@PROPERTY
@given(text=label_map_mutation())
def test_property_label_map(tmp, text):
    path = os.path.join(tmp, "label_map.pbtxt")
    with open(path, "wb") as f:
        f.write(text)
    with time_bound():
        try:
            out = read_label_map(path)
        except DatasetError as exc:
            assert exc.file == path and str(exc).startswith(path)
            return
    assert all(type(k) is int and 0 <= k < 2**63 and isinstance(v, str) for k, v in out.items())
    assert len(out) <= text.count(b"item")


@PROPERTY
@given(names=st.lists(st.sampled_from(NASTY_STRINGS[:3] + NASTY_STRINGS[4:]), max_size=4))
def test_property_label_map_round_trip(tmp, names):
    """What write_tfrecord writes (pbtxt_quote) reads back as written, for any name."""
    from readers.label_map import pbtxt_quote

    path = os.path.join(tmp, "rt.pbtxt")
    with open(path, "w", encoding="utf-8", errors="surrogatepass") as f:
        f.writelines(f"item {{\n  id: {i + 1}\n  name: {pbtxt_quote(n)}\n}}\n"
                     for i, n in enumerate(names))
    try:
        out = read_label_map(path)
    except DatasetError as exc:  # a lone surrogate is no UTF-8 text
        assert any("\ud800" in n for n in names) and exc.file == path
        return
    assert out == {i + 1: n for i, n in enumerate(names)}
