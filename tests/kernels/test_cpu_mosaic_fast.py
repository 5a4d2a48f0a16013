"""The CPU mosaic's tiles from one resize of their image (kernels/resize_lines.py, kernels/warp.py
``_cv2_one``): OpenCV's bilinear resize computed on a few lines, against cv2.resize itself
(plain, and of the border-replicated copy that a clamp rectangle stands for); a clamped tile
against the border-copy path it replaces and the NumPy twin; the scalar corner test against the
array one; and the hsv kernel's scan strip by strip at strip edges that cut 8-byte words. Fixed
and fresh random inputs."""
import cv2
import numpy as np
import pytest

from detaug.core import geometry as G
from detaug.core.batch import _identity_geometry
from detaug.kernels import color as C
from detaug.kernels import resize_lines as RL
from detaug.kernels import warp as W
from helpers import fresh_seed, random_images

FRESH = fresh_seed()


def _bordered(img, clamp):
    """The image with its pixels outside ``clamp`` (cx0, cx1, cy0, cy1) repeating the
    rectangle's edge: what a clamped resize reads."""
    h, w = img.shape[:2]
    cx0, cx1, cy0, cy1 = clamp
    return cv2.copyMakeBorder(img[cy0:cy1 + 1, cx0:cx1 + 1], cy0, h - 1 - cy1, cx0, w - 1 - cx1,
                              cv2.BORDER_REPLICATE).reshape(img.shape)


def _random_clamp(rng, h, w):
    cx0 = int(rng.integers(0, w))
    cy0 = int(rng.integers(0, h))
    return cx0, int(rng.integers(cx0, w)), cy0, int(rng.integers(cy0, h))


def test_emulation_holds_for_the_installed_opencv():
    assert RL.emulation_holds()
    assert not RL.emulable((40, 60), (20, 30))  # both halved: OpenCV's INTER_AREA
    assert RL.emulable((40, 60), (20, 31)) and RL.emulable((40, 60), (40, 60))


@pytest.mark.parametrize("seed", [0, FRESH])
def test_resize_at_is_cv2_resize(seed):
    rng = np.random.default_rng(seed)
    n = 0
    for k in range(60):
        h, w = (int(v) for v in rng.integers(1, 50, 2))
        dh, dw = (int(v) for v in rng.integers(1, 90, 2))
        if k % 6 == 0:  # one axis kept, the other scaled; and the same size
            dh = h
        if k % 11 == 0:
            dh, dw = h, w
        if not RL.emulable((h, w), (dh, dw)):
            continue
        shape = (h, w) if k % 4 == 0 else (h, w, 1 if k % 4 == 1 else 3)
        img = rng.integers(0, 256, shape, dtype=np.uint8)
        rows, cols = np.arange(dh), np.arange(dw)
        want = cv2.resize(img, (dw, dh), interpolation=cv2.INTER_LINEAR).reshape(
            (dh, dw) + shape[2:])
        np.testing.assert_array_equal(RL.resize_at(img, (dh, dw), rows, cols), want)
        clamp = _random_clamp(rng, h, w)
        want = cv2.resize(_bordered(img, clamp), (dw, dh),
                          interpolation=cv2.INTER_LINEAR).reshape((dh, dw) + shape[2:])
        np.testing.assert_array_equal(RL.resize_at(img, (dh, dw), rows, cols, clamp), want)
        pick_r = np.sort(rng.choice(dh, size=min(dh, 3), replace=False))
        pick_c = np.sort(rng.choice(dw, size=min(dw, 4), replace=False))
        np.testing.assert_array_equal(RL.resize_at(img, (dh, dw), pick_r, pick_c, clamp),
                                      want[pick_r][:, pick_c])
        n += 1
    assert n > 40


@pytest.mark.parametrize("seed", [1, FRESH])
def test_fix_clamped_makes_the_window_of_the_bordered_resize(seed):
    """A window of the plain resize, its lines of ``clamped_lines`` made again: the window of the
    resize of the border-replicated image, bit for bit; and the other lines were equal already."""
    rng = np.random.default_rng(seed)
    for _ in range(60):
        h, w = (int(v) for v in rng.integers(2, 60, 2))
        dh, dw = (int(v) for v in rng.integers(2, 100, 2))
        if not RL.emulable((h, w), (dh, dw)):
            continue
        img = rng.integers(0, 256, (h, w, 3), dtype=np.uint8)
        clamp = _random_clamp(rng, h, w)
        r0, c0 = int(rng.integers(0, dh)), int(rng.integers(0, dw))
        win = (slice(r0, int(rng.integers(r0 + 1, dh + 1))),
               slice(c0, int(rng.integers(c0 + 1, dw + 1))))
        plain = cv2.resize(img, (dw, dh), interpolation=cv2.INTER_LINEAR)[win]
        want = cv2.resize(_bordered(img, clamp), (dw, dh), interpolation=cv2.INTER_LINEAR)[win]
        rows, cols = RL.clamped_lines((h, w), (dh, dw), win, clamp)
        same = np.ones(plain.shape[:2], bool)
        same[rows - win[0].start] = False
        same[:, cols - win[1].start] = False
        np.testing.assert_array_equal(plain[same], want[same])
        np.testing.assert_array_equal(RL.fix_clamped(plain.copy(), img, (dh, dw), win, clamp),
                                      want)


