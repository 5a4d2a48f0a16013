"""Every argument an op declares is honoured or refused.

For every op of the registry, each declared argument is changed from its default to another
valid value (on top of the context some arguments need, e.g. ``fill`` only shows where a
rotation brings in content from outside) and the op is run on fixed inputs: the outputs must
differ from the run without the change, or the run must raise an error that names the argument
(refused). An argument that changes no value must be a declared hint (``OpSchema.hints``: its
arg_docs say 'hint', and setting it warns once). An argument in none of these tables fails
``test_every_declared_argument_is_covered``: a new argument needs a case in helpers/op_cases.py.
"""
from __future__ import annotations

import warnings

import numpy as np
import pytest

from detaug import Pipeline, fn
from detaug.graph import trace as graph
from detaug.ops import REGISTRY

from helpers import close_pipelines, track  # noqa: F401 (fixture)
from helpers.op_cases import (CASES, ELSEWHERE, IMAGES, RNG, SOURCES, With, _encoded, _feed, _run,
                              _same)


def _public():
    return sorted(n for n in REGISTRY if not n.startswith("_"))


def test_every_declared_argument_is_covered():
    missing = []
    for name in _public():
        s = REGISTRY[name]
        changes = {k for case, (_, _, ch) in CASES.items() if case.split("@")[0] == name for k in ch}
        for k in s.args:
            covered = k in changes or k in s.hints or (name in SOURCES and k in ELSEWHERE)
            if not covered:
                missing.append(f"{name}({k}=)")
    assert not missing, f"arguments with no case in tests/helpers/op_cases.py: {missing}"
    assert {c.split("@")[0] for c in CASES} | SOURCES == set(_public())


ARG_CASES = [(n, k) for n in sorted(CASES) for k in CASES[n][2]]


@pytest.mark.parametrize("name,arg", ARG_CASES, ids=[f"{n}-{k}" for n, k in ARG_CASES])
def test_a_changed_argument_changes_the_output_or_is_refused(name, arg):
    runner, base, changes = CASES[name]
    change = changes[arg]
    context = change.context if isinstance(change, With) else {}
    value = change.value if isinstance(change, With) else change
    schema = REGISTRY[name.split("@")[0]]
    assert arg in schema.args and arg not in schema.hints
    first = {} if not isinstance(change, With) or change.before is None else {arg: change.before}
    before = _run(name, runner, {**base, **context, **first})
    try:
        after = _run(name, runner, {**base, **context, arg: value})
    except (ValueError, TypeError, NotImplementedError) as e:
        assert arg in str(e), f"{name}: {arg}={value!r} raised an error that does not name it: {e}"
        return
    assert not _same(before, after), (f"fn.{name}: {arg}={value!r} gives the same output as "
                                      f"{first.get(arg, schema.args[arg])!r}: ignored")


HINTS = [(n, k) for n in _public() for k in REGISTRY[n].hints]


@pytest.mark.parametrize("name,arg", HINTS, ids=[f"{n}-{k}" for n, k in HINTS])
def test_a_hint_is_documented_and_says_so_once_when_set(name, arg, monkeypatch):
    s = REGISTRY[name]
    assert s.arg_docs[arg].startswith("hint, changes no value here: ")
    monkeypatch.setattr(graph, "_HINTS_SAID", set())
    value = 1 if s.args[arg] in (None, False, 0) else None
    value = 2 if value is None and s.args[arg] == 1 else value
    pipe = track(Pipeline(batch_size=1))
    with pipe:
        with pytest.warns(UserWarning, match=f"{name}: {arg}=.* hint and changes no value"):
            graph.call_op(name, _hint_inputs(name), {arg: value})
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # once: the second call is silent
            graph.call_op(name, _hint_inputs(name), {arg: value})
            graph.call_op(name, _hint_inputs(name), {})  # the default: silent


def _hint_inputs(name):
    lo = REGISTRY[name].inputs[0]
    return tuple(fn.external_source(source=[[np.zeros(3, np.uint8)]]) for _ in range(lo))


def test_decoder_hints_change_no_pixel():
    """The decoder's hints are hints indeed: the same pixels with any value of them."""
    base = _run("decoders.image", _encoded, {})
    tuned = _run("decoders.image", _encoded, {"hw_decoder_load": 0.9, "use_fast_idct": True,
                                              "split_stages": True, "affine": False})
    assert _same(base, tuned)


def test_resize_antialias_off_is_one_bilinear_sample_per_pixel():
    """antialias=False on a 4x shrink: each output pixel is the bilinear sample at its centre's
    preimage (x = 4 j + 2 lies between input pixels 4j+1 and 4j+2: their mean); with antialias
    (images alone: DALI's form) DALI's triangle of radius 4: input pixels 4j-2 .. 4j+5 weigh
    (1, 3, 5, 7, 7, 5, 3, 1) / 32 per axis, the edge replicated."""
    img = RNG.integers(0, 256, (8, 8, 3), dtype=np.uint8)
    (on,) = _feed([[img]], lambda i: fn.resize(i, size=(2, 2)))
    (off,) = _feed([[img]], lambda i: fn.resize(i, size=(2, 2), antialias=False))
    x = img.astype(np.float64)
    want_off = np.floor((x[1::4][:, 1::4] + x[1::4][:, 2::4] + x[2::4][:, 1::4] + x[2::4][:, 2::4])
                        / 4 + 0.5)
    # OpenCV's bilinear weights are fixed point (1/32): within one level of the float64 value
    np.testing.assert_allclose(np.asarray(off.data[0]), want_off, atol=1)
    tri = np.array([1, 3, 5, 7, 7, 5, 3, 1]) / 32.0
    wax = np.zeros((2, 8))
    for j in range(2):
        np.add.at(wax[j], np.clip(np.arange(4 * j - 2, 4 * j + 6), 0, 7), tri)
    want_on = np.floor(np.einsum("ij,jkc,lk->ilc", wax, x, wax) + 0.5)
    np.testing.assert_allclose(np.asarray(on.data[0]), want_on, atol=1e-9)
    assert np.abs(np.asarray(on.data[0]).astype(int) - np.asarray(off.data[0])).max() > 10


def test_external_source_ndim_is_checked():
    with pytest.raises(ValueError, match="ndim=2 but a sample has 3 dimensions"):
        _ndim_run(2)
    (out,) = _ndim_run(3)
    assert len(out) == 2


def _ndim_run(ndim):
    pipe = track(Pipeline(batch_size=2))
    with pipe:
        pipe.set_outputs(fn.external_source(source=[IMAGES], ndim=ndim))
    return pipe.run()
