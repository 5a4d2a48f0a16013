"""GPU parity of warp_cupy (detaug/kernels/warp.cu) against the NumPy twin warp_numpy.

Tolerances asserted (fresh random images, random affine matrices: rotation, scale 0.3..3,
shear, flips, translation; ragged and dense batches; every dtype and layout):
  uint8 output                        max abs diff <= 1 grey level (float32 sums vs float64)
  float32 output, not normalized      max abs diff <= 2e-3 grey levels
  float32 output, normalized (std~58) max abs diff <= 1e-4
  float16 output                      |gpu - twin| <= 1e-3 + 1e-3 * |twin| (half rounding)
(The same source run on the CPU through a C++ shim, tests/test_warp.py, shows about 1e-4 grey
levels un-normalized and 1e-6 normalized.)
"""
from __future__ import annotations

import zlib

import numpy as np
import pytest

from detaug.kernels.launch import reset_launch_counts, total_launches
from detaug.kernels.warp import warp_cupy, warp_numpy
from test_warp import axis_aligned_cases, random_affine, random_region  # the CPU tests' draws

pytestmark = pytest.mark.gpu

MEAN = np.array([123.675, 116.28, 103.53])
STD = np.array([58.395, 57.12, 57.375])


@pytest.fixture(scope="module")
def cp():
    cupy = pytest.importorskip("cupy")
    try:
        if cupy.cuda.runtime.getDeviceCount() < 1:
            pytest.skip("no CUDA device")
    except Exception as exc:  # no driver, no device
        pytest.skip(f"no CUDA device ({type(exc).__name__})")
    return cupy




def _host(x):
    import cupy

    return [cupy.asnumpy(a) for a in x] if isinstance(x, list) else cupy.asnumpy(x)


def _assert_close(gpu, ref, dtype, normalized):
    gpu = [np.asarray(g, np.float64) for g in gpu]
    ref = [np.asarray(r, np.float64) for r in ref]
    assert len(gpu) == len(ref), (len(gpu), len(ref))
    for g, r in zip(gpu, ref, strict=True):
        assert g.shape == r.shape
        d = np.abs(g - r)
        if dtype == np.uint8:
            assert d.max() <= 1, d.max()
        elif dtype == np.float16:
            assert np.all(d <= 1e-3 + 1e-3 * np.abs(r)), d.max()
        else:
            assert d.max() <= (1e-4 if normalized else 2e-3), d.max()


@pytest.mark.parametrize("dtype", [np.uint8, np.float32, np.float16])
@pytest.mark.parametrize("layout", ["HWC", "CHW"])
@pytest.mark.parametrize("ragged", [False, True])
@pytest.mark.parametrize("c", [1, 3])
def test_gpu_matches_twin(cp, dtype, layout, ragged, c):
    seed = zlib.crc32(repr((np.dtype(dtype).name, layout, ragged, c)).encode())
    rng = np.random.default_rng(seed)
    B = 6
    in_sizes = [(int(rng.integers(1, 60)), int(rng.integers(1, 60))) for _ in range(B)]
    in_sizes[0] = (1, 1)
    out_sizes = ([(int(rng.integers(1, 70)), int(rng.integers(1, 70))) for _ in range(B)]
                 if ragged else [(37, 45)] * B)
    imgs = [rng.integers(0, 256, (h, w, c), dtype=np.uint8) for h, w in in_sizes]
    mats = np.stack([random_affine(rng, i, o) for i, o in zip(in_sizes, out_sizes)])
    for normalized in ([False] if dtype == np.uint8 else [False, True]):
        kw = dict(fill=rng.integers(0, 256, (B, c)), out_dtype=dtype, layout=layout)
        if normalized:
            kw.update(mean=MEAN[:c], std=STD[:c])
        got = warp_cupy([cp.asarray(x) for x in imgs], mats, out_sizes, **kw)
        ref = warp_numpy(imgs, mats, out_sizes, **kw)
        assert isinstance(got, list) == ragged == isinstance(ref, list)
        if not ragged:
            assert got.dtype == np.dtype(dtype) and got.shape == ref.shape
        _assert_close(_host(got) if ragged else list(_host(got)), ref if ragged else list(ref),
                      dtype, normalized)


