"""Geometric recipe ops: fn.perspective, fn.scale_jitter, fn.random_shortest_size and DALI's
fn.warp_affine (detaug/ops/recipes_geometry.py), and the projective chain under them.

References are written here from the definitions, never from the module's constants:
- perspective: torchvision's ``_get_perspective_coeffs`` ported (the float64 least squares of the
  output -> input map, rounded to float32 as torchvision does), its grid sampling (pixel centres
  at +0.5, ``grid_sample`` bilinear with zero padding and the fill mask of ``_apply_grid_transform``)
  and its box rule (the 4 corners through the inverse of the coefficients, with the divide,
  enclosing box, clamped); and detaug's own rule (a point outside the image takes the fill,
  inside bilinear with edge taps clamped) in float64;
- LSJ / shortest side: sizes worked out by hand, with the rounding of each library;
- warp_affine: DALI's definition ``out(p) = in(M (p + 0.5))`` in continuous coordinates.
"""
from __future__ import annotations

import os

import numpy as np
import pytest
from PIL import Image

from detaug import Pipeline, fn
from detaug.core import backend
from detaug.core import geometry as G
from detaug.kernels.boxes import box_transform_numpy
from detaug.kernels.warp import warp_cv2, warp_numpy
from detaug.ops.recipes_geometry import scale_jitter_plan, shortest_size_plan
from helpers import COCO, fresh_seed
from helpers import boxes_of, close_pipelines, images_of, run_graph, to_np, track  # noqa: F401
from helpers.geometry import assert_same_boxes, assert_same_pixels, chain_graph, psnr, sample_set
from helpers.geometry import detaug_rule_image


def sample_images(k=3, longest=240):
    """The first ``k`` images of examples/data/coco-mini, shrunk to ``longest`` px (PIL's
    antialiased resize: real photographs, small enough for a float64 reference)."""
    names = sorted(os.listdir(os.path.join(COCO, "images")))[:k]
    out = []
    for n in names:
        im = Image.open(os.path.join(COCO, "images", n)).convert("RGB")
        s = longest / max(im.size)
        im = im.resize((max(1, round(im.size[0] * s)), max(1, round(im.size[1] * s))), Image.BILINEAR)
        out.append(np.asarray(im))
    return out


# ------------------------------------------------------------------------- torchvision, ported
def tv_perspective_coeffs(startpoints, endpoints):
    """torchvision's ``_get_perspective_coeffs``: (a, b, c, d, e, f, g, h) of the map endpoints ->
    startpoints, ``x -> ((a x + b y + c) / (g x + h y + 1), (d x + e y + f) / (g x + h y + 1))``,
    by float64 least squares, returned rounded to float32."""
    a = np.zeros((8, 8))
    for i, (p1, p2) in enumerate(zip(endpoints, startpoints)):
        a[2 * i] = [p1[0], p1[1], 1, 0, 0, 0, -p2[0] * p1[0], -p2[0] * p1[1]]
        a[2 * i + 1] = [0, 0, 0, p1[0], p1[1], 1, -p2[1] * p1[0], -p2[1] * p1[1]]
    b = np.asarray(startpoints, np.float64).reshape(8)
    return np.linalg.lstsq(a, b, rcond=None)[0].astype(np.float32).astype(np.float64)


def _coeff_matrix(c):
    return np.array([[c[0], c[1], c[2]], [c[3], c[4], c[5]], [c[6], c[7], 1.0]])


def tv_perspective_boxes(boxes, coeffs, h, w):
    """torchvision v2's ``perspective_bounding_boxes``: corners through the inverse of the
    coefficients' map (input -> output), with the divide; enclosing box; clamped to the canvas."""
    inv = np.linalg.inv(_coeff_matrix(coeffs))
    b = np.asarray(boxes, np.float64)
    xs, ys = b[:, [0, 2, 2, 0]], b[:, [1, 1, 3, 3]]
    den = inv[2, 0] * xs + inv[2, 1] * ys + inv[2, 2]
    x = (inv[0, 0] * xs + inv[0, 1] * ys + inv[0, 2]) / den
    y = (inv[1, 0] * xs + inv[1, 1] * ys + inv[1, 2]) / den
    out = np.stack([x.min(1), y.min(1), x.max(1), y.max(1)], 1)
    return np.clip(out, 0, [w, h, w, h])


