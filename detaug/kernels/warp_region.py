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
    leaves the region, testing points by the twin's formulas (:func:`_inside_masks`) only on the
    rows and columns of the grid not wholly inside (:func:`_segments_inside`): a point off
    them lies on a row or a column that is inside."""
    gx, gy = _grid_positions(big.shape[1] // nx, nx), _grid_positions(big.shape[0] // ny, ny)
    rows = np.flatnonzero(~_segments_inside(inv, np.full_like(gy, gx[0]), gy,
                                            np.full_like(gy, gx[-1]), gy, spec, b))
    cols = np.flatnonzero(~_segments_inside(inv, gx, np.full_like(gx, gy[0]), gx,
                                            np.full_like(gx, gy[-1]), spec, b))
    if not len(rows) or not len(cols):
        return
    inside, slabs = _inside_masks(inv, gx[cols], gy[rows], spec, b, grid=True)
    if len(rows) == rows[-1] - rows[0] + 1 and len(cols) == cols[-1] - cols[0] + 1:
        sub, back = big[rows[0]:rows[-1] + 1, cols[0]:cols[-1] + 1], None  # a view
    else:
        sub, back = big[np.ix_(rows, cols)], np.ix_(rows, cols)
    # the rect's fill first, then the slabs from the last: the first violated slab wins
    for mask, fv in [(inside, fills[0])] + list(zip(slabs, fills[1:]))[::-1]:
        fv = np.asarray(fv, np.float64)
        sub[~mask] = np.clip(np.floor(fv + 0.5), 0, 255) if big.dtype == np.uint8 else fv
    if back is not None:
        big[back] = sub
