"""Mosaic and mixup plan on the host (ops/multi_plan.py, core/deferred.py): a GPU pipeline's
launch planned on a machine without a GPU (its build's GPU parts stood in for) holds the whole
chain decode -> mosaic (tiles warped into their canvases) -> affine + perspective -> crop ->
mixup (a planned compose) -> letterbox as deferred launches, pickles whole, gives the CPU
pipeline's boxes bit for bit and, run by warp.cu's and compose.cu's kernels (emulated on the
CPU) on the images Pillow decodes, the CPU pipeline's pixels (the float64 twins) within one
grey level, for the three partner modes and batches of two epochs. The YOLO recipe of
benchmarks/bench_yolo.py plans mosaic and mixup and everything between them."""
from __future__ import annotations

import os

import numpy as np
import pytest

from helpers import COCO, fresh_seed, load_benchmark
from helpers import cuda_emulation as emu
from helpers.cases import plan_without_cupy, stand_in_gpu
from helpers.warp import _build_emulation

from detaug import Pipeline, fn  # noqa: E402
from detaug.core.batch import DeferredWarp  # noqa: E402
from detaug.core.deferred import DeferredLaunch, planned_sources, realize  # noqa: E402
from detaug.core.batch import DeviceImages  # noqa: E402
from detaug.kernels import color as KC  # noqa: E402
from detaug.kernels import compose as K  # noqa: E402
from detaug.kernels import warp as W  # noqa: E402
from detaug.kernels import warp_canvas as WC  # noqa: E402

S = 24  # mosaic size: canvases 48 x 48


class _Kernels:
    """warp.cu and compose.cu emulated, launched by name."""

    def __init__(self, *emulations):
        self.by_name = {n: e for e in emulations for n in e.signatures}
        self.calls = []

    def launch(self, name, grid, block, args):
        self.calls.append(name)
        self.by_name[name].launch(name, grid, block, args)


@pytest.fixture(scope="module")
def kernels(tmp_path_factory):
    return _Kernels(_build_emulation(tmp_path_factory),
                    emu.build(tmp_path_factory.mktemp("compose_cu"), "compose.cu"),
                    emu.build(tmp_path_factory.mktemp("color_cu"), "color.cu"))


def _graph(pipe, device, partners):
    with pipe:
        enc, boxes = fn.readers.coco(file_root=os.path.join(COCO, "images"),
                                     annotations_file=os.path.join(COCO, "annotations.json"),
                                     random_shuffle=True)
        img = fn.decoders.image(enc, device=device)
        img, boxes = fn.mosaic(img, boxes, size=S, partners=partners, probability=0.8)
        u = fn.random.uniform
        img, boxes = fn.affine(img, boxes, rotate=u(range=(-10, 10)), scale=u(range=(0.6, 1.4)),
                               shear_x=u(range=(-2, 2)), perspective_x=u(range=(-5e-4, 5e-4)),
                               fill=114.0, antialias=False)
        img, boxes = fn.crop(img, boxes, crop=(S, S), fill=114.0)
        boxes = fn.prune_boxes(boxes, min_size=2.0, min_visibility=0.1)
        img, boxes = fn.mixup(img, boxes, probability=0.7, partners=partners)
        img, boxes = fn.letterbox(img, boxes, size=(20, 28), fill=114.0)
        pipe.set_outputs(img, fn.pad_boxes(fn.prune_boxes(boxes, min_size=1.0), max_boxes=40))


def _gpu_stand_ins(monkeypatch, kernels):
    stand_in_gpu(monkeypatch, kernels, W, WC, K, KC)


def _made(raw):
    """The planned images ``raw`` made: the files decoded by Pillow, the launches run by the
    emulated kernels (the fake cupy installed)."""
    from detaug.core.batch import DeviceImages
    from detaug.ops.decode import decode_pillow
    from detaug.ops.sources import read_files

    decoded = {}
    for src in planned_sources(raw):
        pixels = [emu.dev(decode_pillow(b)) for b in read_files(src.enc.paths)]
        decoded[id(src)] = DeviceImages.from_arrays(pixels)
    return np.asarray(realize(raw, decoded, None, {}))


