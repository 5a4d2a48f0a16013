"""Instance shapes through the per-sample matrices: keypoints, polygons, oriented boxes, masks.

The NumPy reference (CPU path) of what the geometric ops do to the shapes that travel beside
the boxes (readers/segments.py names them). Coordinates as everywhere (docs/design.md):
continuous, an image covers ``[0, W] x [0, H]``, pixel ``(i, j)`` has its centre at
``(j + 0.5, i + 0.5)``; a matrix maps an op's input coordinates to its output coordinates.

A chain is given as its ops, in order: ``matrices`` (K, B, 3, 3), each op's own matrix, and
``sizes`` (K, B, 2) ``(H, W)`` of each op's output canvas (``Geometry.steps``). The shapes are
mapped op by op and cut at every canvas in turn, as boxes are (fusion never changes results):

- keypoints: a labelled point (``v > 0``) that falls outside a canvas (``0 <= x < W``,
  ``0 <= y < H``: it lies on no pixel) becomes ``(0, 0, 0)``, COCO's unlabelled point; a chain
  that mirrors the sample (its matrix has a negative determinant: one flip, or an odd number)
  swaps the points by ``flip_index``, so that a left eye stays a left eye (a vertical flip
  mirrors too, and swaps; a 180-degree turn, two flips, does not);
- polygons: each polygon is clipped to each canvas as a polygon (Sutherland-Hodgman against
  the canvas rectangle; straight edges stay straight under a homography wherever the
  polygon does not reach the horizon) and dropped when fewer than 3 points remain;
- oriented boxes: the 4 corners through the composed matrix, not clipped (DOTA's own corners
  may lie outside the image). Rotations, flips, translations and scales keep a rectangle a
  rectangle and the corners are exact; where the chain shears, scales x and y apart after a
  rotation, or has a perspective, the corners make a general quadrilateral, and the box is the
  smallest-area rectangle enclosing it (one side along one of its edges: the rotating-calipers
  theorem), so that it is an oriented box again and encloses all of the object's content;
- masks: sampled nearest through the inverse of the composed matrix (the source pixel whose
  area holds the output pixel's centre), 0 wherever the centre left an intermediate canvas.
  In a batch a box's bitmap mask is a plane of the batch's largest canvas with its sample's
  canvas at the top left (the field ``bitmasks``, made from run lengths by :func:`rle_planes`).
"""
from __future__ import annotations

import numpy as np


def _map(m, pts):
    """(P, 2) points through per-point (P, 3, 3) matrices, with the perspective divide."""
    out = np.einsum("pij,pj->pi", m[:, :2, :2], pts) + m[:, :2, 2]
    w = np.einsum("pj,pj->p", m[:, 2, :2], pts) + m[:, 2, 2]
    if not np.all(w == 1.0):
        with np.errstate(divide="ignore", invalid="ignore"):
            out = out / w[:, None]
    return out


def _inside(pts, hw):
    """(P,) whether each point lies on a pixel of its (P, 2) ``(H, W)`` canvas."""
    with np.errstate(invalid="ignore"):
        return ((pts[:, 0] >= 0) & (pts[:, 0] < hw[:, 1]) & (pts[:, 1] >= 0)
                & (pts[:, 1] < hw[:, 0]))


def _chain(matrices, sizes):
    m = np.asarray(matrices, np.float64)
    s = np.asarray(sizes, np.int64)
    if m.ndim == 3:
        m, s = m[None], s[None]
    if m.shape[:2] != s.shape[:2] or m.shape[2:] != (3, 3) or s.shape[2:] != (2,):
        raise ValueError(f"a chain is matrices (K, B, 3, 3) and sizes (K, B, 2); got "
                         f"{m.shape} and {s.shape}")
    return m, s


def mirrors(matrices) -> np.ndarray:
    """(B,) whether the chain ``matrices`` (K, B, 3, 3) mirrors each sample: the product's
    determinant is negative."""
    m = np.asarray(matrices, np.float64)
    m = m[None] if m.ndim == 3 else m
    composed = m[0]
    for k in range(1, len(m)):
        composed = m[k] @ composed
    return np.linalg.det(composed) < 0


