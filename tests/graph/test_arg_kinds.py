"""Every op's non-numeric arguments have a declared kind (bool, str, a choice of words, a
dtype, strs), checked by the one check that checks the numbers: a value of the wrong kind is
an ArgumentError naming the op and argument, at trace time and when a hand-edited serialized
pipeline is read, never a TypeError / KeyError / AttributeError from inside the op.

Driven from the declarations (``detaug.graph.arg_check``: ``declare_kinds`` beside each op,
the kinds its defaults say, ``SHARED_KINDS``)."""
from __future__ import annotations

import json
import re

import numpy as np
import pytest

import detaug  # noqa: F401  (registers every op)
from detaug import Pipeline, fn, types
from detaug.graph import trace as g
from detaug.graph.arg_check import (ARG_KINDS, ARG_RANGES, ArgumentError, check_args, kind_of)
from detaug.runtime.persist import GraphFormatError, encode

from helpers import close_pipelines, track  # noqa: F401 (fixture)

# Values of the wrong kind, by kind: what a hand-edited document or a slip in code gives.
WRONG = {"bool": ["yes", "false", 2, 0.5, [True], {}],
         "str": [3, 1.5, True, ["a"], {"a": 1}],
         "choice": ["no-such-word", "", 3, True, ["iou"]],
         "dtype": ["no_such_dtype", 3, 2.5, True, [1], {}],
         "dtypes": ["no_such_dtype", 3, True, ["uint8", 3], ["float32", "no_such_dtype"]],
         "strs": [3, [1, 2], ["a", 3], True, {"a": 1}]}
CASES = sorted((op, arg) for op, s in g.REGISTRY.items() for arg in s.args
               if arg not in ARG_RANGES.get(op, {}) and kind_of(op, arg) is not None
               and kind_of(op, arg).what != "free")
BAD = [(op, arg, v) for op, arg in CASES for v in WRONG[kind_of(op, arg).what]]


def _trace(op, kwargs):
    """Trace ``fn.<op>(inputs..., **kwargs)`` in a throwaway graph (nothing runs)."""
    graph = g.Graph()
    g.push(graph)
    try:
        n = g.schema_of(op).inputs[1]
        src = g.call_op("external_source", (), {"num_outputs": max(n, 2)})[:n] if n else ()
        return g.call_op(op, src, kwargs)
    finally:
        g.pop()


def test_every_argument_has_a_declared_range_or_kind():
    """A new argument fails here until it has a range (declare_ranges) or a kind
    (declare_kinds, or a bool / str default, or SHARED_KINDS)."""
    missing = [(op, k) for op, s in g.REGISTRY.items() for k in s.args
               if k not in ARG_RANGES.get(op, {}) and kind_of(op, k) is None]
    assert not missing, f"declare a kind beside the op (declare_kinds): {missing}"
    for op, table in ARG_KINDS.items():
        assert op in g.REGISTRY and set(table) <= set(g.REGISTRY[op].args), (op, table)
        assert not set(table) & set(ARG_RANGES.get(op, {})), (op, "both a range and a kind")


def test_kind_cases_cover_the_named_ones():
    for case in [("readers.voc", "root"), ("random.coin_flip", "dtype"), ("resize", "antialias"),
                 ("random_bbox_crop", "threshold_type"), ("noise", "mode"),
                 ("readers.file", "file_filters")]:
        assert case in CASES, case
    assert len(CASES) > 150


@pytest.mark.parametrize("op", sorted(g.REGISTRY))
def test_defaults_fit_their_kinds(op):
    check_args(op, dict(g.REGISTRY[op].args))


GOOD = {"bool": [True, False, 0, 1, np.bool_(True)], "str": ["x", "HWC"],
        "dtype": ["float32", "uint8", np.float32, np.dtype("int32"), types.FLOAT, types.UINT8],
        "strs": ["a", ["a", "b"], ("*.jpg",)],
        "dtypes": ["uint8", [types.UINT8, types.INT32], ("float32", np.uint8)]}


def test_values_of_the_right_kind_pass():
    for op, arg in CASES:
        kind = kind_of(op, arg)
        values = kind.choices if kind.what == "choice" else GOOD[kind.what]
        for v in values:
            check_args(op, {arg: v})
        check_args(op, {arg: None})  # left out


