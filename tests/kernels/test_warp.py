"""Warp kernel (detaug/kernels/warp.py): the NumPy twin, the OpenCV path, and the CUDA
source run on the CPU through a C++ shim (the real GPU checks are in test_warp_gpu.py).

Tolerances asserted for warp_cv2 against the twin (random images, random affine matrices):
uint8 and float32 output both within max abs 8 grey levels and mean abs < 0.5 (OpenCV before
5.0 quantises sub-pixel positions to 1/32 px and uses fixed-point weights; the supersampled grid
and the unshrunk float path go through uint8, so up to 0.5 grey level of rounding is expected
there). Exact cases (identity, flip, 90-degree turn, integer crop, constant images) are asserted
exactly for both.
"""
from __future__ import annotations

import os
import re

import numpy as np
import pytest

import cuda_emulation as emu
from detaug.core import geometry as G
from detaug.kernels import warp as W
from detaug.kernels.warp import warp_cv2, warp_numpy

IMPLS = [warp_numpy, warp_cv2]
MEAN = np.array([123.675, 116.28, 103.53])
STD = np.array([58.395, 57.12, 57.375])


def _rng(seed=0):
    return np.random.default_rng(seed)


def rand_image(rng, h=40, w=50, c=3):
    return rng.integers(0, 256, (h, w, c), dtype=np.uint8)


def random_affine(rng, in_hw, out_hw, scale=(0.3, 3.0)):
    """Rotation, anisotropic scale, shear, random flip, centred plus a random translation."""
    a = rng.uniform(-np.pi, np.pi)
    s = rng.uniform(*scale)
    rot = np.array([[np.cos(a), -np.sin(a)], [np.sin(a), np.cos(a)]])
    A = rot @ np.array([[s, rng.uniform(-0.3, 0.3)], [0.0, s * rng.uniform(0.7, 1.4)]])
    if rng.random() < 0.5:
        A = A @ np.diag([-1.0, 1.0])
    M = np.eye(3)
    M[:2, :2] = A
    c_in = np.array([in_hw[1], in_hw[0]]) / 2
    c_out = np.array([out_hw[1], out_hw[0]]) / 2
    M[:2, 2] = c_out - A @ c_in + rng.uniform(-5, 5, 2)
    return M


def one(impl, img, M, out_hw, **kw):
    return impl([img], np.asarray(M, float)[None], [out_hw], **kw)[0]


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
    with pytest.raises(TypeError, match="uint8"):
        warp_numpy([img.astype(np.float32)], np.eye(3)[None], [(4, 4)])
    with pytest.raises(ValueError, match="channel"):
        warp_numpy([img, img[:, :, :1]], np.stack([np.eye(3)] * 2), [(4, 4)] * 2)
    with pytest.raises(ValueError, match="singular"):
        warp_numpy([img], np.diag([0.0, 1.0, 1.0])[None], [(4, 4)])
    with pytest.raises(ValueError, match="layout"):
        warp_numpy([img], np.eye(3)[None], [(4, 4)], layout="NHWC")


# ----------------------------------------------------------------------------- CUDA source on CPU
def _warp_signatures():
    """warp.cu's kernels are made by a macro: their names and output types from its uses."""
    with open(os.path.join(emu.KERNEL_DIR, "warp.cu")) as f:
        uses = re.findall(r"^DETAUG_WARP_KERNEL\((\w+), \d, ([\w ]+), \w+\)", f.read(), re.M)
    head = ["const unsigned long long*", "const long long*", "const double*", "const float*"]
    # each use makes NAME (affine batches) and NAME_p (batches holding projective samples)
    return {n: head + [f"{out_t}*"] for name, out_t in uses for n in (name, name + "_p")}


def _build_emulation(tmp_path_factory, *defines):
    """warp.cu compiled as host C++ (tests/cuda_emulation.py; the float16 store is not emulated)."""
    return emu.build(tmp_path_factory.mktemp("warp_cu"), "warp.cu",
                     defines=(f"DETAUG_WARP_PPL={W._PIX_PER_LANE}", *defines),
                     signatures=_warp_signatures())


@pytest.fixture(scope="module")
def emulated_kernels(tmp_path_factory):
    return _build_emulation(tmp_path_factory)


@pytest.fixture(scope="module")
def emulated_general_path(tmp_path_factory):
    """The same source without the axis-aligned fast path (every sample takes the general loop)."""
    return _build_emulation(tmp_path_factory, "DETAUG_WARP_AXIS=0")


