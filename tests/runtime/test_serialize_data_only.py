"""``Pipeline.serialize`` writes data only, and ``deserialize`` reads nothing else (
item 9): it ran ``pickle.loads`` on its input, so a serialized pipeline from anyone else (a
shared config, a download) could run arbitrary code when loaded.

The round trip is checked against the pipeline itself (same batches bit for bit); the refusals
with crafted inputs: a pickle that would create a folder when loaded, and JSON documents naming
an op, argument, parameter, value tag or dtype that does not exist.
"""
import base64
import copy
import json
import os
import pathlib
import pickle

import numpy as np
import pytest

import detaug
import detaug.types as types
from detaug import fn
from detaug.runtime.persist import GraphFormatError

from helpers import VOC
from helpers import close_pipelines, track  # noqa: F401  (autouse fixture)


def det_pipe(**kw):
    pipe = detaug.Pipeline(batch_size=4, seed=11, **kw)
    with pipe:
        enc, boxes = fn.readers.voc(root=pathlib.Path(VOC), random_shuffle=True)
        img = fn.decoders.image(enc, output_type=types.RGB)
        img, boxes = fn.random_iou_crop(img, boxes, thresholds=(0.1, 0.5))
        img, boxes = fn.flip(img, boxes, horizontal=fn.random.coin_flip(probability=0.5))
        img, boxes = fn.resize(img, boxes, size=(48, 64))
        img = fn.normalize(img, mean=np.array([120.0, 110.0, 100.0], np.float32),
                           std=[58.0, 57.0, 57.0], dtype=types.FLOAT)
        pipe.set_outputs(img, boxes)
    return track(pipe)


def test_serialize_writes_json_and_the_copy_gives_the_same_batches():
    pipe = det_pipe()
    blob = pipe.serialize()
    doc = json.loads(blob.decode("utf-8"))  # plain JSON, nothing else
    assert doc["format"] == "detaug-pipeline-2"
    norm = next(op for op in doc["ops"] if op["schema"] == "normalize")
    assert norm["args"]["mean"] == ["value", {"$array": {
        "dtype": "<f4", "shape": [3], "scalar": False,
        "data": base64.b64encode(np.array([120, 110, 100], np.float32).tobytes()).decode()}}]
    assert norm["args"]["dtype"] == ["value", {"$enum": ["DALIDataType", "FLOAT"]}]
    copy_ = track(detaug.Pipeline.deserialize(blob))
    mean = copy_.graph.ops[[op["schema"] for op in doc["ops"]].index("normalize")].args["mean"]
    assert mean.dtype == np.float32 and mean.tolist() == [120, 110, 100]
    for _ in range(2):
        a, b = pipe.run(), copy_.run()
        np.testing.assert_array_equal(np.asarray(a[0].data), np.asarray(b[0].data))
        np.testing.assert_array_equal(a[1].boxes, b[1].boxes)
    assert track(detaug.Pipeline.deserialize(blob.decode())).batch_size == 4  # str is taken too


def test_a_crafted_pickle_is_refused_and_runs_nothing(tmp_path):
    """A pickle whose loading creates a folder (any code would do)."""
    marker = tmp_path / "pwned"

    class Payload:
        def __reduce__(self):
            return (os.mkdir, (str(marker),))

    blob = pickle.dumps(Payload())
    with pytest.raises(GraphFormatError, match="pickle .* could run code"):
        detaug.Pipeline.deserialize(blob)
    assert not marker.exists(), "deserialize() ran the pickle's code"
    # the previous format (a pickled dict) is refused the same way, with what to do instead
    old = pickle.dumps({"format": "detaug-pipeline-1", "params": {}, "ops": [], "outputs": []})
    with pytest.raises(GraphFormatError, match="Serialize the pipeline again"):
        detaug.Pipeline.deserialize(old)


def _doc():
    return json.loads(det_pipe().serialize())


def _refused(doc, match):
    with pytest.raises(GraphFormatError, match=match):
        detaug.Pipeline.deserialize(json.dumps(doc).encode())


def test_names_that_do_not_exist_are_refused():
    doc = _doc()
    bad = copy.deepcopy(doc)
    bad["ops"][1]["schema"] = "os.system"
    _refused(bad, r"op #1: unknown op 'os.system'")
    bad = copy.deepcopy(doc)
    bad["ops"][1]["args"]["no_such_arg"] = ["value", 1]
    _refused(bad, r"unknown argument\(s\) \['no_such_arg'\]")
    bad = copy.deepcopy(doc)
    bad["params"]["not_a_parameter"] = 1
    _refused(bad, r"unknown pipeline parameter\(s\) \['not_a_parameter'\]")
    bad = copy.deepcopy(doc)
    bad["ops"][0]["args"]["root"] = ["value", {"$class": "os.system"}]
    _refused(bad, r"unknown value tag '\$class'")
    bad = copy.deepcopy(doc)
    bad["ops"][0]["args"]["root"] = ["value", {"$enum": ["os", "system"]}]
    _refused(bad, r"malformed \$enum")
    bad = copy.deepcopy(doc)
    bad["ops"][0]["args"]["root"] = ["value", {"$array": {"dtype": "|O", "shape": [1],
                                                          "data": "AAAAAAAAAAA="}}]
    _refused(bad, r"arrays of dtype object are not read")
    bad = copy.deepcopy(doc)
    bad["ops"][1]["inputs"] = [[7, 0]]
    _refused(bad, r"\[7, 0\] is not an output of an earlier op")
    bad = copy.deepcopy(doc)
    bad["ops"][1]["device"] = "tpu"
    _refused(bad, r"device 'tpu' is not one of")
    _refused({"format": "detaug-pipeline-9"}, "not a serialized detaug pipeline of format")
    with pytest.raises(GraphFormatError, match="not UTF-8 JSON"):
        detaug.Pipeline.deserialize(b"\x00\x01garbage")


def test_an_external_source_callable_is_refused_at_serialize():
    pipe = detaug.Pipeline(batch_size=2, seed=0)
    with pipe:
        pipe.set_outputs(fn.external_source(source=lambda info: np.zeros(3), batch=False, size=4,
                                            name="numbers"))
    with pytest.raises(TypeError, match=r"numbers \(external_source\): argument 'source' is a "
                                        r"callable .* cannot be serialized as data"):
        pipe.serialize()


def test_an_external_source_of_arrays_is_data():
    batches = [np.arange(6, dtype=np.int16).reshape(2, 3) + 10 * k for k in range(3)]
    pipe = detaug.Pipeline(batch_size=2, seed=0)
    with pipe:
        pipe.set_outputs(fn.external_source(source=batches))
    copy_ = track(detaug.Pipeline.deserialize(pipe.serialize()))
    for k in range(3):
        got = np.asarray(copy_.run()[0])
        assert got.dtype == np.int16
        np.testing.assert_array_equal(got, batches[k])
