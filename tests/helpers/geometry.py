"""What the geometry tests share (tests/graph/test_fusion.py, tests/ops/test_recipes_geometry.py,
tests/ops/test_ops_geometry.py, tests/kernels/test_warp_projective.py, the torchvision
comparisons): random smooth images and boxes, a chain of ops traced fused or op by op, the
comparisons of two runs' pixels (fill masks and PSNR away from boundaries), boxes and keypoints,
and docs/design.md's warp rule in float64."""
import math

import numpy as np

from detaug import fn
from helpers import to_np

# Content agreement of fused against op-by-op pixels (fill pixels included, thin border left out).
# Against a float64 evaluation of the rule (one bilinear resampling of the source) the op-by-op
# results of 600 random chains gave 38 dB and more (repeated antialiased shrinking blurs more than
# one resampling does); fused chains that break the rule (composed per op, not per chain) gave
# 7-29 dB where they also failed the mask check, and under 30 dB in some chains that passed it.
PSNR_MIN = 30.0


# ---------------------------------------------------------------------------------------- data
def smooth_image(rng, h, w):
    """uint8 (h, w, 3): a sum of a few low-frequency plane waves per channel (wavelengths of 20
    to 60 px), scaled to [20, 250]: no pixel is 0 (nor 5, 10 or 15), the fill values here."""
    yy, xx = np.mgrid[:h, :w] + 0.5
    out = np.zeros((h, w, 3))
    for c in range(3):
        for _ in range(3):
            k = 2 * np.pi / rng.uniform(20, 60)
            t = rng.uniform(0, 2 * np.pi)
            out[..., c] += rng.uniform(0.3, 1) * np.cos(k * (np.cos(t) * xx + np.sin(t) * yy) + rng.uniform(0, 7))
    lo, hi = out.min(), out.max()
    return np.round(20 + 230 * (out - lo) / max(hi - lo, 1e-9)).astype(np.uint8)


def random_boxes(rng, h, w, n):
    """n boxes inside [0, w] x [0, h]: large and small, some at the edges (so that crops cut
    them and drop them)."""
    x = np.sort(rng.uniform(0, w, (n, 2)), 1)
    y = np.sort(rng.uniform(0, h, (n, 2)), 1)
    b = np.stack([x[:, 0], y[:, 0], x[:, 1], y[:, 1]], 1)
    # a few small ones hugging an edge
    for k in range(0, n, 3):
        s = rng.uniform(2, 8)
        side = rng.integers(4)
        cx, cy = rng.uniform(s, w - s), rng.uniform(s, h - s)
        b[k] = [(0, cy - s, s, cy + s), (w - s, cy - s, w, cy + s),
                (cx - s, 0, cx + s, s), (cx - s, h - s, cx + s, h)][side]
    # at least 0.5 px wide and high
    b[:, 2] = np.maximum(b[:, 2], np.minimum(b[:, 0] + 0.5, w))
    b[:, 3] = np.maximum(b[:, 3], np.minimum(b[:, 1] + 0.5, h))
    b[:, 0] = np.minimum(b[:, 0], b[:, 2] - 0.5)
    b[:, 1] = np.minimum(b[:, 1], b[:, 3] - 0.5)
    return b.astype(np.float32)


def sample_set(rng, n, h, w, boxes_per_image=9):
    imgs = [smooth_image(rng, h, w) for _ in range(n)]
    boxes = [random_boxes(rng, h, w, boxes_per_image) for _ in range(n)]
    fields = [{"annotation_id": rng.integers(0, 1 << 40, boxes_per_image)} for _ in range(n)]
    return imgs, boxes, fields


def chain_graph(ops, stepwise, dead_materialize=False):
    """``graph(img, boxes)`` applying ``ops`` fused, or with ``fn.materialize`` after each op
    (stepwise). ``dead_materialize`` (fused only): trace a materialize after each op whose
    result is not used, so that the fused graph holds the same ops as the stepwise one in the
    same order (random ops draw from keys that include their position in the graph)."""
    def g(i, b):
        for _, name, kw in ops:
            i, b = getattr(fn, name)(i, b, **kw)
            if stepwise:
                i, b = fn.materialize(i, b)
            elif dead_materialize:
                fn.materialize(i, b)
        return i, b
    return g