def _emulate(lib, images, matrices, out_sizes, **kw):
    """Run warp.cu's kernel on the CPU with warp_cupy's own launch plan."""
    spec = W._prepare(images, matrices, out_sizes, kw.get("fill", 0.0), kw.get("antialias", True),
                      kw.get("max_taps", 8), kw.get("mean"), kw.get("std"),
                      kw.get("out_dtype", np.uint8), kw.get("layout", "HWC"), kw.get("region"))
    plan = W.launch_plan(spec)
    imgs = [np.ascontiguousarray(x) for x in spec.images]
    ptrs = np.array([x.ctypes.data for x in imgs], np.uint64)
    flat = np.zeros(int(plan["offsets"][-1]), spec.out_dtype)
    lib.launch(plan["name"], plan["grid"], plan["block"],
               [ptrs, plan["meta_i"], plan["inv"], plan["meta_f"], flat])
    o = plan["offsets"]
    outs = [flat[o[b]:o[b + 1]].reshape(W._out_shape(spec, b)) for b in range(spec.B)]
    return np.stack(outs) if W._is_dense(spec) else outs


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


def axis_aligned_cases(rng, b):
    """Crop / flip / resize / zoom-out matrices (no rotation: off-diagonals exactly 0 or -0):
    windows partly or wholly outside the image, up- and down-scaling, output widths below and
    above 32 and not multiples of it, integer crops whose taps fall on pixel centres."""
    in_sizes, out_sizes, mats = [], [], []
    for k in range(b):
        h, w = int(rng.integers(1, 70)), int(rng.integers(1, 70))
        oh, ow = int(rng.integers(1, 50)), int(rng.choice([int(rng.integers(1, 32)), 32, 64,
                                                           int(rng.integers(33, 90))]))
        if k % 4 == 3:  # integer crop, output = window size: exact pixel centres
            sx = sy = 1.0
            tx, ty = -float(rng.integers(-3, w + 1)), -float(rng.integers(-3, h + 1))
        else:
            sx, sy = ow / rng.uniform(0.2, 2.0) / w, oh / rng.uniform(0.2, 2.0) / h
            tx, ty = rng.uniform(-0.5, 0.5) * ow, rng.uniform(-0.5, 0.5) * oh
        m = np.array([[sx, 0.0, tx], [0.0, sy, ty], [0.0, 0.0, 1.0]])
        if rng.random() < 0.5:  # mirror about the output's vertical centre line
            m = np.array([[-1.0, 0.0, ow], [0.0, 1.0, 0.0], [0.0, 0.0, 1.0]]) @ m
        if rng.random() < 0.5:
            m[0, 1], m[1, 0] = -0.0, -0.0
        in_sizes.append((h, w))
        out_sizes.append((oh, ow))
        mats.append(m)
    return in_sizes, out_sizes, np.stack(mats)


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


# ----------------------------------------------------------------------------- fused-chain region
def random_region(rng, in_sizes, out_sizes, c, max_slabs=2):
    """A region as a fused chain passes it: a rect in source coordinates (partly past the image
    or inside it), its clamp columns / rows, and up to ``max_slabs`` output-space slabs through
    the output (random directions), each with its own fill."""
    b = len(in_sizes)
    ih = np.array([h for h, _ in in_sizes], float)
    iw = np.array([w for _, w in in_sizes], float)
    x0, x1 = np.sort(rng.uniform(-0.3, 1.3, (b, 2)) * iw[:, None], 1).T
    y0, y1 = np.sort(rng.uniform(-0.3, 1.3, (b, 2)) * ih[:, None], 1).T
    rect = np.stack([x0, x1, y0, y1], -1)
    clamp = G.clamp_of_rect(rect, np.stack([ih, iw], -1))
    s = int(rng.integers(0, max_slabs + 1))
    nslab = rng.integers(0, s + 1, b)
    slabs = np.zeros((b, s, 4))
    for k in range(b):
        oh, ow = out_sizes[k]
        for j in range(s):
            d = rng.normal(size=2)
            d /= np.hypot(*d)
            width = rng.uniform(0.3, 1.0) * (oh + ow) / 2
            centre = np.array([ow, oh]) * rng.uniform(0.3, 0.7, 2)
            slabs[k, j] = [d[0], d[1], width / 2 - d @ centre, width]
    return rect, clamp, slabs, rng.integers(0, 256, (b, s, c)).astype(float), nslab


