"""The warp with a projective chain (a perspective in it): warp.cu run on the CPU through
tests/kernels/test_warp.py's C++ shim, OpenCV's warpPerspective path and the GPU, each against the
NumPy twin; boxes.cu's divide on the GPU against the box twin.

Tolerances: the emulated kernel computes coordinates with the twin's very operations (the divide
through a reciprocal and one residual step: the twin's quotient but for rare last bits), so uint8
outputs agree within 1 grey level (float32 sums) and float32 within 1e-3 / 58; OpenCV quantises sample positions to 1/32 px: PSNR >= 40 dB against the twin.
"""
from __future__ import annotations

import numpy as np
import pytest

from detaug.core import geometry as G
from detaug.core.batch import _identity_geometry
from detaug.kernels import warp as W
from detaug.kernels.boxes import box_transform_numpy
from detaug.kernels.warp import warp_cv2, warp_numpy
from helpers import fresh_seed
from helpers.geometry import psnr
from helpers.warp import MEAN, STD, _build_emulation, _emulate, rand_image


@pytest.fixture(scope="module")
def emulated(tmp_path_factory):
    return _build_emulation(tmp_path_factory)


def random_homography(rng, h, w, oh, ow, strength=0.35):
    """Maps the (h, w) image's corners to a random convex quad around the (oh, ow) output."""
    s = np.array([[0, 0], [w, 0], [w, h], [0, h]], np.float64)
    base = np.array([[0, 0], [ow, 0], [ow, oh], [0, oh]], np.float64)
    sign = np.array([[1, 1], [-1, 1], [-1, -1], [1, -1]])
    e = base + sign * rng.uniform(-0.15, strength, (4, 2)) * [ow / 2, oh / 2]
    return G.homography(s, e)[0]


def projective_chain_region(rng, h, w, c):
    """A chain rotate -> perspective -> crop on an (h, w) image: its composed matrix, output
    size and region (the rotate's canvas becomes a slab with a denominator), fills of its own."""
    g = _identity_geometry(np.array([[h, w]]), c)
    rot = G.linear_about(G.rotation_linear(rng.uniform(15, 40)), [[w / 2, h / 2]], [[w / 2, h / 2]])
    g = g.then(rot, [[h, w]], fill=np.full((1, c), 11.0))
    g = g.then(random_homography(rng, h, w, h, w)[None], [[h, w]], fill=np.full((1, c), 22.0))
    oh, ow = int(h * 0.8), int(w * 0.9)
    g = g.then(G.translate(-3.0, -2.0), [[oh, ow]], fill=np.full((1, c), 33.0))
    rect, rect_fill, clamp, slabs, slab_fill, nslab = g.valid_region()
    return g.matrices[0], (oh, ow), rect_fill[0], (rect, clamp, slabs, slab_fill, nslab)


def test_projective_chain_region_has_divided_slabs():
    rng = np.random.default_rng(1)
    _, _, _, (rect, clamp, slabs, slab_fill, nslab) = projective_chain_region(rng, 50, 60, 3)
    assert slabs.shape[-1] == 7 and nslab[0] >= 1
    assert (slabs[0, :nslab[0], 4:] != [0, 0, 1]).any()


@pytest.mark.parametrize("seed", [2, 8, fresh_seed()])
@pytest.mark.parametrize("dtype,layout,c", [(np.uint8, "HWC", 3), (np.float32, "CHW", 3),
                                            (np.uint8, "HWC", 1)])
def test_cuda_source_emulated_projective_matches_twin(emulated, seed, dtype, layout, c):
    rng = np.random.default_rng(seed)
    in_sizes = [(40, 50), (23, 31), (35, 28), (30, 30)]
    out_sizes = [(30, 44), (45, 20), (35, 28), (12, 9)]
    imgs = [rand_image(rng, h, w, c) for h, w in in_sizes]
    mats = np.stack([random_homography(rng, h, w, oh, ow) for (h, w), (oh, ow) in zip(in_sizes, out_sizes)])
    mats[1] = np.diag([0.9, 1.3, 1.0])  # an affine sample in a projective batch
    for antialias in (False, True):
        kw = dict(fill=rng.integers(0, 256, (4, c)), out_dtype=dtype, layout=layout, antialias=antialias)
        if dtype != np.uint8:
            kw.update(mean=MEAN[:c], std=STD[:c])
        got = _emulate(emulated, imgs, mats, out_sizes, **kw)
        ref = warp_numpy(imgs, mats, out_sizes, **kw)
        tol = 1 if dtype == np.uint8 else 1e-3 / 58
        for b, (g, r) in enumerate(zip(got, ref)):
            assert np.abs(g.astype(np.float64) - r).max() <= tol, f"seed {seed}, sample {b}"
    # a chain's region: the rotate's canvas as a projective slab, the crop in the rect
    m, out_hw, fill, region = projective_chain_region(rng, 48, 64, c)
    img = rand_image(rng, 48, 64, c)
    kw = dict(fill=fill, out_dtype=dtype, layout=layout, region=region)
    if dtype != np.uint8:
        kw.update(mean=MEAN[:c], std=STD[:c])
    got = _emulate(emulated, [img], m[None], [out_hw], **kw)[0]
    ref = warp_numpy([img], m[None], [out_hw], **kw)[0]
    assert np.abs(got.astype(np.float64) - ref).max() <= (1 if dtype == np.uint8 else 1e-3 / 58)
    if dtype == np.uint8 and layout == "HWC" and seed in (2, 8):
        # all three fills show: the rotate's (the slab), the perspective's and the crop's (rect);
        # checked on the fixed seeds, whose chains are known to show them (a fresh seed's mild
        # homography can keep its fill inside the crop, which the comparison above still covers)
        vals = {tuple(v) for v in ref.reshape(-1, c).astype(int).tolist()}
        assert {(11,) * c, (22,) * c} <= vals


