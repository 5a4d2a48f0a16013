"""Warp kernel (detaug/kernels/warp.py): the NumPy twin, the OpenCV path, and the CUDA
source run on the CPU through a C++ shim, and on the GPU (``gpu``-marked) against the twin.

Tolerances asserted for warp_cv2 against the twin (random images, random affine matrices):
uint8 and float32 output both within max abs 8 grey levels and mean abs < 0.5 (OpenCV before
5.0 quantises sub-pixel positions to 1/32 px and uses fixed-point weights; the supersampled grid
and the unshrunk float path go through uint8, so up to 0.5 grey level of rounding is expected
there). Exact cases (identity, flip, 90-degree turn, integer crop, constant images) are asserted
exactly for both.

Tolerances asserted on the GPU (fresh random images, random affine matrices: rotation, scale
0.3..3, shear, flips, translation; ragged and dense batches; every dtype and layout):
  uint8 output                        max abs diff <= 1 grey level (float32 sums vs float64)
  float32 output, not normalized      max abs diff <= 2e-3 grey levels
  float32 output, normalized (std~58) max abs diff <= 1e-4
  float16 output                      |gpu - twin| <= 1e-3 + 1e-3 * |twin| (half rounding)
(The same source run on the CPU shows about 1e-4 grey levels un-normalized and 1e-6 normalized.)
"""
from __future__ import annotations

import zlib

import numpy as np
import pytest

from helpers import cuda_emulation as emu
from detaug.kernels import warp as W
from detaug.kernels.launch import reset_launch_counts, total_launches
from detaug.kernels.warp import warp_cupy, warp_cv2, warp_numpy
from helpers.warp import (IMPLS, MEAN, STD, _assert_close, _emulate, _host, _rng,  # noqa: F401
                          axis_aligned_cases, emulated_general_path, emulated_kernels,  # (fixtures)
                          one, rand_image, random_affine)


# ----------------------------------------------------------------------------- exact cases
@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("c", [1, 3])
def test_identity_reproduces_image(impl, c):
    img = rand_image(_rng(1), c=c)
    np.testing.assert_array_equal(one(impl, img, np.eye(3), (40, 50)), img)
    np.testing.assert_array_equal(one(impl, img, np.eye(3), (40, 50), antialias=False), img)


@pytest.mark.parametrize("impl", IMPLS)
def test_horizontal_flip(impl):
    img = rand_image(_rng(2))
    H, Wd = img.shape[:2]
    M = [[-1, 0, Wd], [0, 1, 0], [0, 0, 1]]
    np.testing.assert_array_equal(one(impl, img, M, (H, Wd)), img[:, ::-1])


@pytest.mark.parametrize("impl", IMPLS)
def test_rot90_counter_clockwise(impl):
    # y points down, so (x, y) -> (y, W - x) turns the picture counter-clockwise as displayed
    img = rand_image(_rng(3))
    H, Wd = img.shape[:2]
    ccw = [[0, 1, 0], [-1, 0, Wd], [0, 0, 1]]
    np.testing.assert_array_equal(one(impl, img, ccw, (Wd, H)), np.rot90(img, 1))
    cw = [[0, -1, H], [1, 0, 0], [0, 0, 1]]
    np.testing.assert_array_equal(one(impl, img, cw, (Wd, H)), np.rot90(img, -1))


@pytest.mark.parametrize("impl", IMPLS)
def test_integer_crop_equals_slicing(impl):
    img = rand_image(_rng(4))
    M = [[1, 0, -7], [0, 1, -5], [0, 0, 1]]
    np.testing.assert_array_equal(one(impl, img, M, (21, 30)), img[5:26, 7:37])


@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("out_hw", [(57, 33), (17, 123), (13, 11), (95, 130)])
def test_constant_image_resize_stays_constant(impl, out_hw):
    img = np.full((40, 50, 3), 173, np.uint8)
    M = np.diag([out_hw[1] / 50, out_hw[0] / 40, 1.0])
    # fill equal to the constant: constant everywhere (the weights sum to one)
    np.testing.assert_array_equal(one(impl, img, M, out_hw, fill=173), np.full(out_hw + (3,), 173))
    # fill 0: still constant everywhere, borders included: every sample point of a resize lies
    # inside the source, and the taps replicate the edge (no darkened border)
    out = one(impl, img, M, out_hw, out_dtype=np.float32)
    np.testing.assert_array_equal(out, 173.0)


