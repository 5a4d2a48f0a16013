"""Per-sample 3x3 matrices in continuous pixel coordinates (docs/design.md: an image of W x H covers
[0, W] x [0, H]; pixel (i, j) has its centre at (j + 0.5, i + 0.5)). Every matrix maps INPUT
coordinates to OUTPUT coordinates; all builders are vectorised over the batch: arguments are
scalars or (B,) arrays and the result is (B, 3, 3) float64."""
from __future__ import annotations

import numpy as np


def _batch(*args):
    arrays = [np.asarray(a, dtype=np.float64) for a in args]
    b = max((a.size for a in arrays if a.ndim), default=1)
    return [np.broadcast_to(a.reshape(-1) if a.ndim else a, (b,)) for a in arrays], b


def identity(b: int) -> np.ndarray:
    return np.tile(np.eye(3), (b, 1, 1))


def translate(tx, ty) -> np.ndarray:
    (tx, ty), b = _batch(tx, ty)
    m = identity(b)
    m[:, 0, 2], m[:, 1, 2] = tx, ty
    return m


def scale(sx, sy) -> np.ndarray:
    (sx, sy), b = _batch(sx, sy)
    m = identity(b)
    m[:, 0, 0], m[:, 1, 1] = sx, sy
    return m


def flip(width, height, horizontal, vertical) -> np.ndarray:
    """Mirror x -> W - x where ``horizontal`` and y -> H - y where ``vertical`` (0/1 per sample)."""
    (w, h, fh, fv), b = _batch(width, height, horizontal, vertical)
    m = identity(b)
    fh, fv = fh != 0, fv != 0
    m[fh, 0, 0], m[fh, 0, 2] = -1.0, w[fh]
    m[fv, 1, 1], m[fv, 1, 2] = -1.0, h[fv]
    return m


def cos_sin(degrees):
    """cos and sin of ``degrees``, exact (0, +-1) at multiples of 90 so that quarter turns move
    pixels exactly."""
    rad = np.deg2rad(degrees)
    c, s = np.cos(rad), np.sin(rad)
    quarter = np.isclose(np.mod(degrees, 90.0), 0.0) | np.isclose(np.mod(degrees, 90.0), 90.0)
    c = np.where(quarter, np.round(c), c)
    s = np.where(quarter, np.round(s), s)
    return c, s


def linear_about(linear: np.ndarray, center_in, center_out) -> np.ndarray:
    """The affine map x -> L (x - c_in) + c_out for (B, 2, 2) ``linear`` and (B, 2) centres."""
    b = len(linear)
    m = identity(b)
    m[:, :2, :2] = linear
    c_in = np.asarray(center_in, dtype=np.float64).reshape(b, 2)
    c_out = np.asarray(center_out, dtype=np.float64).reshape(b, 2)
    m[:, :2, 2] = c_out - (linear @ c_in[:, :, None])[:, :, 0]
    return m


def rotation_linear(degrees) -> np.ndarray:
    """(B, 2, 2) counter-clockwise rotation as displayed (y points down), as DALI and torchvision:
    a point right of the centre moves up."""
    (deg,), b = _batch(degrees)
    c, s = cos_sin(deg)
    return np.stack([np.stack([c, s], -1), np.stack([-s, c], -1)], -2)


def shear_linear(shear_x_deg, shear_y_deg) -> np.ndarray:
    (sx, sy), b = _batch(shear_x_deg, shear_y_deg)
    out = np.tile(np.eye(2), (b, 1, 1))
    out[:, 0, 1] = np.tan(np.deg2rad(sx))
    out[:, 1, 0] = np.tan(np.deg2rad(sy))
    return out


def is_projective(m: np.ndarray) -> np.ndarray:
    """(...,) whether each (..., 3, 3) matrix has a last row other than [0, 0, 1] (a
    homography: points map with the perspective divide)."""
    m = np.asarray(m)
    return (m[..., 2, 0] != 0) | (m[..., 2, 1] != 0) | (m[..., 2, 2] != 1)


