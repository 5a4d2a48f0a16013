"""Instance-shape kernels: keypoints, oriented boxes, polygons and bitmap masks through a chain,
the boxes of masks (tight boxes), shaped-field padding.

Every function has a NumPy twin ``<name>_numpy`` (core/instances.py, the CPU path, is the
reference: the twins call it) and a cupy version ``<name>_cupy`` with the same arguments plus
``stream=None``, which makes exactly one launch of a kernel of ``shapes.cu`` per call for the
whole batch, never copies device data to the host and never synchronises.

Conventions (core/instances.py): a chain is ``matrices`` (S, B, 3, 3), each op's own matrix
(input to output coordinates), and ``sizes`` (S, B, 2) ``(H, W)`` of each op's output canvas;
``sample`` (N,) names the sample of each instance. Host metadata (the chain, the sample index,
which samples the chain mirrors) goes up in one staged copy.

Polygons on the device keep the dense per-box layout of the CPU path
(:func:`detaug.core.instances.dense_polygons`: (N, P, 2) float64, a NaN row after each polygon,
NaN to the end of the row), but the width of the moved field cannot be known without reading
the device: it is :func:`polygon_capacity` (input width and chain length), the rows past the
real ones NaN, and :func:`detaug.core.instances.trim_polygons` cuts it to the CPU path's
width at the output (one small copy to the host there). A row whose clipped polygons need more than the capacity (only polygons
that zigzag across a canvas line many times) is written as the marker ``(OVERFLOW, -OVERFLOW)``
in its first row: the output refuses it by name (never a truncated polygon).
"""
from __future__ import annotations

import numpy as np

from ..core import instances as ref
from ..core.backend import upload, upload_many
from .launch import get_kernel, launch

_SRC = "shapes.cu"
_OPTIONS = ("-std=c++17", "--fmad=false")
_BLOCK = 128
_MAX_GRID = 65535 * 64
OVERFLOW = ref.POLYGON_OVERFLOW  # the first point (OVERFLOW, -OVERFLOW) of a row that did not fit
polygon_width, trim_polygons = ref.polygon_width, ref.trim_polygons
_LEVEL_BYTES = 48  # sizeof(Level) in shapes.cu: 4 doubles, 4 ints
_PENDING_BYTES = 24  # sizeof(Pending): 2 doubles, 2 ints
MASK_BOX_THREADS = 256  # the block of shapes.cu mask_boxes (its reduction's width)