def test_region_crop_then_pad_gives_fill_and_clamps_taps():
    """The issue's example at kernel level: a rect keeping the right half of a 200-wide image,
    sampled with the identity: the left half is fill; and a 2x upscale of a 10-column rect
    replicates the rect's own last column, not the image's next one."""
    img = np.zeros((100, 200, 3), np.uint8)
    img[:, :100] = 255
    rect = [[100.0, 200.0, 0.0, 100.0]]
    region = (rect, G.clamp_of_rect(np.array(rect), [[100, 200]]), np.zeros((1, 0, 4)),
              np.zeros((1, 0, 3)), [0])
    for impl in IMPLS:
        out = impl([img], np.eye(3)[None], [(100, 200)], fill=7, region=region)[0]
        assert (out[:, :100] == 7).all() and (out[:, 100:] == 0).all(), impl.__name__
    ramp = np.tile(np.arange(0, 240, 8, dtype=np.uint8)[None, :, None], (4, 1, 3))  # 30 columns
    rect = np.array([[10.0, 20.0, 0.0, 4.0]])
    region = (rect, G.clamp_of_rect(rect, [[4, 30]]), np.zeros((1, 0, 4)), np.zeros((1, 0, 3)), [0])
    m = np.array([[2.0, 0, -20.0], [0, 1.0, 0], [0, 0, 1]])  # columns 10..20 -> 0..20
    for impl in IMPLS:
        out = impl([ramp], m[None], [(4, 20)], region=region, antialias=False)[0].astype(int)
        # the last output column samples x = 19.75: taps 19 and 20, clamped to column 19
        assert (out[:, -1] == 8 * 19).all(), impl.__name__
        assert (out[:, 0] == 8 * 10).all(), impl.__name__  # x = 10.25: taps 9, 10 -> 10


@pytest.mark.parametrize("seed", [31, 32, None])
def test_region_twin_against_float64_reference(seed):
    """Which output pixels are fill, and which fill, against a direct float64 evaluation of the
    rule (rect in source coordinates, slabs in output coordinates, the first slab wins)."""
    seed = int(np.random.default_rng().integers(2**31)) if seed is None else seed
    rng = _rng(seed)
    in_sizes = [(int(rng.integers(5, 40)), int(rng.integers(5, 40))) for _ in range(6)]
    out_sizes = [(int(rng.integers(5, 40)), int(rng.integers(5, 40))) for _ in range(6)]
    mats = np.stack([random_affine(rng, i, o) for i, o in zip(in_sizes, out_sizes)])
    imgs = [rng.integers(1, 256, (h, w, 1), dtype=np.uint8) for h, w in in_sizes]  # never 0
    region = random_region(rng, in_sizes, out_sizes, 1, max_slabs=3)
    out = warp_numpy(imgs, mats, out_sizes, fill=0, region=region, antialias=False)
    rect, _, slabs, slab_fill, nslab = region
    for b, (o, (oh, ow)) in enumerate(zip(out, out_sizes)):
        inv = np.linalg.inv(mats[b])
        oy, ox = np.mgrid[:oh, :ow] + 0.5
        x = inv[0, 0] * ox + inv[0, 1] * oy + inv[0, 2]
        y = inv[1, 0] * ox + inv[1, 1] * oy + inv[1, 2]
        h, w = in_sizes[b]
        in_rect = (x >= rect[b, 0]) & (x < rect[b, 1]) & (y >= rect[b, 2]) & (y < rect[b, 3])
        want = np.where(in_rect & (x >= 0) & (x < w) & (y >= 0) & (y < h), -1.0, 0.0)
        for k in range(int(nslab[b]) - 1, -1, -1):
            a, bb, cc, r = slabs[b, k]
            v = a * ox + bb * oy + cc
            want = np.where((v >= 0) & (v < r), want, slab_fill[b, k, 0])
        content = want < 0
        assert (o[..., 0][content] >= 1).all(), f"seed {seed}"
        np.testing.assert_array_equal(o[..., 0][~content], want[~content], err_msg=f"seed {seed}")


@pytest.mark.parametrize("seed", [33, None])
@pytest.mark.parametrize("dtype,layout,c", [(np.uint8, "HWC", 3), (np.float32, "CHW", 3),
                                            (np.float32, "HWC", 1)])