def apply_points(m: np.ndarray, pts: np.ndarray) -> np.ndarray:
    """Map (B, K, 2) points through (B, 3, 3) matrices, with the perspective divide
    ``(x', y') = (M0 . p, M1 . p) / (M2 . p)`` where a matrix is projective (an affine one maps
    exactly as before: no divide)."""
    # matmul, not einsum: einsum's set-up costs tens of microseconds on these tiny batches
    out = pts @ np.swapaxes(m[:, :2, :2], 1, 2) + m[:, None, :2, 2]
    if is_projective(m).any():
        w = pts @ m[:, 2, :2, None] + m[:, None, 2, 2:3]  # (B, K, 1)
        with np.errstate(divide="ignore", invalid="ignore"):
            out = out / w
    return out


def degenerate_quads(start, end) -> np.ndarray:
    """(B,) bool: where ``start`` or ``end`` (B, 4, 2) has no homography: a point not finite,
    or three of the four on a line (or repeated)."""
    s = np.asarray(start, np.float64).reshape(-1, 4, 2)
    e = np.asarray(end, np.float64).reshape(-1, 4, 2)
    b = max(len(s), len(e))
    s, e = np.broadcast_to(s, (b, 4, 2)), np.broadcast_to(e, (b, 4, 2))
    bad = ~(np.isfinite(s).all((1, 2)) & np.isfinite(e).all((1, 2)))
    for q in (s, e):  # a homography needs 4 points, no 3 of them on a line, on each side
        for i, j, k in ((0, 1, 2), (0, 1, 3), (0, 2, 3), (1, 2, 3)):
            d1, d2 = q[:, j] - q[:, i], q[:, k] - q[:, i]
            cross = d1[:, 0] * d2[:, 1] - d1[:, 1] * d2[:, 0]
            span = np.maximum(np.abs(d1).max(1), np.abs(d2).max(1))
            bad |= ~(np.abs(cross) > 1e-9 * span * span)
    return bad


def homography(start, end) -> np.ndarray:
    """(B, 3, 3) float64 matrices mapping the 4 points ``start`` (B, 4, 2) onto ``end``
    (B, 4, 2) (continuous coordinates), normalised to ``H[2, 2] = 1``: the exact solution of
    the 8 equations ``x'_k (h20 x_k + h21 y_k + 1) = h00 x_k + h01 y_k + h02`` (and y' alike),
    as torchvision's ``_get_perspective_coeffs`` sets them up (it solves the inverse map, end ->
    start, and rounds the coefficients to float32; this is the float64 solve).

    Raises:
        ValueError: for a degenerate quadrilateral (three points on a line, a singular system).
    """
    s = np.asarray(start, np.float64).reshape(-1, 4, 2)
    e = np.asarray(end, np.float64).reshape(-1, 4, 2)
    b = max(len(s), len(e))
    s, e = np.broadcast_to(s, (b, 4, 2)), np.broadcast_to(e, (b, 4, 2))
    x, y, u, v = s[..., 0], s[..., 1], e[..., 0], e[..., 1]
    one, zero = np.ones_like(x), np.zeros_like(x)
    rows_u = np.stack([x, y, one, zero, zero, zero, -u * x, -u * y], -1)
    rows_v = np.stack([zero, zero, zero, x, y, one, -v * x, -v * y], -1)
    a = np.concatenate([rows_u, rows_v], 1)  # (B, 8, 8)
    rhs = np.concatenate([u, v], 1)
    bad = degenerate_quads(s, e)
    if bad.any():
        raise ValueError(f"perspective: the corner points of samples {np.nonzero(bad)[0].tolist()} "
                         "are degenerate (three on a line, or repeated)")
    h = np.linalg.solve(a, rhs[..., None])[..., 0]
    return np.concatenate([h, np.ones((b, 1))], 1).reshape(b, 3, 3)