def transform_keypoints(keypoints, sample, matrices, sizes, flip_index=None) -> np.ndarray:
    """Keypoints through a chain (module docstring).

    Args:
        keypoints: (N, K, 3) ``[x, y, v]`` in the chain's source coordinates; ``(0, 0, 0)``
            is an unlabelled point.
        sample: (N,) int, the sample each instance belongs to.
        matrices, sizes: the chain, (S, B, 3, 3) and (S, B, 2) (one op: (B, 3, 3), (B, 2)).
        flip_index: (K,) the keypoint each one becomes in a mirror image (its own inverse), or
            (N, K), one pairing per instance; None: no swap.

    Returns:
        (N, K, 3) float32 in the last canvas's coordinates.
    """
    m, s = _chain(matrices, sizes)
    kp = np.asarray(keypoints, np.float64).copy()
    n, k = kp.shape[:2]
    sample = np.asarray(sample, np.int64).reshape(-1)
    xy, vis = kp[..., :2].reshape(-1, 2), kp[..., 2].reshape(-1)
    owner = np.repeat(sample, k)
    live = vis > 0
    for step, hw in zip(m, s):
        idx = np.flatnonzero(live)
        xy[idx] = _map(step[owner[idx]], xy[idx])
        live[idx] &= _inside(xy[idx], hw[owner[idx]])
    out = np.concatenate([xy.reshape(n, k, 2), vis.reshape(n, k, 1)], -1)
    out[~live.reshape(n, k)] = 0.0
    if flip_index is not None and n:
        fi = np.broadcast_to(np.asarray(flip_index, np.int64), (n, k))
        flip = mirrors(m)[sample]
        out[flip] = np.take_along_axis(out[flip], fi[flip][..., None], axis=1)
    return out.astype(np.float32)


# per-box fields of a BoxBatch that the chain moves (shapes_through): dense, one row a box, so
# that every op that drops, takes or regroups boxes carries them as it carries labels
SHAPE_FIELDS = ("keypoints", "obb", "polygons", "bitmasks")


def shapes_through(fields, sample, geometry) -> dict:
    """``fields`` with ``keypoints`` (N, K, 3), ``obb`` (N, 4, 2), ``polygons`` (N, P, 2,
    :func:`dense_polygons`) and ``bitmasks`` (N, H, W, :func:`warp_bitmasks`) moved through the
    pending chain ``geometry`` (core.batch.Geometry: its ``steps``, composed ``matrices`` and
    ``source_sizes``); ``keypoint_flip`` (N, K), where present, is each box's mirror pairing.
    Other fields are returned as they are (the same arrays)."""
    out = dict(fields)
    if not geometry.steps:
        return out
    mats = np.stack([st.matrix for st in geometry.steps])
    sizes = np.stack([st.sizes for st in geometry.steps])
    if "keypoints" in fields:
        out["keypoints"] = transform_keypoints(fields["keypoints"], sample, mats, sizes,
                                               fields.get("keypoint_flip"))
    if "obb" in fields:
        out["obb"] = transform_obb(fields["obb"], sample, geometry.matrices)
    if "polygons" in fields:
        moved = transform_polygons(*ragged_polygons(fields["polygons"]), sample, mats, sizes)
        out["polygons"] = dense_polygons(*moved)
    if "bitmasks" in fields:
        out["bitmasks"] = warp_bitmasks(fields["bitmasks"], sample, geometry.source_sizes,
                                        mats, sizes)
    return out


