"""Where a warp's sample points leave its region (docs in kernels/warp.py): the twin's per-point
tests (:func:`_source_points`, :func:`_slab_inside`, used by the NumPy twin and by the OpenCV path
alike, so both place the fill at the same points) and the OpenCV path's fill, tested only on the
grid lines not wholly inside (:func:`_fill_outside`)."""
from __future__ import annotations

import numpy as np


def _slab_inside(slab, ox, oy):
    """Whether output points ``(ox, oy)`` lie in the slab ``0 <= (a ox + b oy) + c < r``; a
    projective slab ``[a, b, c, r, d, e, f]`` divides by ``(d ox + e oy) + f`` first."""
    a, b, c, r = slab[:4]
    v = (a * ox + b * oy) + c
    if len(slab) > 4 and (slab[4] != 0 or slab[5] != 0 or slab[6] != 1):
        with np.errstate(divide="ignore", invalid="ignore"):
            v = v / ((slab[4] * ox + slab[5] * oy) + slab[6])
    return (v >= 0) & (v < r)


def _source_points(inv, ox, oy):
    """The input points ``(x, y)`` of output positions ``(ox, oy)`` through ``inv`` (3, 3), as
    warp.cu computes them: ``x = (a00 ox + a01 oy) + a02`` (y alike), then, for a projective
    ``inv``, divided by ``w = (a20 ox + a21 oy) + a22``."""
    x = inv[0, 0] * ox + inv[0, 1] * oy + inv[0, 2]
    y = inv[1, 0] * ox + inv[1, 1] * oy + inv[1, 2]
    if inv[2, 0] != 0 or inv[2, 1] != 0 or inv[2, 2] != 1:
        w = inv[2, 0] * ox + inv[2, 1] * oy + inv[2, 2]
        with np.errstate(divide="ignore", invalid="ignore"):
            x, y = x / w, y / w
    return x, y


def _grid_positions(n_out: int, taps: int) -> np.ndarray:
    """Output positions ``j + (a + 0.5) / taps`` of the supersampled grid along one axis, in the
    grid's order (index ``j * taps + a``), computed as the twin computes them."""
    return (np.arange(n_out, dtype=np.float64)[:, None]
            + ((np.arange(taps) + 0.5) / taps)[None, :]).reshape(-1)


def _inside_masks(inv, ox, oy, spec, b, grid):
    """(inside the rect, [inside slab k for each used slab]) at the output positions ``ox``
    (columns) and ``oy`` (rows), by the twin's formulas: as a (rows, cols) grid when ``grid``,
    else point by point (``ox``, ``oy`` of one shape)."""
    rect = spec.rect[b]
    if spec.proj[b]:  # a homography: the points with the divide, as the twin maps them
        if grid:
            ox, oy = ox[None, :], oy[:, None]
        x, y = _source_points(inv, ox, oy)
        inside = (x >= rect[0]) & (x < rect[1]) & (y >= rect[2]) & (y < rect[3])
    elif grid:
        if inv[0, 1] == 0 and inv[1, 0] == 0:  # axis-aligned: x from the column, y from the row
            x, y = inv[0, 0] * ox + inv[0, 2], inv[1, 1] * oy + inv[1, 2]
            inside = ((y >= rect[2]) & (y < rect[3]))[:, None] & ((x >= rect[0]) & (x < rect[1]))[None, :]
        else:
            x = (inv[0, 0] * ox)[None, :] + (inv[0, 1] * oy)[:, None] + inv[0, 2]
            y = (inv[1, 0] * ox)[None, :] + (inv[1, 1] * oy)[:, None] + inv[1, 2]
            inside = (x >= rect[0]) & (x < rect[1]) & (y >= rect[2]) & (y < rect[3])
        ox, oy = ox[None, :], oy[:, None]
    else:
        x = inv[0, 0] * ox + inv[0, 1] * oy + inv[0, 2]
        y = inv[1, 0] * ox + inv[1, 1] * oy + inv[1, 2]
        inside = (x >= rect[0]) & (x < rect[1]) & (y >= rect[2]) & (y < rect[3])
    return inside, [_slab_inside(spec.slabs[b, k], ox, oy) for k in range(int(spec.nslab[b]))]


