"""Kernels of DALI's ops on plain tensor batches (detaug/dali/tensor_ops.py): ``box_encoder``,
``coord_flip``, ``coord_transform``, ``cat`` / ``stack``. Each is ONE function written against
an array module ``xp``: NumPy on the host (the 'cpu' kernel, the NumPy twin itself) and cupy on
the device (the 'gpu' kernel, the same code on the batch's stream: :func:`on_device`). The math
is elementwise or a gather, so both give the same values (float32 IoUs and offsets; float64
points cast once).

A batch is a dense ``(B, ...)`` array or a list of per-sample arrays (a ragged batch). Kernels
work on the whole batch at once: ragged samples are *packed* (the rows of every sample one
after another, with host ``counts``), each row's parameters gathered by its sample; where a
sample's rows meet (box_encoder's best box of each anchor) the reduction runs over box slots,
every sample at once (:func:`box_encoder_xp`). Counts, offsets and per-sample parameters are
host arrays (they come from shapes and arguments, never from the device): they go up with
:func:`to_xp`, and nothing comes back to the host.
"""
from __future__ import annotations

import contextlib

import numpy as np

from ..core.backend import upload_many


def on_device(fn):
    """``fn(xp, ...)`` as the 'gpu' kernel ``kernel(..., stream=)``: cupy, on ``stream``."""

    def gpu(*args, stream=None, **kw):
        import cupy as cp

        with stream if stream is not None else contextlib.nullcontext():
            return fn(cp, *args, **kw)

    gpu.__name__ = fn.__name__.replace("_xp", "_cupy")
    gpu.__doc__ = f"cupy variant of ``{fn.__name__}`` (the same code on the device)."
    return gpu


def to_xp(xp, *arrays):
    """Host arrays as ``xp`` arrays: themselves for NumPy, ONE upload for cupy (on the current
    stream)."""
    arrays = [np.asarray(a) for a in arrays]
    if xp is np:
        return arrays
    import cupy as cp

    full = [k for k, a in enumerate(arrays) if a.size]  # (empty ones need no copy)
    out = [cp.empty(a.shape, a.dtype) for a in arrays]
    if full:
        for k, d in zip(full, upload_many([arrays[k] for k in full],
                                          cp.cuda.get_current_stream())):
            out[k] = d
    return out


def counts_of(batch) -> np.ndarray:
    """(B,) int64 rows of each sample (its first extent) of a dense or ragged batch."""
    if isinstance(batch, (list, tuple)):
        return np.array([s.shape[0] if s.ndim else 1 for s in batch], np.int64)
    return np.full(batch.shape[0], batch.shape[1] if batch.ndim > 1 else 1, np.int64)


def pack(xp, batch):
    """(values (N, ...), counts (B,)): the rows of every sample one after another."""
    counts = counts_of(batch)
    if not isinstance(batch, (list, tuple)):
        return batch.reshape((-1,) + batch.shape[2:]), counts
    if not batch:
        return xp.zeros((0,)), counts
    return xp.concatenate([s.reshape((-1,) + s.shape[1:]) for s in batch]), counts


def unpack(values, counts, dense: bool):
    """The inverse of :func:`pack`: ``(B, n, ...)`` where the batch was dense, else a list of
    per-sample views (offsets from the host counts: no copy)."""
    if dense:
        return values.reshape((len(counts), -1) + values.shape[1:]) if len(counts) else \
            values.reshape((0, 0) + values.shape[1:])
    ends = np.cumsum(counts)
    return [values[int(e - c):int(e)] for c, e in zip(counts, ends)]


def sample_of_rows(counts) -> np.ndarray:
    """(N,) int32: the sample each packed row belongs to."""
    return np.repeat(np.arange(len(counts), dtype=np.int32), counts)


def host_values_xp(xp, values):
    """Values made on the host from shapes and arguments (DALI's ``shapes``) on the batch's
    device: a (B, ...) array, or a list of per-sample arrays, each as it is (NumPy) or uploaded
    in ONE copy (cupy)."""
    if isinstance(values, (list, tuple)):
        return list(to_xp(xp, *values)) if values else []
    return to_xp(xp, values)[0]


def dense_if_equal_xp(xp, samples):
    """Per-sample arrays as one dense (B, ...) array where they share a shape and dtype (one
    stack), else the list (a DALI TensorList is dense or not by its samples' shapes)."""
    if samples and all(a.shape == samples[0].shape and a.dtype == samples[0].dtype
                       for a in samples):
        return xp.stack(samples)
    return list(samples)