def shapes_clipped(fields, sample, canvas) -> dict:
    """``fields`` with ``keypoints`` and ``polygons`` cut to the current canvas ``canvas``
    (B, 2) ``(H, W)`` by the rule of a chain's last canvas (one identity step): a point that
    lies on no pixel becomes ``(0, 0, 0)``, a polygon is clipped as a polygon and dropped under
    3 points. ``obb`` is left as it is, as a chain leaves it (never clipped); no mirror, so no
    swap. What clipping boxes with no chain pending does to the shapes beside them."""
    out = dict(fields)
    canvas = np.asarray(canvas, np.int64).reshape(-1, 2)
    eye = np.broadcast_to(np.eye(3), (len(canvas), 3, 3))
    if "keypoints" in fields:
        out["keypoints"] = transform_keypoints(fields["keypoints"], sample, eye, canvas)
    if "polygons" in fields:
        moved = transform_polygons(*ragged_polygons(fields["polygons"]), sample, eye, canvas)
        out["polygons"] = dense_polygons(*moved)
    return out


def tight_boxes(boxes, fields) -> np.ndarray:
    """``boxes`` (N, 4) where each box whose field ``tight_box`` is set is replaced by the
    enclosing box of its moved shapes (:func:`shapes_through`): its ``polygons``
    (:func:`polygon_boxes`) and its ``bitmasks`` (:func:`mask_boxes`), the union of both
    where it has both. After a rotation this is tighter than the enclosing box of the box's own
    corners (on COCO's sample polygons turned 30 degrees, 0.63 of its area). A box with no
    polygon and no mask pixel left keeps its corners' box (which the drop rules judged). Others
    are returned as they are."""
    if "tight_box" not in fields:  # (before the shapes' boxes: a mask's box reads its plane)
        return boxes
    tight = shape_boxes(fields)
    if tight is None:
        return boxes
    use = (np.asarray(fields["tight_box"]) != 0) & ~np.isnan(tight[:, 0])
    if not use.any():
        return boxes
    out = np.array(boxes, copy=True)
    out[use] = tight[use]
    return out


def shape_boxes(fields):
    """(N, 4) float64 enclosing box of each box's ``polygons`` and ``bitmasks`` together
    (NaN where it has neither a polygon point nor a mask pixel), or None without either field."""
    parts = []
    if "polygons" in fields:
        parts.append(polygon_boxes(*ragged_polygons(fields["polygons"])))
    if "bitmasks" in fields:
        parts.append(mask_boxes(fields["bitmasks"]))
    return union_boxes(*parts) if parts else None


def union_boxes(a, b=None):
    """The enclosing box of two (N, 4) boxes row by row, where a row of NaN is no box (the
    other one's is taken; NaN where both are none). Works on NumPy and cupy arrays alike."""
    from .backend import is_device_array, xp_for

    if b is None:
        return a
    xp = xp_for("gpu" if is_device_array(a) else "cpu")
    return xp.concatenate([xp.fmin(a[:, :2], b[:, :2]), xp.fmax(a[:, 2:], b[:, 2:])], 1)


def mask_boxes(planes) -> np.ndarray:
    """(N, 4) float64 box of each mask's nonzero pixels in continuous coordinates: pixel
    ``(i, j)`` covers ``[j, j + 1] x [i, i + 1]``, so a mask's box is ``[j_min, i_min,
    j_max + 1, i_max + 1]``; NaN where the mask is empty. ``planes`` (N, H, W)."""
    m = np.asarray(planes) != 0
    n = len(m)
    out = np.full((n, 4), np.nan)
    if not m.size:
        return out
    rows, cols = m.any(2), m.any(1)  # (N, H), (N, W)
    has = rows.any(1)
    h, w = m.shape[1:]
    out[has] = np.stack([cols.argmax(1), rows.argmax(1), w - cols[:, ::-1].argmax(1),
                         h - rows[:, ::-1].argmax(1)], 1)[has]
    return out