@pytest.mark.parametrize("partners", ["batch", "epoch", "pool"])
def test_mosaic_mixup_plan_and_equal_the_cpu_pipeline(kernels, monkeypatch, partners):
    from detaug.core import backend

    _gpu_stand_ins(monkeypatch, kernels)
    gpu = Pipeline(batch_size=3, seed=11, device_id=0, host_processes=0, decode_processes=1)
    _graph(gpu, "mixed", partners)
    gpu.build()
    backend.set_cpu_warp("reference")
    cpu = Pipeline(batch_size=3, seed=11, num_threads=1, host_processes=0)
    try:
        # every device op planned: the device thread decodes, launches and uploads
        assert gpu.plan_ahead and gpu.build_plan.ahead.rest_ops == () and gpu.build_plan.ahead.param_ops == ()
        assert {"mosaic", "mixup"} <= {op.schema.name for op in gpu.build_plan.ahead.plan_ops}
        _graph(cpu, "cpu", partners)
        for epoch, b in ((0, 2), (1, 1)):
            plan = plan_without_cupy(gpu, (epoch, b, 1))  # a worker never imports cupy
            ref_img, ref_boxes = cpu.run_batch(b, epoch=epoch)
            img_key, box_key = [(o.op.id, o.index) for o in gpu._outputs]
            for k in ref_boxes:
                np.testing.assert_array_equal(plan.values[box_key][k], ref_boxes[k], err_msg=k)
            warp = plan.values[img_key].raw
            assert isinstance(warp, DeferredWarp) and isinstance(warp.source, DeferredLaunch)
            kernels.calls.clear()
            got = _made(warp)
            # one launch each: the canvases, the affine's warp, the blend, the letterbox's warp
            assert [c.split("_")[0] for c in kernels.calls] == ["warp", "warp", "compose", "warp"]
            assert "pitched" in kernels.calls[0]
            assert got.shape == ref_img.data.shape == (3, 20, 28, 3)
            diff = np.abs(got.astype(np.int16) - ref_img.data)
            # float32 weights in the kernels against the float64 twins, through three warps: one
            # level at most, on under 1% of the pixels (measured: 0.4-1%)
            assert diff.max() <= 1 and (diff > 0).mean() < 0.02, (diff.max(), (diff > 0).mean())
    finally:
        backend.set_cpu_warp("opencv")
        cpu.close()
        gpu.close()


@pytest.mark.parametrize("partners", ["batch", "epoch", "pool"])
def test_the_yolo_recipe_plans_every_device_op(kernels, monkeypatch, partners):
    """benchmarks/bench_yolo.py's recipe plans whole on the host: mosaic, the affine and
    perspective, the crop, the pruning, mixup, hsv (its kernel a deferred launch:
    graph/dispatch.py's KernelLaunch), the flip and letterbox on its output, the box padding; no
    device op is left to the device thread. Through hsv, the flip and the letterbox, the planned
    launches make the bytes that the same ops make run at once on the made images (as with
    DETAUG_PLAN_AHEAD=0: the same bodies, the same draws), with warp.cu, compose.cu and color.cu
    emulated. Fails when an op of the recipe stops planning."""
    from detaug.core.batch import ImageBatch
    from detaug.graph import materialize as M
    from detaug.graph.dispatch import KernelLaunch
    from detaug.runtime.gpu.plan_ahead import _PlanContext

    bench = load_benchmark("bench_yolo")
    _gpu_stand_ins(monkeypatch, kernels)
    pipe = bench.detaug_pipe(COCO, 32, 4, "gpu", 0, partners, 0.5)
    try:
        pipe.build()
        planned = [op.schema.name for op in pipe.build_plan.ahead.plan_ops]
        ahead = pipe.build_plan.ahead
        assert pipe.plan_ahead and ahead.rest_ops == () and ahead.param_ops == ()
        assert {"decoders.image", "mosaic", "affine", "crop", "mixup", "hsv", "flip",
                "letterbox", "prune_boxes", "pad_boxes"} <= set(planned), planned
        plan = plan_without_cupy(pipe, (0, 1, 1))  # the launch a worker sends: pickled whole
        out = plan.values[(pipe._outputs[0].op.id, pipe._outputs[0].index)].raw
        assert isinstance(out, DeferredWarp) and isinstance(out.source.launch, KernelLaunch)
        # the planned values of one launch, kept to run its last ops both ways
        key = (1, 0, 1)
        bm = pipe._batches
        ctx = bm.with_retries(key, bm.prepare(key), None, lambda c: (
            bm.run_ops(c, pipe.build_plan.host_ops), bm.run_ops(c, pipe.build_plan.ahead.plan_ops)),
            ctx_type=_PlanContext)
        by_name = {op.schema.name: op for op in pipe.build_plan.ahead.plan_ops}
        hsv, letterbox = by_name["hsv"], by_name["letterbox"]
        mixed = (hsv.inputs[0].op.id, hsv.inputs[0].index)
        decoded = {}
        for src in planned_sources(ctx.values[(letterbox.id, 0)].raw):
            from detaug.ops.decode import decode_pillow
            from detaug.ops.sources import read_files

            decoded[id(src)] = DeviceImages.from_arrays(
                [emu.dev(decode_pillow(b)) for b in read_files(src.enc.paths)])
        kernels.calls.clear()
        later = np.asarray(realize(M.images(ctx.values[(letterbox.id, 0)], ctx).raw, decoded,
                                   None, {}))
        # the canvases, the affine's warp, the blend, hsv, the flip and letterbox's warp
        assert [c.split("_")[0] for c in kernels.calls] == ["warp", "warp", "compose", "hsv",
                                                            "warp"]
        # now: the same ops on the blend made, in a context that does not plan
        ctx.values[mixed] = ImageBatch(realize(ctx.values[mixed].raw, decoded, None, {}), "gpu")
        ctx.planning = False
        ops = list(ahead.plan_ops)
        tail = ops[ops.index(hsv):ops.index(letterbox) + 1]
        assert [op.schema.name for op in tail] == ["hsv", "flip", "letterbox"]
        kernels.calls.clear()
        bm.run_ops(ctx, tail)
        now = np.asarray(M.images(ctx.values[(letterbox.id, 0)], ctx).raw)
        assert [c.split("_")[0] for c in kernels.calls] == ["hsv", "warp"]
        assert later.shape == now.shape == (4, 32, 32, 3)
        np.testing.assert_array_equal(later, now)
    finally:
        pipe.close()