def test_cuda_source_region_matches_twin(emulated_kernels, seed, dtype, layout, c):
    """warp.cu with a region (rect, clamp, slabs with their fills; antialias on) against the twin."""
    seed = int(np.random.default_rng().integers(2**31)) if seed is None else seed
    rng = _rng(seed)
    in_sizes = [(int(rng.integers(1, 50)), int(rng.integers(1, 50))) for _ in range(8)]
    out_sizes = [(int(rng.integers(1, 50)), int(rng.integers(1, 70))) for _ in range(8)]
    mats = np.stack([random_affine(rng, i, o) for i, o in zip(in_sizes, out_sizes)])
    imgs = [rand_image(rng, h, w, c) for h, w in in_sizes]
    kw = dict(fill=rng.integers(0, 256, (8, c)), out_dtype=dtype, layout=layout,
              region=random_region(rng, in_sizes, out_sizes, c, max_slabs=3))
    if dtype != np.uint8:
        kw.update(mean=MEAN[:c], std=STD[:c])
    got = _emulate(emulated_kernels, imgs, mats, out_sizes, **kw)
    ref = warp_numpy(imgs, mats, out_sizes, **kw)
    tol = 1 if dtype == np.uint8 else 1e-3 / 58
    for b, (g, r) in enumerate(zip(got, ref, strict=True)):
        assert np.abs(g.astype(np.float64) - r).max() <= tol, f"seed {seed}, sample {b}"


@pytest.mark.parametrize("seed", [34, None])
def test_cuda_source_axis_path_with_region_equals_general_path(emulated_kernels,
                                                                emulated_general_path, seed):
    """With a rect and clamp (no slabs: the axis loop is taken) both loops stay bit-identical."""
    seed = int(np.random.default_rng().integers(2**31)) if seed is None else seed
    rng = _rng(seed)
    in_sizes, out_sizes, mats = axis_aligned_cases(rng, 16)
    imgs = [rand_image(rng, h, w, 3) for h, w in in_sizes]
    rect, clamp, _, _, _ = random_region(rng, in_sizes, out_sizes, 3, max_slabs=0)
    kw = dict(fill=rng.integers(0, 256, (16, 3)), antialias=bool(rng.random() < 0.5),
              region=(rect, clamp, np.zeros((16, 0, 4)), np.zeros((16, 0, 3)), np.zeros(16, int)))
    fast = _emulate(emulated_kernels, imgs, mats, out_sizes, **kw)
    general = _emulate(emulated_general_path, imgs, mats, out_sizes, **kw)
    ref = warp_numpy(imgs, mats, out_sizes, **kw)
    for b, (f, g, r) in enumerate(zip(fast, general, ref, strict=True)):
        assert np.array_equal(f, g), f"seed {seed}, sample {b}"
        assert np.abs(f.astype(np.float64) - r).max() <= 1, f"seed {seed}, sample {b}"


@pytest.mark.parametrize("c", [1, 3])
def test_cv2_matches_twin_with_region(c):
    """The OpenCV path marks fill with the twin's own tests: the fill pixels are identical; the
    content within OpenCV's interpolation tolerance (as without a region)."""
    rng = _rng(40 + c)
    worst_max, worst_mean = 0.0, 0.0
    for k in range(16):
        in_sizes = [(int(rng.integers(5, 45)), int(rng.integers(5, 45)))]
        out_hw = (int(rng.integers(10, 50)), int(rng.integers(10, 50)))
        img = rng.integers(1, 256, in_sizes[0] + (c,), dtype=np.uint8)
        M = (random_affine(rng, in_sizes[0], out_hw) if k % 2 else
             axis_aligned_cases(rng, 1)[2][0])
        region = random_region(rng, in_sizes, [out_hw], c, max_slabs=2 if k % 2 else 0)
        for dt in (np.uint8, np.float32):
            kw = dict(fill=0, out_dtype=dt, region=region)
            a = one(warp_numpy, img, M, out_hw, **kw).astype(np.float64)
            b = one(warp_cv2, img, M, out_hw, **kw).astype(np.float64)
            if dt == np.uint8:  # content >= 1 (bilinear of pixels >= 1); fill is exact
                np.testing.assert_array_equal(a == 0, b == 0, err_msg=f"case {k}")
            d = np.abs(a - b)
            worst_max, worst_mean = max(worst_max, d.max()), max(worst_mean, d.mean())
    assert worst_max <= 8 and worst_mean < 0.5, (worst_max, worst_mean)


