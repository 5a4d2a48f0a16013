"""A serialized pipeline edited by hand, or damaged, is refused by name ("errors that
name nothing"): an op missing an argument gave a bare KeyError, ``outputs: []`` an IndexError
(or a pipeline without outputs), and parameters of the wrong kind an OverflowError, ``cannot
convert float NaN to integer`` or, for ``batch_size: 2.7``, a pipeline of batch size 2. Each is
now a ``GraphFormatError`` naming the op or parameter and the fault, raised by
``Pipeline.deserialize`` before anything is built. ``mixup``'s ``alpha`` and ``beta`` are both
refused when infinite (``alpha=inf`` failed inside the kernel while ``beta=inf`` passed).
"""
import copy
import json
import pathlib

import numpy as np
import pytest

import detaug
from detaug import fn
from detaug.graph.arg_check import ArgumentError
from detaug.runtime.persist import GraphFormatError

from helpers import VOC
from helpers import close_pipelines, track  # noqa: F401  (autouse fixture)

NAN, INF = {"$float": "nan"}, {"$float": "inf"}


def small_pipe(seed=5):
    pipe = detaug.Pipeline(batch_size=2, seed=seed)
    with pipe:
        enc, boxes = fn.readers.voc(root=pathlib.Path(VOC))
        img = fn.decoders.image(enc)
        img, boxes = fn.flip(img, boxes, horizontal=1)
        img, boxes = fn.resize(img, boxes, size=(24, 32))
        pipe.set_outputs(img, boxes)
    return track(pipe)


@pytest.fixture(scope="module")
def doc():
    return json.loads(small_pipe().serialize())


def op_index(doc, schema):
    return [op["schema"] for op in doc["ops"]].index(schema)


def load(d):
    return track(detaug.Pipeline.deserialize(json.dumps(d)))


def test_the_document_itself_loads_and_gives_the_same_batches(doc):
    """The refusals below are of edits, not of the document: unedited it round-trips."""
    a, b = small_pipe(), load(doc)
    for _ in range(2):
        x, y = a.run(), b.run()
        np.testing.assert_array_equal(np.asarray(x[0].data), np.asarray(y[0].data))
        np.testing.assert_array_equal(x[1].boxes, y[1].boxes)


@pytest.mark.parametrize("schema,arg", [("flip", "horizontal"), ("resize", "size"),
                                        ("readers.voc", "root")])
def test_an_op_missing_an_argument_is_refused_naming_op_and_argument(doc, schema, arg):
    d = copy.deepcopy(doc)
    k = op_index(d, schema)
    del d["ops"][k]["args"][arg]
    with pytest.raises(GraphFormatError) as e:
        load(d)
    msg = str(e.value)
    assert f"serialized op #{k} ({schema})" in msg and "missing argument" in msg and repr(arg) in msg


def test_empty_outputs_are_refused(doc):
    d = copy.deepcopy(doc)
    d["outputs"] = []
    with pytest.raises(GraphFormatError, match="'outputs' is empty"):
        load(d)


@pytest.mark.parametrize("name,value,says", [
    ("batch_size", 1e300, "is a float: it takes int"),
    ("batch_size", NAN, "batch_size=nan is a float"),
    ("batch_size", 2.7, "batch_size=2.7 is a float"),  # was read as 2
    ("batch_size", "8", "is a str: it takes int"),
    ("batch_size", True, "is a bool: it takes int"),
    ("batch_size", 10**30, "out of range"),
    ("num_threads", INF, "num_threads=inf is a float"),
    ("seed", INF, "seed=inf is a float: it takes int or None"),
    ("seed", 2**70, "out of range"),
    ("prefetch_queue_depth", NAN, "prefetch_queue_depth=nan"),
    ("prefetch_queue_depth", {"$dict": [["cpu_size", 1.5]]}, "prefetch_queue_depth['cpu_size']"),
    ("decode_buffer_mb", INF, "decode_buffer_mb=inf"),
    ("device_memory_budget", NAN, "device_memory_budget=nan: it takes a finite number"),
    ("device_memory_budget", -1.0, "it takes a finite number >= 0"),
    ("on_error", 3, "on_error=3 is a int: it takes str"),
])
def test_a_parameter_of_the_wrong_kind_is_refused_by_name(doc, name, value, says):
    d = copy.deepcopy(doc)
    d["params"][name] = value
    with pytest.raises(GraphFormatError) as e:
        load(d)
    assert str(e.value).startswith(f"serialized pipeline: parameter {name}"), str(e.value)
    assert says in str(e.value)