@pytest.mark.parametrize("seed", [22, None])
@pytest.mark.parametrize("dtype,layout", [(np.uint8, "HWC"), (np.float32, "CHW")])
def test_gpu_axis_fast_path_equals_general_path(cp, seed, dtype, layout):
    """Crop / flip / resize matrices take the axis-aligned loop: it matches the twin and is
    bit-identical to the general loop (the same source compiled with DETAUG_WARP_AXIS=0, launched
    with warp_cupy's own plan); seed None draws fresh cases."""
    from detaug.kernels import warp as W
    from detaug.kernels.launch import get_kernel

    seed = int(np.random.default_rng().integers(2**31)) if seed is None else seed
    rng = np.random.default_rng(seed)
    in_sizes, out_sizes, mats = axis_aligned_cases(rng, 24)
    imgs = [rng.integers(0, 256, (h, w, 3), dtype=np.uint8) for h, w in in_sizes]
    kw = dict(fill=rng.integers(0, 256, (24, 3)), out_dtype=dtype, layout=layout, antialias=False)
    if dtype != np.uint8:
        kw.update(mean=MEAN, std=STD)
    dev = [cp.asarray(x) for x in imgs]
    fast = warp_cupy(dev, mats, out_sizes, **kw)
    spec = W._prepare(dev, mats, out_sizes, kw["fill"], False, 8, kw.get("mean"), kw.get("std"),
                      dtype, layout)
    plan = W.launch_plan(spec)
    general = cp.empty(int(plan["offsets"][-1]), dtype)
    args = (cp.asarray(np.array([x.data.ptr for x in dev], np.uint64)), cp.asarray(plan["meta_i"]),
            cp.asarray(plan["inv"]), cp.asarray(plan["meta_f"]), general)
    kernel = get_kernel("warp.cu", plan["name"], W._OPTIONS + ("-DDETAUG_WARP_AXIS=0",))
    kernel(plan["grid"], plan["block"], args)
    general = cp.asnumpy(general)
    ref = warp_numpy(imgs, mats, out_sizes, **kw)
    o = plan["offsets"]
    assert len(fast) == len(ref) == 24
    for b, (f, r) in enumerate(zip(_host(fast), ref)):
        assert np.array_equal(f.reshape(-1), general[o[b]:o[b + 1]]), f"seed {seed}, sample {b}"
        _assert_close([f], [r], dtype, dtype != np.uint8)


def test_gpu_antialias_and_far_outside(cp):
    rng = np.random.default_rng(1)
    imgs = [rng.integers(0, 256, (80, 90, 3), dtype=np.uint8) for _ in range(3)]
    mats = np.stack([np.diag([0.1, 0.2, 1.0]), np.diag([0.3, 0.3, 1.0]), np.eye(3)])
    mats[2, :2, 2] = [1e9, -1e9]  # all taps outside: fill, and no int overflow
    kw = dict(fill=[5, 6, 7], out_dtype=np.float32)
    got = warp_cupy([cp.asarray(x) for x in imgs], mats, [(20, 20)] * 3, **kw)
    ref = warp_numpy(imgs, mats, [(20, 20)] * 3, **kw)
    _assert_close(list(_host(got)), list(ref), np.float32, False)
    np.testing.assert_array_equal(_host(got)[2], np.broadcast_to([5, 6, 7], (20, 20, 3)))


def test_gpu_one_launch_per_call(cp):
    rng = np.random.default_rng(2)
    counts = []
    for B in (1, 64):
        imgs = [cp.asarray(rng.integers(0, 256, (int(rng.integers(5, 40)), 30, 3), np.uint8))
                for _ in range(B)]
        mats = np.stack([random_affine(rng, x.shape[:2], (16, 24)) for x in imgs])
        sizes = [(16, int(rng.integers(10, 30))) for _ in range(B)]
        reset_launch_counts()
        warp_cupy(imgs, mats, sizes, mean=MEAN, std=STD, out_dtype=np.float32, layout="CHW")
        counts.append(total_launches())
    assert counts == [1, 1]