@pytest.mark.parametrize("impl", IMPLS)
def test_points_outside_take_fill_exactly(impl):
    img = np.full((20, 30, 3), 90, np.uint8)
    M = np.array([[1.0, 0, 5], [0, 1.0, 7], [0, 0, 1]])  # paste at (5, 7) into 40 x 50
    out = one(impl, img, M, (40, 50), fill=(1, 2, 3))
    np.testing.assert_array_equal(out[7:27, 5:35], 90)
    outside = np.ones((40, 50), bool)
    outside[7:27, 5:35] = False
    np.testing.assert_array_equal(out[outside], np.tile([1, 2, 3], (outside.sum(), 1)))


@pytest.mark.parametrize("impl", IMPLS)
def test_checkerboard_shrink_antialias(impl):
    board = ((np.indices((64, 64)).sum(0) % 2) * 255).astype(np.uint8)[:, :, None]
    shrink = np.diag([0.25, 0.25, 1.0])
    out = one(impl, board, shrink, (16, 16), out_dtype=np.float32)
    assert np.all(np.abs(out[1:-1, 1:-1] - 127.5) <= 2)
    # shifted by half an input pixel, the single bilinear tap lands on pixel centres: no
    # antialias aliases to pure black/white, antialias still averages to grey
    shifted = shrink @ np.array([[1, 0, -0.5], [0, 1, -0.5], [0, 0, 1]])
    aliased = one(impl, board, shifted, (16, 16), antialias=False, out_dtype=np.float32)
    assert np.all(np.abs(aliased[1:-1, 1:-1] - 127.5) > 100)
    smooth = one(impl, board, shifted, (16, 16), out_dtype=np.float32)
    assert np.all(np.abs(smooth[1:-1, 1:-1] - 127.5) <= 2)


def test_taps_rule():
    inv = np.linalg.inv(np.array([np.diag([0.25, 1 / 2.5, 1.0]), np.diag([3.0, 1.0, 1.0]),
                                  np.diag([0.01, 0.5, 1.0])]))
    np.testing.assert_array_equal(W.taps_for(inv, True, 8), [[4, 3], [1, 1], [8, 2]])
    np.testing.assert_array_equal(W.taps_for(inv, False, 8), [[1, 1]] * 3)


# ----------------------------------------------------------------------------- cv2 vs twin
@pytest.mark.parametrize("c", [1, 3])
def test_cv2_matches_twin_on_random_affines(c):
    rng = _rng(5 + c)
    worst_max, worst_mean = 0.0, 0.0
    for k in range(24):
        img = rand_image(rng, c=c)
        out_hw = (int(rng.integers(20, 60)), int(rng.integers(20, 60)))
        M = random_affine(rng, img.shape[:2], out_hw)
        fill = rng.integers(0, 256, c) if k % 3 == 0 else 0
        for dt in (np.uint8, np.float32):
            a = one(warp_numpy, img, M, out_hw, fill=fill, out_dtype=dt).astype(np.float64)
            b = one(warp_cv2, img, M, out_hw, fill=fill, out_dtype=dt).astype(np.float64)
            d = np.abs(a - b)
            worst_max, worst_mean = max(worst_max, d.max()), max(worst_mean, d.mean())
    assert worst_max <= 8 and worst_mean < 0.5, (worst_max, worst_mean)


def test_cv2_fractional_fill_goes_through_float():
    rng = _rng(8)
    img = rand_image(rng)
    M = random_affine(rng, (40, 50), (45, 55), scale=(0.5, 0.9))
    for fill in (37.3, [300.0, -20.0, 12.5]):
        a = one(warp_numpy, img, M, (45, 55), fill=fill, out_dtype=np.float32)
        b = one(warp_cv2, img, M, (45, 55), fill=fill, out_dtype=np.float32)
        assert np.abs(a - b).max() <= 8 and np.abs(a - b).mean() < 0.5
        corner = one(warp_numpy, img, np.eye(3) + [[0, 0, 100], [0, 0, 0], [0, 0, 0]], (4, 4),
                     fill=fill, out_dtype=np.float32)
        np.testing.assert_allclose(corner, np.broadcast_to(fill, (4, 4, 3)), atol=1e-5)