def dense_polygons(points, poly_offsets, box_offsets) -> np.ndarray:
    """The polygons of N boxes as one dense per-box field (N, P, 2) float64: each box's
    polygons in order, each followed by a NaN row, then NaN to the batch's longest (P). Dense,
    so that every op that drops, takes or regroups boxes carries it as it carries labels."""
    pts = np.asarray(points, np.float64).reshape(-1, 2)
    off, boff = np.asarray(poly_offsets, np.int64), np.asarray(box_offsets, np.int64)
    n = len(boff) - 1
    counts = np.diff(off)
    poly_box = np.repeat(np.arange(n), np.diff(boff))
    rows_of_box = np.bincount(poly_box, weights=counts + 1, minlength=n).astype(np.int64)
    width = int(rows_of_box.max()) if n else 0
    out = np.full((n, width, 2), np.nan)
    if not len(pts):
        return out
    box_start = np.zeros(n + 1, np.int64)
    np.cumsum(rows_of_box, out=box_start[1:])
    poly_start = np.concatenate([[0], np.cumsum(counts + 1)])[:-1]  # in the packed rows
    first_poly = boff[:-1][poly_box]
    within = poly_start - poly_start[first_poly] if len(poly_start) else poly_start
    owner = np.repeat(poly_box, counts)
    col = np.repeat(within, counts) + (np.arange(len(pts)) - np.repeat(off[:-1], counts))
    out[owner, col] = pts
    return out


def same_widths(name, parts):
    """Samples' parts of a dense per-box field made one width, to be concatenated: polygons
    (n, P, 2) to the longest P with NaN rows, bitmasks (n, H, W) to the largest planes with 0
    (bottom and right); other fields as they are. A part without the field (a sample that has
    no such box, its (n,) zeros) becomes an empty-width one."""
    if not parts or name not in ("polygons", "bitmasks"):
        return parts
    fill, dtype = (np.nan, np.float64) if name == "polygons" else (0, np.uint8)
    empty = (0, 2) if name == "polygons" else (0, 0)
    parts = [np.asarray(p, dtype) if p.ndim == 3 else np.full((len(p), *empty), fill, dtype)
             for p in parts]
    most = np.max([p.shape[1:] for p in parts], 0)
    return [np.pad(p, [(0, 0)] + [(0, int(m - d)) for m, d in zip(most, p.shape[1:])],
                   constant_values=fill) for p in parts]


def ragged_polygons(dense):
    """``(points, poly_offsets, box_offsets)`` of a :func:`dense_polygons` field."""
    d = np.asarray(dense, np.float64)
    n = len(d)
    if not d.size:
        return np.zeros((0, 2)), np.zeros(1, np.int64), np.zeros(n + 1, np.int64)
    real = ~np.isnan(d[..., 0])  # (N, P)
    flat = real.reshape(-1)
    # a polygon starts at a real row whose predecessor (in its box) is not real
    prev = np.concatenate([np.zeros((n, 1), bool), real[:, :-1]], 1).reshape(-1)
    starts = flat & ~prev
    box_of_row = np.repeat(np.arange(n), d.shape[1])
    pts = d.reshape(-1, 2)[flat]
    poly_id = np.cumsum(starts)[flat] - 1
    q = int(starts.sum())
    off = np.zeros(q + 1, np.int64)
    np.cumsum(np.bincount(poly_id, minlength=q), out=off[1:])
    boff = np.zeros(n + 1, np.int64)
    np.cumsum(np.bincount(box_of_row[starts], minlength=n), out=boff[1:])
    return pts, off, boff


# the first point (POLYGON_OVERFLOW, -POLYGON_OVERFLOW) of a polygon row that the GPU could not
# fit in its capacity (kernels/shapes.py): never a coordinate of a real point
POLYGON_OVERFLOW = 1.0e308