def _segments_inside(inv, px, py, qx, qy, spec, b):
    """Whether each output segment from ``(px, py)`` to ``(qx, qy)`` (arrays of one shape) lies
    inside the region (the rect and every slab), with a margin that the twin's rounding cannot
    cross. Each bound is a half-plane in output coordinates where its divide is positive (a
    homography keeps lines), so a segment is inside when both ends are, by a margin: the
    numerator of ``value - bound`` is linear along it (its least value at an end) and the divide
    at most the larger end's."""
    def ok(num_p, num_q, den_p, den_q, val_p, val_q):
        # value - bound >= min(num) / max(den) along the segment; the twin's rounding is far
        # below 1e-7 of the values (which are monotone along it, so largest at an end)
        tol = 1e-7 * (1.0 + np.maximum(np.abs(val_p), np.abs(val_q)))
        with np.errstate(invalid="ignore"):
            return np.minimum(num_p, num_q) / np.maximum(den_p, den_q) > tol

    def lin(r, x, y):
        return (r[0] * x + r[1] * y) + r[2]

    good = np.ones(np.shape(px), bool)
    dp, dq = (lin(inv[2], px, py), lin(inv[2], qx, qy)) if spec.proj[b] else (1.0, 1.0)
    good &= (np.asarray(dp) > 0) & (np.asarray(dq) > 0)
    rect = spec.rect[b]
    with np.errstate(divide="ignore", invalid="ignore"):
        for row, lo, hi in ((inv[0], rect[0], rect[1]), (inv[1], rect[2], rect[3])):
            ap, aq = lin(row, px, py), lin(row, qx, qy)
            vp, vq = ap / dp, aq / dq
            if np.isfinite(lo):
                good &= ok(ap - lo * dp, aq - lo * dq, dp, dq, vp, vq)
            if np.isfinite(hi):
                good &= ok(hi * dp - ap, hi * dq - aq, dp, dq, vp, vq)
        for k in range(int(spec.nslab[b])):
            sl = spec.slabs[b, k]
            ap, aq = lin(sl[:3], px, py), lin(sl[:3], qx, qy)
            sp, sq = (lin(sl[4:7], px, py), lin(sl[4:7], qx, qy)) if len(sl) > 4 else (1.0, 1.0)
            good &= (np.asarray(sp) > 0) & (np.asarray(sq) > 0)
            vp, vq = ap / sp, aq / sq
            good &= ok(ap, aq, sp, sq, vp, vq)
            good &= ok(sl[3] * sp - ap, sl[3] * sq - aq, sp, sq, vp, vq)
    return good


