"""Small case tables and builders that several test families share: the prune and RetinaNet
threshold cases (ops' boundary tests and the CUDA sources' emulation), the Keras adapter's VOC
pipeline and batch comparison, the photometric tolerances and fresh inputs, a random mosaic
compose case, torchvision's Gaussian blur as a float64 reference, and running an example script."""
import contextlib
import os
import subprocess
import sys

import numpy as np

from detaug import Pipeline, fn, pipeline_def
from helpers import REPO, fresh_seed, random_images, track

# ---------------------------------------------------------------------------------- prune / clip
PRUNE_CASES = [  # box on a 10 x 10 canvas, identity; (min_size, min_area, min_visibility), kept
    ([0, 0, 2, 3], (2.0, 0.0, 0.0), True),     # w == min_size: kept (w >= min_size)
    ([0, 0, 3, 2], (2.0, 0.0, 0.0), True),     # h == min_size
    ([0, 0, 1.5, 3], (2.0, 0.0, 0.0), False),
    ([0, 0, 2, 3], (0.0, 6.0, 0.0), True),     # area == min_area
    ([0, 0, 2, 2.9], (0.0, 6.0, 0.0), False),
    ([-5, 0, 5, 10], (0.0, 0.0, 0.5), True),   # visible fraction 50 / 100 == min_visibility
    ([-6, 0, 4, 10], (0.0, 0.0, 0.5), False),  # 40 / 100
    ([10, 0, 12, 5], (0.0, 0.0, 0.0), False),  # touches the right edge: clipped width 0, gone
    ([-2, 0, 0, 5], (0.0, 0.0, 0.0), False),   # touches the left edge
    ([0, 10, 5, 11], (0.0, 0.0, 0.0), False),  # touches the bottom edge
    ([0, 0, 0.5, 5], (0.0, 0.0, 0.0), True),   # thin but inside
]


RN_ANCHORS = [[0, 0, 4, 4],     # IoU 8 / 16 = 0.5: positive (IoU >= 0.5, keras-retinanet)
              [0, 0, 4, 5],     # 8 / 20 = 0.4: negative (ignored only when IoU > 0.4)
              [0, 0, 4, 4.5],   # 8 / 18 = 0.44: ignored
              [0, 0, 4, 3.9],   # 8 / 15.6 = 0.51: positive
              [4, 0, 8, 4],     # touches the box: IoU 0, negative
              [6, 0, 10, 4]]    # centre x = 8 = W of an (8, 8) canvas: outside, ignored


RN_BOX = [[0, 0, 4, 2]]


RN_STATES = [1, 0, -1, 1, 0, -1]


NUM_CLASSES = 20


@pipeline_def
def voc_pipe(root, size=64, encode=False, shuffle=True):
    enc, boxes = fn.readers.voc(root=root, random_shuffle=shuffle)
    img = fn.decoders.image(enc)
    img, boxes = fn.random_iou_crop(img, boxes)
    img, boxes = fn.flip(img, boxes, horizontal=fn.random.coin_flip())
    img, boxes = fn.letterbox(img, boxes, size=(size, size), center=False)
    boxes = fn.prune_boxes(boxes, min_size=1)
    img = fn.normalize(img, mean=0, std=255)  # [0, 1] floats, HWC (Keras' channels_last)
    if encode:
        _, classification = fn.retinanet_encode(boxes, num_classes=NUM_CLASSES)
        return img, classification
    return img, boxes


def _flat(batch):
    """Every array of a batch (x, y), in a fixed order, as NumPy."""
    out = []

    def walk(v):
        if isinstance(v, dict):
            for k in sorted(v):
                walk(v[k])
        elif isinstance(v, (tuple, list)):
            for e in v:
                walk(e)
        else:
            out.append(np.asarray(v))

    walk(batch)
    return out


def _assert_same(a, b):
    fa, fb = _flat(a), _flat(b)
    assert len(fa) == len(fb)
    for u, v in zip(fa, fb):
        assert u.dtype == v.dtype
        np.testing.assert_array_equal(u, v)