# ------------------------------------------------------------------------------- comparisons
def uniform_within(mask, r):
    """Pixels whose (2r + 1)^2 neighbourhood is all True or all False in ``mask`` (the image's
    own edge does not count as a boundary: edge values replicate)."""
    p = np.pad(mask, r, mode="edge")
    h, w = mask.shape
    all_true, any_true = np.ones_like(mask), np.zeros_like(mask)
    for dy in range(2 * r + 1):
        for dx in range(2 * r + 1):
            v = p[dy:dy + h, dx:dx + w]
            all_true &= v
            any_true |= v
    return all_true | ~any_true


def fill_mask(img, fill=0):
    return (np.asarray(img) == fill).all(-1)


def psnr(a, b):
    mse = np.mean((np.asarray(a, np.float64) - np.asarray(b, np.float64)) ** 2)
    return math.inf if mse == 0 else 10 * math.log10(255.0 ** 2 / mse)


def assert_same_boxes(got, want, ctx):
    assert len(got) == len(want), ctx
    for k, (g, w) in enumerate(zip(got, want, strict=True)):
        np.testing.assert_array_equal(g["labels"], w["labels"],
                                      err_msg=f"{ctx}: sample {k} keeps other boxes (labels)")
        for f in w:
            if f not in ("boxes", "labels"):
                np.testing.assert_array_equal(g[f], w[f], err_msg=f"{ctx}: sample {k}: {f}")
        np.testing.assert_allclose(g["boxes"], w["boxes"], atol=1e-3, rtol=0,
                                   err_msg=f"{ctx}: sample {k}: boxes")


def compare_keypoints(got, ref, canvas, atol=1e-3):
    """Assert ``got`` (K, 3: x, y, visibility; detaug's) equals ``ref`` (K, 2: x, y; another
    library's, e.g. torchvision's) on ``canvas`` (H, W): the same points within ``atol`` inside the
    canvas, unlabelled (all zero) in detaug outside; points within ``atol`` of an edge are left
    out (rounding picks the side). Returns (points compared inside, points compared outside)."""
    h, w = canvas
    inside = (ref[:, 0] >= 0) & (ref[:, 0] < w) & (ref[:, 1] >= 0) & (ref[:, 1] < h)
    near = (np.abs(ref[:, 0]) < atol) | (np.abs(ref[:, 0] - w) < atol) | \
        (np.abs(ref[:, 1]) < atol) | (np.abs(ref[:, 1] - h) < atol)
    sure = ~near
    assert np.array_equal(got[sure, 2] > 0, inside[sure])
    assert np.abs(got[sure & inside, :2] - ref[sure & inside]).max(initial=0) <= atol
    assert (got[sure & ~inside] == 0).all()
    return int((sure & inside).sum()), int((sure & ~inside).sum())


def assert_same_pixels(got, want, ctx, border=1, fill=0, psnr_min=PSNR_MIN, max_diff=None):
    """Same fill masks (one per value in ``fill``: pixels of that value in every channel) except
    within ``border`` px of a boundary of any mask of either image or of the image's edge; on the
    rest, PSNR >= psnr_min (fill pixels included) and, if given, |difference| <= max_diff."""
    assert len(got) == len(want), ctx
    fills = np.atleast_1d(fill).tolist()
    for k, (a, b) in enumerate(zip(got, want, strict=True)):
        a, b = to_np(a), to_np(b)
        assert a.shape == b.shape, f"{ctx}: sample {k}: shape {a.shape} against {b.shape}"
        masks = [(f, fill_mask(a, f), fill_mask(b, f)) for f in fills]
        # away from the image's edge too: there a crop may have cut off a fill region whose
        # blurred edge (op by op) is still in the output
        sure = np.zeros(a.shape[:2], bool)
        sure[border:a.shape[0] - border, border:a.shape[1] - border] = True
        for _, ma, mb in masks:
            sure &= uniform_within(ma, border) & uniform_within(mb, border)
        for f, ma, mb in masks:
            bad = sure & (ma != mb)
            if bad.any():
                y, x = (int(v[0]) for v in np.nonzero(bad))
                raise AssertionError(
                    f"{ctx}: sample {k}: {int(bad.sum())} of {bad.size} pixels (beyond a {border} px "
                    f"border) are fill {f} in one image and not in the other; first at [{y}, {x}]: "
                    f"got {a[y, x].tolist()}, expected {b[y, x].tolist()}; pixels of fill {f}: got "
                    f"{int(ma.sum())}, expected {int(mb.sum())}")
        if sure.any():
            p = psnr(a[sure], b[sure])
            assert p >= psnr_min, f"{ctx}: sample {k}: PSNR {p:.1f} dB < {psnr_min} dB"
            if max_diff is not None:
                d = np.abs(a[sure].astype(int) - b[sure].astype(int)).max()
                assert d <= max_diff, f"{ctx}: sample {k}: pixels differ by {d} > {max_diff}"