def _fill_outside(big, inv, nx, ny, spec, b, fills):
    """Write the fills where the supersampled grid ``big`` ((ny H, nx W, ...) of the output)
    leaves the region: only on the rows of the grid not wholly inside (:func:`_segments_inside`),
    and there by each row's span inside every mask (:func:`_row_spans`: the twin's per-point test
    (:func:`_inside_masks`) at a few points a bound, the rest by monotony), so that the fill lands
    on exactly the points the full point-by-point test gives, in a few per-row operations
    instead of float64 grids of the whole output."""
    gx, gy = _grid_positions(big.shape[1] // nx, nx), _grid_positions(big.shape[0] // ny, ny)
    rows = np.flatnonzero(~_segments_inside(inv, np.full_like(gy, gx[0]), gy,
                                            np.full_like(gy, gx[-1]), gy, spec, b))
    if not len(rows) or _segments_inside(inv, gx, np.full_like(gx, gy[0]), gx,
                                         np.full_like(gx, gy[-1]), spec, b).all():
        return
    spans = _row_spans(inv, gx, gy[rows], spec, b)
    if len(rows) == rows[-1] - rows[0] + 1:
        sub, back = big[rows[0]:rows[-1] + 1], None  # a view
    else:
        sub, back = big[rows], rows
    # the rect's fill first, then the slabs from the last: the first violated slab wins
    for (lo, hi, exact), fv in [(spans[0], fills[0])] + list(zip(spans[1:], fills[1:]))[::-1]:
        fv = np.asarray(fv, np.float64)
        value = np.clip(np.floor(fv + 0.5), 0, 255) if big.dtype == np.uint8 else fv
        _fill_spans(sub, lo, hi, exact, value.astype(big.dtype))
    if back is not None:
        big[back] = sub


def _fill_spans(sub, lo, hi, exact, value):
    """``value`` (per channel) written on each row of ``sub`` outside its columns ``lo <= j <
    hi`` (rows ``exact[0]``: where ``exact[1]`` is False): the rows wholly outside at once, then
    the band of columns left of the largest ``lo`` and the band right of the least ``hi``, each
    under its mask."""
    n, w = sub.shape[:2]
    lo, hi = np.clip(lo, 0, w), np.clip(hi, 0, w)
    if exact is not None:
        lo[exact[0]], hi[exact[0]] = 0, w  # (written below, point by point)
    row = np.ascontiguousarray(np.broadcast_to(value, (w,) + sub.shape[2:]))
    empty = lo >= hi
    if empty.any():
        sub[np.flatnonzero(empty)] = row
        lo, hi = np.where(empty, 0, lo), np.where(empty, w, hi)
    cols = np.arange(w, dtype=np.int64)
    r = np.flatnonzero(lo > 0)
    if len(r):  # the left band: columns before each row's lo
        r0, r1 = int(r[0]), int(r[-1]) + 1
        c1 = int(lo[r0:r1].max())
        _put_where(sub[r0:r1, :c1], cols[None, :c1] < lo[r0:r1, None], row[:c1])
    r = np.flatnonzero(hi < w)
    if len(r):  # the right band: columns from each row's hi
        r0, r1 = int(r[0]), int(r[-1]) + 1
        c0 = int(hi[r0:r1].min())
        _put_where(sub[r0:r1, c0:], cols[None, c0:] >= hi[r0:r1, None], row[c0:])
    if exact is not None:  # (rows exact[0], columns outside: one assignment)
        r, c = np.nonzero(~exact[1])
        sub[exact[0][r], c] = value


def _put_where(sub, mask, row):
    """``sub[mask] = row`` (``row``: one row of ``sub``'s values, broadcast down) by
    ``cv2.copyTo`` from a filled image of ``sub``'s shape (a boolean setitem costs about 50x
    more)."""
    import cv2

    filled = np.empty_like(sub)
    filled[...] = row
    got = cv2.copyTo(filled, mask.view(np.uint8), sub)
    if not isinstance(got, np.ndarray) or got.ctypes.data != sub.ctypes.data:
        sub[mask] = filled[mask]  # (OpenCV did not write in place: a layout it copies)


_SPAN_WINDOW = 2  # points tested on either side of a bound's estimated crossing


def _row_bounds(inv, spec, b):
    """The bounds of each mask (the rect, then each used slab) as arrays over the K bounds:
    ``num``, ``den`` (K, 3), ``bound`` (K,), ``lower`` (K,) bool and ``owner`` (K,) (its mask's
    index: 0 the rect, k + 1 slab k): the twin's value ``((num0 ox + num1 oy) + num2) / ((den0 ox + den1 oy) + den2)``,
    and ``value >= bound`` (lower) or ``value < bound``. Where the twin does not divide, ``den``
    is ``(0, 0, 1)``: a divide by 1, exact. An infinite bound is left out (it holds at every
    finite value)."""
    one = np.array([0.0, 0.0, 1.0])
    den = inv[2] if spec.proj[b] and (inv[2, 0] != 0 or inv[2, 1] != 0 or inv[2, 2] != 1) else one
    rect = spec.rect[b]
    rows = [(inv[0], den, rect[0], True, 0), (inv[0], den, rect[1], False, 0),
            (inv[1], den, rect[2], True, 0), (inv[1], den, rect[3], False, 0)]
    for k in range(int(spec.nslab[b])):
        sl = spec.slabs[b, k]
        sden = sl[4:7] if len(sl) > 4 and (sl[4] != 0 or sl[5] != 0 or sl[6] != 1) else one
        rows += [(sl[:3], sden, 0.0, True, k + 1), (sl[:3], sden, sl[3], False, k + 1)]
    rows = [r for r in rows if np.isfinite(r[2])]
    return (np.array([r[0] for r in rows], np.float64).reshape(-1, 3),
            np.array([r[1] for r in rows], np.float64).reshape(-1, 3),
            np.array([r[2] for r in rows], np.float64), np.array([r[3] for r in rows], bool),
            np.array([r[4] for r in rows], np.int64))


def _row_spans(inv, gx, oy, spec, b):
    """Per mask (the rect, then each used slab), the columns of each grid row (output positions
    ``gx`` along rows at ``oy``) that lie inside it: ``[lo, hi, exact]``, columns
    ``lo <= j < hi`` inside, except the rows ``exact[0]`` whose points are inside where
    ``exact[1]`` (rows x columns: the twin's test at every point; ``exact`` None: no such row).

    Each bound of a mask is one side of a threshold on a value that is monotone along a row (a
    linear function, or a ratio of two whose divide is positive there), so it holds on a
    prefix or a suffix of the row. The crossing is estimated, the twin's test is run on the
    ``2 _SPAN_WINDOW + 1`` points around it and on the point beyond each side of them; such a
    point and the row's end on its side that lie on one side of the bound by the margin the
    rounding cannot cross (1e-7, as :func:`_segments_inside`) settle every point between them.
    A row where this does not hold (the divide not positive at both ends, a value within the
    margin of a bound away from its crossing, more than one change) is tested point by point."""
    n_col, n_row = len(gx), len(oy)
    num, den, bound, lower, owner = _row_bounds(inv, spec, b)
    n_mask = 1 + int(spec.nslab[b])
    kb = len(bound)
    step = (gx[-1] - gx[0]) / max(n_col - 1, 1)  # grid spacing: gx[j] ~ gx[0] + j step
    offs = np.arange(-_SPAN_WINDOW - 1, _SPAN_WINDOW + 2)  # guard, window, guard
    # crossing of (num - bound den) . (ox, oy, 1) = 0 along each row: (K, R)
    lin = num - bound[:, None] * den
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        at = -(lin[:, 1:2] * oy[None, :] + lin[:, 2:3]) / lin[:, 0:1]
    k = np.nan_to_num((at - gx[0]) / step, nan=0.0, posinf=n_col, neginf=-1.0)
    k = np.clip(np.round(k), 0, n_col - 1).astype(np.int64)
    idx = np.clip(k[..., None] + offs, 0, n_col - 1)  # (K, R, 7)
    pts = np.concatenate([idx, np.broadcast_to(np.array([0, n_col - 1]), (kb, n_row, 2))], 2)
    ox, oyc = gx[pts], oy[None, :, None]
    n3 = num[:, :, None, None]
    d3 = den[:, :, None, None]
    v = n3[:, 0] * ox + n3[:, 1] * oyc + n3[:, 2]
    with np.errstate(divide="ignore", invalid="ignore"):
        v = v / (d3[:, 0] * ox + d3[:, 1] * oyc + d3[:, 2])
    bnd = bound[:, None, None]
    ok = np.where(lower[:, None, None], v >= bnd, v < bnd)
    eps = 1e-7 * (1.0 + np.abs(v))
    clear = (v - eps >= bnd) | (v + eps < bnd)
    p = ok[..., :-2]
    last = len(offs) - 1
    # the divide positive at both ends of the row (so along it: the value is monotone there)
    ends = den[:, 0:1, None] * gx[[0, -1]][None, None, :] + den[:, 1:2, None] * oy[None, :, None] \
        + den[:, 2:3, None]
    bad = ~(ends > 0).all(2)
    # a side beyond its guard: the guard and the row's end agree, both clear of the bound
    bad |= (k + offs[0] >= 0) & ~(clear[..., 0] & clear[..., -2] & (p[..., 0] == ok[..., -2]))
    bad |= (k + offs[-1] <= n_col - 1) & ~(clear[..., last] & clear[..., -1]
                                           & (p[..., -1] == ok[..., -1]))
    change = p[..., 1:] != p[..., :-1]
    bad |= change.sum(2) > 1
    first = p[..., 0]
    j = np.argmax(change, 2)
    at_col = np.where(change.any(2), np.take_along_axis(idx, j[..., None] + 1, 2)[..., 0], n_col)
    # the bound holds on [0, at_col) where it holds first, else on [at_col, n_col)
    hi_k = np.where(first, at_col, n_col)
    lo_k = np.where(first, 0, at_col)
    fallback = bad.any(0)
    exact = np.flatnonzero(fallback)
    masks = [None] * n_mask
    if len(exact):
        inside, slabs = _inside_masks(inv, gx, oy[exact], spec, b, grid=True)
        masks = [inside] + list(slabs)
    spans = []
    for m in range(n_mask):
        sel = owner == m
        lo = lo_k[sel].max(0, initial=0)
        hi = hi_k[sel].min(0, initial=n_col)
        spans.append([lo, hi, None if masks[m] is None else (exact, masks[m])])
    return spans