def host_batch(batch):
    """An (images, boxes) batch as NumPy: the images one by one, the boxes per sample."""
    img, bx = batch
    return [np.asarray(a) for a in img.data], bx.per_sample()


def assert_same_host_batch(a, b):
    """Two :func:`host_batch` results hold the same pixels and the same per-sample fields."""
    assert len(a[0]) == len(b[0])
    for x, y in zip(a[0], b[0]):
        np.testing.assert_array_equal(x, y)
    for x, y in zip(a[1], b[1]):
        assert x.keys() == y.keys()
        for key in x:
            np.testing.assert_array_equal(x[key], y[key])


def close(got, ref, tol=1):
    d = np.abs(np.asarray(got, np.float64) - ref)
    assert d.shape == np.shape(ref)
    assert d.size == 0 or d.max() <= tol, f"max difference {d.max()} at {np.unravel_index(d.argmax(), d.shape)}"


def fresh(seed, shapes, dtype=np.uint8):
    rng = np.random.default_rng(seed)
    imgs = random_images(rng, shapes)
    if dtype == np.float32:
        imgs = [(i / 255.0).astype(np.float32) for i in imgs]
    return rng, imgs


SEEDS = [0, 1, fresh_seed()]  # two fixed, one fresh per run (conftest: the same in every xdist worker)


def random_compose_case(rng, c=3):
    b = int(rng.integers(1, 5))
    counts = rng.integers(1, 5, b)
    groups = np.concatenate([[0], np.cumsum(counts)])
    canvas = rng.integers(1, 40, (b, 2))
    tiles, origins, weights = [], [], []
    for k in range(b):
        raw = rng.integers(0, 65537, counts[k])
        w = np.floor(raw / raw.sum() * 65536).astype(np.int64) if raw.sum() else np.zeros(counts[k], np.int64)
        w[0] += 65536 - w.sum()
        weights.extend(w)
        for _ in range(counts[k]):
            tiles.append(rng.integers(0, 256, (int(rng.integers(1, 30)), int(rng.integers(1, 30)), c),
                                      dtype=np.uint8))
            origins.append(rng.integers(-10, 35, 2))
    return tiles, np.array(origins), groups, canvas, rng.integers(0, 256, (b, c)), np.array(weights)


def run_example(script, *args, timeout=120):
    env = dict(os.environ, KERAS_BACKEND="torch", PYTHONWARNINGS="ignore")
    proc = subprocess.run([sys.executable, os.path.join(REPO, "examples", script), *args], cwd=REPO,
                          env=env, capture_output=True, text=True, timeout=timeout)
    return proc.returncode, proc.stdout + proc.stderr


# ---- torchvision's gaussian_blur, written from its definition (float64) ----------------------
def tv_kernel1d(ksize, sigma):
    """torchvision _get_gaussian_kernel1d: linspace(-(k-1)/2, (k-1)/2, k), exp(-0.5 (x/s)^2), / sum."""
    half = (ksize - 1) * 0.5
    x = np.linspace(-half, half, ksize)
    pdf = np.exp(-0.5 * (x / sigma) ** 2)
    return pdf / pdf.sum()