def detaug_rule_image(img, inv, out_hw, fill=0.0):
    """docs/design.md's warp rule in float64, one sample per pixel: the output pixel centre
    through ``inv`` (with the divide); outside [0, W) x [0, H) the fill; inside bilinear with the
    taps clamped to the image."""
    h, w = img.shape[:2]
    oh, ow = out_hw
    ox, oy = np.meshgrid(np.arange(ow) + 0.5, np.arange(oh) + 0.5)
    den = inv[2, 0] * ox + inv[2, 1] * oy + inv[2, 2]
    x = (inv[0, 0] * ox + inv[0, 1] * oy + inv[0, 2]) / den
    y = (inv[1, 0] * ox + inv[1, 1] * oy + inv[1, 2]) / den
    inside = (x >= 0) & (x < w) & (y >= 0) & (y < h)
    u, v = np.where(inside, x, 0.5) - 0.5, np.where(inside, y, 0.5) - 0.5
    u0, v0 = np.floor(u), np.floor(v)
    fu, fv = u - u0, v - v0
    val = 0.0
    for dv, wv in ((0, 1 - fv), (1, fv)):
        for du, wu in ((0, 1 - fu), (1, fu)):
            xc = np.clip(u0 + du, 0, w - 1).astype(int)
            yc = np.clip(v0 + dv, 0, h - 1).astype(int)
            val = val + (wu * wv)[..., None] * img[yc, xc]
    out = np.where(inside[..., None], val, fill)
    return np.clip(np.floor(out + 0.5), 0, 255)


def polygons_of_row(row):
    """The polygons of one box's dense polygons row (P, 2): NaN rows end each polygon (the test
    side's reading, independent of detaug.core.instances)."""
    out, cur = [], []
    for p in np.asarray(row, np.float64):
        if np.isnan(p[0]):
            if cur:
                out.append(np.array(cur))
            cur = []
        else:
            cur.append(p)
    return out + ([np.array(cur)] if cur else [])


def dense_polygons_of(polys_per_box):
    """One sample's dense polygons field (n, P, 2) from each box's polygons: NaN after each
    polygon, rows padded with NaN to the longest."""
    rows = [np.concatenate([np.concatenate([p, [[np.nan, np.nan]]]) for p in ps])
            for ps in polys_per_box]
    width = max(len(r) for r in rows)
    return np.stack([np.pad(r, ((0, width - len(r)), (0, 0)), constant_values=np.nan)
                     for r in rows])


def mosaic4_placement(q, single, xc, yc, w, h, s):
    """(x1a, y1a, x2a, y2a, x1b, y1b): Ultralytics' _mosaic4 placement of member q."""
    if single:
        cx, cy = (2 * s - w) // 2, (2 * s - h) // 2
        x1a, y1a, x2a, y2a = max(cx, 0), max(cy, 0), min(cx + w, 2 * s), min(cy + h, 2 * s)
        return x1a, y1a, x2a, y2a, x1a - cx, y1a - cy
    x1a, x2a = (max(xc - w, 0), xc) if q % 2 == 0 else (xc, min(xc + w, 2 * s))
    y1a, y2a = (max(yc - h, 0), yc) if q < 2 else (yc, min(yc + h, 2 * s))
    return (x1a, y1a, x2a, y2a, w - (x2a - x1a) if q % 2 == 0 else 0,
            h - (y2a - y1a) if q < 2 else 0)


def mosaic_batch_draws(pipe, n, s, p):
    """Per output sample of ``pipe``'s mosaic (partners='batch', batch of ``n``, tile size ``s``,
    probability ``p``), from the op's keyed draws (ops/multi.py: applied, 3 partners, then the
    centre): its members (itself first, then its partners; itself alone where not applied) and
    its integer canvas centre (xc, yc)."""
    from detaug.core.rng import SampleRNG

    op = next(o for o in pipe.graph.ops if o.schema.name == "mosaic")
    u = SampleRNG(pipe.seed, op.rng_id, 0, np.arange(n)).uniform(6)
    lo = -(-s // 2)
    members = [[k] + [min(int(v * n), n - 1) for v in u[k, 1:4]] if u[k, 0] < p else [k]
               for k in range(n)]
    centres = [tuple(int(lo + v * (2 * s - 2 * lo)) for v in u[k, 4:6]) for k in range(n)]
    return members, centres