def canvas_region(m: np.ndarray, region: np.ndarray, out_sizes_hw: np.ndarray) -> np.ndarray:
    """(B, 4) enclosing box of ``region`` (B, 4) mapped through ``m``, clipped to the output."""
    x0, y0, x1, y1 = (region[:, i] for i in range(4))
    corners = np.stack([np.stack([x0, y0], -1), np.stack([x1, y0], -1),
                        np.stack([x0, y1], -1), np.stack([x1, y1], -1)], 1)
    p = apply_points(m, corners)
    out = np.concatenate([p.min(1), p.max(1)], -1)
    hw = np.asarray(out_sizes_hw, np.float64)
    return np.clip(out, 0, np.stack([hw[:, 1], hw[:, 0], hw[:, 1], hw[:, 0]], -1))


def canvas_rects(sizes_hw) -> np.ndarray:
    """(..., 4) float64 rectangles [0, 0, W, H] of canvases (..., 2) (H, W)."""
    hw = np.asarray(sizes_hw, np.float64)
    return np.concatenate([np.zeros_like(hw), hw[..., ::-1]], -1)


def axis_canvases_in_output(composed, sizes) -> np.ndarray:
    """(B, 4) [x_lo, y_lo, x_hi, y_hi]: the intersection of every canvas k (B, 2) of a chain of
    axis-aligned ops, mapped to the last one's frame by ``composed[-1] @ inv(composed[k])``
    (``composed`` (K, B, 3, 3): start frame -> canvas k)."""
    d = composed[:, :, [0, 1], [0, 1]]  # (K, B, 2) scales
    t = composed[:, :, :2, 2]
    s = d[-1] / d  # canvas k -> output, per axis
    off = t[-1] - s * t
    e0, e1 = off, s * np.asarray(sizes, np.float64)[:, :, ::-1] + off
    lo, hi = np.minimum(e0, e1).max(0), np.maximum(e0, e1).min(0)
    return np.concatenate([lo, hi], 1)


def _inside(points, sizes_hw, tol):
    """(B,) whether all of the (B, K, 2) points lie in [-tol, W + tol] x [-tol, H + tol]."""
    w, h = sizes_hw[:, 1, None], sizes_hw[:, 0, None]
    x, y = points[..., 0], points[..., 1]
    return ((x >= -tol) & (x <= w + tol) & (y >= -tol) & (y <= h + tol)).all(1)


def _corners(sizes_hw):
    """(B, 4, 2) corners of the canvases [0, W] x [0, H]."""
    w, h = sizes_hw[:, 1].astype(np.float64), sizes_hw[:, 0].astype(np.float64)
    z = np.zeros_like(w)
    return np.stack([np.stack([z, z], -1), np.stack([w, z], -1),
                     np.stack([z, h], -1), np.stack([w, h], -1)], 1)


def clamp_of_rect(rect, source_sizes):
    """(B, 4) int64 ``[cx0, cx1, cy0, cy1]``: the columns and rows of the source whose pixel
    centres lie in ``rect`` (B, 4) ``[x_lo, x_hi, y_lo, y_hi]`` (centre ``j + 0.5`` in
    ``[x_lo, x_hi)``: ``ceil(x_lo - 0.5) <= j <= ceil(x_hi - 0.5) - 1``), kept inside the
    image and non-empty (a rect narrower than a pixel keeps its nearest column)."""
    rect = np.asarray(rect, np.float64).reshape(-1, 4)
    last = np.asarray(source_sizes, np.float64).reshape(-1, 2)[:, [1, 0]] - 1  # W - 1, H - 1
    with np.errstate(invalid="ignore"):
        c = np.ceil(rect - 0.5) - [0, 1, 0, 1]
        lo = np.clip(c[:, 0::2], 0, last)
        hi = np.clip(c[:, 1::2], lo, last)
    return np.stack([lo, hi], -1).reshape(-1, 4).astype(np.int64)