@pytest.mark.parametrize("trial", range(6))
def test_cv2_unit_step_maps_copy_pixels_without_a_warp(trial, monkeypatch):
    """Flips and integer crops / pastes inside the image (unit steps, integer offsets) take the
    pixels themselves on the OpenCV path (no cv2.warpAffine call), equal to slicing by hand and
    to the twin; a map reaching outside, or a fractional offset, still warps."""
    import cv2

    rng = np.random.default_rng([trial, 7])
    c = int(rng.choice([1, 3]))
    h, w = int(rng.integers(8, 40)), int(rng.integers(8, 40))
    img = rand_image(rng, h, w, c)
    oh, ow = int(rng.integers(1, h + 1)), int(rng.integers(1, w + 1))
    y0, x0 = int(rng.integers(0, h - oh + 1)), int(rng.integers(0, w - ow + 1))
    fx, fy = bool(rng.integers(2)), bool(rng.integers(2))
    # output pixel j takes input x0 + j, or x0 + ow - 1 - j when flipped (centres: continuous
    # x_out = x_in - x0, or x0 + ow - x_in)
    m = np.eye(3)
    m[0] = [-1, 0, x0 + ow] if fx else [1, 0, -x0]
    m[1] = [0, -1, y0 + oh] if fy else [0, 1, -y0]
    want = img[y0:y0 + oh, x0:x0 + ow][::-1 if fy else 1, ::-1 if fx else 1]
    calls = []
    real = cv2.warpAffine
    monkeypatch.setattr(cv2, "warpAffine", lambda *a, **k: calls.append(1) or real(*a, **k))
    got = warp_cv2([img], m[None], [(oh, ow)])[0]
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(warp_numpy([img], m[None], [(oh, ow)])[0], want)
    assert calls == []
    # half a pixel off, or reaching past the image: the warp runs (and still matches the twin
    # where OpenCV is exact: the fill outside)
    for shift, size in (((0.5, 0), (oh, ow)), ((0, 0), (h + 3, w))):
        m2 = m.copy()
        m2[0, 2] += shift[0]
        out = warp_cv2([img], m2[None], [size], fill=9.0)[0]
        assert len(calls) == 1
        calls.clear()
        ref = warp_numpy([img], m2[None], [size], fill=9.0)[0]
        assert np.abs(out.astype(int) - ref).max() <= 8


@pytest.mark.parametrize("trial", range(6))
def test_cv2_resize_maps_take_cv2_resize(trial, monkeypatch):
    """A resize onto an integer size, or an integer window of one (a mosaic tile), goes
    through cv2.resize (no cv2.warpAffine): within one grey level of the twin and of a float64
    bilinear resize by hand; a window half a pixel off still warps."""
    import cv2

    rng = np.random.default_rng([trial, 11])
    c = int(rng.choice([1, 3]))
    h, w = int(rng.integers(12, 60)), int(rng.integers(12, 60))
    img = rand_image(rng, h, w, c)
    fh, fw = int(rng.integers(8, 90)), int(rng.integers(8, 90))
    oh, ow = int(rng.integers(1, fh + 1)), int(rng.integers(1, fw + 1))
    y0, x0 = int(rng.integers(0, fh - oh + 1)), int(rng.integers(0, fw - ow + 1))
    m = G.translate(-x0, -y0)[0] @ G.scale(fw / w, fh / h)[0]
    # by hand: output pixel (i, j) at full-size centre (y0 + i + 0.5, x0 + j + 0.5), source
    # point (that) * (h / fh, w / fw), bilinear with the edges replicated
    ys = (y0 + np.arange(oh) + 0.5) * (h / fh) - 0.5
    xs = (x0 + np.arange(ow) + 0.5) * (w / fw) - 0.5
    yi, xi = np.floor(ys).astype(int), np.floor(xs).astype(int)
    fy, fx = (ys - yi)[:, None, None], (xs - xi)[None, :, None]
    f = img.astype(np.float64)
    at = lambda yy, xx: f[np.clip(yy, 0, h - 1)][:, np.clip(xx, 0, w - 1)]  # noqa: E731
    want = ((1 - fy) * ((1 - fx) * at(yi, xi) + fx * at(yi, xi + 1))
            + fy * ((1 - fx) * at(yi + 1, xi) + fx * at(yi + 1, xi + 1)))
    want = np.clip(np.floor(want + 0.5), 0, 255)
    calls = []
    real = cv2.warpAffine
    monkeypatch.setattr(cv2, "warpAffine", lambda *a, **k: calls.append(1) or real(*a, **k))
    got = warp_cv2([img], m[None], [(oh, ow)], antialias=False)[0].astype(int)
    assert calls == []
    assert np.abs(got - want).max() <= 1
    twin = warp_numpy([img], m[None], [(oh, ow)], antialias=False)[0].astype(int)
    assert np.abs(got - twin).max() <= 1
    m2 = G.translate(0.5, 0)[0] @ m
    warp_cv2([img], m2[None], [(oh, ow)], antialias=False)
    assert calls == [1]
