"""Box kernels: transform + clip + filter, padding to a dense batch, IoU.

Every function has a NumPy twin ``<name>_numpy`` (float64 inside; the reference) and a cupy
version ``<name>_cupy`` with the same signature plus ``stream=None``, which makes exactly one
launch of a kernel of ``boxes.cu`` per call for the whole batch, never copies device data to the
host and never synchronises.

Conventions (docs/design.md): a box is ``float32 [x0, y0, x1, y1]`` in continuous pixel coordinates
(the image covers ``[0, W] x [0, H]``). The boxes of B samples are packed in one ``(N, 4)``
array; ``offsets (B + 1,)`` int64 on the host delimit the samples and ``sample_index (N,)`` int32
names the sample of each box (:func:`sample_index_from_offsets`). Per-sample ``matrices
(B, 3, 3)`` map input to output coordinates: affine, or projective (a perspective: the box's
corners map with the divide ``(M0 . p, M1 . p) / (M2 . p)``; the last row of an affine matrix is
not read, so affine chains compute exactly as before).
"""
from __future__ import annotations

import numpy as np

from ..core.backend import upload, upload_many
from ..core.batch import host_offsets as _host_offsets
from ..core.batch import sample_index_from_offsets
from ..core.geometry import canvas_rects
from .launch import get_kernel, launch

_SRC = "boxes.cu"
# No FMA contraction: the kernels then round exactly like the NumPy twins, so keep decisions
# agree except where a value sits exactly on a threshold.
_OPTIONS = ("-std=c++17", "--fmad=false")
_BLOCK = 256
_MAX_GRID = 65535 * 64
_MODES = {"corners": 0, "ellipse": 1}


# ----------------------------------------------------------------------------- helpers


def _check_shape(name, shape, expected):
    ok = len(shape) == len(expected) and all(e is None or s == e for s, e in zip(shape, expected))
    if not ok:
        want = tuple("?" if e is None else e for e in expected)
        raise ValueError(f"{name} must have shape {want}, got {tuple(shape)}")