def test_values_of_the_right_kind_are_taken(doc):
    """A seed past 2**31 (``seed=None`` draws 32 bits), a budget as a float or a string, and
    a DALI-style queue dict are what serialize() writes: they load as given."""
    d = copy.deepcopy(doc)
    d["params"].update(seed=2**32 - 1, device_memory_budget=2.5e9, prefetch_queue_depth=
                       {"$dict": [["cpu_size", 3], ["gpu_size", 2]]})
    pipe = load(d)
    assert pipe.seed == 2**32 - 1 and pipe.prefetch_queue_depth == 3
    assert pipe.device_memory_budget == 2_500_000_000


def mixup_pipe(**kw):
    pipe = detaug.Pipeline(batch_size=2, seed=1)
    with pipe:
        enc, boxes = fn.readers.voc(root=pathlib.Path(VOC))
        img = fn.decoders.image(enc)
        img, boxes = fn.resize(img, boxes, size=(24, 32))
        img, boxes = fn.mixup(img, boxes, **kw)
        pipe.set_outputs(img, boxes)
    return track(pipe)


@pytest.mark.parametrize("arg", ["alpha", "beta"])
@pytest.mark.parametrize("value", [float("inf"), float("nan"), 0.0, -1.0])
def test_mixup_alpha_and_beta_are_refused_alike_when_traced(arg, value):
    with pytest.raises(ArgumentError, match=f"mixup: argument {arg}="):
        mixup_pipe(**{arg: value})


@pytest.mark.parametrize("arg", ["alpha", "beta"])
def test_mixup_alpha_and_beta_are_refused_alike_when_read(arg):
    d = json.loads(mixup_pipe(alpha=2.0, beta=3.0).serialize())
    d["ops"][op_index(d, "mixup")]["args"][arg] = ["value", INF]
    with pytest.raises(GraphFormatError, match=f"\\(mixup\\): mixup: argument {arg}=inf"):
        load(d)


def iou_crop_pipe(**kw):
    pipe = detaug.Pipeline(batch_size=2, seed=1)
    with pipe:
        enc, boxes = fn.readers.voc(root=pathlib.Path(VOC))
        img = fn.decoders.image(enc)
        img, boxes = fn.random_iou_crop(img, boxes, **kw)
        img, boxes = fn.resize(img, boxes, size=(24, 32))
        pipe.set_outputs(img, boxes)
    return track(pipe)


@pytest.mark.parametrize("kw,says", [
    ({"num_attempts": "x"}, "num_attempts='x' is a str, not numbers"),  # was int('x')
    ({"num_attempts": {"n": 5}}, "num_attempts={'n': 5} is a dict, not numbers"),
    ({"aspect_ratio": ("a", 2.0)}, "aspect_ratio=('a', 2.0) is a tuple, not numbers"),
    ({"scaling": [[0.3, 1.0]]}, "scaling=[[0.3, 1.0]] is not one number or two"),
    ({"scaling": (0.1, 0.2, 0.3)}, "is not one number or two"),
])
def test_a_number_argument_given_something_else_is_refused_by_name(kw, says):
    with pytest.raises(ArgumentError, match="random_iou_crop: argument ") as e:
        iou_crop_pipe(**kw)
    assert says in str(e.value)


@pytest.mark.parametrize("arg,value", [("num_attempts", "x"), ("num_attempts", {"$dict": []}),
                                       ("scaling", [[0.3, 1.0]]), ("thresholds", {"$bytes": ""})])
def test_such_an_argument_in_a_document_is_refused_when_read(arg, value):
    d = json.loads(iou_crop_pipe().serialize())
    d["ops"][op_index(d, "random_iou_crop")]["args"][arg] = ["value", value]
    with pytest.raises(GraphFormatError, match=f"\\(random_iou_crop\\): random_iou_crop: "
                                               f"argument {arg}="):
        load(d)


def test_a_declared_word_is_still_taken():
    """random_erasing's value takes 'random' in place of a number; another word is refused."""
    from detaug.graph.arg_check import check_args

    check_args("random_erasing", {"value": "random"})
    with pytest.raises(ArgumentError, match="value='noise' is a str, not numbers"):
        check_args("random_erasing", {"value": "noise"})