# ---- coord_flip / coord_transform -----------------------------------------------------------------
def coord_flip_xp(xp, points, flips, centers):
    """DALI's coord_flip of a batch of points: per sample ``s``, coordinate ``k`` of every point
    becomes ``2 * centers[s, k] - p[k]`` where ``flips[s, k]``, computed in float64 and cast back
    to the points' dtype.

    Args: points: dense (B, n, nd) or a list of (n_s, nd); flips (B, nd) bool, centers (B, nd)
    float64, host arrays. Returns the points in the input's form and dtype."""
    values, counts = pack(xp, points)
    if not len(values):
        return points
    rows = sample_of_rows(counts)
    f, c = to_xp(xp, flips[rows], centers[rows])
    out = xp.where(f, 2 * c - values.astype(xp.float64), values).astype(values.dtype)
    return unpack(out, counts, not isinstance(points, (list, tuple)))


def coord_transform_xp(xp, points, m, t, dtype):
    """DALI's coord_transform of a batch of points: per sample ``s``, ``out = m[s] @ p + t[s]``
    in float64, cast to ``dtype``.

    Args: points: dense (B, n, nd) or a list of (n_s, nd) (any numeric dtype); m (B, nd_out, nd)
    and t (B, nd_out) float64 host arrays. Returns (B, n, nd_out) or a list of (n_s, nd_out)."""
    values, counts = pack(xp, points)
    nd_out = m.shape[1]
    if not len(values):
        empty = xp.zeros((0, nd_out), dtype)
        return unpack(empty, counts, not isinstance(points, (list, tuple)))
    rows = sample_of_rows(counts)
    mm, tt = to_xp(xp, m[rows], t[rows])
    out = (xp.matmul(mm, values.astype(xp.float64)[:, :, None])[:, :, 0] + tt).astype(dtype)
    return unpack(out, counts, not isinstance(points, (list, tuple)))


# ---- cat / stack ---------------------------------------------------------------------------------------
def join_xp(xp, inputs, axis: int, new_axis: bool):
    """DALI's cat (``new_axis`` False) / stack (True) of several batches, per sample along
    ``axis`` (of a sample; negative from the end): one call over the batch where every input is
    dense; ragged inputs along axis 0 of a concatenation interleave their samples' rows in ONE
    concatenation, split back by the host counts; any other ragged case joins sample by sample.
    Returns a dense batch or a list, as the inputs' shapes allow."""
    join = xp.stack if new_axis else xp.concatenate
    if all(not isinstance(v, (list, tuple)) for v in inputs):
        nd = inputs[0].ndim - 1
        ax = axis + (nd + 1 if new_axis else nd) if axis < 0 else axis
        return join(inputs, axis=ax + 1)
    cols = [list(v) for v in inputs]
    if not new_axis and all(s.ndim for c in cols for s in c) and axis in (0, -cols[0][0].ndim):
        parts = [s for row in zip(*cols) for s in row]
        rest = {s.shape[1:] for s in parts}
        if len(rest) == 1 and len({s.dtype for s in parts}) == 1:
            counts = np.array([sum(s.shape[0] for s in row) for row in zip(*cols)], np.int64)
            return dense_if_equal_xp(xp, unpack(xp.concatenate(parts), counts, False))
    return dense_if_equal_xp(xp, [join(list(row), axis=axis) for row in zip(*cols)])


# ---- box_encoder -----------------------------------------------------------------------------------
def _center_wh(xp, ltrb):
    return xp.stack([(ltrb[..., 0] + ltrb[..., 2]) / 2, (ltrb[..., 1] + ltrb[..., 3]) / 2,
                     ltrb[..., 2] - ltrb[..., 0], ltrb[..., 3] - ltrb[..., 1]], -1)


def iou_xp(xp, boxes, anchors):
    """(..., n, m) float32 IoU of ltrb ``boxes`` (..., n, 4) with ltrb ``anchors`` (m, 4), as
    DALI's BoundingBox (0 where the union is empty)."""
    b, a = boxes[..., :, None, :], anchors
    iw = xp.maximum(xp.minimum(b[..., 2], a[..., 2]) - xp.maximum(b[..., 0], a[..., 0]), 0)
    ih = xp.maximum(xp.minimum(b[..., 3], a[..., 3]) - xp.maximum(b[..., 1], a[..., 1]), 0)
    inter = iw * ih
    union = ((b[..., 2] - b[..., 0]) * (b[..., 3] - b[..., 1])
             + (a[..., 2] - a[..., 0]) * (a[..., 3] - a[..., 1]) - inter)
    ok = union > 0
    return xp.where(ok, inter / xp.where(ok, union, 1), 0).astype(xp.float32)


def _slot_table(counts):
    """The rows of box slot ``j`` of every sample that has one, for ``j`` in 0..n_max-1: (the
    samples (K,), their rows (K,), host offsets (n_max + 1,)) with each slot's entries together."""
    starts = np.cumsum(counts) - counts
    n = int(counts.max()) if len(counts) else 0
    samples = [np.nonzero(counts > j)[0] for j in range(n)]
    offsets = np.cumsum([0] + [len(a) for a in samples])
    samples = np.concatenate(samples) if samples else np.zeros(0, np.int64)
    slots = np.repeat(np.arange(n), np.diff(offsets))
    return samples.astype(np.int64), (starts[samples] + slots).astype(np.int64), offsets


