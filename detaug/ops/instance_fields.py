"""A reader's ragged instance fields (readers/segments.py ``Ragged``: polygons, run-length
masks) kept apart from its dataset-wide packed boxes and made dense per batch (core/instances.py
``dense_polygons``, ``rle_planes``), so that the BoxBatch holds only dense per-box fields, which
every op carries as it carries labels."""
from __future__ import annotations

import numpy as np

from ..core.instances import dense_polygons, rle_planes, trim_polygons
from ..kernels import shapes as ks

# the ragged fields a pipeline carries, and the dense per-box field each becomes in a batch
CARRIED = {"polygons": "polygons", "rle": "bitmasks"}


def split_ragged(records):
    """``(records, ragged)``: the records without their ragged fields (copies where they had
    some) and each such field over the whole set, rows in record order (a ``Ragged`` per
    name). A RecordTable (read_coco's columns) has none: returned as it is, no record made.

    Raises:
        ValueError naming a ragged field that a pipeline does not carry, rather than pass it
        through unmoved.
    """
    if hasattr(records, "packed") or not len(records):
        return records, {}
    from readers.segments import Ragged

    names = [k for k, v in records[0].fields.items() if isinstance(v, Ragged)]
    if not names:
        return records, {}
    other = [k for k in names if k not in CARRIED]
    if other:
        raise ValueError(f"the records' fields {other} cannot ride a pipeline yet (it carries "
                         f"{list(CARRIED)}); drop them from the records")
    ragged = {k: Ragged.concat([r.fields[k] for r in records]) for k in names}
    import copy

    out = []
    for r in records:
        r = copy.copy(r)
        r.fields = {k: v for k, v in r.fields.items() if k not in ragged}
        out.append(r)
    return out, ragged


def batch_fields(ragged, rows, canvas) -> dict:
    """The dense per-box fields of the packed ``rows`` of a batch: ``polygons`` (N, P, 2)
    float64 (NaN-ended rows), and from ``rle`` the field ``bitmasks`` (N, H, W) uint8 0/1, each
    box's mask on its image's canvas ``canvas`` (N, 2) ``(h, w)`` at the top left of a plane of
    the batch's largest canvas (zeros: no mask)."""
    out = {}
    canvas = np.asarray(canvas, np.int64).reshape(-1, 2)
    for name, values in ragged.items():
        sub = values.take(np.asarray(rows, np.int64))
        if name == "rle":
            plane = canvas.max(0) if len(canvas) else (0, 0)
            out[CARRIED[name]] = rle_planes(sub.values, sub.offsets, canvas, plane)
        else:
            out[CARRIED[name]] = dense_polygons(sub.values.values, sub.values.offsets,
                                                sub.offsets)
    return out


def pad_fields(boxes, fields, keep, offsets, max_boxes, *, device="cpu", pad=None, **kw):
    """``pad`` (kernels/boxes.py ``pad_boxes_numpy`` or its cupy twin, called with ``kw``) for
    the (N,) fields, and the fields with a per-box shape (keypoints (N, K, 3), keypoint_flip
    (N, K), obb (N, 4, 2), polygons (N, P, 2)) padded the same way: (B, M, ...), row r of sample
    b its r-th kept box, the rest kernels/shapes.py ``shaped_fill`` (keypoints 0, other floats
    NaN, integers -1, bools False). Polygons keep their batch's P (its longest box: NaN rows end
    each polygon), so their padded shape varies from batch to batch as a box count does without
    ``max_boxes``. On the GPU polygons are first cut to that P (core/instances.py
    ``trim_polygons``: the GPU leaves NaN rows past it; one small copy to the host) and the
    shaped fields take one more launch (``pad_shaped_cupy``, from the row each padded slot
    holds, which ``pad`` gives as one more field).

    Returns ``(boxes (B, M, 4), fields, counts (B,))`` as ``pad`` does.
    """
    from ..kernels import boxes as kb

    flat = {k: v for k, v in fields.items() if np.ndim(v) == 1}
    shaped = {k: v for k, v in fields.items() if np.ndim(v) != 1}
    if shaped and device == "gpu":
        return _pad_fields_gpu(boxes, fields, flat, shaped, keep, offsets, max_boxes, pad, kw)
    out_boxes, out, cnt = (pad or kb.pad_boxes_numpy)(boxes, flat, keep, offsets, max_boxes,
                                                      **kw)
    if not shaped:
        return out_boxes, out, cnt
    o = np.asarray(offsets, np.int64)
    n, b, m = int(o[-1]), len(o) - 1, int(max_boxes)
    k = np.ones(n, bool) if keep is None else np.asarray(keep, bool).reshape(-1)
    si = np.repeat(np.arange(b), np.diff(o))
    csum = np.concatenate([[0], np.cumsum(k, dtype=np.int64)])
    rank = csum[:-1] - csum[o[si]]  # kept boxes before this one in its sample
    sel = k & (rank < m)
    index = np.full((b, m), -1, np.int64)
    index[si[sel], rank[sel]] = np.flatnonzero(sel)
    _check_rows(shaped, n)
    out.update(ks.pad_shaped_numpy(shaped, index))
    return out_boxes, {k: out[k] for k in ["labels", *fields] if k in out}, cnt


def _pad_fields_gpu(boxes, fields, flat, shaped, keep, offsets, max_boxes, pad, kw):
    """:func:`pad_fields` on the device: the padded slots' rows come out of ``pad`` as one more
    field (-1 where a slot is padding), then one launch pads every shaped field."""
    import cupy as cp

    n = int(np.asarray(offsets)[-1])
    _check_rows(shaped, n)
    row = "\0row"  # a name no reader gives a field
    ff = kw.get("field_fill", -1)
    kw = dict(kw, field_fill=dict(ff, **{row: -1}) if isinstance(ff, dict)
              else {**{k: ff for k, v in flat.items() if v.dtype != np.bool_}, row: -1})
    stream = kw.get("stream")
    with stream if stream is not None else cp.cuda.get_current_stream():
        rows = cp.arange(n, dtype=cp.int64)
        if "polygons" in shaped:  # one small copy to the host, after the batch's kernels
            shaped["polygons"] = trim_polygons(shaped["polygons"])
    out_boxes, out, cnt = pad(boxes, {**flat, row: rows}, keep, offsets, max_boxes, **kw)
    index = out.pop(row)
    out.update(ks.pad_shaped_cupy(shaped, index, stream=stream))
    return out_boxes, {k: out[k] for k in ["labels", *fields] if k in out}, cnt


def _check_rows(shaped, n):
    for name, v in shaped.items():
        if len(v) != n:
            raise ValueError(f"field {name!r} has {len(v)} rows for {n} boxes")
