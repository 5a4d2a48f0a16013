"""Planning ahead plans the device ops that declare a host plan (colour, photometric, blur,
noise, erasing: OpSchema.host_plan): where their input is planned, their launch is deferred
(graph/dispatch.py's KernelLaunch, holding the kernel's arguments), else their parameters travel
with the plan; either way a device thread only launches them. A GPU pipeline's launch planned on
a machine without a GPU (its build's GPU parts stood in for) holds them, they survive the pickle
a worker sends, and they equal bit for bit the arguments the same ops hand their kernels (and
the parameters they make) when the whole graph runs in this process (the CPU pipeline of the
same definition), for batches of two epochs."""
from __future__ import annotations

import os
import pickle
import sys

import numpy as np
import pytest

from helpers import COCO
from helpers.cases import stand_in_gpu

from detaug import Pipeline, fn  # noqa: E402
from detaug.core.batch import DeferredWarp  # noqa: E402
from detaug.core.deferred import sources_of  # noqa: E402
from detaug.graph.dispatch import KernelLaunch  # noqa: E402
from detaug.graph.trace import PARAMS  # noqa: E402

# their launches deferred (their input planned)
DEFERRED = ("random_erasing", "jitter", "hsv", "brightness_contrast", "photometric_distort",
            "grayscale", "gaussian_blur", "noise", "noise.gaussian", "noise.salt_and_pepper",
            "noise.shot", "erase")
# its parameters planned, its launch made on the device (its input, a float colour twist, is)
PARAMS_ONLY = ("photometric_distort",)


def _graph(pipe, device):
    u = fn.random.uniform
    with pipe:
        enc, boxes = fn.readers.coco(file_root=os.path.join(COCO, "images"),
                                     annotations_file=os.path.join(COCO, "annotations.json"),
                                     random_shuffle=True)
        img = fn.decoders.image(enc, device=device)
        img, boxes = fn.random_iou_crop(img, boxes)
        img, boxes = fn.resize(img, boxes, size=(48, 64))
        jittered = fn.jitter(img, nDegree=3, fill_value=(10, 20, 30))
        img, boxes = fn.random_erasing(img, boxes, probability=0.7, value="random")
        img = fn.hsv(img, hue=u(range=(-20, 20)), saturation=u(range=(0.5, 1.5)))
        img = fn.brightness_contrast(img, brightness=u(range=(0.8, 1.2)))
        img = fn.photometric_distort(img, p=0.6)
        img = fn.grayscale(img, p=0.3)
        img = fn.gaussian_blur(img, sigma_range=(0.2, 2.0), probability=0.5)
        img = fn.noise(img, std=(0.0, 9.0))
        img = fn.noise.gaussian(img, stddev=u(range=(0, 4)))
        img = fn.noise.salt_and_pepper(img, prob=0.02)
        img = fn.noise.shot(img, factor=u(range=(5, 30)))
        img = fn.erase(img, anchor=(0.2, 0.3), shape=(0.3, 0.2), normalized=True)
        floats = fn.photometric_distort(fn.color_twist(img, hue=u(range=(-9, 9)), dtype="float32"))
        pipe.set_outputs(img, fn.pad_boxes(boxes, max_boxes=24), jittered, floats)


def _same(a, b, where):
    if isinstance(a, (tuple, list)):
        assert type(a) is type(b) and len(a) == len(b), where
        for k, (x, y) in enumerate(zip(a, b)):
            _same(x, y, f"{where}[{k}]")
    elif isinstance(a, np.ndarray):
        assert a.dtype == np.asarray(b).dtype, where
        np.testing.assert_array_equal(a, b, err_msg=where)
    else:
        assert a == b, where


@pytest.fixture
def gpu_pipe(monkeypatch):
    stand_in_gpu(monkeypatch)
    pipe = Pipeline(batch_size=5, seed=9, device_id=0, host_processes=0, decode_processes=1)
    _graph(pipe, "mixed")
    pipe.build()
    yield pipe
    pipe.close()


def _kernel_launches(raw, found):
    """name -> KernelLaunch of the deferred kernel launches under ``raw``."""
    stack = [raw]
    while stack:
        r = stack.pop()
        if isinstance(r, DeferredWarp):
            if isinstance(r.launch, KernelLaunch):
                assert r.launch.name not in found
                found[r.launch.name] = r.launch
            stack.extend(sources_of(r))
    return found


def test_planned_parameters_equal_the_whole_run(gpu_pipe, monkeypatch):
    gpu = gpu_pipe
    assert gpu.plan_ahead
    assert set(DEFERRED) <= {op.schema.name for op in gpu.build_plan.ahead.plan_ops}
    assert [op.schema.name for op in gpu.build_plan.ahead.param_ops] == list(PARAMS_ONLY)
    assert [op.schema.name for op in gpu.build_plan.ahead.rest_ops] == ["color_twist", *PARAMS_ONLY]
    cpu = Pipeline(batch_size=5, seed=9, num_threads=1, host_processes=0)
    _graph(cpu, "cpu")
    made, handed = {}, {}
    from detaug.graph import dispatch
    from detaug.runtime import batch_making

    whole, kernel_of = batch_making.BatchMaking._params_of, dispatch.get_kernel

    def recording(ctx, op, args, inputs):
        params = whole(ctx, op, args, inputs)
        made[op.rng_id] = params
        return params

    def recording_kernel(name, device):  # what the CPU run hands each kernel
        fn, be = kernel_of(name, device)

        def rec(images, *params, **static):  # (the first of an op's name: the deferred one)
            handed.setdefault(name, (params, static))
            return fn(images, *params, **static)
        return rec, be

    monkeypatch.setattr(batch_making.BatchMaking, "_params_of", staticmethod(recording))
    monkeypatch.setattr(dispatch, "get_kernel", recording_kernel)
    try:
        for epoch, b in ((0, 0), (0, 3), (1, 2)):
            key = (epoch, b, 1)
            plan = pickle.loads(pickle.dumps(gpu._planner.plan_launch(key, gpu._batches.prepare(key), None),
                                             protocol=5))
            launches = {}
            for o in gpu._outputs:
                _kernel_launches(getattr(plan.values.get((o.op.id, o.index)), "raw", None),
                                 launches)
            assert sorted(launches) == sorted(DEFERRED)
            made.clear()
            handed.clear()
            cpu.run_batch(b, epoch=epoch)
            assert len(made) == len(DEFERRED) + len(PARAMS_ONLY)
            for name, kl in launches.items():
                _same((kl.params, kl.static), handed[name], f"{name} {key}")
            for op in gpu.build_plan.ahead.param_ops:
                _same(plan.values[(op.id, PARAMS)], made[op.rng_id], f"{op.name} {key}")
    finally:
        cpu.close()


def test_planning_ahead_off_plans_no_parameters(monkeypatch):
    """DETAUG_PLAN_AHEAD=0: every device op runs in the device thread, parameters and all."""
    stand_in_gpu(monkeypatch, plan_ahead=False)
    pipe = Pipeline(batch_size=5, seed=9, device_id=0, host_processes=0, decode_processes=1)
    _graph(pipe, "mixed")
    pipe.build()
    try:
        assert not pipe.plan_ahead and pipe.build_plan.ahead.param_ops == ()
        assert {op.schema.name for op in pipe.build_plan.ahead.rest_ops} >= set(DEFERRED) | set(PARAMS_ONLY)
    finally:
        pipe.close()
