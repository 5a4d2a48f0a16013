"""Polygons to masks by COCO's own rule, vectorised: the NumPy twin of kernels/masks.cu.

COCO's masks are what pycocotools makes of a polygon (``mask.frPyObjects`` then ``decode``; its
C function ``rleFrPoly``), and an object of several polygons is their union (``mask.merge``).
That function works on a grid 5 times finer than the pixels:

1. each vertex ``(x, y)`` goes to the fine grid as ``(int)(5 x + 0.5)`` (C's cast: truncation
   toward zero, so a vertex just left of 0 rounds to 0);
2. each edge is walked point by point along its longer axis, from the end with the smaller
   coordinate on that axis (so both directions round alike); the other coordinate of step ``t``
   is ``(int)((a + s t) + 0.5)``, with ``s`` the edge's slope as a float64 division;
3. wherever the walk steps from fine column ``5c + 2`` to ``5c + 3`` (it passes the centre
   ``c + 0.5`` of pixel column ``c``, ``0 <= c < W``), the smaller fine row ``v`` of the two
   points gives a boundary point at pixel row ``ceil((v - 2) / 5)`` clamped to ``[0, H]``;
4. down each column the pixels toggle at those rows (even-odd: a column's boundary points
   come in pairs, since the walk is closed; a point at row H toggles nothing on the canvas).

Each edge's walk moves monotonically along the fine x axis, so it passes a given column at most
once, and where it does the step is found in closed form (long axis x) or by a bisection over
the walk's steps (long axis y), with the very float64 operations of the walk: the boundary
points, and so the masks, are pycocotools' bit for bit (tests/kernels/test_polygon_masks.py on
fresh random polygons and on COCO's own). The walk's junction points between edges lie on the
vertices, where no column is passed; trunc and floor differ only left of x = 0 and above y = 0,
where no kept boundary point depends on them beyond the vertex rounding of step 1.

Polygons come as a dense per-box field (core/instances.py ``dense_polygons``: (N, P, 2)
float64, a NaN row ending each polygon) and each box has its canvas ``(H, W)`` (its sample's).
Coordinates must lie within +-4e8 (pycocotools' ``int``).
"""
from __future__ import annotations

import numpy as np

SCALE = 5  # pycocotools' upsampling of the grid the polygon is walked on


def fine_grid(points) -> np.ndarray:
    """(V, 2) int64 fine-grid vertices: ``(int)(5 x + 0.5)`` as C truncates."""
    return np.trunc(SCALE * np.asarray(points, np.float64) + 0.5).astype(np.int64)


def _walk(a, s, t):
    """The walk's other coordinate at step ``t``: ``(int)((a + s t) + 0.5)``."""
    return np.trunc((a + s * t) + 0.5).astype(np.int64)


def edge_crossings(x0, y0, x1, y1, widths):
    """Every pixel column an edge's walk passes (module docstring, step 3).

    Args:
        x0, y0, x1, y1: (E,) int64 fine-grid ends of each edge, in the polygon's order.
        widths: (E,) the width W of each edge's canvas (columns ``0 <= c < W``).

    Returns:
        ``(edge (M,), column (M,), v (M,))``: the edge, the column it passes and the smaller
        fine row of the two walk points around the pass.
    """
    dx, dy = np.abs(x1 - x0), np.abs(y1 - y0)
    along_x = (dx >= dy) & (dx > 0)
    flip = ((dx >= dy) & (x0 > x1)) | ((dx < dy) & (y0 > y1))
    xs, xe = np.where(flip, x1, x0), np.where(flip, x0, x1)
    ys, ye = np.where(flip, y1, y0), np.where(flip, y0, y1)
    out = [_along_x(np.flatnonzero(along_x), xs, xe, ys, ye, dx, widths),
           _along_y(np.flatnonzero(dx < dy), xs, xe, ys, dy, widths)]
    return tuple(np.concatenate([o[k] for o in out]) for k in range(3))