def polygon_width(rows) -> int:
    """The width :func:`dense_polygons` gives the polygons of a dense field (a host or device
    array, possibly with NaN rows past that width, as the GPU path leaves it): its longest
    box's rows up to and with the NaN row after its last polygon; 0 when no box has one. On
    the device: one small copy to the host (output stage).

    Raises:
        RuntimeError naming the field where a row carries the overflow marker.
    """
    from .backend import is_device_array, xp_for

    xp = xp_for("gpu" if is_device_array(rows) else "cpu")
    if rows.shape[0] == 0 or rows.shape[1] == 0:
        return 0
    # one maximum over (N, P) int64 scores: a real point's row number (1..P), or P + 1 on a
    # box's first row where it carries the overflow marker. One reduction, one value to the
    # host. On the device no any(): cupy compiles its CUB any() the first time an input takes
    # that path (two kernels, 2.5 s each on the H200, at the 99th batch of a seg run)
    p = rows.shape[1]
    score = ~xp.isnan(rows[..., 0]) * xp.arange(1, p + 1)
    score[:, 0] = xp.maximum(score[:, 0], (rows[:, 0, 0] == POLYGON_OVERFLOW) * (p + 1))
    last = int(score.max())
    if last > p:
        raise RuntimeError("the field 'polygons': a box's polygons, clipped on the GPU, needed "
                           "more rows than kernels/shapes.polygon_capacity gives (a polygon "
                           "that crosses a canvas line many times); run the polygons of this "
                           "pipeline on the CPU")
    return last + 1 if last else 0


def trim_polygons(rows):
    """``rows`` (N, P, 2) cut to :func:`polygon_width` (a view)."""
    return rows[:, :polygon_width(rows)]


def clip_polygons(points, offsets, rects):
    """Clip each polygon to its axis-aligned rectangle (Sutherland-Hodgman, all polygons at
    once, one rectangle side at a time).

    Args:
        points: (P, 2) float64; ``offsets`` (Q + 1,): polygon q owns ``points[o[q]:o[q + 1]]``.
        rects: (Q, 4) ``[x0, y0, x1, y1]`` of each polygon.

    Returns:
        ``(points, offsets)`` of the clipped polygons (a polygon wholly outside has 0 points).
    """
    pts = np.asarray(points, np.float64).reshape(-1, 2)
    off = np.asarray(offsets, np.int64)
    rects = np.asarray(rects, np.float64).reshape(-1, 4)
    for axis, col, sign in ((0, 0, 1.0), (0, 2, -1.0), (1, 1, 1.0), (1, 3, -1.0)):
        pts, off = _clip_side(pts, off, rects[:, col], axis, sign)
    return pts, off


def _clip_side(pts, off, bound, axis, sign):
    """One Sutherland-Hodgman pass: keep ``sign * (p[axis] - bound) >= 0``."""
    counts = np.diff(off)
    q = len(counts)
    if not len(pts):
        return pts, off
    poly = np.repeat(np.arange(q), counts)
    prev = np.arange(len(pts)) - 1
    first = off[:-1][counts > 0]
    prev[first] = off[1:][counts > 0] - 1  # a polygon's first point follows its last
    c = bound[poly]
    cur_in = sign * (pts[:, axis] - c) >= 0
    prev_in = cur_in[prev]
    crossing = cur_in != prev_in
    emit = cur_in.astype(np.int64) + crossing
    start = np.concatenate([[0], np.cumsum(emit)])
    out = np.empty((start[-1], 2))
    a, b = pts[prev], pts
    with np.errstate(divide="ignore", invalid="ignore"):  # (rows not crossing: unused)
        t = (c - a[:, axis]) / (b[:, axis] - a[:, axis])
        cut = a + t[:, None] * (b - a)
    cut[:, axis] = c
    k = np.flatnonzero(crossing)
    out[start[k]] = cut[k]
    k = np.flatnonzero(cur_in)
    out[start[k] + crossing[k]] = pts[k]
    new_off = np.zeros(q + 1, np.int64)
    np.cumsum(np.bincount(poly, weights=emit, minlength=q).astype(np.int64), out=new_off[1:])
    return out, new_off


