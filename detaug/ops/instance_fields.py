"""A reader's ragged instance fields (readers/segments.py ``Ragged``: polygons) kept apart
from its dataset-wide packed boxes and made dense per batch (core/instances.py
``dense_polygons``), so that the BoxBatch holds only dense per-box fields, which every op
carries as it carries labels."""
from __future__ import annotations

import numpy as np

from ..core.instances import dense_polygons

CARRIED = ("polygons",)  # the ragged fields a pipeline carries (masks: not yet)


def split_ragged(records):
    """``(records, ragged)``: the records without their ragged fields (copies where they had
    some) and each such field over the whole set, rows in record order (a ``Ragged`` per
    name). A RecordTable (read_coco's columns) has none: returned as it is, no record made.

    Raises:
        ValueError naming a ragged field that a pipeline does not carry (an RLE mask), rather
        than pass it through unmoved.
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


def batch_fields(ragged, rows) -> dict:
    """The dense per-box fields of the packed ``rows`` of a batch."""
    out = {}
    for name, values in ragged.items():
        sub = values.take(np.asarray(rows, np.int64))
        out[name] = dense_polygons(sub.values.values, sub.values.offsets, sub.offsets)
    return out


def _shaped_fill(name, dtype):
    """The pad value of a field with per-box shape: keypoints 0 (COCO's unlabelled point),
    other floats NaN (a polygon row or corner that is not there: the NaN rows that already end
    each polygon), integers -1, bools False."""
    if name == "keypoints":
        return 0
    if np.issubdtype(dtype, np.floating):
        return np.nan
    return False if dtype == np.bool_ else -1


def pad_fields(boxes, fields, keep, offsets, max_boxes, *, device="cpu", pad=None, **kw):
    """``pad`` (kernels/boxes.py ``pad_boxes_numpy`` or its cupy twin, called with ``kw``) for
    the (N,) fields, and the fields with a per-box shape (keypoints (N, K, 3), keypoint_flip
    (N, K), obb (N, 4, 2), polygons (N, P, 2)) padded the same way on the host: (B, M, ...),
    row r of sample b its r-th kept box, the rest :func:`_shaped_fill`. Polygons keep their
    batch's P (its longest box: NaN rows end each polygon), so their padded shape varies from
    batch to batch as a box count does without ``max_boxes``.

    Returns ``(boxes (B, M, 4), fields, counts (B,))`` as ``pad`` does.

    Raises:
        NotImplementedError naming the shaped fields on the GPU (no padding kernel for them;
        the GPU path refuses them at its geometric ops too).
    """
    from ..kernels import boxes as kb

    flat = {k: v for k, v in fields.items() if np.ndim(v) == 1}
    shaped = {k: v for k, v in fields.items() if np.ndim(v) != 1}
    if shaped and device == "gpu":
        raise NotImplementedError(f"the fields {sorted(shaped)} have a per-box shape and are "
                                  "padded on the CPU only so far")
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
    for name, v in shaped.items():
        v = np.asarray(v)
        if len(v) != n:
            raise ValueError(f"field {name!r} has {len(v)} rows for {n} boxes")
        p = np.full((b, m) + v.shape[1:], _shaped_fill(name, v.dtype), v.dtype)
        p[si[sel], rank[sel]] = v[sel]
        out[name] = p
    return out_boxes, {k: out[k] for k in ["labels", *fields] if k in out}, cnt