def _bilinear_taps(img, x, y):
    """(taps [(weight, in_bounds, value)]) of the bilinear sample at continuous points x, y."""
    h, w = img.shape[:2]
    u, v = x - 0.5, y - 0.5
    u0, v0 = np.floor(u), np.floor(v)
    fu, fv = u - u0, v - v0
    taps = []
    for dv, wv in ((0, 1 - fv), (1, fv)):
        for du, wu in ((0, 1 - fu), (1, fu)):
            xi, yi = u0 + du, v0 + dv
            inb = (xi >= 0) & (xi < w) & (yi >= 0) & (yi < h)
            xc = np.clip(np.nan_to_num(xi), 0, w - 1).astype(int)
            yc = np.clip(np.nan_to_num(yi), 0, h - 1).astype(int)
            taps.append((wu * wv, inb, img[yc, xc].astype(np.float64)))
    return taps


def tv_perspective_image(img, coeffs, fill=0.0):
    """torchvision's tensor perspective: output pixel centre -> input through the coefficients
    (``_perspective_grid``), ``grid_sample`` bilinear (zeros outside), then the fill through the
    sampled mask (``_apply_grid_transform``: ``mask * (img - fill) + fill``), rounded."""
    h, w = img.shape[:2]
    ox, oy = np.meshgrid(np.arange(w) + 0.5, np.arange(h) + 0.5)
    c = coeffs
    den = c[6] * ox + c[7] * oy + 1
    x, y = (c[0] * ox + c[1] * oy + c[2]) / den, (c[3] * ox + c[4] * oy + c[5]) / den
    val, mask = 0.0, 0.0
    for wt, inb, v in _bilinear_taps(img, x, y):
        val = val + (wt * inb)[..., None] * v
        mask = mask + wt * inb
    out = mask[..., None] * (val - fill) + fill
    return np.clip(np.round(out), 0, 255), mask


def random_quads(rng, h, w, scale=0.3):
    """torchvision-style start points (the image corners) and end points moved inwards by up to
    ``scale`` of the half sizes, real-valued."""
    start = np.array([[0, 0], [w, 0], [w, h], [0, h]], np.float64)
    d = rng.uniform(0, scale, (4, 2)) * [w / 2, h / 2]
    sign = np.array([[1, 1], [-1, 1], [-1, -1], [1, -1]])
    return start, start + sign * d


# ------------------------------------------------------------------------------------ perspective
@pytest.mark.parametrize("seed", [3, 17, fresh_seed()])
def test_perspective_matches_torchvision_given_points(seed):
    rng = np.random.default_rng(seed)
    imgs = sample_images()
    quads = [random_quads(rng, *im.shape[:2]) for im in imgs]
    boxes = [np.sort(rng.uniform(0, [im.shape[1], im.shape[0]] * 2, (6, 4)).reshape(6, 2, 2), 1)
             .reshape(6, 4)[:, [0, 1, 2, 3]] for im in imgs]
    boxes = [np.concatenate([np.minimum(b[:, :2], b[:, 2:]), np.maximum(b[:, :2], b[:, 2:])], 1)
             .astype(np.float32) for b in boxes]
    for k, (img, bx, (s, e)) in enumerate(zip(imgs, boxes, quads)):
        (oi, ob) = run_graph([img], [bx], lambda i, b: fn.perspective(
            i, b, startpoints=s.tolist(), endpoints=e.tolist(), antialias=False, fill=0.0))
        got = images_of(oi)[0]
        coeffs = tv_perspective_coeffs(s, e)
        h, w = img.shape[:2]
        want_boxes = tv_perspective_boxes(bx, coeffs, h, w)
        gb = boxes_of(ob)[0]["boxes"]
        keep = (want_boxes[:, 2] > want_boxes[:, 0]) & (want_boxes[:, 3] > want_boxes[:, 1])
        assert len(gb) == keep.sum(), f"seed {seed}, image {k}"
        np.testing.assert_allclose(gb, want_boxes[keep], atol=1e-3, rtol=0,
                                   err_msg=f"seed {seed}, image {k}")
        tv, mask = tv_perspective_image(img, coeffs)
        assert got.shape == tv.shape
        # torchvision blends the fill into the half-pixel band along the image's edge (its taps
        # there are partly outside: mask in (0, 1)); detaug gives the sample point's side.
        # Compared off that band, which is at most ~2 px wide
        off_band = (mask <= 0) | (mask >= 1)
        assert off_band.mean() > 0.95
        p = psnr(got[off_band], tv[off_band])
        assert p >= 40.0, f"seed {seed}, image {k}: {p:.1f} dB"
        # detaug's own rule (float64) with the exact homography: within OpenCV's fixed point
        rule = detaug_rule_image(img, np.linalg.inv(G.homography(s, e)[0]), (h, w))
        assert psnr(got, rule) >= 42.0, f"seed {seed}, image {k}: {psnr(got, rule):.1f} dB"
        assert np.mean(np.abs(got - rule)) < 0.3