# ----------------------------------------------------------------------------- epilogue
@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("shrink", [False, True])
def test_epilogue_equals_applying_afterwards(impl, shrink):
    rng = _rng(9)
    imgs = [rand_image(rng) for _ in range(2)]
    out_hw = (18, 21) if shrink else (45, 55)
    mats = np.stack([random_affine(rng, (40, 50), out_hw, scale=(0.3, 0.5) if shrink else (1, 2))
                     for _ in imgs])
    if shrink:
        assert np.all(W.taps_for(np.linalg.inv(mats), True, 8) > 1)
    sizes = [out_hw] * 2
    raw = impl(imgs, mats, sizes, out_dtype=np.float32).astype(np.float64)  # (B, H, W, C)
    mean = np.stack([MEAN, MEAN[::-1]])  # per-sample (B, C)
    expected = (raw - mean[:, None, None, :]) / STD
    norm = impl(imgs, mats, sizes, mean=mean, std=STD, out_dtype=np.float32)
    np.testing.assert_allclose(norm, expected, rtol=0, atol=1e-4)
    chw = impl(imgs, mats, sizes, mean=mean, std=STD, out_dtype=np.float32, layout="CHW")
    np.testing.assert_array_equal(chw, norm.transpose(0, 3, 1, 2))
    half = impl(imgs, mats, sizes, mean=mean, std=STD, out_dtype=np.float16, layout="CHW")
    assert half.dtype == np.float16 and half.shape == chw.shape
    np.testing.assert_allclose(half.astype(np.float64), expected.transpose(0, 3, 1, 2),
                               rtol=1e-3, atol=1e-3)
    u8 = impl(imgs, mats, sizes).astype(np.float64)
    d = np.abs(u8 - np.clip(np.floor(raw + 0.5), 0, 255))
    # the twin rounds the unrounded value (float32 rounding of `raw` may flip a tie); OpenCV's
    # uint8 INTER_AREA rounds its block sums its own way
    assert d.max() <= 1 and (d.mean() < 0.01 or impl is warp_cv2)
    u8_chw = impl(imgs, mats, sizes, layout="CHW")
    np.testing.assert_array_equal(u8_chw, u8.transpose(0, 3, 1, 2))


def test_uint8_rejects_normalize():
    with pytest.raises(ValueError, match="normalize"):
        warp_numpy([rand_image(_rng())], np.eye(3)[None], [(40, 50)], mean=MEAN, std=STD)


# ----------------------------------------------------------------------------- batch contract
@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("layout", ["HWC", "CHW"])
def test_ragged_batch_equals_per_sample(impl, layout):
    rng = _rng(10)
    in_sizes = [(40, 50), (23, 61), (1, 1), (37, 12)]
    out_sizes = [(30, 44), (45, 20), (3, 5), (7, 9)]
    imgs = [rand_image(rng, h, w) for h, w in in_sizes]
    mats = np.stack([random_affine(rng, i, o) for i, o in zip(in_sizes, out_sizes)])
    kw = dict(fill=np.array([[1, 2, 3], [4, 5, 6], [7, 8, 9], [10, 11, 12]]),
              mean=MEAN, std=STD, out_dtype=np.float32, layout=layout)
    out = impl(imgs, mats, out_sizes, **kw)
    assert isinstance(out, list) and len(out) == 4
    for b in range(4):
        single = impl([imgs[b]], mats[b:b + 1], [out_sizes[b]], **{**kw, "fill": kw["fill"][b]})
        assert single.shape[0] == 1
        np.testing.assert_array_equal(out[b], single[0])
        h, w = out_sizes[b]
        assert out[b].shape == ((h, w, 3) if layout == "HWC" else (3, h, w))
    # same output size, ragged inputs: one dense array, still equal to per-sample calls
    dense = impl(imgs, mats, [(16, 17)] * 4, out_dtype=np.uint8, layout=layout)
    assert isinstance(dense, np.ndarray) and dense.shape[0] == 4
    for b in range(4):
        np.testing.assert_array_equal(dense[b], impl([imgs[b]], mats[b:b + 1], [(16, 17)],
                                                     layout=layout)[0])


@pytest.mark.parametrize("impl", IMPLS)
def test_dense_input_array_equals_list(impl):
    rng = _rng(11)
    batch = rng.integers(0, 256, (3, 40, 50, 3), dtype=np.uint8)
    mats = np.stack([random_affine(rng, (40, 50), (32, 32)) for _ in range(3)])
    np.testing.assert_array_equal(impl(batch, mats, [(32, 32)] * 3),
                                  impl(list(batch), mats, [(32, 32)] * 3))


@pytest.mark.parametrize("impl", IMPLS)
def test_empty_batch_and_one_pixel(impl):
    assert impl([], np.zeros((0, 3, 3)), np.zeros((0, 2), int)) == []
    px = np.array([[[10, 20, 30]]], np.uint8)
    np.testing.assert_array_equal(one(impl, px, np.eye(3), (1, 1)), px)
    up = one(impl, px, np.diag([7.0, 5.0, 1.0]), (5, 7), fill=[10, 20, 30])
    np.testing.assert_array_equal(up, np.broadcast_to(px, (5, 7, 3)))
    img = np.full((40, 50, 3), 99, np.uint8)
    down = one(impl, img, np.diag([1 / 50, 1 / 40, 1.0]), (1, 1), fill=99)
    np.testing.assert_array_equal(down, [[[99, 99, 99]]])
    small = one(impl, rand_image(_rng(12)), np.diag([1 / 50, 1 / 40, 1.0]), (1, 1),
                out_dtype=np.float32)
    assert small.shape == (1, 1, 3) and np.all((small > 40) & (small < 215))


