"""Planning ahead on the host (detaug/runtime/gpu/plan_ahead.py), without a GPU: a chain of geometric ops
on planned images (shapes, no pixels) ends in a planned warp whose launch, run later on the
images at their real addresses and row pitches (warp.cu's kernel emulated on the CPU), gives
the pixels of the same chain run on the images; pixels of planned images cannot be read; the
plannable ops. The whole pipeline, planned in workers, is tested on the device (the
``gpu``-marked tests at the end)."""
from __future__ import annotations

import os
import shutil

import numpy as np
import pytest

from detaug import ImageBatch, Pipeline, fn
from detaug.core import geometry as G
from detaug.graph import materialize as M
from detaug.core.batch import DeferredWarp, PlannedImages
from detaug.core.errors import NotPlannable
from detaug.kernels import warp as W
from detaug.ops.geometry import apply_geometry
from detaug.graph.trace import schema_of
from detaug.runtime.gpu.plan_ahead import _static_plannable
from helpers import COCO
from helpers import close_pipelines, to_np, track  # noqa: F401  (autouse fixture)
from helpers import cuda_emulation as emu
from helpers.cases import plan_without_cupy, stand_in_gpu
from helpers.warp import MEAN, STD, emulated_kernels, rand_image  # noqa: F401 (a fixture)


@pytest.fixture
def fake_gpu(emulated_kernels, monkeypatch):
    """cupy replaced by host arrays and warp.cu's kernel emulated on the CPU; the launched
    kernels' names."""
    emulated_kernels.calls.clear()
    emu.install_fake_cupy(monkeypatch, emulated_kernels, W)
    return emulated_kernels.calls


class _Op:
    def __init__(self, name):
        self.name = name


def _chain(batch, rng, b):
    """A crop, a per-sample flip and a resize planned on ``batch`` (planned or real images)."""
    def crop(sizes, boxes):
        x0 = np.floor(rng.uniform(0, 0.3, b) * sizes[:, 1])
        y0 = np.floor(rng.uniform(0, 0.3, b) * sizes[:, 0])
        out = np.stack([sizes[:, 0] - y0 - 3, sizes[:, 1] - x0 - 2], -1)
        return G.translate(-x0, -y0), out, None

    def flip(sizes, boxes):
        return G.flip(sizes[:, 1], sizes[:, 0], rng.integers(0, 2, b), np.zeros(b)), sizes, None

    def resize(sizes, boxes):
        return G.scale(48 / sizes[:, 1], 40 / sizes[:, 0]), np.tile([40, 48], (b, 1)), None

    for plan in (crop, flip, resize):
        (batch,) = apply_geometry(None, _Op("op"), [batch], plan)
    return batch