def _canvas_in_source(comp, sizes):
    """(lo, hi), each (..., 2) as (x, y): the canvases [0, W] x [0, H] of ``sizes`` (..., 2)
    (H, W) mapped back to the start frame by the axis-aligned ``comp`` (..., 3, 3)."""
    s = comp[..., [0, 1], [0, 1]]  # x and y scales
    t = comp[..., :2, 2]
    with np.errstate(divide="ignore", invalid="ignore"):
        e0, e1 = -t / s, (np.asarray(sizes, np.float64)[..., ::-1] - t) / s
    return np.minimum(e0, e1), np.maximum(e0, e1)


def pixel_exact(m, tol=1e-9) -> np.ndarray:
    """(...,) whether the affine matrices ``m`` (..., 3, 3) move pixels without resampling: a
    linear part of +-1 / 0 with one unit per row (flips, quarter turns) and integer offsets, so
    pixel centres map onto pixel centres (a crop, a flip, a paste at an integral place)."""
    m = np.asarray(m, np.float64)
    a, t = m[..., :2, :2], m[..., :2, 2]
    ra = np.round(a)
    unit = ((np.abs(a - ra) <= tol).all((-2, -1)) & (np.abs(ra).sum(-1) == 1).all(-1)
            & (np.abs(ra).sum(-2) == 1).all(-1))
    whole = (np.abs(t - np.round(t)) <= tol * (1.0 + np.abs(t))).all(-1)
    return unit & whole & (m[..., 2, 0] == 0) & (m[..., 2, 1] == 0) & (m[..., 2, 2] == 1)


def axis_copy(m, tol=1e-9) -> np.ndarray:
    """(...,) whether the matrices ``m`` (..., 3, 3) copy pixels and keep the axes: ``pixel_exact``
    without a quarter turn (a crop, a flip, a paste at an integral place)."""
    m = np.asarray(m, np.float64)
    return pixel_exact(m, tol) & (np.abs(m[..., 0, 1]) <= tol) & (np.abs(m[..., 1, 0]) <= tol)


def _copied_canvases(ops, comp, roi=None) -> np.ndarray:
    """(K, B) whether canvas k needs no tap clamp: op k copies pixels (``pixel_exact``), or
    resamples a region of interest (``roi[k]``: DALI's resize reads beyond its region), and
    everything after it copies (canvas k -> output). Running the ops one by one, nothing then
    resamples canvas k, so no tap is ever taken beyond its edge. (A resampling op's canvas
    clamps: a crop and a resize in one matrix replicates the window's edge; so does a canvas
    that a later op resamples.)"""
    with np.errstate(divide="ignore", invalid="ignore"):
        tail = np.matmul(comp[-1][None], np.linalg.inv(comp))
    own = pixel_exact(ops)
    if roi is not None:
        own = own | np.asarray(roi, bool).reshape(-1, 1)
    return own & pixel_exact(tail)


def _axis_rect(rect, rect_fill, ops, comp, sizes, src, roi=None):
    """valid_region of a chain whose composed matrices are all axis-aligned, with one fill:
    the source rect intersected with every canvas mapped back, (K, B) at once; the clamp's rect
    with the canvases that are resampled (not ``_copied_canvases``) only."""
    b, c = rect_fill.shape
    lo, hi = _canvas_in_source(comp, sizes)
    copied = _copied_canvases(ops, comp, roi)[..., None]
    clo = np.maximum(rect[:, 0::2], np.where(copied, -np.inf, lo).max(0))
    chi = np.minimum(rect[:, 1::2], np.where(copied, np.inf, hi).min(0))
    lo = np.maximum(rect[:, 0::2], lo.max(0))
    hi = np.minimum(rect[:, 1::2], hi.min(0))
    rect = np.stack([lo, hi], -1).reshape(b, 4)
    clamp = clamp_of_rect(np.stack([clo, chi], -1).reshape(b, 4), src)
    return (rect, rect_fill, clamp, np.zeros((b, 0, 4)), np.zeros((b, 0, c)),
            np.zeros(b, np.int64))