def _grid(total: int) -> tuple:
    return (max(1, min((total + _BLOCK - 1) // _BLOCK, _MAX_GRID)), 1, 1)


def _cupy_stream(stream):
    import cupy as cp

    return cp, (stream if stream is not None else cp.cuda.get_current_stream())


def _dev(cp, a, dtype):
    if isinstance(a, cp.ndarray):
        return cp.ascontiguousarray(a.astype(dtype, copy=False))
    return upload(np.asarray(a, dtype=dtype))


def _chain(matrices, sizes):
    """(S, B, 3, 3) float64 and (S, B, 2) int64, contiguous (one op: (B, 3, 3), (B, 2))."""
    m = np.ascontiguousarray(np.asarray(matrices, np.float64))
    s = np.ascontiguousarray(np.asarray(sizes, np.int64))
    if m.ndim == 3:
        m, s = m[None], s[None]
    if m.shape[:2] != s.shape[:2] or m.shape[2:] != (3, 3) or s.shape[2:] != (2,):
        raise ValueError(f"a chain is matrices (S, B, 3, 3) and sizes (S, B, 2); got "
                         f"{m.shape} and {s.shape}")
    return m, s


def _sample(cp, sample, n, extra, s):
    """The sample index (int32) and the ``extra`` host arrays on the device, one staged copy
    where the index is on the host."""
    if isinstance(sample, cp.ndarray):
        return [cp.ascontiguousarray(sample.astype(cp.int32, copy=False))] + list(
            upload_many(extra, s))
    si = np.asarray(sample, np.int32).reshape(-1)
    if len(si) != n:
        raise ValueError(f"sample has {len(si)} entries for {n} instances")
    return list(upload_many([si] + list(extra), s))


# ----------------------------------------------------------------------------- keypoints


def keypoints_transform_numpy(keypoints, sample, matrices, sizes, flip_index=None):
    """(N, K, 3) float32 keypoints through the chain: :func:`detaug.core.instances.
    transform_keypoints` (a point off any canvas becomes (0, 0, 0); a mirroring chain swaps
    slots by ``flip_index`` (K,) or (N, K))."""
    return ref.transform_keypoints(keypoints, sample, matrices, sizes, flip_index)


def keypoints_transform_cupy(keypoints, sample, matrices, sizes, flip_index=None, *,
                             stream=None):
    """cupy twin of :func:`keypoints_transform_numpy`: one thread per (instance, slot); which
    samples the chain mirrors is decided on the host from its matrices. A ``flip_index`` entry
    outside ``[0, K)`` gives the unlabelled point (0, 0, 0) in that slot of a mirrored sample."""
    m, sz = _chain(matrices, sizes)
    cp, s = _cupy_stream(stream)
    with s:
        kp = _dev(cp, keypoints, cp.float32)
        if kp.ndim != 3 or kp.shape[2] != 3:
            raise ValueError(f"keypoints must be (N, K, 3), got {tuple(kp.shape)}")
        n, k = kp.shape[:2]
        out = cp.empty((n, k, 3), cp.float32)
        if n * k == 0:
            return out
        mirror = ref.mirrors(m).astype(np.int32)
        si, dm, dsz, dmirror = _sample(cp, sample, n, [m, sz, mirror], s)
        if flip_index is not None:
            fi = cp.asarray(flip_index) if isinstance(flip_index, cp.ndarray) else \
                np.asarray(flip_index)
            fi = cp.ascontiguousarray(cp.broadcast_to(_dev(cp, fi, cp.int64), (n, k)))
        else:
            fi = out  # never read: has_flip = 0
        args = (kp, si, np.int64(n), np.int32(k), dm, dsz, np.int32(m.shape[0]),
                np.int32(m.shape[1]), fi, np.int32(flip_index is not None), dmirror, out)
        launch(get_kernel(_SRC, "keypoints_transform", _OPTIONS), _grid(n * k), (_BLOCK, 1, 1),
               args, stream=s, name="keypoints_transform")
    return out


# ----------------------------------------------------------------------------- oriented boxes


def obb_transform_numpy(corners, sample, composed):
    """(N, 4, 2) float32 oriented boxes through the composed matrices (B, 3, 3):
    :func:`detaug.core.instances.transform_obb` (exact where the map keeps rectangles, else the
    smallest-area enclosing rectangle)."""
    return ref.transform_obb(corners, sample, composed)


def obb_transform_cupy(corners, sample, composed, *, stream=None, rtol=1e-9):
    """cupy twin of :func:`obb_transform_numpy`: one thread per box."""
    comp = np.ascontiguousarray(np.asarray(composed, np.float64).reshape(-1, 3, 3))
    cp, s = _cupy_stream(stream)
    with s:
        c = _dev(cp, corners, cp.float32)
        n = c.shape[0]
        if c.shape[1:] != (4, 2):
            raise ValueError(f"oriented boxes must be (N, 4, 2) corners, got {tuple(c.shape)}")
        out = cp.empty((n, 4, 2), cp.float32)
        if n == 0:
            return out
        si, dcomp = _sample(cp, sample, n, [comp], s)
        args = (c, si, np.int64(n), dcomp, np.int32(len(comp)), np.float64(rtol),
                np.float64(np.nan), out)
        launch(get_kernel(_SRC, "obb_transform", _OPTIONS), _grid(n), (_BLOCK, 1, 1), args,
               stream=s, name="obb_transform")
    return out


# ----------------------------------------------------------------------------- polygons


def polygon_capacity(width: int, stages: int) -> int:
    """Rows of a moved polygon field on the device: ``(stages + 1) * width + 4``. A convex
    polygon gains at most 4 points per canvas it is clipped to, and a box of ``width`` rows holds
    at most ``width / 4`` polygons (3 points and a NaN row each)."""
    return (int(stages) + 1) * int(width) + 4 if width else 0


def polygons_transform_numpy(rows, sample, matrices, sizes):
    """Dense polygon rows (N, P, 2) through the chain, clipped at every canvas
    (:func:`detaug.core.instances.transform_polygons`). Returns ``(rows (N, P', 2) float64,
    tight (N, 4) float64)``: P' the longest moved box (:func:`dense_polygons`), tight each
    box's enclosing box of its moved points (NaN where none is left)."""
    moved = ref.transform_polygons(*ref.ragged_polygons(rows), sample, matrices, sizes)
    return ref.dense_polygons(*moved), ref.polygon_boxes(*moved)


def polygons_transform_cupy(rows, sample, matrices, sizes, *, stream=None, capacity=None):
    """cupy twin of :func:`polygons_transform_numpy`: one thread per box, Sutherland-Hodgman
    streamed through the chain's 4 S canvas sides (shapes.cu), the same points in the same
    order as the reference. The rows are :func:`polygon_capacity` wide (or ``capacity``), NaN
    past the real ones; a row that does not fit is the overflow marker (module docstring)."""
    m, sz = _chain(matrices, sizes)
    cp, s = _cupy_stream(stream)
    with s:
        d = _dev(cp, rows, cp.float64)
        if d.ndim != 3 or d.shape[2] != 2:
            raise ValueError(f"polygons must be (N, P, 2), got {tuple(d.shape)}")
        n, p_in = d.shape[:2]
        p_out = polygon_capacity(p_in, m.shape[0]) if capacity is None else int(capacity)
        if p_in and p_out < 1:
            raise ValueError(f"capacity must be at least 1 row for polygons, got {p_out}")
        out = cp.empty((n, p_out, 2), cp.float64)
        tight = cp.empty((n, 4), cp.float64)
        if n == 0:
            return out, tight
        levels = 4 * m.shape[0]
        lv = cp.empty(n * levels * _LEVEL_BYTES, cp.uint8)
        stack = cp.empty(n * (2 * levels + 4) * _PENDING_BYTES, cp.uint8)
        si, dm, dsz = _sample(cp, sample, n, [m, sz], s)
        args = (d, si, np.int64(n), np.int32(p_in), dm, dsz, np.int32(m.shape[0]),
                np.int32(m.shape[1]), np.int32(p_out), np.float64(np.nan),
                np.float64(OVERFLOW), lv, stack, out, tight)
        launch(get_kernel(_SRC, "polygons_transform", _OPTIONS), _grid(n), (_BLOCK, 1, 1), args,
               stream=s, name="polygons_transform")
    return out, tight


# ----------------------------------------------------------------------------- padding


def shaped_fill(name, dtype):
    """The pad value of a field with per-box shape: keypoints 0 (COCO's unlabelled point),
    masks and bitmasks 0 (no pixel), other floats NaN (a polygon row or corner that is not there: the NaN rows that already end
    each polygon), integers -1, bools False."""
    if name in ("keypoints", "masks", "bitmasks"):
        return 0
    if np.issubdtype(dtype, np.floating):
        return np.nan
    return False if dtype == np.bool_ else -1


def pad_shaped_numpy(fields, index):
    """Each (N, ...) field as (B, M, ...): row ``[b, m]`` is the field's row ``index[b, m]``,
    its :func:`shaped_fill` where that is -1."""
    index = np.asarray(index, np.int64)
    out = {}
    for name, v in fields.items():
        v = np.asarray(v)
        p = np.full(index.shape + v.shape[1:], shaped_fill(name, v.dtype), v.dtype)
        have = index >= 0
        p[have] = v[index[have]]
        out[name] = p
    return out


def pad_shaped_cupy(fields, index, *, stream=None):
    """cupy twin of :func:`pad_shaped_numpy`: one launch for every field, items copied bit for
    bit (1, 2, 4 or 8 bytes each); ``index`` (B, M) int64 on the device."""
    cp, s = _cupy_stream(stream)
    with s:
        idx = cp.ascontiguousarray(cp.asarray(index).astype(cp.int64, copy=False))
        fields = {k: cp.ascontiguousarray(cp.asarray(v)) for k, v in fields.items()}
        out = {k: cp.empty(idx.shape + v.shape[1:], v.dtype) for k, v in fields.items()}
        rows = int(np.prod(idx.shape))
        items = {k: int(np.prod(v.shape[1:])) for k, v in fields.items()}
        most = max(items.values(), default=0)
        if rows * most == 0:
            return out
        meta = np.zeros((5, len(fields)), np.uint64)
        for j, (name, v) in enumerate(fields.items()):
            if v.dtype.itemsize not in (1, 2, 4, 8):
                raise TypeError(f"field {name!r}: dtype {v.dtype} is not 1, 2, 4 or 8 bytes")
            with np.errstate(all="ignore"):
                fill = np.array(shaped_fill(name, v.dtype)).astype(v.dtype)
            bits = fill.tobytes().ljust(8, b"\0")
            meta[:, j] = (v.data.ptr, out[name].data.ptr, v.dtype.itemsize, items[name],
                          np.frombuffer(bits, np.uint64)[0])
        dmeta = upload(meta, s)
        args = (idx, np.int64(rows), np.int32(len(fields)), dmeta[0], dmeta[1], dmeta[2],
                dmeta[3], dmeta[4], np.int64(most))
        launch(get_kernel(_SRC, "pad_shaped", _OPTIONS), _grid(len(fields) * rows * most),
               (_BLOCK, 1, 1), args, stream=s, name="pad_shaped")
    return out


# ----------------------------------------------------------------------------- a batch's fields


def shapes_through_cupy(fields, sample, geometry, *, stream=None):
    """GPU twin of :func:`detaug.core.instances.shapes_through`: ``fields`` with keypoints,
    oriented boxes, polygons and bitmap masks (device arrays) moved through the pending chain
    ``geometry``, one launch per shape kind. Returns ``(fields, tight)``: tight (N, 4) the enclosing box of
    each box's moved polygons, united with its moved mask's box where the field ``tight_box``
    asks for tight boxes (:func:`mask_boxes_cupy`); NaN where none is left, None without
    either."""
    out = dict(fields)
    if not geometry.steps:
        return out, None
    mats = np.stack([st.matrix for st in geometry.steps])
    sizes = np.stack([st.sizes for st in geometry.steps])
    return _move(out, sample, mats, sizes, geometry.matrices, stream)


def shapes_clipped_cupy(fields, sample, canvas, *, stream=None):
    """GPU twin of :func:`detaug.core.instances.shapes_clipped` (keypoints and polygons cut to
    the canvas (B, 2), oriented boxes left as they are); ``(fields, tight)`` as
    :func:`shapes_through_cupy`."""
    canvas = np.asarray(canvas, np.int64).reshape(-1, 2)
    eye = np.broadcast_to(np.eye(3), (len(canvas), 3, 3))
    return _move(dict(fields), sample, eye[None], canvas[None], None, stream)


def _move(out, sample, mats, sizes, composed, stream):
    tight = None
    if "bitmasks" in out and composed is not None:  # (no chain: the canvas leaves them as they are)
        out["bitmasks"] = bitmasks_warp_cupy(out["bitmasks"], sample, mats, sizes, stream=stream)
    if "keypoints" in out:
        out["keypoints"] = keypoints_transform_cupy(out["keypoints"], sample, mats, sizes,
                                                    out.get("keypoint_flip"), stream=stream)
    if "obb" in out and composed is not None:
        out["obb"] = obb_transform_cupy(out["obb"], sample, composed, stream=stream)
    if "polygons" in out:
        out["polygons"], tight = polygons_transform_cupy(out["polygons"], sample, mats, sizes,
                                                         stream=stream)
    if "bitmasks" in out and composed is not None and "tight_box" in out:
        tight = ref.union_boxes(mask_boxes_cupy(out["bitmasks"], stream=stream), tight)
    return out, tight


def tight_boxes_cupy(boxes, fields, tight, *, stream=None):
    """GPU twin of :func:`detaug.core.instances.tight_boxes`: each box whose ``tight_box``
    field is set and that has a moved polygon or mask pixel left takes the enclosing box
    ``tight`` of them (:func:`shapes_through_cupy`)."""
    if tight is None or "tight_box" not in fields:
        return boxes
    cp, s = _cupy_stream(stream)
    with s:
        use = (cp.asarray(fields["tight_box"]) != 0) & ~cp.isnan(tight[:, 0])
        return cp.where(use[:, None], tight.astype(cp.float32), boxes)


# ----------------------------------------------------------------------------- masks


def mask_boxes_numpy(planes):
    """(N, 4) float64 box of each mask's nonzero pixels (planes (N, H, W)), NaN where empty:
    :func:`detaug.core.instances.mask_boxes`."""
    return ref.mask_boxes(planes)


def mask_boxes_cupy(planes, *, stream=None):
    """cupy twin of :func:`mask_boxes_numpy`: one launch for the batch, a block of
    ``MASK_BOX_THREADS`` threads per mask reducing its plane (shapes.cu ``mask_boxes``)."""
    cp, s = _cupy_stream(stream)
    with s:
        m = cp.ascontiguousarray(cp.asarray(planes).astype(cp.uint8, copy=False))
        if m.ndim != 3:
            raise ValueError(f"masks must be (N, H, W), got {tuple(m.shape)}")
        n, h, w = (int(v) for v in m.shape)
        box = cp.empty((n, 4), cp.float64)
        if n == 0:
            return box
        if h * w == 0:
            box.fill(np.nan)
            return box
        words = (h * w) % 4 == 0 and m.data.ptr % 4 == 0
        args = (m, np.int64(n), np.int64(h), np.int64(w), np.int32(words), np.float64(np.nan),
                box)
        launch(get_kernel(_SRC, "mask_boxes", _OPTIONS), (min(n, _MAX_GRID), 1, 1),
               (MASK_BOX_THREADS, 1, 1), args, stream=s, name="mask_boxes")
    return box


def masks_warp_numpy(masks, matrices, sizes):
    """Each sample's bitmap masks through its chain, nearest sampling
    (:func:`detaug.core.instances.warp_masks`, sample by sample: the reference).

    Args:
        masks: B arrays (n_b, H_b, W_b) uint8 or bool on each sample's source canvas.
        matrices, sizes: the chain, (S, B, 3, 3) and (S, B, 2).

    Returns:
        B arrays (n_b, H'_b, W'_b) uint8 0/1 on each sample's last canvas.
    """
    m, sz = _chain(matrices, sizes)
    return [ref.warp_masks(mk, m[:, b], sz[:, b], np.shape(mk)[1:]) for b, mk in
            enumerate(masks)]


def masks_warp_cupy(masks, matrices, sizes, *, stream=None):
    """cupy twin of :func:`masks_warp_numpy`: one launch for every mask of every sample (one
    thread per output pixel; a sample's masks share its pixel's source point). ``masks``: B
    C-contiguous uint8 device arrays (n_b, H_b, W_b); returns B device arrays, views of one
    buffer."""
    return _masks_warp(masks, matrices, sizes, stream)[1]


def bitmasks_warp_cupy(planes, sample, matrices, sizes, *, stream=None):
    """GPU twin of :func:`detaug.core.instances.warp_bitmasks`, wired onto the kernel of
    :func:`masks_warp_cupy` (one launch for the batch).

    Each sample's rows of ``planes`` (N, H, W), one contiguous block, go in whole: the kernel
    tests a source point against the plane, where the reference tests it against the sample's
    canvas, and the plane is 0 past the canvas (every producer of the field leaves it so), so
    both give 0 there. The chain closes with an identity step onto the largest last canvas
    (H', W'), which makes the sample's own last canvas an intermediate one that the kernel tests,
    and the output buffer the dense (N, H', W') field.
    """
    m, sz = _chain(matrices, sizes)
    b = m.shape[1]
    counts = np.bincount(np.asarray(sample, np.int64), minlength=b)
    off = np.concatenate([[0], np.cumsum(counts)])
    plane = sz[-1].max(0) if b else np.zeros(2, np.int64)
    m = np.concatenate([m, np.tile(np.eye(3), (1, b, 1, 1))])
    sz = np.concatenate([sz, np.tile(plane, (1, b, 1))])
    buf, _ = _masks_warp([planes[off[k]:off[k + 1]] for k in range(b)], m, sz, stream)
    return buf.reshape(int(off[-1]), int(plane[0]), int(plane[1]))


def _masks_warp(masks, matrices, sizes, stream):
    """(buffer, views) of :func:`masks_warp_cupy`: the B outputs are views of the buffer, in
    order."""
    m, sz = _chain(matrices, sizes)
    b = m.shape[1]
    if len(masks) != b:
        raise ValueError(f"{len(masks)} mask arrays for a chain of {b} samples")
    composed = np.tile(np.eye(3), (b, 1, 1))
    partial = []
    for step in m:
        composed = step @ composed
        partial.append(composed)
    inverse = np.ascontiguousarray(np.linalg.inv(composed))
    cp, s = _cupy_stream(stream)
    with s:
        masks = [cp.ascontiguousarray(cp.asarray(a).astype(cp.uint8, copy=False)) for a in masks]
        for k, a in enumerate(masks):
            if a.ndim != 3:
                raise ValueError(f"masks of sample {k} must be (n, H, W), got {tuple(a.shape)}")
        out_hw = sz[-1]
        counts = np.array([a.shape[0] for a in masks], np.int64)
        planes = counts * out_hw[:, 0] * out_hw[:, 1]
        starts = np.concatenate([[0], np.cumsum(planes)])
        buf = cp.empty(int(starts[-1]), cp.uint8)
        out = [buf[starts[k]:starts[k + 1]].reshape(int(counts[k]), *(int(v) for v in out_hw[k]))
               for k in range(b)]
        pix = np.concatenate([[0], np.cumsum(out_hw[:, 0] * out_hw[:, 1] * (counts > 0))])
        if pix[-1] == 0:
            return buf, out
        meta = np.stack([counts, [a.shape[1] for a in masks], [a.shape[2] for a in masks],
                         out_hw[:, 0], out_hw[:, 1]], 1).astype(np.int64)
        ptrs = np.array([[a.data.ptr for a in masks], [int(buf.data.ptr) + int(starts[k])
                                                       for k in range(b)]], np.uint64)
        part = np.ascontiguousarray(np.stack(partial[:-1]) if len(partial) > 1
                                    else np.zeros((1, b, 3, 3)))
        psz = np.ascontiguousarray(sz[:-1] if len(sz) > 1 else np.zeros((1, b, 2), np.int64))
        dpix, dmeta, dptrs, dinv, dpart, dpsz = upload_many(
            [pix.astype(np.int64), meta, ptrs, inverse, part, psz], s)
        args = (dpix, np.int32(b), dmeta, dptrs[0], dptrs[1], dinv, dpart, dpsz,
                np.int32(len(partial) - 1))
        launch(get_kernel(_SRC, "masks_warp", _OPTIONS), _grid(int(pix[-1])), (_BLOCK, 1, 1),
               args, stream=s, name="masks_warp")
    return buf, out