@pytest.mark.parametrize("seed", [3, None])
def test_a_planned_warp_runs_later_on_the_decoded_images(fake_gpu, seed):
    """Planned on shapes alone, launched on the images (stored with padded rows, as a decoder
    may), the warp gives the float64 twin's pixels of the same chain on the same images, and
    the launch equals warp_cupy's on those images, bit for bit."""
    rng = np.random.default_rng(seed)
    b = 5
    sizes = np.stack([rng.integers(30, 90, b), rng.integers(30, 120, b)], -1)
    imgs = [rand_image(rng, int(h), int(w)) for h, w in sizes]
    planned = PlannedImages(np.concatenate([sizes, np.full((b, 1), 3)], 1), None, "RGB", 64, None)
    draws = np.random.default_rng(rng.integers(1 << 30))
    pending = _chain(ImageBatch(planned, "gpu"), np.random.default_rng(draws.integers(1 << 30)), b)
    out = M.images(pending, None, mean=MEAN, std=STD, dtype=np.float32, layout="CHW")
    assert isinstance(out.raw, DeferredWarp) and out.raw.source is planned and out.geometry is None
    assert out.batch_size == b and out.channels == 3 and out.sizes().tolist() == [[40, 48]] * b
    # the images as a decoder leaves them: rows padded to a multiple of 256 bytes
    pitches = -(-sizes[:, 1] * 3 // 256) * 256
    stores = [np.zeros((h, p), np.uint8) for (h, _), p in zip(sizes, pitches)]
    for s, img in zip(stores, imgs):
        s[:, :img.shape[1] * 3] = img.reshape(img.shape[0], -1)
    got = W.launch_warp(out.raw.launch, [s.ctypes.data for s in stores], pitches)
    # the same chain on the pixels (its matrices depend on the sizes and draws alone): the
    # twin, and warp_cupy (emulated)
    geo = pending.geometry
    rect, rect_fill, clamp, slabs, slab_fill, nslab = geo.valid_region()
    kw = dict(fill=rect_fill, mean=MEAN, std=STD, out_dtype=np.float32, layout="CHW",
              region=(rect, clamp, slabs, slab_fill, nslab))
    ref = W.warp_numpy(imgs, geo.matrices, geo.sizes, **kw)
    assert got.shape == (b, 3, 40, 48)
    assert np.abs(got - ref).max() <= 1e-3

    direct = W.warp_cupy([emu.dev(i) for i in imgs], geo.matrices, geo.sizes, **kw)
    np.testing.assert_array_equal(got, direct)
    assert fake_gpu == ["warp_f32_chw_c3"] * 2


def test_pixels_of_planned_images_cannot_be_read():
    """An op that reads pixels before the warp (a colour op, DALI's normalize without mean)
    raises NotPlannable, so that the launch runs unplanned; so does a second warp."""
    planned = PlannedImages(np.array([[10, 12, 3], [8, 9, 3]]), None, "RGB", 64, None)
    batch = ImageBatch(planned, "gpu")
    assert batch.sizes().tolist() == [[10, 12], [8, 9]] and batch.channels == 3
    with pytest.raises(NotPlannable):
        batch.data
    with pytest.raises(NotPlannable):
        planned[0]
    out = M.images(batch, None, mean=MEAN, std=STD, dtype=np.float32)
    with pytest.raises(NotPlannable):
        out.data
    with pytest.raises(NotPlannable):
        M.images(ImageBatch(out.raw, "gpu", "HWC", out.pending()), None)


def test_which_ops_plan_on_the_host():
    """Geometric, box and normalising ops plan, colour ops where they give uint8 (their launch
    deferred); encoders do not; a GPU decode plans for RGB and GRAY, DALI's normalize only
    with its mean and std given."""
    from detaug import Pipeline

    pipe = Pipeline(batch_size=2)
    with pipe:
        enc, boxes = fn.readers.coco(file_root="x", annotations_file="x.json")
        rgb = fn.decoders.image(enc, device="mixed")
        bgr = fn.decoders.image(enc, device="mixed", output_type="BGR")
        host = fn.decoders.image(enc, device="cpu")
        norm = fn.normalize(rgb, mean=[1, 2, 3], std=[4, 5, 6])
        stats = fn.normalize(rgb)
        bc = fn.brightness_contrast(rgb)
        twist = fn.color_twist(rgb, dtype="float32")
        enc_ = fn.retinanet_encode(boxes, num_classes=3)
    op = lambda node: node.op  # noqa: E731
    assert _static_plannable(op(rgb)) and not _static_plannable(op(bgr))
    assert not _static_plannable(op(host))
    assert _static_plannable(op(norm)) and not _static_plannable(op(stats))
    assert _static_plannable(op(bc)) and not _static_plannable(op(twist))
    assert not _static_plannable(op(enc_[0]))
    assert all(schema_of(n).plans is True for n in ("flip", "random_iou_crop", "pad_boxes",
                                                    "prune_boxes", "_upload"))


class _FakeService:
    """A decode service that answers with the shapes (or errors) it is given, as decode_proc's
    DecodeService does: DeviceImages owned by a lease, or (None, [(position, message)])."""

    def __init__(self, shapes=None, errors=()):
        self.shapes, self.errors, self.calls = shapes, list(errors), []

    def decode(self, paths, output_type, chunk, stream):
        from detaug.core.batch import DeviceImages

        self.calls.append((list(paths), output_type, chunk))
        if self.errors:
            return None, self.errors
        sh = np.asarray(self.shapes, np.int64)
        return DeviceImages(np.arange(1, len(sh) + 1), sh, sh[:, 1] * sh[:, 2], "lease"), []


def _decode_ctx(service):
    import types

    return types.SimpleNamespace(pipeline=types.SimpleNamespace(_decode_service=service, batch_size=3),
                                 leases=[], stream=None, planning=True)


def test_planned_decode_checks_what_the_decode_made():
    """A planned decode: the annotated sizes plan the shapes; the decode processes get the paths;
    their images come back with their lease, and a size or channel count other than planned, or a
    file the process could not decode, is a SampleError naming the file (its place in the batch),
    so that on_error='skip' replaces it. Unknown sizes or BGR cannot be planned."""
    from detaug.core.batch import EncodedBatch
    from detaug.core.errors import SampleError
    from detaug.ops import gpu_decode as gd

    paths = ["a.jpg", "b.jpg", "c.jpg"]
    enc = EncodedBatch(None, paths, np.array([[10, 20], [30, 40], [5, 6]]))
    svc = _FakeService([[10, 20, 3], [30, 40, 3], [5, 6, 3]])
    ctx = _decode_ctx(svc)
    planned = gd.decode_batch(ctx, enc, "RGB", None).raw
    assert isinstance(planned, PlannedImages) and planned.shapes.tolist() == svc.shapes
    assert ctx.leases == [] and svc.calls == []  # planning makes no request
    images = gd.decode_planned(ctx, planned)
    assert svc.calls == [(paths, "RGB", 3)] and ctx.leases == ["lease"]
    assert images.shapes.tolist() == svc.shapes
    for shapes, errors, where, what in (
            ([[10, 20, 3], [31, 40, 3], [5, 6, 3]], (), 1, "differs from the annotated size"),
            (None, [(2, "c.jpg: truncated")], 2, "truncated")):
        with pytest.raises(SampleError, match=what) as e:
            gd.decode_planned(_decode_ctx(_FakeService(shapes, errors)), planned)
        assert (e.value.position, e.value.path) == (where, paths[where])
    with pytest.raises(RuntimeError, match="worker died"):
        gd.decode_planned(_decode_ctx(_FakeService(None, [(-1, "worker died")])), planned)
    gray = gd.decode_batch(_decode_ctx(svc), enc, "GRAY", None).raw
    assert gray.shapes[:, 2].tolist() == [1, 1, 1]
    with pytest.raises(SampleError, match="decoded to 3 channels, 1 expected"):
        gd.decode_planned(_decode_ctx(svc), gray)
    with pytest.raises(NotPlannable, match="size"):
        gd.decode_batch(ctx, EncodedBatch(None, paths, np.array([[10, 20], [0, 0], [5, 6]])), "RGB", None)
    with pytest.raises(NotPlannable, match="BGR"):
        gd.decode_batch(ctx, enc, "BGR", None)


def _det_graph(pipe, device):
    import os

    from helpers import COCO

    with pipe:
        enc, boxes = fn.readers.coco(file_root=os.path.join(COCO, "images"),
                                     annotations_file=os.path.join(COCO, "annotations.json"),
                                     random_shuffle=True)
        img = fn.decoders.image(enc, device=device)
        img, boxes = fn.random_iou_crop(img, boxes)
        img, boxes = fn.flip(img, boxes, horizontal=fn.random.coin_flip())
        img, boxes = fn.rotate(img, boxes, angle=fn.random.uniform(range=(-15, 15)))
        img, boxes = fn.resize(img, boxes, size=(48, 64))
        boxes = fn.prune_boxes(boxes, min_size=1)
        pipe.set_outputs(fn.normalize(img, mean=list(MEAN), std=list(STD), output_layout="CHW"),
                         fn.pad_boxes(boxes, max_boxes=24))


def test_a_launch_planned_without_a_gpu_equals_the_cpu_pipeline(emulated_kernels, monkeypatch):
    """The GPU pipeline's plan made on a machine without a GPU (its build's GPU parts stood in
    for): it pickles and unpickles whole (what a worker sends); its padded boxes, labels and
    counts equal the CPU pipeline's bit for bit (both are the NumPy twins); its planned warp, run
    by warp.cu's kernel (emulated) on the images decoded by Pillow, gives the CPU pipeline's
    pixels (the float64 twin) within 1e-3, for batches of two epochs."""
    from detaug import Pipeline
    from detaug.core import backend
    from detaug.ops.decode import decode_pillow
    from detaug.ops.sources import read_files

    stand_in_gpu(monkeypatch, emulated_kernels, W)
    gpu = Pipeline(batch_size=6, seed=5, device_id=0, host_processes=0, decode_processes=1)
    _det_graph(gpu, "mixed")
    gpu.build()
    assert gpu.plan_ahead and gpu.build_plan.ahead.rest_ops == () and gpu._paths_only
    backend.set_cpu_warp("reference")
    try:
        cpu = Pipeline(batch_size=6, seed=5, num_threads=1, host_processes=0)
        _det_graph(cpu, "cpu")
        for epoch, b in ((0, 0), (0, 5), (1, 3)):
            key = (epoch, b, 1)
            plan = plan_without_cupy(gpu, key)  # a worker never imports cupy
            ref_img, ref_boxes = cpu.run_batch(b, epoch=epoch)
            img_key, box_key = [(o.op.id, o.index) for o in gpu._outputs]
            boxes = plan.values[box_key]
            assert boxes.keys() == ref_boxes.keys()
            for k in boxes:
                np.testing.assert_array_equal(boxes[k], ref_boxes[k], err_msg=k)
            warp = plan.values[img_key].raw
            assert isinstance(warp, DeferredWarp) and warp.source.enc.data is None
            pixels = [decode_pillow(buf) for buf in read_files(warp.source.enc.paths)]
            assert [p.shape for p in pixels] == [tuple(s) for s in warp.source.shapes]
            got = W.launch_warp(warp.launch, [p.ctypes.data for p in pixels])
            assert got.shape == ref_img.data.shape == (6, 3, 48, 64)
            assert np.abs(got - ref_img.data).max() <= 1e-3
    finally:
        backend.set_cpu_warp("opencv")
        gpu.close()


def test_box_upload_takes_every_array_and_puts_each_back_in_its_place():
    """BoxBatch.device_arrays / on_device (to_device's upload, and a planned launch's): boxes,
    labels, each field and the mask go up in one list and come back under their names, with
    the host batch as the host copy; a batch without a mask gets none."""
    from detaug.core.batch import BoxBatch

    rng = np.random.default_rng()
    n = int(rng.integers(1, 9))
    fields = {"iscrowd": rng.integers(0, 2, n), "annotation_id": rng.integers(0, 1 << 40, n)}
    for valid in (rng.integers(0, 2, n).astype(bool), None):
        b = BoxBatch(rng.uniform(0, 50, (n, 4)).astype(np.float32), rng.integers(0, 9, n),
                     [0, n], [[60, 70]], "cpu", fields, valid)
        arrays = b.device_arrays()
        assert len(arrays) == 4 + (valid is not None)
        d = b.on_device([a.copy() for a in arrays])  # (the upload, stood in for)
        assert d.device == "gpu" and d.host is b and list(d.fields) == list(fields)
        np.testing.assert_array_equal(d.boxes, b.boxes)
        np.testing.assert_array_equal(d.labels, b.labels)
        for k in fields:
            np.testing.assert_array_equal(d.fields[k], fields[k])
        if valid is None:
            assert d.valid is None
        else:
            np.testing.assert_array_equal(d.valid, valid)
        assert d.offsets.tolist() == [0, n] and d.canvas.tolist() == [[60, 70]]


# ------------------------------------------------------------------------------------------ GPU
R = fn.random


def _pipe(monkeypatch, planned, host_processes=None, decode_processes=1, root=None, extra=None,
          on_error="raise", batches_per_launch=1):
    """A COCO detection pipeline; ``planned`` False turns planning ahead off (DETAUG_PLAN_AHEAD)."""
    pytest.importorskip("nvidia.nvimgcodec")
    monkeypatch.setenv("DETAUG_PLAN_AHEAD", "1" if planned else "0")
    root = root or COCO
    pipe = Pipeline(batch_size=8, num_threads=2, seed=11, device_id=0, prefetch_queue_depth=3,
                    decode_processes=decode_processes, host_processes=host_processes,
                    on_error=on_error, batches_per_launch=batches_per_launch)
    with pipe:
        enc, boxes = fn.readers.coco(file_root=os.path.join(root, "images"),
                                     annotations_file=os.path.join(root, "annotations.json"),
                                     random_shuffle=True)
        img = fn.decoders.image(enc, device="mixed")
        img, boxes = fn.random_iou_crop(img, boxes)
        img, boxes = fn.flip(img, boxes, horizontal=R.coin_flip())
        if extra == "colour":  # an op that reads pixels mid-chain: its kernel's launch deferred
            img = fn.brightness_contrast(img, brightness=R.uniform(range=(0.7, 1.3)))
        img, boxes = fn.resize(img, boxes, size=(96, 128))
        boxes = fn.prune_boxes(boxes, min_size=1)
        outs = [fn.normalize(img, mean=[124, 116, 104], std=[58, 57, 57], output_layout="CHW"),
                fn.pad_boxes(boxes, max_boxes=32)]
        if extra == "retinanet":
            outs += list(fn.retinanet_encode(boxes, num_classes=80))
        pipe.set_outputs(*outs)
    monkeypatch.setenv("DETAUG_PLAN_AHEAD", "1" if planned else "0")
    pipe.build()
    monkeypatch.delenv("DETAUG_PLAN_AHEAD")
    return track(pipe)


def _epochs(pipe, n=2):
    out = []
    for _ in range(n):
        for batch in pipe:
            out.append([{k: to_np(a) for k, a in v.items()} if isinstance(v, dict)
                        else to_np(v.data) if isinstance(v, ImageBatch) else to_np(v) for v in batch])
        pipe.reset()
    pipe.close()
    return out


def _assert_same(a, b, exact_boxes=True):
    assert len(a) == len(b) == 2 * 9  # 68 images, batches of 8, two epochs
    for x, y in zip(a, b, strict=True):
        assert len(x) == len(y)
        for u, v in zip(x, y, strict=True):
            if isinstance(u, dict):
                assert u.keys() == v.keys()
                for k in u:
                    if k == "boxes" and not exact_boxes:
                        # the GPU box kernel against its NumPy twin
                        np.testing.assert_allclose(v[k], u[k], atol=1e-4)
                    else:
                        np.testing.assert_array_equal(v[k], u[k], err_msg=k)
            elif u.dtype.kind == "f" and not exact_boxes and u.ndim == 3:
                np.testing.assert_allclose(v, u, atol=1e-4)  # RetinaNet's encoded box targets
            else:
                np.testing.assert_array_equal(v, u)


@pytest.mark.gpu
def test_planned_in_processes_in_threads_and_unplanned_agree(monkeypatch):
    """Planned in 2 host worker processes, in this process's threads, with one decode process
    or decoded in this process, and not planned: the same images (bit for bit), labels and
    counts; boxes equal between the planned runs and within 1e-4 px of the unplanned one (its
    box math runs in the GPU kernels, planned in their NumPy twins)."""
    procs = _pipe(monkeypatch, True, host_processes=2)
    assert procs.plan_ahead and procs.host_processes == 2
    assert [op.schema.name for op in procs.build_plan.ahead.rest_ops] == []
    ref = _epochs(procs)
    threads = _pipe(monkeypatch, True, host_processes=0)
    assert threads.plan_ahead and threads.host_processes == 0
    _assert_same(ref, _epochs(threads))
    in_thread = _pipe(monkeypatch, True, host_processes=2, decode_processes=0)
    assert in_thread.plan_ahead and in_thread._decode_service is None
    _assert_same(ref, _epochs(in_thread))
    plain = _pipe(monkeypatch, False)
    assert not plain.plan_ahead and plain.host_processes == 0
    _assert_same(ref, _epochs(plain), exact_boxes=False)
    # launches of several batches plan as one
    _assert_same(ref, _epochs(_pipe(monkeypatch, True, host_processes=2, batches_per_launch=3)))


@pytest.mark.gpu
def test_random_access_of_a_planned_pipeline(monkeypatch):
    """run_batch of a planned pipeline (planned in a worker) is the batch iteration gives."""
    pipe = _pipe(monkeypatch, True, host_processes=2)
    it = []
    for batch in pipe:
        it.append(batch)
    for b in (4, 0, 7):
        got = pipe.run_batch(b, epoch=0)
        np.testing.assert_array_equal(to_np(got[0].data), to_np(it[b][0].data))
        for k in it[b][1]:
            np.testing.assert_array_equal(to_np(got[1][k]), to_np(it[b][1][k]))


@pytest.mark.gpu
@pytest.mark.parametrize("extra", ["colour", "retinanet"])
def test_ops_that_cannot_be_planned_run_after_the_decode(monkeypatch, extra):
    """A colour op mid-chain (it reads pixels) plans as a deferred launch of its kernel between
    the chain's two warps (graph/dispatch.py's KernelLaunch), and everything after it plans; a
    RetinaNet encoder on the GPU runs after the decode. Either way the batches of no planning."""
    pipe = _pipe(monkeypatch, True, host_processes=2, extra=extra)
    rest = [op.schema.name for op in pipe.build_plan.ahead.rest_ops]
    if extra == "colour":
        assert rest == [] and "brightness_contrast" in {op.schema.name for op in pipe.build_plan.ahead.plan_ops}
    else:
        assert rest == ["retinanet_encode"]
    _assert_same(_epochs(_pipe(monkeypatch, False, extra=extra)), _epochs(pipe), exact_boxes=False)


@pytest.mark.gpu
def test_a_bad_file_is_replaced_as_without_planning(monkeypatch, tmp_path):
    """on_error='skip': a truncated file, met by the decode of a planned launch, is replaced by
    the next record of the epoch, the launch re-planned; batches and counts as unplanned."""
    root = tmp_path / "coco"
    shutil.copytree(COCO, root)
    victim = sorted(os.listdir(root / "images"))[9]
    data = (root / "images" / victim).read_bytes()
    (root / "images" / victim).write_bytes(data[:len(data) // 3])
    runs = []
    for planned in (True, False):
        pipe = _pipe(monkeypatch, planned, host_processes=2 if planned else None, root=str(root),
                     on_error="skip")
        with pytest.warns(UserWarning, match=victim):
            runs.append(_epochs(pipe))
        assert pipe.stats["skipped"] == 2  # once per epoch
    _assert_same(runs[0], runs[1], exact_boxes=False)


@pytest.mark.gpu
def test_images_of_unknown_size_run_unplanned(monkeypatch, tmp_path):
    """A reader that does not know the images' sizes (a file reader): every launch runs whole in
    this process, with the batches of no planning."""
    pytest.importorskip("nvidia.nvimgcodec")
    root = tmp_path / "files" / "a"
    root.mkdir(parents=True)
    for name in sorted(os.listdir(os.path.join(COCO, "images")))[:20]:
        shutil.copy(os.path.join(COCO, "images", name), root / name)

    def make(planned):
        monkeypatch.setenv("DETAUG_PLAN_AHEAD", "1" if planned else "0")
        pipe = Pipeline(batch_size=4, num_threads=2, seed=2, device_id=0, decode_processes=1)
        with pipe:
            enc, label = fn.readers.file(file_root=str(tmp_path / "files"))
            img = fn.decoders.image(enc, device="mixed")
            img = fn.resize(img, size=(40, 40))
            pipe.set_outputs(fn.normalize(img, mean=[0, 0, 0], std=[1, 1, 1]), label)
        pipe.build()
        return track(pipe)

    a, b = make(True), make(False)
    assert a.plan_ahead and not b.plan_ahead
    for _ in range(5):
        (x, lx), (y, ly) = a.run(), b.run()
        np.testing.assert_array_equal(to_np(x.data), to_np(y.data))
        np.testing.assert_array_equal(to_np(lx), to_np(ly))