def valid_region(source_sizes, ops, composed, sizes, fills, fill, roi=None):
    """Where the output of a fused chain holds source content, as the kernels test it.

    Running the ops one by one, op k samples its input canvas and puts its ``fill`` wherever
    its output maps outside that canvas; later ops carry that fill along as content. So an
    output point holds source content iff it lies inside the source image and inside every
    intermediate canvas, mapped to it; else it holds the fill of the LAST op that found it
    outside its input. This function turns that rule into what one warp needs:

    * ``rect`` (B, 4) ``[x_lo, x_hi, y_lo, y_hi]`` in SOURCE coordinates: the source image
      intersected with every canvas that is an axis-aligned rectangle there (crop, pad, flip,
      resize, letterbox, zoom-out and quarter turns, in any composition). A sample point
      ``(x, y)`` is inside iff ``x_lo <= x < x_hi and y_lo <= y < y_hi``. Its ``rect_fill``
      (B, C) is the fill outside it. ``clamp`` (B, 4) int64 ``[cx0, cx1, cy0, cy1]``: the source
      columns / rows whose centres lie in the rect of the source and of the canvases that are
      resampled (within the image); bilinear taps are clamped to them, so a crop's edge
      replicates as the cropped image's edge would when a later op resamples it. A canvas that
      is copied to the output (``_copied_canvases``: a crop, flip or paste with nothing but
      such copies after it) does not clamp: a resize followed by a crop reads the taps of the
      resize beyond the window, as the resized image's pixels are made.
    * ``slabs`` (B, S, 4) ``[a, b, c, r]`` in OUTPUT coordinates for the other canvases (after a
      free rotation or shear): a point ``(ox, oy)`` is inside iff ``0 <= (a ox + b oy) + c < r``;
      ``slab_fill`` (B, S, C); ``nslab`` (B,) of them are used, in priority order: the first
      slab a point violates gives its fill, then the rect. Where a perspective (a projective
      op) follows canvas k, the map output -> canvas k is projective and its slabs are
      ``[a, b, c, r, d, e, f]`` (B, S, 7): inside iff ``0 <= ((a ox + b oy) + c) / ((d ox +
      e oy) + f) < r`` (the perspective divide); the 4-column form is returned when every slab
      is affine.

    Every axis-aligned canvas joins the rect, the output canvas too; the clamp takes those that
    are resampled (a crop followed by a resize clamps the resize's taps to the crop, as running
    them one by one does; a crop and a resize in one op's matrix too). Other canvases need
    a slab only where they can cut something: canvas k is redundant when the next op maps it
    onto a superset of the next canvas (a flip, a resize, a crop inside it). When the chain's
    fills differ, only canvases below the first slab and of the source's fill join the rect
    (so the fill priority holds); the rest become slabs.

    Args:
        source_sizes: (B, 2) (H, W) of the start frame.
        ops, composed: per op (B, 3, 3): its own matrix, and start frame -> its output.
        sizes: per op (B, 2) (H, W) of its output canvas.
        fills: per op (B, C): its fill.
        fill: (B, C) the fill where the chain has no op.
        roi: per op, whether it resamples a region of interest (its canvas then clamps no tap
            unless a later op resamples it; ``_copied_canvases``); default none does.
    """
    src = np.asarray(source_sizes, np.float64).reshape(-1, 2)
    b, c = fill.shape
    rect = np.stack([np.zeros(b), src[:, 1], np.zeros(b), src[:, 0]], -1)
    rect_fill = (fills[0] if fills else fill).copy()
    if ops:
        comp = np.stack(composed)  # (K, B, 3, 3)
        if not (comp[:, :, 0, 1].any() or comp[:, :, 1, 0].any() or is_projective(comp).any()) and all(
                np.array_equal(f, rect_fill) for f in fills):
            # the common chains (crop, flip, resize, pad, letterbox, zoom-out; one fill): every
            # canvas joins the rect, all at once
            return _axis_rect(rect, rect_fill, np.stack(ops), comp, np.asarray(sizes, np.float64),
                              src, roi)
    final_inv = np.linalg.inv(composed[-1]) if ops else np.tile(np.eye(3), (b, 1, 1))
    slab_rows, slab_fill, slab_use = [], [], []
    all_same = all(np.array_equal(f, rect_fill) for f in fills)
    merging = np.ones(b, bool)  # per sample: still below the first slab / other fill
    clamp_rect = rect.copy()  # the canvases that are resampled only (_copied_canvases)
    copied = _copied_canvases(np.stack(ops), np.stack(composed), roi) if ops else None
    # canvas k (the output of op k) is cut by op k + 1; the last canvas is the output itself,
    # which no sample point leaves: it joins the rect, and the clamp where op k resamples (a
    # crop and a resize in one matrix)
    for k in range(len(ops)):
        size_k = np.asarray(sizes[k], np.float64)
        last = k == len(ops) - 1
        if last:
            needed, fill_k = np.zeros(b, bool), rect_fill
        else:
            back = apply_points(np.linalg.inv(ops[k + 1]), _corners(np.asarray(sizes[k + 1], np.float64)))
            needed = ~_inside(back, size_k, 1e-9 * (1.0 + size_k.max(1, keepdims=True)))
            fill_k = fills[k + 1]
        ck = composed[k]
        axis = (ck[:, 0, 1] == 0) & (ck[:, 1, 0] == 0) & ~is_projective(ck)
        same = (fill_k == rect_fill).all(1)
        # axis-aligned canvases join the rect even where redundant: they cut no content then,
        # but they clamp the taps as the op that reads them would
        to_rect = axis & (same if all_same else (merging & same))
        to_slab = needed & ~to_rect
        if to_rect.any():
            lo, hi = _canvas_in_source(ck, size_k)
            sel = to_rect[:, None]
            rect[:, 0::2] = np.where(sel, np.maximum(rect[:, 0::2], lo), rect[:, 0::2])
            rect[:, 1::2] = np.where(sel, np.minimum(rect[:, 1::2], hi), rect[:, 1::2])
            sel = (to_rect & ~copied[k])[:, None]
            clamp_rect[:, 0::2] = np.where(sel, np.maximum(clamp_rect[:, 0::2], lo), clamp_rect[:, 0::2])
            clamp_rect[:, 1::2] = np.where(sel, np.minimum(clamp_rect[:, 1::2], hi), clamp_rect[:, 1::2])
        if to_slab.any():
            r = ck @ final_inv  # output -> canvas k (projective where a perspective follows k)
            for ax in (0, 1):
                slab_rows.append(np.concatenate([r[:, ax, :], size_k[:, 1 - ax, None], r[:, 2, :]], -1))
                slab_fill.append(fill_k)
                slab_use.append(to_slab)
        merging &= ~to_slab
    clamp = clamp_of_rect(clamp_rect, src)
    if not slab_rows:
        return rect, rect_fill, clamp, np.zeros((b, 0, 4)), np.zeros((b, 0, c)), np.zeros(b, np.int64)
    # priority: the latest canvas first; each sample's used slabs moved to the front
    rows = np.stack(slab_rows[::-1], 1)
    fill = np.stack(slab_fill[::-1], 1)
    use = np.stack(slab_use[::-1], 1)
    order = np.argsort(~use, axis=1, kind="stable")
    rows = np.take_along_axis(rows, order[:, :, None], 1)
    fill = np.take_along_axis(fill, order[:, :, None], 1)
    nslab = use.sum(1).astype(np.int64)
    width = int(nslab.max())
    rows = rows[:, :width]
    d = rows[..., 4:]
    if not ((d[..., 0] != 0) | (d[..., 1] != 0) | (d[..., 2] != 1)).any():
        rows = rows[..., :4]  # affine slabs: [a, b, c, r]
    return rect, rect_fill, clamp, rows, fill[:, :width], nslab