@pytest.mark.parametrize("seed", [4, fresh_seed()])
def test_opencv_projective_matches_twin(seed):
    rng = np.random.default_rng(seed)
    # smooth images: OpenCV's 1/32 px positions then differ from the twin by a level or so
    yy, xx = np.mgrid[:60, :80]
    img = np.stack([128 + 100 * np.sin(xx / 7 + c) * np.cos(yy / 9) for c in range(3)], -1)
    img = img.astype(np.uint8)
    for antialias in (False, True):
        m = random_homography(rng, 60, 80, 50, 70, 0.5)
        out_cv = warp_cv2([img], m[None], [(50, 70)], antialias=antialias, fill=17)[0]
        out_np = warp_numpy([img], m[None], [(50, 70)], antialias=antialias, fill=17)[0]
        assert psnr(out_cv, out_np) >= 40.0
        assert np.mean(np.abs(out_cv.astype(int) - out_np)) < 0.5
        # float32, normalised, CHW: through the float path of the epilogue
        f_cv = warp_cv2([img], m[None], [(50, 70)], antialias=antialias, fill=17,
                        out_dtype=np.float32, layout="CHW", mean=MEAN, std=STD)[0]
        f_np = warp_numpy([img], m[None], [(50, 70)], antialias=antialias, fill=17,
                          out_dtype=np.float32, layout="CHW", mean=MEAN, std=STD)[0]
        assert np.mean(np.abs(f_cv - f_np)) < 0.5 / 57
    m, out_hw, fill, region = projective_chain_region(rng, 60, 80, 3)
    out_cv = warp_cv2([img], m[None], [out_hw], fill=fill, region=region)[0]
    out_np = warp_numpy([img], m[None], [out_hw], fill=fill, region=region)[0]
    assert psnr(out_cv, out_np) >= 38.0


def test_projective_taps_follow_the_most_shrunk_corner():
    """A keystone that shrinks the bottom 3x and keeps the top: the taps are set by the bottom
    corners (3 per axis or so), not by the centre's milder scale; an affine sample keeps the
    column-norm rule."""
    s = np.array([[0, 0], [90, 0], [90, 90], [0, 90]], np.float64)
    e = np.array([[0, 0], [90, 0], [60, 90], [30, 90]], np.float64)
    inv = np.linalg.inv(G.homography(s, e))
    taps = W.taps_for(inv, True, 8, np.array([[90, 90]]))
    # near the bottom corners an output step of 1 px is 3 input px across
    assert taps[0, 0] >= 3
    affine = np.linalg.inv(np.diag([0.5, 0.25, 1.0]))[None]
    assert W.taps_for(affine, True, 8, np.array([[10, 10]])).tolist() == [[2, 4]]


# ---------------------------------------------------------------------------------------- GPU


@pytest.mark.gpu
@pytest.mark.parametrize("seed", [6, fresh_seed()])
def test_gpu_projective_warp_matches_twin(cp, seed):
    rng = np.random.default_rng(seed)
    in_sizes = [(40, 50), (23, 31), (64, 48)]
    out_sizes = [(30, 44), (45, 20), (64, 48)]
    imgs = [rand_image(rng, h, w, 3) for h, w in in_sizes]
    mats = np.stack([random_homography(rng, h, w, oh, ow) for (h, w), (oh, ow) in zip(in_sizes, out_sizes)])
    for antialias in (False, True):
        got = W.warp_cupy([cp.asarray(i) for i in imgs], mats, out_sizes, antialias=antialias, fill=5)
        ref = warp_numpy(imgs, mats, out_sizes, antialias=antialias, fill=5)
        for g, r in zip(got, ref):
            assert np.abs(cp.asnumpy(g).astype(int) - r).max() <= 1
    m, out_hw, fill, region = projective_chain_region(rng, 48, 64, 3)
    img = rand_image(rng, 48, 64, 3)
    got = W.warp_cupy([cp.asarray(img)], m[None], [out_hw], fill=fill, region=region)[0]
    ref = warp_numpy([img], m[None], [out_hw], fill=fill, region=region)[0]
    assert np.abs(cp.asnumpy(got).astype(int) - ref).max() <= 1