def box_encoder_xp(xp, boxes, labels, anchors, criteria, offset, means, stds):
    """DALI's BoxEncoder over a batch (SSD, arXiv 1512.02325, as MLPerf's).

    Per sample: IoU of every box with every anchor; each box's best anchor (the last of equal
    ones) gets IoU 2, so that every box keeps an anchor; each anchor takes its best box (the
    last of equal ones) when that IoU is > ``criteria``. Output per anchor: the matched box in
    centre form [cx, cy, w, h] and its label, an unmatched anchor itself in centre form and
    label 0; with ``offset``, the matched box as ``((c_box - c_anchor) / wh_anchor -
    means[:2]) / stds[:2]`` and ``(log(wh_box / wh_anchor) - means[2:]) / stds[2:]``, an
    unmatched anchor as zeros. (DALI multiplies box and anchor by its ``scale`` first, which
    cancels in these ratios.)

    The boxes of the batch are packed (N rows): the IoUs are (N, m), each box's best anchor a
    row's argmax. Each anchor's best box within its sample is a segmented argmax, taken box
    slot by box slot (slot j: the j-th box of every sample that has one, all at once), keeping
    the later box on ties: no atomics (the same result on either device, in any order of
    threads) and work in proportion to the boxes, not to the batch's largest count.

    Args: boxes: dense (B, n, 4) or a list of (n_s, 4) ltrb; labels: the same counts, (n_s,) or
    (n_s, 1); anchors (m, 4) ltrb, means / stds (4,) float32 host arrays.
    Returns ((B, m, 4) float32, (B, m) int32)."""
    if not isinstance(boxes, (list, tuple)):
        boxes = boxes.reshape(boxes.shape[0], -1, 4)
        labels = labels.reshape(labels.shape[0], -1)
    else:
        boxes = [s.reshape(-1, 4) for s in boxes]
        labels = [s.reshape(-1) for s in labels]
    bx, counts = pack(xp, boxes)
    lab, lcounts = pack(xp, labels)
    if (lcounts != counts).any():
        raise ValueError("a sample has a different number of labels than of boxes")
    act, rows, offsets = _slot_table(counts)
    anchors, means, stds, act, rows = to_xp(
        xp, np.asarray(anchors, np.float32).reshape(-1, 4), np.asarray(means, np.float32),
        np.asarray(stds, np.float32), act, rows)
    b, m = len(counts), len(anchors)
    anchors_c = _center_wh(xp, anchors)
    if not len(bx):
        out = xp.zeros((b, m, 4), xp.float32) if offset else xp.broadcast_to(
            anchors_c, (b, m, 4)).copy()
        return out, xp.zeros((b, m), xp.int32)
    bx = bx.reshape(-1, 4).astype(xp.float32)
    ious = iou_xp(xp, bx, anchors)                                            # (N, m)
    best_anchor = m - 1 - xp.argmax(ious[:, ::-1], 1)
    ious[xp.arange(len(bx)), best_anchor] = 2.0
    best_iou = xp.full((b, m), -1, xp.float32)  # a sample without boxes matches nothing
    best_row = xp.zeros((b, m), xp.int64)
    for j in range(len(offsets) - 1):
        a, r = act[offsets[j]:offsets[j + 1]], rows[offsets[j]:offsets[j + 1]]
        vals, cur = ious[r], best_iou[a]
        take = vals >= cur                                  # >=: the later box wins a tie
        best_iou[a] = xp.where(take, vals, cur)
        best_row[a] = xp.where(take, r[:, None], best_row[a])
    matched = best_iou > criteria
    box_c = _center_wh(xp, bx)[best_row]                                      # (B, m, 4)
    anc = xp.broadcast_to(anchors_c, box_c.shape)
    if offset:
        box_c = xp.where(matched[:, :, None], box_c, anc)  # unmatched: no log of 0
        with np.errstate(divide="ignore", invalid="ignore"):  # (an unmatched empty anchor)
            enc = xp.concatenate([(box_c[..., :2] - anc[..., :2]) / anc[..., 2:],
                                  xp.log(box_c[..., 2:] / anc[..., 2:])], -1)
        out = xp.where(matched[:, :, None], (enc - means) / stds, xp.float32(0))
    else:
        out = xp.where(matched[:, :, None], box_c, anc)
    out_labels = xp.where(matched, lab.reshape(-1)[best_row], 0).astype(xp.int32)
    return out.astype(xp.float32), out_labels


box_encoder_cupy = on_device(box_encoder_xp)
coord_flip_cupy = on_device(coord_flip_xp)
coord_transform_cupy = on_device(coord_transform_xp)
join_cupy = on_device(join_xp)
host_values_cupy = on_device(host_values_xp)
dense_if_equal_cupy = on_device(dense_if_equal_xp)