def _grid(total: int) -> tuple:
    return (max(1, min((total + _BLOCK - 1) // _BLOCK, _MAX_GRID)), 1, 1)


def _cupy_stream(stream):
    import cupy as cp

    return cp, (stream if stream is not None else cp.cuda.get_current_stream())


def _dev(cp, a, dtype):
    """Device copy of ``a`` as contiguous ``dtype`` (no copy when it already is one); host
    arrays go up through the pinned staging ring (no wait on the device)."""
    if isinstance(a, cp.ndarray):
        return cp.ascontiguousarray(a.astype(dtype, copy=False))
    return upload(np.asarray(a, dtype=dtype))


# ----------------------------------------------------------------------------- transform


def _stages(matrices, canvas, mode):
    """Staged arguments as (K, B, 3, 3) float64 matrices, (K, B, 4) float64 clip rectangles
    ``[x_lo, y_lo, x_hi, y_hi]`` and a length-K list of mode codes; a single (B, 3, 3) / (B, 2)
    / str is one stage. A canvas (H, W) is the rectangle [0, 0, W, H]."""
    m = np.asarray(matrices, dtype=np.float64)
    cv = np.asarray(canvas, dtype=np.float64)
    if m.ndim == 3:
        m = m[None]
    _check_shape("matrices", m.shape, (None, None, 3, 3))
    if cv.ndim == 2:
        cv = cv[None]
    if cv.shape[-1] == 2:
        cv = canvas_rects(cv)
    cv = np.broadcast_to(cv, (m.shape[0], m.shape[1], 4))
    _check_shape("canvas", cv.shape, (m.shape[0], m.shape[1], 4))
    modes = [mode] * m.shape[0] if isinstance(mode, str) else list(mode)
    if len(modes) != m.shape[0]:
        raise ValueError(f"{m.shape[0]} stages but {len(modes)} modes")
    for md in modes:
        if md not in _MODES:
            raise ValueError(f"mode must be one of {sorted(_MODES)}, got {md!r}")
    return m, cv, [_MODES[md] for md in modes]


def _map_box(t, A, ellipse):
    """Enclosing box (N, 4) of boxes ``t`` mapped through per-box matrices ``A`` (N, 3, 3):
    of the 4 corners, or (``ellipse``) of the inscribed axis-aligned ellipse."""
    a00, a01, a02 = A[:, 0, 0, None], A[:, 0, 1, None], A[:, 0, 2, None]
    a10, a11, a12 = A[:, 1, 0, None], A[:, 1, 1, None], A[:, 1, 2, None]
    if not ellipse:
        xs, ys = t[:, [0, 2, 2, 0]], t[:, [1, 1, 3, 3]]
        tx = a00 * xs + a01 * ys + a02
        ty = a10 * xs + a11 * ys + a12
        proj = (A[:, 2, 0] != 0) | (A[:, 2, 1] != 0) | (A[:, 2, 2] != 1)
        if proj.any():  # the perspective divide, on those boxes only
            w = A[:, 2, 0, None] * xs + A[:, 2, 1, None] * ys + A[:, 2, 2, None]
            with np.errstate(divide="ignore", invalid="ignore"):
                tx = np.where(proj[:, None], tx / w, tx)
                ty = np.where(proj[:, None], ty / w, ty)
        return np.stack([tx.min(1), ty.min(1), tx.max(1), ty.max(1)], axis=1)
    cx, cy = (t[:, 0:1] + t[:, 2:3]) * 0.5, (t[:, 1:2] + t[:, 3:4]) * 0.5
    ha, hb = (t[:, 2:3] - t[:, 0:1]) * 0.5, (t[:, 3:4] - t[:, 1:2]) * 0.5
    ncx, ncy = a00 * cx + a01 * cy + a02, a10 * cx + a11 * cy + a12
    hx = np.sqrt((a00 * ha) * (a00 * ha) + (a01 * hb) * (a01 * hb))
    hy = np.sqrt((a10 * ha) * (a10 * ha) + (a11 * hb) * (a11 * hb))
    return np.concatenate([ncx - hx, ncy - hy, ncx + hx, ncy + hy], axis=1)


def _clip_box(t, rect):
    """Boxes ``t`` (N, 4) clipped to the per-box rectangles ``rect`` (N, 4) [x0, y0, x1, y1]."""
    lo, hi = rect[:, [0, 1, 0, 1]], rect[:, [2, 3, 2, 3]]
    return np.minimum(np.maximum(t, lo), hi)


def box_transform_numpy(boxes, sample_index, matrices, canvas, *, mode="corners", clip=True,
                        min_size=0.0, min_area=0.0, min_visibility=0.0, valid=None):
    """Map boxes through their sample's chain of ops, clipping at every canvas; mark survivors.

    A chain of K stages (one per op, in order): ``matrices[k, s]`` maps stage k's input to its
    output canvas ``canvas[k, s] = (H, W)`` (the clip rectangle [0, W] x [0, H]; a ``(.., 4)``
    canvas gives the rectangle ``[x_lo, y_lo, x_hi, y_hi]`` itself); ``mode[k]`` is that op's box
    rule. A single ``(B, 3, 3)`` matrix, ``(B, 2)`` canvas and one mode string is one stage.

    At each stage, with ``A`` the 2x2 linear part and ``t`` the translation of its matrix:

    - ``mode="corners"``: the 4 corners go through ``x -> A x + t`` (a projective matrix:
      with the perspective divide); the result is their enclosing box.
    - ``mode="ellipse"``: the box is read as its inscribed axis-aligned ellipse (centre ``c``,
      semi-axes ``a = w/2``, ``b = h/2``); the result is centred at ``A c + t`` with half-extents
      ``sqrt((A00 a)^2 + (A01 b)^2)`` and ``sqrt((A10 a)^2 + (A11 b)^2)`` (a rotated square
      keeps its size).

    then the box is clipped to that stage's canvas before the next stage
    maps it: what an op cuts away never comes back when a later op enlarges the canvas (the
    same boxes as running the ops one by one). A box whose clipped width or height is 0 at any
    stage has left that canvas and is dropped. Beside it the UNCLIPPED box is mapped through all
    stages (``t_K``); ``visibility = final clipped area / area of t_K`` (0 when the latter is
    0). ``keep = valid & (every stage's clipped w > 0 and h > 0) & (w >= min_size) &
    (h >= min_size) & (w * h >= min_area) & (visibility >= min_visibility)`` with ``w, h`` of
    the final clipped box. ``clip`` chooses which box is written at the last stage (the clipped
    one, or the last stage's map of the box clipped up to the stage before); earlier stages
    always clip. Dropped boxes keep some values; ``keep`` is the validity mask.

    Args / Shape:
        boxes (N, 4) float32; sample_index (N,) int; matrices (B, 3, 3) or (K, B, 3, 3);
        canvas (B, 2) or (K, B, 2) as (H, W), or (K, B, 4) rectangles; mode str or K strs;
        valid (N,) bool or None.
    Returns:
        out_boxes (N, 4) float32, keep (N,) bool.
    """
    bx = np.asarray(boxes, dtype=np.float32).astype(np.float64).reshape(-1, 4)
    _check_shape("boxes", np.shape(boxes), (bx.shape[0], 4))
    si = np.asarray(sample_index, dtype=np.int64)
    _check_shape("sample_index", si.shape, (bx.shape[0],))
    m, cv, modes = _stages(matrices, canvas, mode)
    c, free, alive = bx, bx, np.ones(len(bx), bool)
    for k in range(len(modes)):
        A = m[k][si]
        t = _map_box(c, A, modes[k])
        free = _map_box(free, A, modes[k])
        c = _clip_box(t, cv[k][si])
        alive &= (c[:, 2] - c[:, 0] > 0) & (c[:, 3] - c[:, 1] > 0)
    w, h = c[:, 2] - c[:, 0], c[:, 3] - c[:, 1]
    area = w * h
    area_t = np.maximum(free[:, 2] - free[:, 0], 0.0) * np.maximum(free[:, 3] - free[:, 1], 0.0)
    vis = np.divide(area, area_t, out=np.zeros_like(area), where=area_t > 0)
    keep = alive & (w >= min_size) & (h >= min_size) & (area >= min_area) & (vis >= min_visibility)
    if valid is not None:
        v = np.asarray(valid, dtype=bool)
        _check_shape("valid", v.shape, (bx.shape[0],))
        keep &= v
    return (c if clip else t).astype(np.float32), keep


def box_transform_cupy(boxes, sample_index, matrices, canvas, *, mode="corners", clip=True,
                       min_size=0.0, min_area=0.0, min_visibility=0.0, valid=None, stream=None):
    """cupy twin of :func:`box_transform_numpy` (same math in float64, one launch for the
    whole chain: each thread walks its box through the K stages).

    ``boxes``, ``sample_index`` and ``valid`` should be device arrays; ``matrices`` and
    ``canvas`` are host arrays (staged like the twin's), uploaded with the sample index in one
    staged copy. A ``sample_index`` outside ``[0, B)`` gives ``keep = False`` and the input box
    unchanged (it is not checked on the host: no sync).
    """
    m, cv, modes = _stages(matrices, canvas, mode)
    cp, s = _cupy_stream(stream)
    with s:
        bx = _dev(cp, boxes, cp.float32)
        n = bx.shape[0] if bx.ndim == 2 else -1
        _check_shape("boxes", bx.shape, (n, 4))
        out = cp.empty((n, 4), dtype=cp.float32)
        keep = cp.empty((n,), dtype=cp.bool_)
        if n == 0:
            return out, keep
        meta = [np.ascontiguousarray(m), np.ascontiguousarray(cv), np.asarray(modes, np.int32)]
        if isinstance(sample_index, cp.ndarray):
            si = cp.ascontiguousarray(sample_index.astype(cp.int32, copy=False))
            dm, dcv, dmodes = upload_many(meta, s)
        else:
            si, dm, dcv, dmodes = upload_many([np.asarray(sample_index, np.int32)] + meta, s)
        _check_shape("sample_index", si.shape, (n,))
        if valid is not None:
            v = _dev(cp, valid, cp.bool_)
            _check_shape("valid", v.shape, (n,))
        else:
            v = keep  # never read: has_valid = 0
        args = (bx, si, dm, dcv, dmodes, np.int32(len(modes)), v, np.int32(valid is not None),
                np.int64(n), np.int32(m.shape[1]), np.int32(bool(clip)), np.float64(min_size),
                np.float64(min_area), np.float64(min_visibility), out, keep)
        launch(get_kernel(_SRC, "box_transform", _OPTIONS), _grid(n), (_BLOCK, 1, 1), args,
               stream=s, name="box_transform")
    return out, keep


# ----------------------------------------------------------------------------- padding


def _field_fill_value(name, dtype, field_fill):
    """The pad value of one field, cast like ``astype``; bool fields pad with False unless a
    per-field value is given."""
    if isinstance(field_fill, dict):
        value = field_fill.get(name, False if dtype == np.bool_ else -1)
    else:
        value = False if dtype == np.bool_ else field_fill
    with np.errstate(all="ignore"):
        return np.array(value).astype(dtype)


def _pad_prepare(boxes_shape, fields, offsets, max_boxes):
    o = _host_offsets(offsets)
    n = int(o[-1])
    _check_shape("boxes", boxes_shape, (n, 4))
    for name, f in fields.items():
        _check_shape(f"field {name!r}", f.shape, (n,))
    if int(max_boxes) < 0:
        raise ValueError(f"max_boxes must be >= 0, got {max_boxes}")
    return o, n, int(max_boxes)


def pad_boxes_numpy(boxes, fields, keep, offsets, max_boxes, *, fill=0.0, field_fill=-1):
    """Compact each sample's kept boxes (in their order) to the front of a dense batch.

    Row ``r < counts[b]`` of ``padded[b]`` is the r-th kept box of sample b; the rest is
    ``fill`` (boxes) and the field's pad value (``field_fill``: a scalar or ``{name: value}``,
    cast to the field's dtype like ``astype``; bool fields pad with False unless named in the
    dict). A sample with more than ``max_boxes`` kept boxes keeps its first ``max_boxes``;
    ``counts`` is then ``max_boxes`` and the caller can detect the overflow with
    :func:`kept_counts_numpy`.

    Args / Shape:
        boxes (N, 4); fields {name: (N,)}; keep (N,) bool or None (all kept);
        offsets (B + 1,) int64 host; max_boxes int.
    Returns:
        padded (B, max_boxes, 4) float32, {name: (B, max_boxes) field dtype}, counts (B,) int32.
    """
    fields = {k: np.asarray(v) for k, v in fields.items()}
    o, n, mb = _pad_prepare(np.shape(boxes), fields, offsets, max_boxes)
    bx = np.asarray(boxes, dtype=np.float32).reshape(n, 4)
    b = o.size - 1
    k = np.ones(n, dtype=bool) if keep is None else np.asarray(keep, dtype=bool)
    _check_shape("keep", k.shape, (n,))
    si = sample_index_from_offsets(o)
    csum = np.concatenate([[0], np.cumsum(k, dtype=np.int64)])
    rank = csum[:-1] - csum[o[si]]           # kept boxes before this one in its sample
    sel = k & (rank < mb)
    padded = np.full((b, mb, 4), fill, dtype=np.float32)
    padded[si[sel], rank[sel]] = bx[sel]
    out_fields = {}
    for name, f in fields.items():
        pf = np.full((b, mb), _field_fill_value(name, f.dtype, field_fill), dtype=f.dtype)
        pf[si[sel], rank[sel]] = f[sel]
        out_fields[name] = pf
    counts = np.minimum(np.diff(csum[o]), mb).astype(np.int32)
    return padded, out_fields, counts


def pad_boxes_cupy(boxes, fields, keep, offsets, max_boxes, *, fill=0.0, field_fill=-1,
                   stream=None):
    """cupy twin of :func:`pad_boxes_numpy`: one launch, one block per sample doing a
    block-wide prefix sum over its keep flags; fields of any 1/2/4/8-byte dtype are copied
    bit for bit (no casts)."""
    cp, s = _cupy_stream(stream)
    with s:
        bx = _dev(cp, boxes, cp.float32)
        fields = {k: cp.ascontiguousarray(cp.asarray(v)) for k, v in fields.items()}
        o, n, mb = _pad_prepare(bx.shape, fields, offsets, max_boxes)
        b = o.size - 1
        padded = cp.empty((b, mb, 4), dtype=cp.float32)
        out_fields = {k: cp.empty((b, mb), dtype=v.dtype) for k, v in fields.items()}
        counts = cp.empty((b,), dtype=cp.int32)
        if b == 0:
            return padded, out_fields, counts
        if keep is not None:
            k = _dev(cp, keep, cp.bool_)
            _check_shape("keep", k.shape, (n,))
        else:
            k = counts  # never read: has_keep = 0
        meta = np.zeros((4, max(len(fields), 1)), dtype=np.uint64)
        for j, (name, f) in enumerate(fields.items()):
            if f.dtype.itemsize not in (1, 2, 4, 8):
                raise TypeError(f"field {name!r}: dtype {f.dtype} is not 1, 2, 4 or 8 bytes")
            bits = _field_fill_value(name, f.dtype, field_fill).tobytes().ljust(8, b"\0")
            meta[:, j] = (f.data.ptr, out_fields[name].data.ptr, f.dtype.itemsize,
                          np.frombuffer(bits, dtype=np.uint64)[0])
        meta_d, o_d = upload_many([meta, o], stream)
        args = (bx, k, np.int32(keep is not None), o_d, np.int32(mb), np.float32(fill),
                np.int32(len(fields)), meta_d[0], meta_d[1], meta_d[2], meta_d[3], padded, counts)
        launch(get_kernel(_SRC, "pad_boxes", _OPTIONS), (b, 1, 1), (_BLOCK, 1, 1), args,
               stream=s, name="pad_boxes")
    return padded, out_fields, counts


def kept_counts_numpy(keep, offsets) -> np.ndarray:
    """(B,) int64: the number of kept boxes of each sample (every box where ``keep`` is None)."""
    o = _host_offsets(offsets)
    if keep is None:
        return np.diff(o)
    csum = np.concatenate([[0], np.cumsum(np.asarray(keep, dtype=bool), dtype=np.int64)])
    return np.diff(csum[o])


# ----------------------------------------------------------------------------- IoU


def _iou_numpy(a, b):
    """IoU of broadcast-compatible (..., 4) float64 arrays; 0 where the union is 0.
    Areas use ``max(w, 0) * max(h, 0)``, so an inverted box has area 0."""
    iw = np.maximum(np.minimum(a[..., 2], b[..., 2]) - np.maximum(a[..., 0], b[..., 0]), 0.0)
    ih = np.maximum(np.minimum(a[..., 3], b[..., 3]) - np.maximum(a[..., 1], b[..., 1]), 0.0)
    inter = iw * ih
    area_a = np.maximum(a[..., 2] - a[..., 0], 0.0) * np.maximum(a[..., 3] - a[..., 1], 0.0)
    area_b = np.maximum(b[..., 2] - b[..., 0], 0.0) * np.maximum(b[..., 3] - b[..., 1], 0.0)
    union = area_a + area_b - inter
    return np.divide(inter, union, out=np.zeros_like(inter), where=union > 0)


def iou_matrix_numpy(a, b):
    """IoU of every box of ``a (M, 4)`` with every box of ``b (N, 4)``: (M, N) float32."""
    a = np.asarray(a, dtype=np.float32).astype(np.float64)
    b = np.asarray(b, dtype=np.float32).astype(np.float64)
    _check_shape("a", a.shape, (None, 4))
    _check_shape("b", b.shape, (None, 4))
    return _iou_numpy(a[:, None, :], b[None, :, :]).astype(np.float32)


def iou_matrix_cupy(a, b, *, stream=None):
    """cupy twin of :func:`iou_matrix_numpy` (float64 math, one launch)."""
    cp, s = _cupy_stream(stream)
    with s:
        a, b = _dev(cp, a, cp.float32), _dev(cp, b, cp.float32)
        _check_shape("a", a.shape, (None, 4))
        _check_shape("b", b.shape, (None, 4))
        m, n = a.shape[0], b.shape[0]
        out = cp.empty((m, n), dtype=cp.float32)
        if m * n == 0:
            return out
        launch(get_kernel(_SRC, "iou_matrix", _OPTIONS), _grid(m * n), (_BLOCK, 1, 1),
               (a, b, np.int64(m), np.int64(n), out), stream=s, name="iou_matrix")
    return out


def _windows_prepare(windows_shape, boxes_shape, offsets):
    o = _host_offsets(offsets)
    _check_shape("windows", windows_shape, (o.size - 1, None, 4))
    _check_shape("boxes", boxes_shape, (int(o[-1]), 4))
    nmax = int(np.diff(o).max()) if o.size > 1 else 0
    return o, nmax


def windows_iou_numpy(windows, boxes, offsets):
    """IoU of each candidate window of a sample with each box of that sample.

    Args / Shape: windows (B, T, 4); boxes (N, 4) packed by ``offsets (B + 1,)`` (host).
    Returns: (B, T, Nmax) float32, Nmax = the largest box count; ``out[b, t, j]`` for
    ``j >= count[b]`` is -1.
    """
    w = np.asarray(windows, dtype=np.float32).astype(np.float64)
    bx = np.asarray(boxes, dtype=np.float32).astype(np.float64).reshape(-1, 4)
    o, nmax = _windows_prepare(w.shape, np.shape(boxes), offsets)
    counts = np.diff(o)
    j = np.arange(nmax)
    present = j[None, :] < counts[:, None]                          # (B, Nmax)
    idx = np.where(present, o[:-1, None] + j[None, :], 0)
    padded = bx[idx] if bx.shape[0] else np.zeros(idx.shape + (4,))
    iou = _iou_numpy(w[:, :, None, :], padded[:, None, :, :])      # (B, T, Nmax)
    return np.where(present[:, None, :], iou, -1.0).astype(np.float32)


def windows_iou_cupy(windows, boxes, offsets, *, stream=None):
    """cupy twin of :func:`windows_iou_numpy` (one launch; ``offsets`` stay host metadata)."""
    cp, s = _cupy_stream(stream)
    with s:
        w, bx = _dev(cp, windows, cp.float32), _dev(cp, boxes, cp.float32)
        o, nmax = _windows_prepare(w.shape, bx.shape, offsets)
        b, t = w.shape[0], w.shape[1]
        out = cp.empty((b, t, nmax), dtype=cp.float32)
        total = b * t * nmax
        if total == 0:
            return out
        launch(get_kernel(_SRC, "windows_iou", _OPTIONS), _grid(total), (_BLOCK, 1, 1),
               (w, bx, upload(o, stream), np.int32(t), np.int32(nmax), np.int64(total), out),
               stream=s, name="windows_iou")
    return out