def test_perspective_reference_warp_is_the_rule_and_antialias_shrinks_smoothly():
    """The NumPy twin (backend 'reference') gives the float64 rule within one grey level;
    antialias on a strong shrink averages (closer to the box-filtered image than one sample)."""
    img = sample_images(1, 120)[0]
    h, w = img.shape[:2]
    s = np.array([[0, 0], [w, 0], [w, h], [0, h]], np.float64)
    e = np.array([[w * 0.3, h * 0.35], [w * 0.7, h * 0.3], [w * 0.65, h * 0.7], [w * 0.35, h * 0.65]])
    m = G.homography(s, e)
    ref = warp_numpy([img], m, [(h, w)], antialias=False)[0]
    rule = detaug_rule_image(img, np.linalg.inv(m[0]), (h, w))
    assert np.abs(ref.astype(int) - rule).max() <= 1
    cv = warp_cv2([img], m, [(h, w)], antialias=False)[0]
    assert psnr(cv, ref) >= 40
    aa_twin = warp_numpy([img], m, [(h, w)], antialias=True)[0]
    aa_cv = warp_cv2([img], m, [(h, w)], antialias=True)[0]
    assert psnr(aa_cv, aa_twin) >= 40
    assert not np.array_equal(aa_twin, ref)  # a 2.5x shrink takes several taps


def test_perspective_boxes_fresh_random_against_float64_corners(rng):
    """Boxes of random homographies (twin of box_transform): the enclosing box of the 4 corners
    mapped with the divide, clipped to the canvas."""
    for _ in range(20):
        h, w = int(rng.integers(20, 300)), int(rng.integers(20, 300))
        s, e = random_quads(rng, h, w, 0.45)
        m = G.homography(s, e)
        bx = np.sort(rng.uniform(-10, max(h, w) + 10, (30, 2, 2)), 1).reshape(30, 4)[:, [0, 2, 1, 3]]
        bx = bx.astype(np.float32)
        out, keep = box_transform_numpy(bx, np.zeros(30, np.int32), m, [(h, w)])
        hm = m[0]
        b = bx.astype(np.float64)
        cx, cy = b[:, [0, 2, 2, 0]], b[:, [1, 1, 3, 3]]
        den = hm[2, 0] * cx + hm[2, 1] * cy + hm[2, 2]
        x = (hm[0, 0] * cx + hm[0, 1] * cy + hm[0, 2]) / den
        y = (hm[1, 0] * cx + hm[1, 1] * cy + hm[1, 2]) / den
        want = np.clip(np.stack([x.min(1), y.min(1), x.max(1), y.max(1)], 1), 0, [w, h, w, h])
        alive = (want[:, 2] > want[:, 0]) & (want[:, 3] > want[:, 1])
        np.testing.assert_array_equal(keep, alive)
        np.testing.assert_allclose(out[keep], want[alive], atol=1e-3, rtol=0)


