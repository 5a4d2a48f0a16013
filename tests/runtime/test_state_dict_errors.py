"""A tampered or damaged ``state_dict`` is refused by name, not by an error that names nothing:
``load_state_dict`` ran ``int()`` on its fields, so a string gave ``invalid literal for int()``,
None or a list a TypeError, a shard of 3 ``'int' object is not iterable``, a dataset of 5 an
AttributeError, and ``epoch=1.9`` resumed at epoch 1 without a word (``batch=True`` at batch 1).
Each field is now checked against what ``state_dict`` writes, where the state enters, and a
fault is a ``StateDictError`` (a ValueError) naming the field and its value; a valid state still
resumes exactly.
"""
import pathlib

import numpy as np
import pytest

import detaug
from detaug import fn
from detaug.runtime.run_state import StateDictError

from helpers import VOC
from helpers import close_pipelines, track  # noqa: F401  (autouse fixture)


def pipe():
    p = detaug.Pipeline(batch_size=2, seed=9)
    with p:
        enc, boxes = fn.readers.voc(root=pathlib.Path(VOC), random_shuffle=True)
        img = fn.decoders.image(enc)
        img, boxes = fn.resize(img, boxes, size=(16, 20))
        p.set_outputs(img, boxes)
    return track(p)


@pytest.fixture(scope="module")
def saved():
    p = pipe()
    for _ in range(3):
        p.run()
    state = p.state_dict()
    want = p.run()
    return state, np.asarray(want[0].data).copy(), want[1].boxes.copy()


@pytest.mark.parametrize("field,value", [
    ("epoch", 1.9), ("epoch", "1"), ("epoch", [1]), ("batch", None), ("batch", True),
    ("batch", 3.0), ("seed", "9"), ("batch_size", 2.0), ("shard", 3), ("shard", [0]),
    ("shard", [0, "1"]), ("dataset", 5), ("dataset", {"records": "40", "keys": "x"}),
    ("shard_policy", 1), ("batches_per_epoch", 2.5), ("format", "2"),
])
def test_a_field_of_another_kind_is_refused_naming_it(saved, field, value):
    state = {**saved[0], field: value}
    p = pipe()
    with pytest.raises(StateDictError) as e:
        p.load_state_dict(state)
    assert f"state field {field!r} is {value!r}" in str(e.value)
    assert isinstance(e.value, ValueError)  # what callers caught before


@pytest.mark.parametrize("state", [None, [], {"epoch": 0}, {"batch": 0}])
def test_what_is_not_a_state_is_refused(state):
    with pytest.raises(StateDictError, match="not a pipeline state"):
        pipe().load_state_dict(state)


def test_a_negative_position_is_refused(saved):
    with pytest.raises(StateDictError, match="must not be negative"):
        pipe().load_state_dict({**saved[0], "batch": -1})


def test_a_valid_state_still_resumes_exactly(saved):
    state, images, boxes = saved
    p = pipe()
    p.load_state_dict({**state, "epoch": np.int64(state["epoch"])})  # NumPy ints are ints
    got = p.run()
    np.testing.assert_array_equal(np.asarray(got[0].data), images)
    np.testing.assert_array_equal(got[1].boxes, boxes)


def test_the_torch_iterators_state_is_checked_too(saved):
    pytest.importorskip("torch")
    from detaug.adapters.torch import DetaugIterator

    it = DetaugIterator(pipe(), boxes_format="padded")
    good = it.state_dict()
    for bad in ({**good, "batch": 1.9}, {**good, "batch": "0"}, {**good, "pipelines": None},
                {"batch": 0}, None):
        with pytest.raises(StateDictError, match="not an iterator state"):
            it.load_state_dict(bad)
    it.load_state_dict(good)