def transform_polygons(points, poly_offsets, box_offsets, sample, matrices, sizes):
    """Polygons through a chain, clipped at every canvas (module docstring).

    Args:
        points: (P, 2) in the chain's source coordinates; ``poly_offsets`` (Q + 1,) the points
            of each polygon; ``box_offsets`` (N + 1,) the polygons of each instance.
        sample: (N,) int, the sample of each instance.
        matrices, sizes: the chain, (S, B, 3, 3) and (S, B, 2).

    Returns:
        ``(points float64, poly_offsets, box_offsets)`` in the last canvas's coordinates; a
        polygon left with fewer than 3 points is dropped (its instance keeps its other ones).
    """
    m, s = _chain(matrices, sizes)
    pts = np.asarray(points, np.float64).reshape(-1, 2)
    off = np.asarray(poly_offsets, np.int64)
    boff = np.asarray(box_offsets, np.int64)
    poly_sample = np.repeat(np.asarray(sample, np.int64), np.diff(boff))
    for step, hw in zip(m, s):
        owner = np.repeat(poly_sample, np.diff(off))
        pts = _map(step[owner], pts)
        h, w = hw[poly_sample, 0], hw[poly_sample, 1]
        rects = np.stack([np.zeros_like(w), np.zeros_like(h), w, h], -1)
        pts, off = clip_polygons(pts, off, rects)
    keep = np.diff(off) >= 3
    poly_box = np.repeat(np.arange(len(boff) - 1), np.diff(boff))
    point_keep = np.repeat(keep, np.diff(off))
    new_off = np.zeros(keep.sum() + 1, np.int64)
    np.cumsum(np.diff(off)[keep], out=new_off[1:])
    new_boff = np.zeros(len(boff), np.int64)
    np.cumsum(np.bincount(poly_box[keep], minlength=len(boff) - 1), out=new_boff[1:])
    return pts[point_keep], new_off, new_boff


def polygon_boxes(points, poly_offsets, box_offsets) -> np.ndarray:
    """(N, 4) float64 enclosing box of each instance's polygons; NaN where it has none. After
    a chain this is tighter than the box's own corners mapped and enclosed (a rotated polygon
    hugs its object; a rotated box's corners do not)."""
    pts = np.asarray(points, np.float64).reshape(-1, 2)
    off, boff = np.asarray(poly_offsets, np.int64), np.asarray(box_offsets, np.int64)
    n = len(boff) - 1
    out = np.full((n, 4), np.nan)
    if not len(pts):
        return out
    owner = np.repeat(np.repeat(np.arange(n), np.diff(boff)), np.diff(off))
    lo, hi = np.full((n, 2), np.inf), np.full((n, 2), -np.inf)
    np.minimum.at(lo, owner, pts)
    np.maximum.at(hi, owner, pts)
    has = np.isfinite(lo[:, 0])
    out[has] = np.concatenate([lo, hi], 1)[has]
    return out


def transform_obb(corners, sample, composed, rtol=1e-9) -> np.ndarray:
    """Oriented boxes through a chain's composed matrix (module docstring).

    Args:
        corners: (N, 4, 2) the corners in order around the box.
        sample: (N,) int; composed: (B, 3, 3) source -> output.
        rtol: how far from a right angle (relative) the mapped corners may be and still be
            taken as the rectangle they are (rounding of a rotation's sine and cosine).

    Returns:
        (N, 4, 2) float32: the mapped corners where they form a rectangle, else the corners
        of the smallest rectangle enclosing them, starting at the one nearest the first
        mapped corner, in the mapped corners' turning direction.
    """
    c = np.asarray(corners, np.float64).reshape(-1, 4, 2)
    n = len(c)
    if not n:
        return np.zeros((0, 4, 2), np.float32)
    m = np.asarray(composed, np.float64)[np.repeat(np.asarray(sample, np.int64), 4)]
    q = _map(m, c.reshape(-1, 2)).reshape(n, 4, 2)
    e0, e1 = q[:, 1] - q[:, 0], q[:, 2] - q[:, 1]
    scale = np.linalg.norm(e0, axis=1) * np.linalg.norm(e1, axis=1)
    diag = q[:, 0] + q[:, 2] - q[:, 1] - q[:, 3]
    size = np.abs(q - q.mean(1, keepdims=True)).max((1, 2)) + 1.0
    rect = (np.abs((e0 * e1).sum(1)) <= rtol * scale) & \
        (np.abs(diag).max(1) <= rtol * size)
    out = q.copy()
    if not rect.all():
        out[~rect] = _min_area_rect(q[~rect])
    return out.astype(np.float32)