def tv_gaussian_blur(img, kernel_size, sigma):
    """torchvision.transforms.v2.functional.gaussian_blur on a uint8 HWC image: kernel_size and
    sigma as (x, y); the 2-D kernel is outer(ky, kx); reflect padding (no edge repeat) of kx // 2
    columns and ky // 2 rows; cross-correlation; rounded half to even, clamped."""
    kx, ky = kernel_size
    sx, sy = sigma
    k2 = np.outer(tv_kernel1d(ky, sy), tv_kernel1d(kx, sx))
    pad = np.pad(img.astype(np.float64), ((ky // 2, ky // 2), (kx // 2, kx // 2), (0, 0)), mode="reflect")
    h, w, _ = img.shape
    out = np.zeros(img.shape)
    for i in range(ky):
        for j in range(kx):
            out += k2[i, j] * pad[i:i + h, j:j + w]
    return np.clip(np.round(out), 0, 255)


# ------------------------------------------------------------------------ partner pool pipelines
def flat_pipe(n, batch_size, k, partners="pool", mixup=False, seed=5):
    """A partner-pool pipeline whose boxes name their records: record i is a 12 x 10 image with
    one whole-image box labelled i; mosaic of probability 1 (its boxes' labels are its group's
    records, the sample first), mixup optionally; pool of ``k`` batches."""
    def src(info):
        i = info.idx_in_epoch
        return (np.full((12, 10, 3), i % 250, np.uint8),
                {"boxes": np.array([[0, 0, 10, 12]], np.float32), "labels": np.array([i])})

    pipe = track(Pipeline(batch_size=batch_size, seed=seed, host_processes=0))
    with pipe:
        img, bx = fn.external_source(source=src, batch=False, num_outputs=2, size=n)
        img, bx = fn.mosaic(img, bx, size=16, partners=partners, pool_batches=k)
        if mixup:
            img, bx = fn.mixup(img, bx, probability=0.5, partners=partners, pool_batches=k)
        pipe.set_outputs(img, bx)
    return pipe


class NoDecodeService:
    """decode_proc.DecodeService at build: planning only needs to know that the files are
    decoded by decode processes."""

    def __init__(self, *args):
        self.workers, self.threads = [], 1
        self.connected = args[2] is not None

    def configure(self, processes, ring_bytes, threads, slots, warm_first=False):
        self.threads = threads

    def connect(self):
        self.connected = True

    def stop(self):
        pass

    def close(self):
        pass


class BuildStopped(Exception):
    """A build reached its plan's decode processes (:func:`plan_stops_build`): what follows
    needs a GPU."""


def plan_stops_build(monkeypatch) -> dict:
    """build() without a GPU: the GPU check passes; the decode processes started early are
    stood in for (the record's ``early``: how many), and the plan's stop the build with
    :class:`BuildStopped`, the pipeline's record made by then (``plans``: each plan's
    (processes, threads)). Returns the record."""
    from detaug.core import backend
    from detaug.runtime.gpu import decode_proc

    log = {"plans": []}

    class Early:
        def __init__(self, processes):
            log["early"] = processes

        def configure(self, processes, ring_bytes, threads, slots, warm_first=False):
            log["plans"].append((processes, threads))
            raise BuildStopped

        def close(self):
            pass

        stop = close

    def service(processes, device_id, ring_bytes, threads=1, slots=None):
        if ring_bytes is None:
            return Early(processes)
        log["plans"].append((processes, threads))
        raise BuildStopped

    monkeypatch.setattr(backend, "gpu_missing", lambda **k: None)
    monkeypatch.setattr(decode_proc, "DecodeService", service)
    return log


def stand_in_gpu(monkeypatch, kernels=None, *modules, plan_ahead=True):
    """A GPU pipeline built and planned on a machine without a GPU: cupy faked over the emulated
    ``kernels`` of ``modules`` (helpers.cuda_emulation), no GPU check, the decode processes stood
    in for (:class:`NoDecodeService`), no early decoder, DETAUG_PLAN_AHEAD as ``plan_ahead``
    says. Returns the fake cupy."""
    import types

    from detaug import Pipeline
    from detaug.runtime.gpu import decode_proc

    from . import cuda_emulation as emu

    fake = emu.install_fake_cupy(monkeypatch, kernels, *modules)
    fake.cuda.Device = lambda i=0: types.SimpleNamespace(use=lambda: None, id=0)
    fake.cuda.Stream = lambda non_blocking=True: types.SimpleNamespace(ptr=0)
    monkeypatch.setattr(Pipeline, "_check_gpu", lambda self: None)
    monkeypatch.setattr(decode_proc, "DecodeService", NoDecodeService)
    monkeypatch.setenv("DETAUG_EARLY_DECODE", "0")
    monkeypatch.setenv("DETAUG_DEVICE_ALLOCATOR", "pool")  # (the fake has no stream-ordered pool)
    if plan_ahead:
        monkeypatch.delenv("DETAUG_PLAN_AHEAD", raising=False)
    else:
        monkeypatch.setenv("DETAUG_PLAN_AHEAD", "0")
    return fake


def plan_without_cupy(pipe, key):
    """``pipe``'s LaunchPlan of launch ``key``, planned with cupy unimportable (a planning worker
    never imports it), through a pickle as a worker sends it."""
    import pickle

    saved = sys.modules["cupy"]
    sys.modules["cupy"] = None
    try:
        plan = pipe._planner.plan_launch(key, pipe._batches.prepare(key), None)
    finally:
        sys.modules["cupy"] = saved
    return pickle.loads(pickle.dumps(plan, protocol=5))


class _Event:
    done = True

    def __init__(self, *args, **kwargs):
        pass

    def record(self, stream=None):
        pass

    def synchronize(self):
        pass

    def query(self):
        return True


class _Stream:
    ptr = 0

    def __init__(self, *args, **kwargs):
        pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False

    def wait_event(self, event):
        pass

    def synchronize(self):
        pass


class _Device(_Stream):
    def __init__(self, device_id=0):
        self.id = device_id

    def use(self):
        pass


class _Lease(list):
    """The decoded images a decode service lends (the arrays, kept alive)."""

    def retire(self, event):
        pass


def _set(self, host, stream=None):  # cupy's ndarray.set: a host-to-device copy
    np.copyto(self.view(np.ndarray), np.asarray(host).reshape(self.shape))


def device_stage_stand_in(monkeypatch, kernels=None, *modules, plan_ahead=True):
    """:func:`stand_in_gpu`, and what a pipeline's device stage runs on stood in for too:
    events, streams and devices that do nothing (an emulated kernel has run, in the thread that
    launched it, before the launch returns; one at a time in the process: cuda_emulation.py),
    host staging buffers, ``ndarray.set`` a host copy, and the decode (planned or not) made by
    Pillow on the host. Returns the fake cupy."""
    from detaug.core import backend
    from detaug.core.batch import DeviceImages
    from detaug.ops import gpu_decode
    from detaug.ops.decode import decode_pillow
    from detaug.ops.sources import read_files

    from . import cuda_emulation as emu

    fake = stand_in_gpu(monkeypatch, kernels, *modules, plan_ahead=plan_ahead)
    fake.cuda.Event, fake.cuda.Stream, fake.cuda.Device = _Event, _Stream, _Device
    fake.cuda.get_current_stream = _Stream
    fake.cuda.alloc_pinned_memory = bytearray
    monkeypatch.setattr(emu.FakeDeviceArray, "set", _set, raising=False)
    monkeypatch.setattr(backend, "_RING", backend._PinnedRing())  # its staging buffers: host ones
    def made(paths):
        images = DeviceImages.from_arrays([emu.dev(decode_pillow(b)) for b in read_files(paths)])
        images.owners = _Lease(images.owners)
        return images

    monkeypatch.setattr(gpu_decode, "decode_planned", lambda ctx, src: made(src.enc.paths))
    monkeypatch.setattr(NoDecodeService, "decode", lambda self, paths, output_type, chunk, stream:
                        (made(paths), []), raising=False)  # (a launch run unplanned)
    return fake


@contextlib.contextmanager
def planned_and_plain(monkeypatch, kernels, make):
    """Two pipelines ``make(seed)`` of one fresh seed on :func:`device_stage_stand_in` (warp.cu
    emulated by ``kernels``): the first planned ahead, the second not (DETAUG_PLAN_AHEAD=0);
    yielded with the CPU warp the NumPy reference (what the emulated kernel matches bit for
    bit), the warp set back and both pipelines closed after."""
    from detaug.core import backend
    from detaug.kernels import warp as W

    device_stage_stand_in(monkeypatch, kernels, W)
    seed = fresh_seed()
    planned = make(seed)
    monkeypatch.setenv("DETAUG_PLAN_AHEAD", "0")
    plain = make(seed)
    before = backend.cpu_warp()
    backend.set_cpu_warp("reference")
    try:
        yield planned, plain
    finally:
        backend.set_cpu_warp(before)
        planned.close()
        plain.close()