def _columns(idx, lo, hi, widths):
    """(edge, column) for columns c with ``lo <= 5c + 2`` and ``5c + 3 <= hi``, 0 <= c < W."""
    c_lo = np.maximum(-((2 - lo) // SCALE), 0)        # ceil((lo - 2) / 5)
    c_hi = np.minimum((hi - 3) // SCALE, widths - 1)   # floor((hi - 3) / 5)
    count = np.maximum(c_hi - c_lo + 1, 0)
    edge = np.repeat(idx, count)
    first = np.concatenate([[0], np.cumsum(count)])[:-1]
    col = np.repeat(c_lo, count) + np.arange(int(count.sum())) - np.repeat(first, count)
    return edge, col


def _along_x(idx, xs, xe, ys, ye, dx, widths):
    """Edges walked along x (from xs <= xe): step t sits at fine column xs + t."""
    e, c = _columns(idx, xs[idx], xe[idx], widths[idx])
    s = (ye[e] - ys[e]).astype(np.float64) / dx[e]
    t = SCALE * c + 2 - xs[e]
    a = ys[e].astype(np.float64)
    v = np.minimum(_walk(a, s, t.astype(np.float64)), _walk(a, s, (t + 1).astype(np.float64)))
    return e, c, v


def _along_y(idx, xs, xe, ys, dy, widths):
    """Edges walked along y (from ys <= ye): step t sits at fine row ys + t, its column
    ``(int)((xs + s t) + 0.5)`` moves monotonically, one at a time; the pass of column c is the
    first step whose column is past ``5c + 2`` (rising) or at most ``5c + 2`` (falling)."""
    a = xs[idx].astype(np.float64)
    s = (xe[idx] - xs[idx]).astype(np.float64) / dy[idx]
    u0, u1 = _walk(a, s, 0.0), _walk(a, s, dy[idx].astype(np.float64))
    e, c = _columns(np.arange(len(idx)), np.minimum(u0, u1), np.maximum(u0, u1), widths[idx])
    a, s, rising, target = a[e], s[e], (u1 > u0)[e], SCALE * c + 2
    lo, hi = np.ones(len(e), np.int64), dy[idx][e].copy()
    while np.any(lo < hi):
        mid = (lo + hi) // 2
        u = _walk(a, s, mid.astype(np.float64))
        hit = np.where(rising, u > target, u <= target)
        hi, lo = np.where(hit, mid, hi), np.where(hit, lo, mid + 1)
    return idx[e], c, ys[idx][e] + lo - 1


def boundary_points(points, poly_offsets, heights, widths):
    """``(polygon, column, row)`` of every boundary point of every polygon (module docstring,
    steps 1-3); ``heights`` / ``widths`` (Q,): each polygon's canvas."""
    pts = np.asarray(points, np.float64).reshape(-1, 2)
    off = np.asarray(poly_offsets, np.int64)
    counts = np.diff(off)
    g = fine_grid(pts)
    nxt = np.arange(len(pts)) + 1
    ends = off[1:][counts > 0] - 1
    nxt[ends] = off[:-1][counts > 0]  # each polygon closes: its last vertex to its first
    poly = np.repeat(np.arange(len(counts)), counts)
    w = np.asarray(widths, np.int64)[poly]
    edge, col, v = edge_crossings(g[:, 0], g[:, 1], g[nxt, 0], g[nxt, 1], w)
    q = poly[edge]
    row = np.clip(-((2 - v) // SCALE), 0, np.asarray(heights, np.int64)[q])
    return q, col, row


def plane_size(canvas, out_hw=None) -> tuple:
    """``(H, W)`` of the mask planes: ``out_hw``, else the largest of the boxes' canvases
    ``canvas`` (N, 2) (``(0, 0)`` for no box)."""
    if out_hw is not None:
        return int(out_hw[0]), int(out_hw[1])
    return tuple(int(v) for v in canvas.max(0)) if len(canvas) else (0, 0)


def polygon_masks_numpy(dense, canvas, out_hw=None) -> np.ndarray:
    """(N, H, W) uint8 0/1 masks of N boxes' polygons, pycocotools' exactly (module docstring):
    each polygon filled even-odd, a box's polygons merged (union).

    Args:
        dense: (N, P, 2) float64 polygons (core/instances.py ``dense_polygons``).
        canvas: (N, 2) int ``(H, W)`` of each box's canvas (its sample's).
        out_hw: ``(H, W)`` of the output planes, at least every canvas (default their
            largest); pixels outside a box's canvas are 0.
    """
    from .instances import POLYGON_OVERFLOW, ragged_polygons

    d = np.asarray(dense, np.float64)
    n = len(d)
    hw = np.asarray(canvas, np.int64).reshape(n, 2)
    big_h, big_w = plane_size(hw, out_hw)
    if n and ((hw[:, 0] > big_h).any() or (hw[:, 1] > big_w).any()):
        raise ValueError(f"out_hw {(big_h, big_w)} is smaller than a box's canvas")
    if d.size and (d[:, 0, 0] == POLYGON_OVERFLOW).any():
        raise ValueError("polygons: a row carries the GPU's overflow marker (not polygons)")
    pts, off, boff = ragged_polygons(d)
    box = np.repeat(np.arange(n), np.diff(boff))
    q, col, row = boundary_points(pts, off, hw[box, 0], hw[box, 1])
    # each (polygon, column)'s points in row order pair up: fill [first, second), ...
    order = np.lexsort((row, col, q))
    q, col, row = q[order], col[order], row[order]
    b, c, r0, r1 = box[q[0::2]], col[0::2], row[0::2], row[1::2]
    size = n * (big_h + 1) * big_w
    cover = (np.bincount((b * (big_h + 1) + r0) * big_w + c, minlength=size)
             - np.bincount((b * (big_h + 1) + r1) * big_w + c, minlength=size))
    cover = np.cumsum(cover.reshape(n, big_h + 1, big_w), axis=1)[:, :big_h]
    return (cover > 0).astype(np.uint8)  # union: covered by any of the box's polygons


def polygon_masks_coco(dense, canvas, out_hw=None) -> np.ndarray:
    """:func:`polygon_masks_numpy` made by pycocotools itself (``frPyObjects``, ``merge``,
    ``decode``; a C library made for the job: the CPU path): one call per box that has
    polygons."""
    from pycocotools import mask as coco_mask

    from .instances import ragged_polygons

    pts, off, boff = ragged_polygons(dense)
    n = len(boff) - 1
    hw = np.asarray(canvas, np.int64).reshape(n, 2)
    big_h, big_w = plane_size(hw, out_hw)
    out = np.zeros((n, big_h, big_w), np.uint8)
    for i in np.flatnonzero(np.diff(boff)):
        h, w = (int(v) for v in hw[i])
        polys = [pts[off[j]:off[j + 1]].reshape(-1).tolist() for j in range(boff[i], boff[i + 1])]
        rles = coco_mask.frPyObjects(polys, h, w)
        out[i, :h, :w] = coco_mask.decode(coco_mask.merge(rles))
    return out
