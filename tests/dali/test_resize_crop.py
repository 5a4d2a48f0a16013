"""DALI's resize followed by a crop (fn.crop, fn.slice, fn.crop_mirror_normalize with a window):
the pixels of the resized image copied from DALI's integer window, although detaug fuses the
two into one warp. Checked against a float64 reference written from the documented rules, not
from the kernels' code (``helpers.dali_refs.dali_resize``): the resize separable, DALI's
triangle filter of radius ``max(1, in / out)`` per axis (pixel centres at +0.5, weights
normalised, taps clamped to the image; DALI's INTERP_LINEAR where it enlarges), rounded half
up; the window's anchor DALI's ``round(pos * (in - crop))`` (crop) or ``llround(start *
extent)`` (slice), its float32 arguments taken in double."""
from __future__ import annotations

import numpy as np

import detaug.fn as fn
import detaug.types as types
from detaug.core.batch import _identity_geometry
from detaug.core import geometry as G
from helpers import fresh_seed, run_images
from helpers.dali_refs import assert_rounded, dali_crop_anchor, dali_resize, round_away


def dali_slice_window(rel_start: float, rel_shape: float, extent: int) -> tuple[int, int]:
    """DALI's SliceAttr with both normalised: start = llround(a * ext), end = llround((a + s) *
    ext), the float32 arguments taken in double."""
    a, s = float(np.float32(rel_start)), float(np.float32(rel_shape))
    return round_away(a * extent), round_away((a + s) * extent)


def assert_rounded_equal(out: np.ndarray, ref: np.ndarray, warp: str) -> None:
    """uint8 ``out`` against ``ref``: the NumPy twin ('reference') gives ``ref`` rounded half up,
    except within 1e-6 of a half, where the float rounding of its sample points may round
    either way; OpenCV (the CPU default: sub-pixel positions in 1/32 px, fixed-point weights)
    is within 1 grey level, 0.5 on average (tests/kernels/test_warp.py's bound)."""
    want = np.clip(np.floor(ref + 0.5), 0, 255)
    if warp == "opencv":
        d = np.abs(out - want)
        assert d.max() <= 1 and d.mean() < 0.5, (d.max(), d.mean())
        return
    assert_rounded(out, ref, tol=1e-6)


def _case(rng, shrink: bool):
    ih, iw = (int(v) for v in rng.integers(12, 60, 2))
    k = rng.uniform(0.25, 0.9) if shrink else rng.uniform(1.1, 3.0)
    oh, ow = max(int(round(ih * k * rng.uniform(0.8, 1.25))), 4), max(int(round(iw * k)), 4)
    ch, cw = int(rng.integers(1, oh + 1)), int(rng.integers(1, ow + 1))
    px, py = (float(np.round(v, 2)) for v in rng.uniform(0, 1, 2))
    return rng.integers(0, 256, (ih, iw, 3), dtype=np.uint8), (oh, ow), (ch, cw), (px, py)


def _check_crop(cases, warp):
    imgs = [c[0] for c in cases]
    sizes = [c[1] for c in cases]
    crops = np.array([c[2] for c in cases], np.float32)
    pos = np.array([c[3] for c in cases], np.float32)
    out = run_images(imgs, lambda i: fn.crop(
        fn.resize(i, resize_x=fn.external_source(source=lambda: [np.float32(s[1]) for s in sizes]),
                  resize_y=fn.external_source(source=lambda: [np.float32(s[0]) for s in sizes])),
        crop=fn.external_source(source=lambda: list(crops)),
        crop_pos_x=fn.external_source(source=lambda: list(pos[:, 0])),
        crop_pos_y=fn.external_source(source=lambda: list(pos[:, 1]))))[0]
    for k, (img, (oh, ow), (ch, cw), (px, py)) in enumerate(cases):
        ref = dali_resize(img, oh, ow)
        x0, y0 = dali_crop_anchor(px, ow - cw), dali_crop_anchor(py, oh - ch)
        got = np.asarray(out.at(k)).astype(np.float64)
        assert got.shape == (ch, cw, 3)
        assert_rounded_equal(got, ref[y0:y0 + ch, x0:x0 + cw], warp)


def test_resize_then_crop_fixed(cpu_warp):
    """Shrinking (2 taps) and enlarging (1 tap); DALI's float32 position: 0.7 * 5 is 3.5 in
    double (the window would start at 4), 0.7f * 5 is 3.4999999 (it starts at 3)."""
    rng = np.random.default_rng(0)
    a = rng.integers(0, 256, (37, 53, 3), dtype=np.uint8)
    b = rng.integers(0, 256, (13, 17, 3), dtype=np.uint8)
    c = rng.integers(0, 256, (40, 160, 3), dtype=np.uint8)
    _check_crop([(a, (21, 29), (10, 12), (0.3, 0.6)), (b, (30, 41), (16, 20), (0.5, 0.35)),
                 (c, (20, 17), (8, 12), (0.7, 1.0))], cpu_warp)
    assert dali_crop_anchor(0.7, 5) == 3 and dali_crop_anchor(0.5, 5) == 3


def test_resize_then_crop_fresh(cpu_warp):
    rng = np.random.default_rng(fresh_seed())
    _check_crop([_case(rng, shrink=bool(k % 2)) for k in range(4)], cpu_warp)


