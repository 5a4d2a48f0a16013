"""detaug.dali.outputs and detaug.dali.pipeline_api: run()'s outputs by the module's rule (dense host
arrays as ArrayList, ragged lists as SampleList, detaug's batches and dicts as they are, the file
reader's label in DALI's (1,) int32 form also through an upload, nothing wrapped with
dali_outputs = False); DALI's tuning arguments accepted with a warning, enable_checkpointing and
unknown arguments refused by name; the API-type check; serialize / deserialize round trip with the
same batches and overrides, a hand-edited parameter refused; the dot export."""
import json
import os
import warnings
from types import SimpleNamespace

import numpy as np
import pytest

from detaug import Pipeline, fn
from detaug.core.tensor_list import ArrayList, SampleList
from detaug.dali import outputs as O
from detaug.dali import pipeline_api as PA

from helpers import COCO, close_pipelines, images_of  # noqa: F401 (fixture)


def node(name, index=0, inputs=()):
    return SimpleNamespace(op=SimpleNamespace(schema=SimpleNamespace(name=name),
                                              inputs=list(inputs)), index=index)


def test_dali_sample_form_of_the_file_readers_label():
    labels = np.array([3, 1, 4], np.int64)
    got = O.dali_sample_form(node("readers.file", 1), labels)
    assert got.dtype == np.int32 and got.shape == (3, 1) and got[:, 0].tolist() == [3, 1, 4]
    up = node("_upload", 0, [node("readers.file", 1)])  # labels.gpu(): the reader's form too
    assert O.dali_sample_form(up, labels).shape == (3, 1)
    assert O.dali_sample_form(node("readers.file", 0), labels) is labels
    assert O.dali_sample_form(None, labels) is labels


def test_as_tensor_list_by_the_rule():
    dense = np.arange(6, dtype=np.float32).reshape(3, 2)
    a = O.as_tensor_list(node("x"), dense)
    assert type(a) is ArrayList and a.value is dense and np.array_equal(a, dense)
    lab = O.as_tensor_list(node("readers.file", 1), np.array([7, 8]))
    assert type(lab) is ArrayList and lab.shape == (2, 1) and lab.dtype == np.int32
    assert lab.value.tolist() == [7, 8]  # detaug's value kept
    ragged = [np.zeros((2, 3)), np.ones(4)]
    s = O.as_tensor_list(node("x"), ragged)
    assert type(s) is SampleList and s.value is ragged and [x.shape for x in s] == [(2, 3), (4,)]
    d = {"a": 1}
    assert O.as_tensor_list(node("x"), d) is d and O.as_tensor_list(node("x"), None) is None
    assert O.as_tensor_list(node("x"), a) is a
    scalar = np.float32(2.0)
    assert O.as_tensor_list(node("x"), scalar) is scalar


def test_run_outputs_and_the_switch_off():
    outs = (np.zeros((2, 2)), [np.zeros(1)])
    pipe = SimpleNamespace(_outputs=[node("x"), node("y")])
    got = O.run_outputs(pipe, outs)
    assert [type(g) for g in got] == [ArrayList, SampleList]
    pipe.dali_outputs = False
    assert O.run_outputs(pipe, outs) is outs


def graph_pipe(seed=3, **kw):
    pipe = Pipeline(batch_size=2, num_threads=1, seed=seed, **kw)
    with pipe:
        enc, boxes = fn.readers.coco(file_root=os.path.join(COCO, "images"),
                                     annotations_file=os.path.join(COCO, "annotations.json"),
                                     random_shuffle=True)
        img = fn.resize(fn.decoders.image(enc), size=(16, 16))
        pipe.set_outputs(img, fn.random.uniform(range=(0, 10), shape=2))
    return pipe


def test_run_gives_dali_tensor_lists_and_detaug_values_with_the_switch_off():
    pipe = graph_pipe()
    img, u = pipe.run()
    assert type(u) is ArrayList and u.shape == (2, 2)
    assert hasattr(img, "as_tensor") and hasattr(img, "at")  # an ImageBatch with DALI's methods
    pipe.close()
    pipe = graph_pipe()
    pipe.dali_outputs = False
    _, u2 = pipe.run()
    assert type(u2) is np.ndarray and np.array_equal(u2, u)
    pipe.close()


def test_dali_tuning_arguments_warn_and_refusals_name_the_argument():
    with pytest.warns(UserWarning, match=r"Pipeline: bytes_per_sample=1024 is accepted for DALI "
                                         r"programs and changes no value here"):
        PA._check_dali_tuning({"bytes_per_sample": 1024})
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # enable_checkpointing=False: DALI's default, no warning
        PA._check_dali_tuning({})
    with pytest.raises(TypeError, match=r"Pipeline: unknown argument\(s\) \['bogus'\]"):
        PA._check_dali_tuning({"bogus": 1, "max_streams": 2})
    with pytest.raises(NotImplementedError, match="enable_checkpointing=True .* pipe.state_dict"):
        PA._check_dali_tuning({"enable_checkpointing": True})
    with pytest.warns(UserWarning, match="py_num_workers=3"):
        Pipeline(batch_size=1, py_num_workers=3).close()


def test_the_api_type_check():
    api = PA.ApiTypeCheck()
    api.check("BASIC")
    api.check("BASIC")
    with pytest.raises(RuntimeError, match=r"Mixing pipeline API type. Currently used: "
                                           r"PipelineAPIType.BASIC, but trying to use "
                                           r"PipelineAPIType.ITERATOR"):
        api.check("ITERATOR")
    with api.scope("BASIC"):
        api.check("ITERATOR")  # inside an iterator's scope: let through
    api.enable(False)
    api.check("ITERATOR")
    fresh = PA.ApiTypeCheck()
    with pytest.raises(RuntimeError, match="Mixing"):
        with fresh.scope("ITERATOR"):
            pass
        fresh.check("BASIC")


def test_serialize_round_trip_overrides_and_a_hand_edited_parameter(tmp_path):
    def batches(p):
        p.dali_outputs = False
        out = [(np.stack(images_of(img)), u) for img, u in (p.run() for _ in range(2))]
        p.close()
        return out

    pipe = graph_pipe(seed=11)
    data = pipe.serialize()
    want = batches(pipe)
    again = Pipeline.deserialize(data)
    assert again.seed == 11 and again.batch_size == 2
    got = batches(again)
    for w, g in zip(want, got, strict=True):
        for a, b in zip(w, g, strict=True):
            np.testing.assert_array_equal(a, b)
    other = Pipeline.deserialize(data, seed=12)
    assert other.seed == 12
    other.close()
    doc = json.loads(data)
    doc["params"]["batch_size"] = 2.7
    with pytest.raises(ValueError, match=r"parameter batch_size=2.7 is a float: it takes int"):
        Pipeline.deserialize(json.dumps(doc).encode())
    dot = tmp_path / "g.dot"
    p = graph_pipe()
    p.save_graph_to_dot_file(str(dot))
    p.close()
    text = dot.read_text()
    assert text.lstrip().startswith("digraph") and "resize" in text and "readers.coco" in text