@pytest.mark.gpu
def test_gpu_projective_boxes_match_twin(cp):
    from detaug.kernels.boxes import box_transform_cupy

    rng = np.random.default_rng(12)
    b, n = 4, 40
    si = rng.integers(0, b, n).astype(np.int32)
    bx = np.sort(rng.uniform(-10, 110, (n, 2, 2)), 1).reshape(n, 4)[:, [0, 2, 1, 3]].astype(np.float32)
    persp = np.stack([random_homography(rng, 100, 100, 90, 90) for _ in range(b)])
    rot = G.linear_about(G.rotation_linear(rng.uniform(10, 40, b)), np.full((b, 2), 50.0),
                         np.full((b, 2), 45.0))
    mats = np.stack([rot, persp])
    canvas = np.tile([[100, 100]], (2, b, 1))
    canvas[1] = [90, 90]
    want, keep_w = box_transform_numpy(bx, si, mats, canvas, min_visibility=0.2)
    got, keep = box_transform_cupy(cp.asarray(bx), cp.asarray(si), mats, canvas, min_visibility=0.2)
    np.testing.assert_array_equal(cp.asnumpy(keep), keep_w)
    np.testing.assert_allclose(cp.asnumpy(got)[keep_w], want[keep_w], atol=1e-4)


def _mild_homography(rng, h, w, oh, ow, p):
    """Ultralytics-like: centre, perspective terms ~ U(-p, p), rotate a little, centre on the
    output: an input -> output homography, mostly inside the image for small p."""
    P = np.array([[1, 0, 0], [0, 1, 0], [rng.uniform(-p, p), rng.uniform(-p, p), 1.0]])
    a = np.deg2rad(rng.uniform(-10, 10))
    R = np.array([[np.cos(a), np.sin(a), 0], [-np.sin(a), np.cos(a), 0], [0, 0, 1.0]])
    return G.translate(ow / 2, oh / 2)[0] @ R @ P @ G.translate(-w / 2, -h / 2)[0]


@pytest.mark.parametrize("seed", [5, fresh_seed()])
def test_opencv_projective_fill_test_skipped_only_where_no_point_is_outside(seed, monkeypatch):
    """The OpenCV path tests every grid point against the region only where some may fall
    outside (a homography's hull: its four extreme points, with a margin): the output is bit
    for bit the one with every point tested, for maps well inside, maps reaching outside, maps
    through the horizon, and chains with projective slabs; and the shortcut is taken for the
    maps well inside (the YOLO recipe's case)."""
    rng = np.random.default_rng(seed)
    img = rand_image(rng, 90, 100, 3)
    real = W._reaches_outside
    cases = []
    for _ in range(6):
        cases.append((_mild_homography(rng, 90, 100, 40, 50, 1e-3), (40, 50), None, 17.0, False))
        cases.append((_mild_homography(rng, 90, 100, 120, 120, 3e-3), (120, 120), None, 17.0, True))
        cases.append((random_homography(rng, 90, 100, 70, 60, 0.6), (70, 60), None, 17.0, None))
    horizon = np.array([[1, 0, 0], [0, 1, 0], [0.02, 0, 1.0]])  # w = 0 at x = -50 (output side)
    cases.append((horizon, (60, 60), None, 17.0, True))
    m, out_hw, fill, region = projective_chain_region(rng, 90, 100, 3)
    cases.append((m, out_hw, region, fill, None))
    for m, out_hw, region, fill, outside in cases:
        spec = W._prepare([img], m[None], [out_hw], fill, False, 8, None, None, np.uint8, "HWC",
                          region)
        got = real(spec.inv[0], 1, 1, out_hw, spec, 0)
        if outside is not None:
            assert got == outside
        fast = warp_cv2([img], m[None], [out_hw], fill=fill, region=region, antialias=False)[0]
        with monkeypatch.context() as mp:
            mp.setattr(W, "_reaches_outside", lambda *a: True)
            full = warp_cv2([img], m[None], [out_hw], fill=fill, region=region, antialias=False)[0]
        np.testing.assert_array_equal(fast, full)