def test_a_wrong_kind_is_refused_by_name_at_trace_time():
    wrong = []
    for op, arg, value in BAD:
        try:
            _trace(op, {arg: value})
        except ArgumentError as exc:
            if not str(exc).startswith(f"{op}: argument {arg}=") or "it takes" not in str(exc):
                wrong.append((op, arg, value, str(exc)[:120]))
        except Exception as exc:  # noqa: BLE001  (what the test is about)
            wrong.append((op, arg, value, f"{type(exc).__name__}: {exc}"[:120]))
        else:
            wrong.append((op, arg, value, "taken"))
    assert not wrong, wrong[:10]


@pytest.fixture(scope="module")
def params():
    pipe = Pipeline(batch_size=1, num_threads=1, seed=0)
    with pipe:
        pipe.set_outputs(fn.external_source(source=[[np.zeros((4, 4, 3), np.uint8)]]))
    doc = json.loads(pipe.serialize())
    pipe.close()
    return doc["params"]


def _document(params, op, arg, value):
    """A hand-written one-op document: every argument at its default, ``arg`` at ``value``."""
    schema = g.REGISTRY[op]
    args = {k: ["value", encode(v, k)] for k, v in schema.args.items()}
    args[arg] = ["value", encode(value, arg)]
    return json.dumps({"format": "detaug-pipeline-2", "params": params,
                       "ops": [{"schema": op, "name": "x_0", "device": schema.devices[0],
                                "inputs": [], "args": args}], "outputs": [[0, 0]]}).encode()


def test_a_wrong_kind_is_refused_by_name_when_read(params):
    """Every declared argument, each wrong value of its kind, in a document edited by hand."""
    wrong = []
    for op, arg, value in BAD:
        try:
            Pipeline.deserialize(_document(params, op, arg, value))
        except GraphFormatError as exc:
            if not re.search(rf"^serialized op #0 \({re.escape(op)}\): {re.escape(op)}: argument {re.escape(arg)}=.* it takes",
                             str(exc)):
                wrong.append((op, arg, value, str(exc)[:160]))
        except Exception as exc:  # noqa: BLE001  (what the test is about)
            wrong.append((op, arg, value, f"{type(exc).__name__}: {exc}"[:160]))
        else:
            wrong.append((op, arg, value, "taken"))
    assert not wrong, wrong[:10]


def test_a_real_document_edited_by_hand(params):
    """The issue's cases in a document ``serialize()`` wrote, edited as a user would."""
    pipe = track(Pipeline(batch_size=1, num_threads=1, seed=0))
    with pipe:
        x = fn.external_source(source=[[np.zeros((8, 8, 3), np.uint8)]])
        pipe.set_outputs(fn.resize(x, size=4, antialias=True), fn.random.coin_flip(dtype="uint8"))
    doc = pipe.serialize().decode()
    assert Pipeline.deserialize(doc.encode()) is not None
    for old, new, msg in [('"antialias":["value",true]', '"antialias":["value","false"]',
                           "resize: argument antialias='false' (str) is not of its kind: it takes a bool"),
                          ('"dtype":["value","uint8"]', '"dtype":["value",3]',
                           "random.coin_flip: argument dtype=3 (int) is not of its kind"),
                          ('"mode":["value","default"]', '"mode":["value","stretched"]',
                           "resize: argument mode='stretched' (str) is not of its kind: it takes one of")]:
        assert old in doc
        with pytest.raises(GraphFormatError, match=re.escape(msg)):
            Pipeline.deserialize(doc.replace(old, new).encode())


def test_one_threshold_as_a_number():
    """random_iou_crop's thresholds: one number or a sequence (it failed in list())."""
    from detaug.ops.crops import iou_crop_windows
    sizes = np.array([[20, 20]], np.int64)
    boxes = np.array([[2, 2, 10, 10]], np.float32)
    u = np.random.default_rng(0).random((1, 1 + 4 * 3))
    args = (sizes, boxes, np.array([0, 1]), np.ones(1, bool))
    a = iou_crop_windows(u, *args, 0.5, True, (0.3, 1.0), (0.5, 2.0))
    b = iou_crop_windows(u, *args, (0.5,), True, (0.3, 1.0), (0.5, 2.0))
    for x, y in zip(a, b):
        np.testing.assert_array_equal(x, y)