def test_planned_and_unplanned_launches_make_the_same_bits(kernels, monkeypatch):
    """ops/multi_plan.py's paths: the canvases and the blend made now on the GPU, and planned
    (through a pickle, as a worker sends them) then made, are the same bytes (emulated kernels;
    DETAUG_PLAN_AHEAD=0 runs the former, planning ahead the latter)."""
    import pickle

    from detaug.core.batch import DeviceImages, ImageBatch, PlannedImages
    from detaug.ops.multi import mosaic_plan
    from detaug.ops.multi_plan import compose_planned, mosaic_on_device
    from detaug.ops.take import take_images

    _gpu_stand_ins(monkeypatch, kernels)
    rng = np.random.default_rng(fresh_seed())
    imgs = [rng.integers(0, 256, (int(rng.integers(10, 40)), int(rng.integers(10, 40)), 3),
                        np.uint8) for _ in range(5)]
    made = DeviceImages.from_arrays([emu.dev(i) for i in imgs])
    planned = PlannedImages(made.shapes, None, "RGB", 64, None)
    gather, groups = np.array([0, 3, 1, 4, 2, 1]), np.array([0, 4, 5, 6])
    canvas = np.full((3, 2), 2 * S)
    mats, tiles, origins = mosaic_plan(made.shapes[gather, :2], groups,
                                       rng.integers(S // 2, 3 * S // 2, (3, 2)), S)

    def canvases(raw):
        batch = take_images(ImageBatch(raw, "gpu"), gather)
        chain = batch.pending().then(mats, tiles, antialias=bool(rng.integers(2)))
        return mosaic_on_device(None, batch.with_geometry(chain), origins, groups, canvas, 114)

    state = rng.bit_generator.state
    now = np.asarray(canvases(made).raw)
    rng.bit_generator.state = state
    later = pickle.loads(pickle.dumps(canvases(planned).raw))
    np.testing.assert_array_equal(realize(later, {id(later.sources[0].source): made}, None, {}), now)
    kw = dict(origins=np.zeros((4, 2), np.int64), groups=np.array([0, 2, 3, 4]),
              canvas=np.full((3, 2), 40), fill=np.full((3, 3), 114.0))
    blend = K.compose_cupy(take_images(ImageBatch(made, "gpu"), [0, 1, 2, 3]).raw,
                           weights=np.array([30000, 35536, 65536, 65536]), mode="weighted", **kw)
    p = compose_planned(take_images(ImageBatch(planned, "gpu"), [0, 1, 2, 3]),
                        weights=np.array([30000, 35536, 65536, 65536]), mode="weighted", **kw)
    np.testing.assert_array_equal(realize(p.raw, {id(planned): made}, None, {}), blend)