def test_fix_clamped_hand_case():
    """A 1 x 4 row (40, 100, 200, 255) doubled to 8 columns: column d samples x = d / 2 - 0.25
    (pixel indices), so columns 0..2 read pixels 0 and 1 (column 0 pixel 0 alone), 3 and 4 read
    1 and 2 with weights 3/4, 1/4 and 1/4, 3/4, 5..7 read 2 and 3 (7: pixel 3 alone). Clamped to
    pixels 1..2, columns 0..2 read pixel 1 only and 5..7 pixel 2 only: 100 100 100 125 175 200
    200 200, the lines made again being columns 0, 1, 2, 5, 6, 7."""
    img = np.array([[40, 100, 200, 255]], np.uint8)
    plain = cv2.resize(img, (8, 1), interpolation=cv2.INTER_LINEAR)
    assert plain[0, :5].tolist() == [40, 55, 85, 125, 175] and plain[0, 7] == 255
    whole = (slice(0, 1), slice(0, 8))
    rows, cols = RL.clamped_lines((1, 4), (1, 8), whole, (1, 2, 0, 0))
    assert cols.tolist() == [0, 1, 2, 5, 6, 7] and rows.tolist() == []
    got = RL.fix_clamped(plain.copy(), img, (1, 8), whole, (1, 2, 0, 0))
    assert got[0].tolist() == [100, 100, 100, 125, 175, 200, 200, 200]
    # the same window of 2 columns: only its own lines
    got = RL.fix_clamped(plain[:, 2:4].copy(), img, (1, 8), (slice(0, 1), slice(2, 4)),
                         (1, 2, 0, 0))
    assert got[0].tolist() == [100, 125]


def _tiles(rng, n_images, s):
    """Mosaic-like tiles: each image resized to longer side s (Ultralytics' ceil), the part of a
    random window of it; an image is the source of several tiles (partners from the batch)."""
    sizes = [(int(rng.integers(8, 3 * s)), int(rng.integers(8, 3 * s))) for _ in range(n_images)]
    sizes[0] = (2 * s, s)  # halved exactly both ways: cv2.resize takes its area path
    images = random_images(rng, [(h, w, 3) for h, w in sizes])
    pick = rng.integers(0, n_images, 3 * n_images)
    pick[:2] = 0
    mats, outs, srcs = [], [], []
    for k, i in enumerate(pick):
        h0, w0 = sizes[i]
        r = s / max(h0, w0)
        fw, fh = min(int(np.ceil(w0 * r)), s), min(int(np.ceil(h0 * r)), s)
        x1, y1 = int(rng.integers(0, fw)), int(rng.integers(0, fh))
        tw, th = int(rng.integers(1, fw - x1 + 1)), int(rng.integers(1, fh - y1 + 1))
        if k < 2:  # the halved image cut on every side (its taps stay inside), then whole
            x1, y1, tw, th = (1, 1, fw - 2, fh - 2) if k == 0 else (0, 0, fw, fh)
        mats.append(G.translate(-x1, -y1)[0] @ G.scale(fw / w0, fh / h0)[0])
        outs.append((th, tw))
        srcs.append(images[i])
    g = _identity_geometry(np.array([im.shape[:2] for im in srcs]), 3)
    g = g.then(np.stack(mats), np.array(outs), fill=np.full((len(srcs), 3), 114.0))
    return srcs, g


@pytest.mark.parametrize("seed", [2, FRESH])
def test_clamped_tiles_equal_the_border_copy_path(seed, monkeypatch):
    """Tiles through warp_cv2 (one resize an image, clamped lines made by the rule) against the
    same warp with the rule disabled (each clamped tile a border copy and its own resize) and
    against the definition (cv2.resize of the border copy, then the window), bit for bit; and
    within one grey level of the NumPy twin."""
    rng = np.random.default_rng(seed)
    srcs, g = _tiles(rng, 6, 40)
    rect, rect_fill, clamp, slabs, slab_fill, nslab = g.valid_region()
    kw = dict(fill=rect_fill, region=(rect, clamp, slabs, slab_fill, nslab), antialias=False)
    fast = W.warp_cv2(srcs, g.matrices, g.sizes, **kw)
    with monkeypatch.context() as mp:
        mp.setattr(RL, "emulation_holds", lambda: False)
        border = W.warp_cv2(srcs, g.matrices, g.sizes, **kw)
    twin = W.warp_numpy(srcs, g.matrices, g.sizes, **kw)
    for t, (img, m, (th, tw)) in enumerate(zip(srcs, g.matrices, g.sizes)):
        np.testing.assert_array_equal(fast[t], border[t])
        h0, w0 = img.shape[:2]
        fw, fh = int(round(w0 * m[0, 0])), int(round(h0 * m[1, 1]))
        x1, y1 = int(round(-m[0, 2])), int(round(-m[1, 2]))
        want = cv2.resize(_bordered(img, tuple(int(v) for v in clamp[t])), (fw, fh),
                          interpolation=cv2.INTER_LINEAR)[y1:y1 + th, x1:x1 + tw]
        np.testing.assert_array_equal(fast[t], want)
        d = np.abs(fast[t].astype(int) - twin[t])
        assert d.max() <= 1, t