def _min_area_rect(q):
    """Smallest-area rectangle enclosing each convex quadrilateral (M, 4, 2): one side along
    one of its edges. Corners start nearest ``q[:, 0]`` and turn as ``q`` does."""
    m = len(q)
    edges = np.roll(q, -1, axis=1) - q  # (M, 4, 2)
    u = edges / np.maximum(np.linalg.norm(edges, axis=2, keepdims=True), 1e-300)
    v = np.stack([-u[..., 1], u[..., 0]], -1)
    pu = np.einsum("mkd,mpd->mkp", u, q)  # (M, 4 candidates, 4 points)
    pv = np.einsum("mkd,mpd->mkp", v, q)
    area = (pu.max(2) - pu.min(2)) * (pv.max(2) - pv.min(2))
    best = area.argmin(1)
    r = np.arange(m)
    ub, vb = u[r, best], v[r, best]
    lo_u, hi_u = pu[r, best].min(1), pu[r, best].max(1)
    lo_v, hi_v = pv[r, best].min(1), pv[r, best].max(1)
    cu = np.stack([lo_u, hi_u, hi_u, lo_u], 1)
    cv = np.stack([lo_v, lo_v, hi_v, hi_v], 1)
    rect = cu[..., None] * ub[:, None] + cv[..., None] * vb[:, None]  # (M, 4, 2)
    turn = _turn(q)
    flip = _turn(rect) != turn
    rect[flip] = rect[flip][:, ::-1]
    start = np.linalg.norm(rect - q[:, :1], axis=2).argmin(1)
    idx = (start[:, None] + np.arange(4)) % 4
    return rect[r[:, None], idx]


def _turn(q):
    """(M,) sign of the signed area of each quadrilateral (its turning direction)."""
    x, y = q[..., 0], q[..., 1]
    return np.sign((x * np.roll(y, -1, 1) - np.roll(x, -1, 1) * y).sum(1))


def warp_masks(masks, matrices, sizes, source_size) -> np.ndarray:
    """One sample's masks through a chain, nearest sampling (module docstring).

    Args:
        masks: (n, H, W) uint8 (or bool) on the source canvas ``source_size`` = (H, W).
        matrices, sizes: the chain of this sample, (S, 3, 3) and (S, 2) (or one op's (3, 3),
            (2,)).

    Returns:
        (n, H', W') uint8 on the last canvas.
    """
    mats = np.asarray(matrices, np.float64).reshape(-1, 3, 3)
    hw = np.asarray(sizes, np.int64).reshape(-1, 2)
    composed, partial = np.eye(3), []
    for step in mats:
        composed = step @ composed
        partial.append(composed)
    h_out, w_out = (int(v) for v in hw[-1])
    jj, ii = np.meshgrid(np.arange(w_out) + 0.5, np.arange(h_out) + 0.5)
    centres = np.stack([jj.reshape(-1), ii.reshape(-1)], -1)
    inv = np.linalg.inv(composed)
    src = _map(np.broadcast_to(inv, (len(centres), 3, 3)), centres)
    h_src, w_src = (int(v) for v in source_size)
    ok = _inside(src, np.broadcast_to(np.array([h_src, w_src]), src.shape))
    for comp, size in zip(partial[:-1], hw[:-1]):  # every intermediate canvas
        at = _map(np.broadcast_to(comp, (len(src), 3, 3)), src)
        ok &= _inside(at, np.broadcast_to(size, at.shape))
    masks = np.asarray(masks)
    out = np.zeros((len(masks), h_out * w_out), np.uint8)
    k = np.flatnonzero(ok)
    ix = np.floor(src[k, 0]).astype(np.int64)
    iy = np.floor(src[k, 1]).astype(np.int64)
    out[:, k] = masks[:, iy, ix] != 0
    return out.reshape(len(masks), h_out, w_out)