@pytest.mark.parametrize("impl", IMPLS)
def test_inputs_not_mutated(impl):
    rng = _rng(13)
    imgs = [rand_image(rng), rand_image(rng, 20, 30)]
    mats = np.stack([random_affine(rng, (40, 50), (20, 20)), random_affine(rng, (20, 30), (9, 8))])
    sizes = np.array([(20, 20), (9, 8)])
    mean, std, fill = MEAN.copy(), STD.copy(), np.array([[1.0, 2, 3], [4, 5, 6]])
    before = [x.copy() for x in imgs + [mats, sizes, mean, std, fill]]
    impl(imgs, mats, sizes, fill=fill, mean=mean, std=std, out_dtype=np.float32)
    for x, y in zip(imgs + [mats, sizes, mean, std, fill], before):
        np.testing.assert_array_equal(x, y)


def test_bad_input_raises():
    img = rand_image(_rng())
    with pytest.raises(ValueError, match="finite"):  # (a projective matrix is a perspective)
        warp_numpy([img], np.array([[[1, 0, 0], [0, 1, 0], [np.nan, 0, 1]]]), [(4, 4)])
    with pytest.raises(ValueError, match="singular"):
        warp_numpy([img], np.array([[[1, 0, 0], [0, 1, 0], [1, 0, 0]]]), [(4, 4)])
    with pytest.raises(TypeError, match="uint8 or float32"):
        warp_numpy([img.astype(np.float64)], np.eye(3)[None], [(4, 4)])
    with pytest.raises(ValueError, match="channel"):
        warp_numpy([img, img[:, :, :1]], np.stack([np.eye(3)] * 2), [(4, 4)] * 2)
    with pytest.raises(ValueError, match="singular"):
        warp_numpy([img], np.diag([0.0, 1.0, 1.0])[None], [(4, 4)])
    with pytest.raises(ValueError, match="layout"):
        warp_numpy([img], np.eye(3)[None], [(4, 4)], layout="NHWC")


@pytest.mark.parametrize("dtype", [np.uint8, np.float32])
@pytest.mark.parametrize("layout", ["HWC", "CHW"])
@pytest.mark.parametrize("c", [1, 3])
def test_cuda_source_emulated_matches_twin(emulated_kernels, dtype, layout, c):
    rng = _rng(14)
    in_sizes = [(40, 50), (23, 31), (1, 1), (30, 30)]
    out_sizes = [(30, 24), (45, 20), (3, 5), (7, 9)]
    imgs = [rand_image(rng, h, w, c) for h, w in in_sizes]
    mats = np.stack([random_affine(rng, i, o) for i, o in zip(in_sizes, out_sizes)])
    mats[3] = np.diag([0.1, 0.2, 1.0])  # 8 x 5 taps
    mats[1, :2, 2] += 1e9  # far outside: all fill, no int overflow
    kw = dict(fill=rng.integers(0, 256, (4, c)), out_dtype=dtype, layout=layout)
    if dtype != np.uint8:
        kw.update(mean=MEAN[:c], std=STD[:c])
    got = _emulate(emulated_kernels, imgs, mats, out_sizes, **kw)
    ref = warp_numpy(imgs, mats, out_sizes, **kw)
    for g, r in zip(got, ref):
        tol = 1 if dtype == np.uint8 else 1e-3 / 58
        assert np.abs(g.astype(np.float64) - r).max() <= tol


@pytest.mark.parametrize("seed", [21, None])
@pytest.mark.parametrize("dtype,layout,c", [(np.uint8, "HWC", 3), (np.float32, "CHW", 3),
                                            (np.float32, "HWC", 1)])