def test_gpu_ragged_is_views_of_one_buffer(cp):
    rng = np.random.default_rng(3)
    imgs = [cp.asarray(rng.integers(0, 256, (10 + b, 20, 3), np.uint8)) for b in range(3)]
    out = warp_cupy(imgs, np.stack([np.eye(3)] * 3), [(10, 20), (11, 20), (12, 20)])
    assert isinstance(out, list) and len({o.data.mem.ptr for o in out}) == 1
    for o, x in zip(out, imgs, strict=True):
        cp.testing.assert_array_equal(o, x)


def test_gpu_dense_input_noncontiguous_and_stream(cp):
    rng = np.random.default_rng(4)
    host = rng.integers(0, 256, (4, 40, 50, 3), dtype=np.uint8)
    mats = np.stack([random_affine(rng, (40, 50), (32, 32)) for _ in range(4)])
    ref = warp_numpy(host, mats, [(32, 32)] * 4)
    dense = cp.asarray(host)
    before = dense.copy()
    stream = cp.cuda.Stream(non_blocking=True)
    got = warp_cupy(dense, mats, [(32, 32)] * 4, stream=stream)
    stream.synchronize()
    _assert_close(list(_host(got)), list(ref), np.uint8, False)
    cp.testing.assert_array_equal(dense, before)  # input not mutated
    # non-contiguous inputs (a flipped view) are made contiguous first
    flipped = cp.asarray(host[:, :, ::-1])
    view = cp.asarray(host)[:, :, ::-1]
    cp.testing.assert_array_equal(warp_cupy(list(view), mats, [(32, 32)] * 4),
                                  warp_cupy(list(flipped), mats, [(32, 32)] * 4))


def test_gpu_empty_and_one_pixel(cp):
    assert warp_cupy([], np.zeros((0, 3, 3)), np.zeros((0, 2), int)) == []
    px = cp.asarray(np.array([[[10, 20, 30]]], np.uint8))
    out = warp_cupy([px], np.eye(3)[None], [(1, 1)])
    cp.testing.assert_array_equal(out[0], px)
    up = warp_cupy([px], np.diag([7.0, 5.0, 1.0])[None], [(5, 7)], fill=[10, 20, 30])
    cp.testing.assert_array_equal(up[0], cp.broadcast_to(px, (5, 7, 3)))


def test_gpu_device_images_with_row_pitch(cp):
    """DeviceImages (what the GPU decode hands over: pointers, shapes and row pitches, no array
    per image) warps exactly as the same images given as arrays; rows with a pitch wider than
    W * C (decoders pad rows) are read through the pitch; views and slices show the pixels."""
    from detaug.core.batch import DeviceImages

    rng = np.random.default_rng(5)
    B = 5
    sizes = [(int(rng.integers(1, 50)), int(rng.integers(1, 50))) for _ in range(B)]
    host = [rng.integers(0, 256, (h, w, 3), dtype=np.uint8) for h, w in sizes]
    # each image in a buffer with 7..40 spare bytes per row
    pads = [int(rng.integers(7, 41)) for _ in range(B)]
    bufs = [cp.zeros((h, w * 3 + p), cp.uint8) for (h, w), p in zip(sizes, pads)]
    for buf, x in zip(bufs, host):
        buf[:, :x.shape[1] * 3] = cp.asarray(x.reshape(x.shape[0], -1))
    dev = DeviceImages([b.data.ptr for b in bufs], [x.shape for x in host],
                       [b.strides[0] for b in bufs], bufs)
    assert len(dev) == B and [tuple(s) for s in dev.shapes] == [x.shape for x in host]
    for k in range(B):
        np.testing.assert_array_equal(cp.asnumpy(dev[k]), host[k])
    np.testing.assert_array_equal(cp.asnumpy(dev[2:4][1]), host[3])
    mats = np.stack([random_affine(rng, s, (24, 31)) for s in sizes])
    kw = dict(mean=MEAN, std=STD, out_dtype=np.float32, layout="CHW")
    got = warp_cupy(dev, mats, [(24, 31)] * B, **kw)
    same = warp_cupy([cp.asarray(x) for x in host], mats, [(24, 31)] * B, **kw)
    cp.testing.assert_array_equal(got, same)
    _assert_close(list(_host(got)), list(warp_numpy(host, mats, [(24, 31)] * B, **kw)),
                  np.float32, True)
    packed = DeviceImages.from_arrays([cp.asarray(x) for x in host])
    cp.testing.assert_array_equal(warp_cupy(packed, mats, [(24, 31)] * B, **kw), same)