def warp_bitmasks(planes, sample, source_sizes, matrices, sizes) -> np.ndarray:
    """The per-box bitmap masks of a batch through its chain (:func:`warp_masks`, nearest).

    Args:
        planes: (N, H, W) uint8: box ``i``'s mask on its sample's source canvas
            ``source_sizes[sample[i]]``, at the plane's top left (H, W at least every canvas).
        sample: (N,) int, the sample of each box; source_sizes: (B, 2) ``(H, W)``.
        matrices, sizes: the chain, (S, B, 3, 3) and (S, B, 2).

    Returns:
        (N, H', W') uint8 0/1, each on its sample's last canvas at the top left, (H', W') the
        largest last canvas; 0 elsewhere. A box whose mask is empty stays empty unwarped.
    """
    m, s = _chain(matrices, sizes)
    planes = np.asarray(planes)
    sample = np.asarray(sample, np.int64).reshape(-1)
    src = np.asarray(source_sizes, np.int64).reshape(-1, 2)
    last = s[-1]
    h_out, w_out = (int(v) for v in last.max(0)) if len(last) else (0, 0)
    out = np.zeros((len(planes), h_out, w_out), np.uint8)
    some = planes.reshape(len(planes), -1).any(1) if planes.size else np.zeros(len(planes), bool)
    # one call per sample that has a mask: each sample has its own chain and canvases. A batched
    # form (every sample's map on the largest canvas, one gather) gives the same masks but ran
    # 3x slower (8 samples x 10 masks 640 x 640: 0.87-0.99 s against 0.28-0.29 s): its gather
    # needs an index per box and pixel, where a sample's boxes share one
    for b in np.unique(sample[some]):
        rows = np.flatnonzero(some & (sample == b))
        (h, w), (h2, w2) = src[b], last[b]
        out[rows, :h2, :w2] = warp_masks(planes[rows, :h, :w], m[:, b], s[:, b], (h, w))
    return out


def rle_planes(runs, offsets, canvas, plane) -> np.ndarray:
    """Boxes' COCO run-length masks decoded into planes, all boxes at once.

    Args:
        runs: (R,) run lengths; box ``i`` owns ``runs[offsets[i]:offsets[i + 1]]``: COCO's
            rule, column-major over its canvas, alternately 0s and 1s starting with 0s; no runs:
            no mask (zeros).
        offsets: (N + 1,); canvas: (N, 2) ``(h, w)`` of each box's image; plane: ``(H, W)``,
            at least every canvas.

    Returns:
        (N, H, W) uint8 0/1, each mask at its plane's top left (pycocotools' ``decode``).

    Raises:
        ValueError naming the box whose runs do not cover its canvas exactly.
    """
    runs = np.asarray(runs, np.int64).reshape(-1)
    off = np.asarray(offsets, np.int64).reshape(-1)
    canvas = np.asarray(canvas, np.int64).reshape(-1, 2)
    n = len(off) - 1
    out = np.zeros((n, int(plane[0]), int(plane[1])), np.uint8)
    counts = np.diff(off)
    if not len(runs):
        return out
    csum = np.concatenate([[0], np.cumsum(runs)])
    total = csum[off[1:]] - csum[off[:-1]]
    bad = (counts > 0) & (total != canvas[:, 0] * canvas[:, 1])
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise ValueError(f"box {i}: its run lengths sum to {int(total[i])}, not its image's "
                         f"{int(canvas[i, 0])} x {int(canvas[i, 1])}")
    owner = np.repeat(np.arange(n), counts)
    start = csum[:-1] - csum[off[:-1]][owner]  # each run's first pixel in its box
    ones = ((np.arange(len(runs)) - off[:-1][owner]) % 2 == 1) & (runs > 0)
    r_owner, r_start, r_len = owner[ones], start[ones], runs[ones]
    within = np.arange(int(r_len.sum())) - np.repeat(np.cumsum(r_len) - r_len, r_len)
    pix = np.repeat(r_start, r_len) + within
    pix_owner = np.repeat(r_owner, r_len)
    col, row = np.divmod(pix, canvas[pix_owner, 0])
    out[pix_owner, row, col] = 1
    return out