def test_random_perspective_follows_torchvisions_rule():
    """RandomPerspective: start points are the corners [0, W - 1] x [0, H - 1]; each end point is
    an integer in [0, bound) from its own sides (bound = int(d * (size // 2)) + 1); p gives the
    share of samples transformed. Checked through the boxes of a box covering the image (its
    corners are the start points' hull), over 200 samples."""
    n, h, w = 200, 61, 80
    imgs = [np.full((h, w, 3), 100, np.uint8)] * n
    box = [np.array([[0, 0, w - 1, h - 1]], np.float32)] * n
    for d, p in ((0.5, 0.5), (0.2, 1.0)):
        _, ob = run_graph(imgs, box, lambda i, b: fn.perspective(i, b, distortion_scale=d, p=p))
        got = np.stack([x["boxes"][0] for x in boxes_of(ob)])
        changed = np.any(np.abs(got - box[0]) > 1e-4, 1)
        bw, bh = int(d * (w // 2)) + 1, int(d * (h // 2)) + 1
        # the box of the 4 end points: x0 = min of the left ones, in [0, bw), etc.; integers
        np.testing.assert_allclose(got, np.round(got), atol=1e-3)
        assert (got[:, 0] >= 0).all() and (got[:, 0] < bw).all()
        assert (got[:, 1] >= 0).all() and (got[:, 1] < bh).all()
        assert (got[:, 2] >= w - bw).all() and (got[:, 2] <= w - 1).all()
        assert (got[:, 3] >= h - bh).all() and (got[:, 3] <= h - 1).all()
        if p == 1.0:
            assert changed.mean() > 0.9  # unchanged only where all 8 draws hit the corners
        else:
            assert 0.35 < changed.mean() < 0.65
        assert len(np.unique(got, axis=0)) > n * p * 0.8  # per-sample draws
    # a 1-pixel side: the corners [0, W - 1] coincide, the image is left as it is
    tiny = [np.full((1, 5, 3), 9, np.uint8), np.full((4, 1, 3), 9, np.uint8)]
    ti, _ = run_graph(tiny, [np.zeros((0, 4), np.float32)] * 2, lambda i, b: fn.perspective(i, b, p=1.0))
    assert [a.tolist() for a in images_of(ti)] == [a.tolist() for a in tiny]
    _, ob = run_graph(imgs[:8], box[:8], lambda i, b: fn.perspective(i, b, p=0.0))
    for x in boxes_of(ob):
        np.testing.assert_array_equal(x["boxes"][0], box[0][0])


def test_perspective_refuses_bad_points():
    img = [np.zeros((20, 30, 3), np.uint8)]
    bx = [np.array([[1, 1, 5, 5]], np.float32)]
    s = [[0, 0], [30, 0], [30, 20], [0, 20]]
    with pytest.raises(ValueError, match="degenerate"):
        run_graph(img, bx, lambda i, b: fn.perspective(i, b, startpoints=s,
                                                      endpoints=[[0, 0], [5, 5], [10, 10], [0, 20]]))
    with pytest.raises(ValueError, match="horizon"):
        run_graph(img, bx, lambda i, b: fn.perspective(
            i, b, startpoints=[[0, 0], [30, 0], [30, 20], [0, 20]],
            endpoints=[[0, 0], [30, 0], [0, 20], [30, 20]]))  # a bow tie
    with pytest.raises(ValueError, match="startpoints"):
        run_graph(img, bx, lambda i, b: fn.perspective(i, b, startpoints=[[0, 0]], endpoints=s))
    with pytest.raises(ValueError, match="distortion_scale"):
        run_graph(img, bx, lambda i, b: fn.perspective(i, b, startpoints=s, endpoints=s,
                                                      distortion_scale=0.3))


# ------------------------------------------------------------------------------- LSJ / shortest
def test_scale_jitter_sizes_by_hand():
    sizes = np.array([[40, 60], [14, 20], [10, 20], [100, 50]])
    # scale 1, target (32, 32): 40x60 fits by min(32/40, 32/60) = 8/15 -> 21.33 x 32 -> 21 x 32;
    # 14x20 in (25, 25): 1.25 -> 17.5 x 25: Detectron2 np.round -> 18 (half to even), trunc 17;
    # 10x20 in (25, 25): 12.5 x 25 -> rounds to 12 (to even), trunc 12; 100x50: 0.32 -> 32 x 16
    targets = {(32, 32): [(21, 32), None, None, (32, 16)], (25, 25): [None, (18, 25), (12, 25), None]}
    for size, want in targets.items():
        for rounding in ("round", "trunc"):
            m, out = scale_jitter_plan(np.zeros((4, 2)), sizes, size, (1.0, 1.0), rounding,
                                       crop=False, pad=False)
            for k, wk in enumerate(want):
                if wk is None:
                    continue
                wk = (17, 25) if (rounding, k, size) == ("trunc", 1, (25, 25)) else wk
                assert tuple(out[k]) == wk, (size, rounding, k, out[k])
                np.testing.assert_allclose(m[k], np.diag([wk[1] / sizes[k, 1], wk[0] / sizes[k, 0], 1]))
    # scale 2 of (32, 32) on 40x60: 16/15 -> 42.67 x 64 -> 43 x 64; crop at round(11 u), round(32 u)
    m, out = scale_jitter_plan(np.array([[0.0, 0.75]]), sizes[:1], (32, 32), (2.0, 2.0), "round",
                               crop=True, pad=True)
    assert out.tolist() == [[32, 32]]
    np.testing.assert_allclose(m[0], [[64 / 60, 0, -24], [0, 43 / 40, -8], [0, 0, 1]])
    # scale 0.5: 10.67 x 16 -> 11 x 16, padded to 32 x 32 at the bottom and right (no offset)
    m, out = scale_jitter_plan(np.array([[0.0, 0.9]]), sizes[:1], (32, 32), (0.5, 0.5), "round",
                               crop=True, pad=True)
    assert out.tolist() == [[32, 32]]
    np.testing.assert_allclose(m[0], np.diag([16 / 60, 11 / 40, 1]))
    _, out = scale_jitter_plan(np.array([[0.0, 0.9]]), sizes[:1], (32, 32), (0.5, 0.5), "round",
                               crop=True, pad=False)
    assert out.tolist() == [[11, 16]]


def _maps_back(out_boxes, src_boxes, sx, sy, ox, oy, tol=0.05):
    """Every output box, carried back through x -> (x + ox) / sx, y -> (y + oy) / sy, lies
    within a source box (clipping only shrinks a box): a necessary condition of the candidate."""
    back = (np.asarray(out_boxes, np.float64) + [ox, oy, ox, oy]) / [sx, sy, sx, sy]
    src = np.asarray(src_boxes, np.float64)
    inside = ((back[:, None, :2] >= src[None, :, :2] - tol)
              & (back[:, None, 2:] <= src[None, :, 2:] + tol))
    return bool(inside.all(-1).any(-1).all())


def test_scale_jitter_in_a_pipeline_is_resize_then_crop_or_pad():
    """The fused op equals resize -> crop window at the drawn offset (Detectron2's one uniform
    for both axes: ox / (nw - tw) and oy / (nh - th) round the same u), boxes too."""
    rng = np.random.default_rng(5)
    imgs, boxes, fields = sample_set(rng, 6, 48, 72)
    fi, fb = run_graph(imgs, boxes, lambda i, b: fn.scale_jitter(i, b, size=(40, 40),
                                                                   scale_range=(1.5, 2.0), fill=0))
    outs, bxs = images_of(fi), boxes_of(fb)
    for k in range(6):
        assert outs[k].shape == (40, 40, 3)
        # find the draw: the boxes scale by nw / 72 and shift by -ox
        found = False
        s_lo = min(40 * 1.5 / 48, 40 * 1.5 / 72)
        s_hi = min(40 * 2.0 / 48, 40 * 2.0 / 72)
        # (each side is rounded on its own: the width may be off the aspect by a pixel)
        cands = [(nh, nw) for nh in range(round(48 * s_lo), round(48 * s_hi) + 1)
                 for nw in range(round(nh * 1.5) - 1, round(nh * 1.5) + 2)]
        for nh, nw in cands:
            for ox in range(0, nw - 40 + 1):
                u = ox / max(nw - 40, 1)
                oy = round((nh - 40) * u)
                if round((nw - 40) * u) != ox:
                    continue
                # a quick necessary test first (the continuous-coordinate map of the candidate
                # carries each fused box's corners to the source box it came from); only a
                # candidate that passes is run op by op, which decides
                if len(bxs[k]["boxes"]) and not _maps_back(bxs[k]["boxes"], boxes[k], nw / 72,
                                                           nh / 48, ox, oy):
                    continue
                win = (ox, oy, ox + 40, oy + 40)
                si, sb = run_graph([imgs[k]], [boxes[k]], lambda i, b: fn.crop(
                    *fn.materialize(*fn.resize(i, b, size=(nh, nw))), window=win),
                    fields=[fields[k]])
                sbx = boxes_of(sb)[0]
                if len(sbx["boxes"]) == len(bxs[k]["boxes"]) and np.allclose(
                        sbx["boxes"], bxs[k]["boxes"], atol=1e-3):
                    assert psnr(images_of(si)[0], outs[k]) > 35
                    found = True
                    break
            if found:
                break
        assert found, f"sample {k}: no resize + crop gives the fused result"


def test_random_shortest_size_by_hand():
    sizes = np.array([[40, 60], [60, 40], [30, 30], [1000, 10]])
    # min 30, no cap: 40x60 -> 0.75 -> 30 x 45; 60x40 -> 45 x 30; 30x30 -> 30 x 30;
    # 1000x10 -> 3 -> 3000 x 30
    m, out = shortest_size_plan(np.zeros(4, int), sizes, [30.0], None, "trunc")
    assert out.tolist() == [[30, 45], [45, 30], [30, 30], [3000, 30]]
    # cap 40: torchvision r = min(0.75, 40 / 60) -> 26.67 x 40 -> int 26; Detectron2 scales
    # (30, 45) by 40 / 45 -> 26.67 -> int(26.67 + 0.5) = 27. 1000x10 capped: 40 x 0.4 -> trunc 0
    # -> at least 1; Detectron2 (3000, 30) * 40 / 3000 -> 40 x 0.4 -> int(0.9) = 0 -> 1
    _, out = shortest_size_plan(np.zeros(4, int), sizes, [30.0], 40, "trunc")
    assert out.tolist() == [[26, 40], [40, 26], [30, 30], [40, 1]]
    _, out = shortest_size_plan(np.zeros(4, int), sizes, [30.0], 40, "round")
    assert out.tolist() == [[27, 40], [40, 27], [30, 30], [40, 1]]
    # on the half: 14x20 to short 25 -> 25 x 35.714..; 20x14 likewise; 10 x 20 -> 25 x 50;
    # 8 x 11 to 20 -> 20 x 27.5: Detectron2 int(27.5 + 0.5) = 28, torchvision int -> 27
    _, out = shortest_size_plan(np.zeros(1, int), np.array([[8, 11]]), [20.0], None, "round")
    assert out.tolist() == [[20, 28]]
    _, out = shortest_size_plan(np.zeros(1, int), np.array([[8, 11]]), [20.0], None, "trunc")
    assert out.tolist() == [[20, 27]]


def test_random_shortest_size_draws_from_the_list_per_sample():
    n = 60
    imgs = [np.full((40, 60, 3), 7, np.uint8)] * n
    bx = [np.array([[6, 4, 30, 20]], np.float32)] * n
    oi, ob = run_graph(imgs, bx, lambda i, b: fn.random_shortest_size(i, b, min_size=[20, 32, 48],
                                                                     max_size=66))
    shorts = sorted({a.shape[0] for a in images_of(oi)})
    # 20 -> 20 x 30; 32 -> 32 x 48; 48 -> min(1.2, 1.1) = 1.1 -> 44 x 66
    assert shorts == [20, 32, 44]
    for a, x in zip(images_of(oi), boxes_of(ob)):
        s = a.shape[1] / 60
        np.testing.assert_allclose(x["boxes"][0], np.array([6, 4, 30, 20]) * ([s, a.shape[0] / 40] * 2),
                                   atol=1e-4)


# ------------------------------------------------------------------------------------ warp_affine
def test_warp_affine_dali_semantics_by_hand_and_reference(rng):
    img = rng.integers(0, 256, (30, 40, 3), dtype=np.uint8)
    bx = [np.array([[5, 5, 20, 12], [35, 25, 40, 30]], np.float32)]
    # inverse_map=True: the matrix maps output to input; x_src = x - 5, y_src = y - 3
    for kw in ({"matrix": [1, 0, -5, 0, 1, -3]}, {"matrix": [1, 0, 5, 0, 1, 3], "inverse_map": False}):
        oi, ob = run_graph([img], bx, lambda i, b: fn.warp_affine(i, b, fill_value=9, **kw))
        out = images_of(oi)[0]
        assert out.shape == img.shape
        np.testing.assert_array_equal(out[3:, 5:], img[:-3, :-5])
        assert (out[:3] == 9).all() and (out[:, :5] == 9).all()
        got = boxes_of(ob)[0]
        np.testing.assert_allclose(got["boxes"], [[10, 8, 25, 15]])  # the second left the canvas
        np.testing.assert_array_equal(got["labels"], [0])
    # a general matrix and an output size: DALI's definition out(p) = in(M (p + 0.5)), float64
    mat = np.array([[0.8, 0.3, 2.0], [-0.25, 1.1, -1.5]])
    inv = np.vstack([mat, [0, 0, 1]])
    oi, ob = run_graph([img], bx, lambda i, b: fn.warp_affine(i, b, matrix=mat.reshape(-1).tolist(),
                                                            size=(25, 50), fill_value=0))
    out = images_of(oi)[0]
    want = detaug_rule_image(img, inv, (25, 50))
    assert out.shape == (25, 50, 3)
    assert psnr(out, want) > 40
    fwd = np.linalg.inv(inv)
    b = bx[0].astype(np.float64)
    cx, cy = b[:, [0, 2, 2, 0]], b[:, [1, 1, 3, 3]]
    x, y = fwd[0, 0] * cx + fwd[0, 1] * cy + fwd[0, 2], fwd[1, 0] * cx + fwd[1, 1] * cy + fwd[1, 2]
    wb = np.clip(np.stack([x.min(1), y.min(1), x.max(1), y.max(1)], 1), 0, [50, 25, 50, 25])
    alive = (wb[:, 2] > wb[:, 0]) & (wb[:, 3] > wb[:, 1])
    np.testing.assert_allclose(boxes_of(ob)[0]["boxes"], wb[alive], atol=1e-4)


def test_warp_affine_per_sample_matrix_and_dalis_mtx_input():
    """A per-sample matrix (DALI's argument input) moves each image by its own translation; DALI's
    positional mtx input is the same matrix."""
    rng = np.random.default_rng(2)
    imgs = [rng.integers(0, 256, (20, 30, 3), dtype=np.uint8) for _ in range(3)]
    mats = [np.array([1, 0, -k, 0, 1, -1], np.float32) for k in range(3)]

    def src(info):
        return imgs[info.idx_in_epoch], mats[info.idx_in_epoch]

    for positional in (False, True):
        pipe = track(Pipeline(batch_size=3, num_threads=1, seed=0))
        with pipe:
            i, m = fn.external_source(source=src, batch=False, num_outputs=2, size=3)
            if positional:
                pipe.set_outputs(fn.warp_affine(i, m, fill_value=0))
            else:
                pipe.set_outputs(fn.warp_affine(i, matrix=m, fill_value=0))
        (out,) = pipe.run()
        for k in range(3):
            a = to_np(out.data[k])
            np.testing.assert_array_equal(a[1:, k:], imgs[k][:-1, :30 - k])
            assert (a[0] == 0).all() and (a[:, :k] == 0).all()


def test_warp_affine_refusals():
    img, bx = [np.zeros((8, 8, 3), np.uint8)], [np.zeros((0, 4), np.float32)]
    with pytest.raises(ValueError, match="matrix"):
        run_graph(img, bx, lambda i, b: fn.warp_affine(i, b, matrix=[1, 0, 0], fill_value=0))
    with pytest.raises(ValueError, match="interp_type"):
        run_graph(img, bx, lambda i, b: fn.warp_affine(i, b, matrix=[1, 0, 0, 0, 1, 0], fill_value=0,
                                                       interp_type="INTERP_NN"))


# ------------------------------------------------------------------- fusion, keys, determinism
RECIPE_CHAINS = {
    "crop-perspective-rotate": [
        ("crop", "crop", {"window": (5, 4, 70, 60)}),
        ("perspective", "perspective", {"p": 1.0, "distortion_scale": 0.4}),
        ("rotate", "rotate", {"angle": 17.0})],
    "perspective-scale_jitter-flip": [
        ("perspective", "perspective", {"p": 1.0, "distortion_scale": 0.5}),
        ("scale_jitter", "scale_jitter", {"size": (64, 64), "scale_range": (0.6, 1.6), "fill": 0}),
        ("flip", "flip", {"horizontal": 1})],
    "rotate-perspective-shortest-letterbox": [
        ("rotate", "rotate", {"angle": -25.0}),
        ("perspective", "perspective", {"p": 1.0, "distortion_scale": 0.3}),
        ("random_shortest_size", "random_shortest_size", {"min_size": [40, 56], "max_size": 90}),
        ("letterbox", "letterbox", {"size": (72, 72), "fill": 0})],
    "warp_affine-perspective-crop": [
        ("warp_affine", "warp_affine", {"matrix": [0.9, 0.2, -3, -0.1, 1.05, 2], "fill_value": 0}),
        ("perspective", "perspective", {"p": 1.0}),
        ("crop", "crop", {"window": (-6, 8, 60, 70)})],
    "affine_perspective_terms-crop-flip": [  # the YOLO recipe's RandomPerspective, no antialias
        ("affine", "affine", {"rotate": 8.0, "scale": 0.7, "translate_x": 4.0,
                              "perspective_x": 2e-3, "perspective_y": -1.5e-3,
                              "antialias": False, "fill": 114.0}),
        ("crop", "crop", {"window": (5, 3, 61, 55), "fill": 114.0}),
        ("flip", "flip", {"horizontal": 1})],
}


@pytest.mark.parametrize("name", sorted(RECIPE_CHAINS))
def test_recipe_chains_fused_equal_op_by_op(name):
    ops = RECIPE_CHAINS[name]
    for seed in (4, 9, fresh_seed()):
        rng = np.random.default_rng(seed)
        imgs, boxes, fields = sample_set(rng, 3, int(rng.integers(60, 90)), int(rng.integers(70, 100)))
        desc = f"{name}, seed {seed}"
        fi, fb = run_graph(imgs, boxes, chain_graph(ops, False, dead_materialize=True),
                           fields=fields, seed=seed)
        si, sb = run_graph(imgs, boxes, chain_graph(ops, True), fields=fields, seed=seed)
        assert [a.shape for a in images_of(fi)] == [a.shape for a in images_of(si)], desc
        assert_same_boxes(boxes_of(fb), boxes_of(sb), desc)
        assert_same_pixels(images_of(fi), images_of(si), desc, border=3)


def _recipe_pipe(device="cpu", seed=11, batch_size=4, num_threads=1, root=COCO):
    pipe = track(Pipeline(batch_size=batch_size, num_threads=num_threads, seed=seed,
                          device_id=0 if device == "gpu" else None))
    with pipe:
        enc, bx = fn.readers.coco(file_root=os.path.join(root, "images"),
                                  annotations_file=os.path.join(root, "annotations.json"),
                                  random_shuffle=True)
        img = fn.decoders.image(enc, device="cpu")  # one decoder: the warps are compared
        if device == "gpu":
            img, bx = img.gpu(), bx.gpu()
        img, bx = fn.random_shortest_size(img, bx, min_size=[96, 128, 160], max_size=220)
        img, bx = fn.perspective(img, bx, distortion_scale=0.3)
        img, bx = fn.scale_jitter(img, bx, size=(128, 128), scale_range=(0.5, 1.5))
        pipe.set_outputs(img, bx)
    return pipe


def _key(out):
    imgs, bx = out
    return ([to_np(a).tobytes() for a in images_of(imgs)],
            [(d["boxes"].round(3).tobytes(), d["labels"].tobytes()) for d in boxes_of(bx)])


def test_recipe_ops_random_access_in_any_order_equals_the_run(coco_small):
    """(The COCO sample at 1/8 size: the batches are compared with each other, and the recipe
    resizes to 96-220 px either way.)"""
    pipe = _recipe_pipe(root=coco_small)
    run = [_key(pipe.run()) for _ in range(3)]
    other = _recipe_pipe(root=coco_small)
    assert [_key(other.run_batch(i, epoch=0)) for i in (2, 0, 1)] == [run[2], run[0], run[1]]
    threads = _recipe_pipe(num_threads=2, root=coco_small)  # two host workers: the same batches
    assert [_key(threads.run()) for _ in range(3)] == run


@pytest.mark.gpu
def test_gpu_recipe_ops_draw_as_the_cpu():
    """CPU draws = GPU draws: the same sizes and boxes (1e-3 px), pixels within a grey level or
    two on a PSNR of 40 dB, against the CPU's NumPy twin."""
    backend.set_cpu_warp("reference")
    try:
        cpu, gpu = _recipe_pipe(), _recipe_pipe("gpu")
        for _ in range(2):
            (ci, cb), (gi, gb) = cpu.run(), gpu.run()
            assert [a.shape for a in images_of(ci)] == [a.shape for a in images_of(gi)]
            assert_same_boxes(boxes_of(gb), boxes_of(cb), "GPU against CPU")
            assert_same_pixels(images_of(gi), images_of(ci), "GPU against CPU", border=1,
                               psnr_min=40.0, max_diff=2)
    finally:
        backend.set_cpu_warp("opencv")


@pytest.mark.gpu
@pytest.mark.parametrize("name", sorted(RECIPE_CHAINS))
def test_gpu_recipe_chains_match_cpu(name):
    backend.set_cpu_warp("reference")
    try:
        rng = np.random.default_rng(23)
        imgs, boxes, fields = sample_set(rng, 3, 70, 90)
        g = chain_graph(RECIPE_CHAINS[name], False)
        ci, cb = run_graph(imgs, boxes, g, fields=fields, seed=23)
        gi, gb = run_graph(imgs, boxes, g, fields=fields, seed=23, device="gpu")
        assert_same_boxes(boxes_of(gb), boxes_of(cb), f"GPU against CPU, {name}")
        assert_same_pixels(images_of(gi), images_of(ci), f"GPU against CPU, {name}", border=1,
                           psnr_min=40.0, max_diff=2)
    finally:
        backend.set_cpu_warp("opencv")