def test_cuda_source_axis_fast_path_equals_general_path(emulated_kernels, emulated_general_path,
                                                        seed, dtype, layout, c):
    """The axis-aligned loop (row taps once per row, column taps per pixel) gives bit-identical
    output to the general loop, and matches the twin; seed None draws fresh cases."""
    seed = int(np.random.default_rng().integers(2**31)) if seed is None else seed
    rng = _rng(seed)
    in_sizes, out_sizes, mats = axis_aligned_cases(rng, 16)
    imgs = [rand_image(rng, h, w, c) for h, w in in_sizes]
    kw = dict(fill=rng.integers(0, 256, (16, c)), out_dtype=dtype, layout=layout,
              antialias=bool(rng.random() < 0.5))
    if dtype != np.uint8:
        kw.update(mean=MEAN[:c], std=STD[:c])
    fast = _emulate(emulated_kernels, imgs, mats, out_sizes, **kw)
    general = _emulate(emulated_general_path, imgs, mats, out_sizes, **kw)
    ref = warp_numpy(imgs, mats, out_sizes, **kw)
    assert len(fast) == len(general) == len(ref) == 16
    tol = 1 if dtype == np.uint8 else 1e-3 / 58
    for b, (f, g, r) in enumerate(zip(fast, general, ref)):
        assert np.array_equal(f, g), f"seed {seed}, sample {b}"
        assert np.abs(f.astype(np.float64) - r).max() <= tol, f"seed {seed}, sample {b}"


def test_warp_cupy_host_code_with_emulated_kernel(emulated_kernels, monkeypatch):
    """warp_cupy's host code (pointers, offsets, views of one buffer, float16 as uint16) run with
    the emulated kernel."""
    from detaug.kernels import warp as warp_mod

    emulated_kernels.calls.clear()
    emu.install_fake_cupy(monkeypatch, emulated_kernels, warp_mod)
    rng = _rng(15)
    in_sizes = [(40, 50), (23, 31), (1, 1)]
    imgs = [rand_image(rng, h, w) for h, w in in_sizes]
    for out_sizes in ([(30, 24), (45, 20), (3, 5)], [(17, 19)] * 3):
        mats = np.stack([random_affine(rng, i, o) for i, o in zip(in_sizes, out_sizes)])
        kw = dict(fill=[9, 8, 7], out_dtype=np.float32, layout="CHW", mean=MEAN, std=STD)
        # a non-contiguous input goes through ascontiguousarray
        got = W.warp_cupy([imgs[0][:, ::-1].view(emu.FakeDeviceArray)] + imgs[1:], mats, out_sizes,
                          **kw)
        ref = warp_numpy([imgs[0][:, ::-1]] + imgs[1:], mats, out_sizes, **kw)
        assert isinstance(got, list) == isinstance(ref, list)
        if isinstance(got, list):
            assert len({g.data.mem.ptr for g in got}) == 1  # views of one buffer
        for g, r in zip(got, ref):
            assert g.shape == r.shape and np.abs(g - r).max() <= 1e-4
        dense = W.warp_cupy(np.stack([imgs[2]] * 2).view(emu.FakeDeviceArray), mats[:2],
                            out_sizes[:2], out_dtype=np.uint8)
        ref = warp_numpy([imgs[2]] * 2, mats[:2], out_sizes[:2])
        for g, r in zip(dense, ref):
            assert np.abs(g.astype(int) - r).max() <= 1
    assert W.warp_cupy([], np.zeros((0, 3, 3)), np.zeros((0, 2), int)) == []
    assert emulated_kernels.calls == ["warp_f32_chw_c3", "warp_u8_hwc_c3"] * 2


# ---------------------------------------------------------------------------------------- GPU


@pytest.mark.gpu
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


@pytest.mark.gpu
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


@pytest.mark.gpu
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


@pytest.mark.gpu
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


@pytest.mark.gpu
def test_gpu_ragged_is_views_of_one_buffer(cp):
    rng = np.random.default_rng(3)
    imgs = [cp.asarray(rng.integers(0, 256, (10 + b, 20, 3), np.uint8)) for b in range(3)]
    out = warp_cupy(imgs, np.stack([np.eye(3)] * 3), [(10, 20), (11, 20), (12, 20)])
    assert isinstance(out, list) and len({o.data.mem.ptr for o in out}) == 1
    for o, x in zip(out, imgs, strict=True):
        cp.testing.assert_array_equal(o, x)


@pytest.mark.gpu
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


@pytest.mark.gpu
def test_gpu_empty_and_one_pixel(cp):
    assert warp_cupy([], np.zeros((0, 3, 3)), np.zeros((0, 2), int)) == []
    px = cp.asarray(np.array([[[10, 20, 30]]], np.uint8))
    out = warp_cupy([px], np.eye(3)[None], [(1, 1)])
    cp.testing.assert_array_equal(out[0], px)
    up = warp_cupy([px], np.diag([7.0, 5.0, 1.0])[None], [(5, 7)], fill=[10, 20, 30])
    cp.testing.assert_array_equal(up[0], cp.broadcast_to(px, (5, 7, 3)))


@pytest.mark.gpu
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