@pytest.mark.parametrize("seed", [5, FRESH])
def test_float_tiles_keep_the_border_copy(seed):
    """float32 images (warped in float: the rule is OpenCV's uint8 one) take the border copy:
    the clamped tiles are cv2.resize of the border-replicated image, then the window."""
    rng = np.random.default_rng(seed)
    srcs, g = _tiles(rng, 4, 24)
    srcs = [(im.astype(np.float32) * 0.37) for im in srcs]
    rect, rect_fill, clamp, slabs, slab_fill, nslab = g.valid_region()
    got = W.warp_cv2(srcs, g.matrices, g.sizes, fill=rect_fill, out_dtype=np.float32,
                     region=(rect, clamp, slabs, slab_fill, nslab), antialias=False)
    for t, (img, m, (th, tw)) in enumerate(zip(srcs, g.matrices, g.sizes)):
        h0, w0 = img.shape[:2]
        fw, fh = int(round(w0 * m[0, 0])), int(round(h0 * m[1, 1]))
        x1, y1 = int(round(-m[0, 2])), int(round(-m[1, 2]))
        want = cv2.resize(_bordered(img, tuple(int(v) for v in clamp[t])), (fw, fh),
                          interpolation=cv2.INTER_LINEAR)[y1:y1 + th, x1:x1 + tw]
        np.testing.assert_array_equal(got[t], want)


@pytest.mark.parametrize("seed", [3, FRESH])
def test_corners_outside_is_the_array_test(seed):
    """The scalar test of an affine map's four extreme sample points against the region's rect
    (no slabs) gives what the array test gives: maps well inside, reaching out, and integer maps
    whose points land exactly on the rect's edges."""
    rng = np.random.default_rng(seed)
    img = rng.integers(0, 256, (30, 40, 3), dtype=np.uint8)
    for k in range(200):
        oh, ow = (int(v) for v in rng.integers(1, 50, 2))
        if k % 3 == 0:  # a crop or a paste: points on pixel centres, edges within a step
            m = G.translate(float(rng.integers(-5, 6)), float(rng.integers(-5, 6)))[0]
        else:
            a = np.deg2rad(rng.uniform(-20, 20)) * (k % 2)
            sc = rng.uniform(0.5, 2.0)
            m = np.array([[sc * np.cos(a), -sc * np.sin(a), rng.uniform(-20, 20)],
                          [sc * np.sin(a), sc * np.cos(a), rng.uniform(-20, 20)], [0, 0, 1.0]])
        spec = W._prepare([img], m[None], [(oh, ow)], 0.0, False, 8, None, None, np.uint8,
                          "HWC", None)
        assert not spec.nslab[0] and not spec.proj[0]
        for nx, ny in ((1, 1), (2, 3)):
            assert (W._corners_outside(spec.inv[0], nx, ny, (oh, ow), spec.rect[0])
                    == W._reaches_outside(spec.inv[0], nx, ny, (oh, ow), spec, 0)), (k, m)


@pytest.mark.parametrize("seed", [4, FRESH])
def test_hsv_scan_by_strips_cutting_words(seed, monkeypatch):
    """Strips of a few rows whose byte counts are not multiples of 8 (a word straddles two
    strips, scanned with the later one), on odd sizes and on the .5 ties of value 0.5: the
    float64 sum rounded half up, bit for bit."""
    rng = np.random.default_rng(seed)
    for rows in (1, 2, 3, 7):
        for h, w in [(9, 5), (13, 7), (8, 3), (int(rng.integers(2, 40)), int(rng.integers(1, 40)))]:
            monkeypatch.setattr(C, "_STRIP_BYTES", 12 * w * rows)
            im = rng.integers(0, 256, (h, w, 3), dtype=np.uint8)
            im[0, :, :] = np.arange(w * 3).reshape(w, 3) * 2 + 1  # odd levels: ties at 0.5
            for hue, sat, val in ((0.0, 1.0, 0.5), tuple(rng.uniform([-180, 0, 0], [180, 2, 2]))):
                m = C.hsv_matrices([hue], [sat], [val])[0].astype(np.float64)
                x = im.astype(np.float64)
                ref = np.stack([(m[i, 0] * x[..., 0] + m[i, 1] * x[..., 1]) + m[i, 2] * x[..., 2]
                                for i in range(3)], -1)
                ref = np.clip(np.floor(ref + 0.5), 0, 255).astype(np.uint8)
                np.testing.assert_array_equal(C.hsv_numpy([im], [hue], [sat], [val])[0], ref)
