"""Warp kernel with a fused chain's region (detaug/kernels/warp.py): a crop then pad gives the
fill and clamps the taps; the twin against a float64 reference; the CUDA source on the CPU
(tests/helpers/cuda_emulation.py) and on the GPU (``gpu``-marked) against the twin, the
axis-aligned fast path against the general one; OpenCV's maps against the twin.
Tolerances as in test_warp.py.
"""
from __future__ import annotations

import numpy as np
import pytest

from detaug.core import geometry as G
from detaug.kernels.warp import warp_cupy, warp_cv2, warp_numpy
from helpers.warp import (IMPLS, MEAN, STD, _assert_close, _emulate, _host, _rng,  # noqa: F401
                          axis_aligned_cases, emulated_general_path, emulated_kernels,  # (fixtures)
                          one, rand_image, random_affine, random_region)

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


@pytest.mark.gpu
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


@pytest.mark.gpu
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
