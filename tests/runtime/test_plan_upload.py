"""A ``.gpu()`` of a plain tensor (DALI's ragged boxes and labels of ``readers.coco(ratio=True)``,
a dense batch of random numbers) in a pipeline that decodes on the GPU: its launches are still
planned ahead (the upload planned stays on the host, detaug/ops/sources.py; the device side
uploads it with the launch's box arrays, detaug/runtime/gpu/plan_ahead.py), and the planned
batches equal those of no planning. Run without a GPU through the device stage's stand-in
(warp.cu's kernel emulated); the GPU run is the ``gpu``-marked test at the end."""
from __future__ import annotations

import os

import numpy as np
import pytest

from detaug import ImageBatch, Pipeline, fn
from detaug.core.deferred import HostUpload
from detaug.runtime.gpu.plan_ahead import LaunchPlan
from helpers import COCO, fresh_seed, to_np, track  # noqa: F401  (track: pipelines closed)
from helpers.cases import planned_and_plain
from helpers.warp import emulated_kernels  # noqa: F401 (a fixture)


def _built(pipe, normalize):
    """``pipe`` built in DALI's form: ragged boxes and labels uploaded with .gpu(), a dense
    tensor too; the images decoded on the GPU, flipped, cropped (and normalised)."""
    with pipe:
        enc, bb, lab = fn.readers.coco(file_root=os.path.join(COCO, "images"),
                                       annotations_file=os.path.join(COCO, "annotations.json"),
                                       ratio=True, ltrb=True, random_shuffle=True)
        img = fn.decoders.image(enc, device="mixed")
        img = fn.crop(fn.flip(img, horizontal=fn.random.coin_flip()), crop=(24, 32))
        if normalize:
            img = fn.normalize(img, mean=[120.0, 110.0, 100.0], std=[60.0, 60.0, 60.0])
        pipe.set_outputs(img, bb.gpu(), lab.gpu(), fn.random.uniform(range=(0, 9), shape=2).gpu())
    pipe.build()
    return pipe


def _pipe(seed):
    return _built(Pipeline(batch_size=3, seed=seed, device_id=0, host_processes=0,
                           decode_processes=1, prefetch_queue_depth=1, device_workers=1),
                  normalize=True)


def _host(batch):
    """run_batch's outputs as host samples: the images' and each tensor batch's."""
    return [[to_np(a) for a in (t.data if isinstance(t, ImageBatch) else t)] for t in batch]


def test_an_uploaded_tensor_keeps_the_launch_planned(emulated_kernels, monkeypatch):
    with planned_and_plain(monkeypatch, emulated_kernels, _pipe) as (planned, plain):
        assert planned.plan_ahead and not plain.plan_ahead
        assert planned.build_plan.ahead.rest_ops == ()  # the uploads are planned ops
        key = (0, 1, 1)
        plan = planned._planner.plan_or_not(key, planned._batches.prepare(key), None)
        assert isinstance(plan, LaunchPlan)  # (an upload of a plain tensor was NotPlannable)
        up = [plan.values[(o.op.id, o.index)] for o in planned._outputs[1:]]
        # on the host until realised, marked for the upload: two ragged batches, one array
        assert [type(v) for v in up] == [HostUpload] * 3
        assert [v.ragged for v in up] == [True, True, False]
        assert up[2].arrays[0].shape == (3, 2)
        for b, epoch in ((1, 0), (4, 1)):
            got, want = _host(planned.run_batch(b, epoch=epoch)), _host(plain.run_batch(b, epoch=epoch))
            assert [len(g) for g in got] == [3] * 4
            for g, w in zip(got[1:], want[1:]):  # boxes, labels, numbers: the same arrays
                for x, y in zip(g, w):
                    assert x.dtype == y.dtype and x.shape == y.shape
                    np.testing.assert_array_equal(x, y)
            for x, y in zip(got[0], want[0]):  # the same warp on the same decoded images
                np.testing.assert_array_equal(x, y)
        assert {a.shape[1] for a in got[1] if a.size} == {4}
        assert all(a.dtype == np.int32 and a.min() >= 1 for a in got[2] if a.size)
        for it_planned, it_plain in zip(planned.run(), plain.run()):  # iteration too
            for x, y in zip([to_np(it_planned.at(k)) for k in range(3)],
                            [to_np(it_plain.at(k)) for k in range(3)]):
                np.testing.assert_array_equal(x, y)


@pytest.mark.gpu
def test_an_uploaded_tensor_keeps_the_launch_planned_on_the_gpu(monkeypatch):
    """On the device: the launch plans (in a host worker process), and its batches, images,
    the uploaded boxes, labels and numbers, equal those of no planning bit for bit."""
    pytest.importorskip("nvidia.nvimgcodec")
    seed = fresh_seed()

    def make(planned, workers):
        monkeypatch.setenv("DETAUG_PLAN_AHEAD", "1" if planned else "0")
        return track(_built(Pipeline(batch_size=4, seed=seed, device_id=0,
                                     host_processes=workers, decode_processes=1),
                            normalize=False))

    planned, plain = make(True, 2), make(False, None)
    assert planned.plan_ahead and not plain.plan_ahead
    key = (0, 2, 1)
    assert isinstance(planned._planner.plan_or_not(key, planned._batches.prepare(key), None),
                      LaunchPlan)
    for _ in range(4):
        for x, y in zip(planned.run(), plain.run()):
            assert len(x) == len(y) == 4
            for k in range(4):
                np.testing.assert_array_equal(to_np(x.at(k)), to_np(y.at(k)))
