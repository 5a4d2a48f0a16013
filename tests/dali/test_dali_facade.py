"""DALI's semantics are a part the pipeline holds (detaug/dali/pipeline_api.py: DaliFacade), not a
base it inherits: the engine's own next batch (``_run``) gives detaug's plain values, ``run()``
the facade's TensorLists of the same batch; the facade owns the API-type check, the output switch
and the fed batches; it does not keep its engine alive."""
import gc
import inspect
import os
import weakref

import numpy as np
import pytest

from detaug import Pipeline, fn
from detaug.core.tensor_list import ArrayList
from detaug.dali import pipeline_api as PA

from helpers import COCO, close_pipelines, fresh_seed, track  # noqa: F401 (fixture)


def _pipe(seed):
    p = track(Pipeline(batch_size=3, num_threads=1, seed=seed))
    with p:
        src = fn.external_source(source=lambda info: np.full((2,), info.idx_in_epoch, np.float32),
                                 batch=False, size=6)
        p.set_outputs(src, fn.random.uniform(range=(0.0, 1.0)))
    return p


def test_no_dali_class_among_the_pipelines_bases():
    dali = [c.__name__ for c in Pipeline.__mro__ if c.__module__.startswith("detaug.dali")]
    assert dali == []
    assert "DaliApi" not in vars(PA)


def test_run_is_the_facade_over_the_engines_own_batch():
    seed = fresh_seed()
    a, b = _pipe(seed), _pipe(seed)
    assert isinstance(a.dali, PA.DaliFacade) and a.dali.engine is a
    for _ in range(2):
        dali, own = a.run(), b._run()
        assert type(dali[0]) is ArrayList and type(own[0]) is np.ndarray
        np.testing.assert_array_equal(dali[0].value, own[0])
        np.testing.assert_array_equal(dali[1].value, own[1])
    a.reset()
    a.dali_outputs = False  # the switch is the facade's
    assert a.dali.outputs is False and type(a.run()[0]) is np.ndarray
    assert a.dali.api.api_type == "BASIC" and b.dali.api.api_type is None


def test_feed_input_goes_to_the_facades_queue():
    p = track(Pipeline(batch_size=2, num_threads=1, seed=0))
    with p:
        src = fn.external_source(name="src")
        p.set_outputs(src)
    p.feed_input(src, [np.zeros(1, np.uint8), np.ones(1, np.uint8)], layout=None)
    assert list(p.dali.fed) == ["src"] and len(p.dali.fed["src"]) == 1
    got = p.run()[0]
    assert [int(s[0]) for s in got] == [0, 1] and p.dali.fed["src"] == []


def test_the_facade_does_not_keep_its_engine_alive():
    p = Pipeline(batch_size=1, num_threads=1, seed=0)
    facade, ref = p.dali, weakref.ref(p)
    del p
    gc.collect()
    assert ref() is None and facade.engine is None


def test_deserialize_takes_the_subclass_constructors_arguments():
    class Sub(Pipeline):
        def __init__(self, extra=0, **kw):
            super().__init__(**kw)
            self.extra = extra

    p = track(Pipeline(batch_size=2, num_threads=1, seed=4))
    with p:
        enc, boxes = fn.readers.coco(file_root=os.path.join(COCO, "images"),
                                     annotations_file=os.path.join(COCO, "annotations.json"))
        p.set_outputs(boxes, fn.random.uniform(range=(0.0, 1.0)))
    data = p.serialize()
    got = Sub.deserialize(data, extra=5)
    assert type(got) is Sub and got.extra == 5 and got.seed == 4
    track(got)
    assert "extra" in inspect.signature(Sub.__init__).parameters
    np.testing.assert_array_equal(got._run()[1], p._run()[1])  # the same graph and seed
    with pytest.raises(Exception):
        Sub.deserialize(b"not a document")