def test_resize_then_slice_and_crop_mirror_normalize(cpu_warp):
    """fn.slice's relative window, and crop_mirror_normalize's crop + mirror + normalisation: the
    fused warp normalises the resize's value before rounding (DALI rounds the resized uint8
    image first), so its floats are within 0.5 grey level (times 1 / std) of DALI's."""
    rng = np.random.default_rng(fresh_seed())
    imgs = [rng.integers(0, 256, (int(h), int(w), 3), dtype=np.uint8)
            for h, w in rng.integers(16, 48, (2, 2))]
    mean, std = [10.0, 20.0, 30.0], [2.0, 3.0, 4.0]
    resized, sliced, cmn = run_images(imgs, lambda i: (lambda r: (r, fn.slice(
        r, rel_start=(0.25, 0.1), rel_shape=(0.5, 0.6)), fn.crop_mirror_normalize(
        r, crop=(7, 9), crop_pos_x=0.35, crop_pos_y=0.7, mirror=1, mean=mean, std=std,
        output_layout="HWC", dtype=types.FLOAT)))(fn.resize(i, resize_x=23, resize_y=19)))
    for k, img in enumerate(imgs):
        ref = dali_resize(img, 19, 23)
        x0, x1 = dali_slice_window(0.25, 0.5, 23)
        y0, y1 = dali_slice_window(0.1, 0.6, 19)
        assert_rounded_equal(np.asarray(sliced.at(k)).astype(np.float64), ref[y0:y1, x0:x1],
                             cpu_warp)
        # the fused slice against the materialised resize's window: the same pixels but at
        # halves (the twin's sample points come through other matrices: a tie may round
        # either way); OpenCV resizes the whole image with cv2.resize and the window with
        # warpAffine, each within 1 level of the exact value, so up to 2 apart
        d = np.abs(np.asarray(sliced.at(k), np.int64) - np.asarray(resized.at(k))[y0:y1, x0:x1])
        win = ref[y0:y1, x0:x1]
        tie = np.abs(win - np.floor(win) - 0.5) < 1e-6
        if cpu_warp == "opencv":
            assert d.max() <= 2 and d.mean() < 0.5
        else:
            assert d.max() <= 1 and (tie | (d == 0)).all()
        cx, cy = dali_crop_anchor(0.35, 23 - 9), dali_crop_anchor(0.7, 19 - 7)
        want = (np.clip(np.floor(ref[cy:cy + 7, cx:cx + 9] + 0.5), 0, 255)[:, ::-1] - mean) / std
        got = np.asarray(cmn.at(k), np.float64)
        assert got.shape == (7, 9, 3)
        levels = np.abs(got - want) * std  # in grey levels; OpenCV's path adds its 1 level
        assert levels.max() <= (1.5 if cpu_warp == "opencv" else 0.5) + 1e-4


def test_a_window_past_the_resized_image_is_filled(cpu_warp):
    """A slice window reaching past the resized image (out_of_bounds_policy='pad'): the resized
    pixels where it overlaps, the fill (0) outside (the resize's canvas still cuts, only its tap
    clamp is gone)."""
    rng = np.random.default_rng(fresh_seed())
    img = rng.integers(1, 256, (30, 26, 3), dtype=np.uint8)
    (out,) = run_images([img], lambda i: (fn.slice(fn.resize(i, resize_x=13, resize_y=15),
                                                   start=(-2, -3), shape=(17, 19),
                                                   out_of_bounds_policy="pad"),))
    got = np.asarray(out.at(0)).astype(np.float64)
    assert got.shape == (19, 17, 3)
    ref = np.zeros((19, 17, 3))
    ref[3:18, 2:15] = dali_resize(img, 15, 13)
    assert_rounded_equal(got, ref, cpu_warp)
    assert (got[:3] == 0).all() and (got[:, :2] == 0).all() and (got[18:] == 0).all()


def test_clamp_of_a_copied_canvas_and_of_a_resampled_one():
    """The tap clamp of a fused chain (geometry.valid_region): a resize followed by a crop (and a
    flip) keeps the whole source (the crop copies the resized pixels); a crop followed by a
    resize clamps to the crop's columns and rows (the resize reads the cropped image); a crop
    and a resize in one matrix too."""
    g0 = _identity_geometry([(40, 60)], 3)
    res = g0.then(G.scale([0.5], [0.5]), [(20, 30)])
    crop = res.then(G.translate([-7.0], [-3.0]), [(10, 12)])
    flipped = crop.then(G.flip([12], [10], [True], [False]), [(10, 12)])
    for g in (crop, flipped):
        rect, _, clamp, *_ = g.valid_region()
        np.testing.assert_array_equal(clamp, [[0, 59, 0, 39]])
        np.testing.assert_allclose(rect, [[14, 38, 6, 26]])  # the window still bounds the content
    up = g0.then(G.translate([-10.0], [-4.0]), [(20, 30)]).then(G.scale([2.0], [2.0]), [(40, 60)])
    np.testing.assert_array_equal(up.valid_region()[2], [[10, 39, 4, 23]])
    one = g0.then(G.scale([2.0], [2.0]) @ G.translate([-10.0], [-4.0]), [(40, 60)])
    np.testing.assert_array_equal(one.valid_region()[2], [[10, 39, 4, 23]])