@pytest.mark.parametrize("seed", [35, None])
@pytest.mark.parametrize("dtype,layout,c", [(np.uint8, "HWC", 3), (np.float32, "CHW", 3),
                                            (np.float16, "HWC", 1)])
def test_gpu_region_matches_twin(cp, seed, dtype, layout, c):
    """A fused chain's region (rect within the image, clamped taps, output-space slabs each with
    its fill; antialias on): the GPU against the twin."""
    seed = int(np.random.default_rng().integers(2**31)) if seed is None else seed
    rng = np.random.default_rng(seed)
    B = 12
    in_sizes = [(int(rng.integers(1, 60)), int(rng.integers(1, 60))) for _ in range(B)]
    out_sizes = [(int(rng.integers(1, 60)), int(rng.integers(1, 80))) for _ in range(B)]
    mats = np.stack([random_affine(rng, i, o) for i, o in zip(in_sizes, out_sizes)])
    mats[::3] = axis_aligned_cases(rng, len(mats[::3]))[2]  # some take the axis loop
    imgs = [rng.integers(0, 256, (h, w, c), dtype=np.uint8) for h, w in in_sizes]
    kw = dict(fill=rng.integers(0, 256, (B, c)), out_dtype=dtype, layout=layout,
              region=random_region(rng, in_sizes, out_sizes, c, max_slabs=3))
    if dtype != np.uint8:
        kw.update(mean=MEAN[:c], std=STD[:c])
    got = warp_cupy([cp.asarray(x) for x in imgs], mats, out_sizes, **kw)
    ref = warp_numpy(imgs, mats, out_sizes, **kw)
    _assert_close(_host(got), ref, dtype, dtype != np.uint8)


@pytest.mark.parametrize("seed", [36, None])
def test_gpu_axis_path_with_region_equals_general_path(cp, seed):
    """With a rect and clamp and no slab the axis loop runs; bit-identical to the general loop."""
    from detaug.kernels import warp as W
    from detaug.kernels.launch import get_kernel

    seed = int(np.random.default_rng().integers(2**31)) if seed is None else seed
    rng = np.random.default_rng(seed)
    in_sizes, out_sizes, mats = axis_aligned_cases(rng, 24)
    imgs = [rng.integers(0, 256, (h, w, 3), dtype=np.uint8) for h, w in in_sizes]
    rect, clamp, *_ = random_region(rng, in_sizes, out_sizes, 3, max_slabs=0)
    region = (rect, clamp, np.zeros((24, 0, 4)), np.zeros((24, 0, 3)), np.zeros(24, int))
    kw = dict(fill=rng.integers(0, 256, (24, 3)), antialias=False, region=region)
    dev = [cp.asarray(x) for x in imgs]
    fast = warp_cupy(dev, mats, out_sizes, **kw)
    spec = W._prepare(dev, mats, out_sizes, kw["fill"], False, 8, None, None, np.uint8, "HWC",
                      region)
    plan = W.launch_plan(spec)
    general = cp.empty(int(plan["offsets"][-1]), np.uint8)
    args = (cp.asarray(np.array([x.data.ptr for x in dev], np.uint64)), cp.asarray(plan["meta_i"]),
            cp.asarray(plan["inv"]), cp.asarray(plan["meta_f"]), general)
    get_kernel("warp.cu", plan["name"], W._OPTIONS + ("-DDETAUG_WARP_AXIS=0",))(
        plan["grid"], plan["block"], args)
    general = cp.asnumpy(general)
    ref = warp_numpy(imgs, mats, out_sizes, **kw)
    o = plan["offsets"]
    for b, (f, r) in enumerate(zip(_host(fast), ref, strict=True)):
        assert np.array_equal(f.reshape(-1), general[o[b]:o[b + 1]]), f"seed {seed}, sample {b}"
        _assert_close([f], [r], np.uint8, False)
