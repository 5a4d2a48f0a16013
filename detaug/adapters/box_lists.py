"""The columns of a BoxBatch's list targets, kept to its valid boxes, with no framework: what the
torch adapter (detaug/adapters/torch.py) wraps without a copy and cuts into each sample's views.

On the device everything here runs on the stream and allocates from the pool the caller sets
(the adapter: torch's current stream, after the batch's event, and the pipeline's stream-ordered
device pool, detaug/runtime/gpu/allocator.py), so that the columns are freed in that stream's
order once the caller drops them, and the framework's own allocator takes nothing.

Where a batch dropped boxes, each column keeps its valid rows. A small column is gathered into
an array of its own. A large one (an instance mask per box, ``masks``) that no other output of
the batch shares memory with is compacted in place: its valid rows are moved to its front, in
runs through a scratch of at most :data:`IN_PLACE_CHUNK` bytes, and its first rows handed out
(a view of the pipeline's own output). Its memory is the batch's, held by the pipeline's hand-out
until the caller has dropped every array of the batch (detaug/runtime/gpu/handout.py), so a copy
would add a batch of masks for each batch the caller holds; moved in place it adds nothing."""
from __future__ import annotations

import collections
import contextlib

import numpy as np

from ..core import backend
from ..core.batch import BoxBatch
from ..core.instances import trim_polygons
from ..runtime.gpu.handout import output_arrays

IN_PLACE_CHUNK = 16 << 20  # bytes: the scratch of one step of an in-place compaction
IN_PLACE_MIN = 1 << 20     # bytes: a column from this size on is compacted in place where it may


def kept(a, keep, kx=None, in_place=False):
    """Rows ``keep`` of ``a`` ((K,) ascending row indices on the host; ``kx``: the same on
    ``a``'s device, default ``keep``). A gathered copy; with ``in_place`` the rows moved to the
    front of ``a`` itself and ``a[:K]`` returned (``a`` changes). In place, the rows move in runs
    of at most :data:`IN_PLACE_CHUNK` bytes, each gathered before it is written: run ``[j, e)``
    reads rows ``keep[j:e] >= j`` (keep ascends) and writes rows ``[j, e)``, so no run reads a
    row that an earlier one wrote; rows already in place are left."""
    xp = backend.xp_for("gpu" if backend.is_device_array(a) else "cpu")
    kx = keep if kx is None else kx
    if not in_place:
        return xp.take(a, kx, axis=0)
    k = len(keep)
    moved = np.flatnonzero(np.asarray(keep) != np.arange(k))
    if len(moved):
        row = a.itemsize * int(np.prod(a.shape[1:], dtype=np.int64))
        step = max(1, IN_PLACE_CHUNK // max(1, row))
        for j in range(int(moved[0]), k, step):
            e = min(k, j + step)
            a[j:e] = xp.take(a, kx[j:e], axis=0)
    return a[:k]


def _span(a) -> tuple:
    """[first, last) byte addresses a device array's elements lie in."""
    lo = hi = a.data.ptr
    if a.size == 0:
        return lo, lo
    for n, st in zip(a.shape, a.strides):
        (lo, hi) = (lo + (n - 1) * st, hi) if st < 0 else (lo, hi + (n - 1) * st)
    return lo, hi + a.itemsize


def movable(outs) -> frozenset:
    """The ids of the large device arrays (:data:`IN_PLACE_MIN` bytes on) of a batch's outputs
    that may be compacted in place: each appears once among the outputs and shares no memory
    with another array of them (an output given twice, two boxes outputs sharing a field, do not
    move)."""
    arrays = [a for a in output_arrays(outs) if backend.is_device_array(a)]
    seen = collections.Counter(id(a) for a in arrays)
    spans = {id(a): _span(a) for a in arrays}
    out = set()
    for a in arrays:
        if a.nbytes < IN_PLACE_MIN or seen[id(a)] > 1:
            continue
        lo, hi = spans[id(a)]
        if not any(j != id(a) and l2 < hi and lo < h2 for j, (l2, h2) in spans.items()):
            out.add(id(a))
    return frozenset(out)


def trimmed_polygons(rows, stream=None):
    """Device polygons cut to the CPU path's width (core/instances.py ``trim_polygons``: the
    GPU leaves NaN rows past it), the width read on ``stream`` (one small copy to the host;
    the adapter's own copy stream, so that no queue of the training loop is waited for). Host
    arrays as they are."""
    if not backend.is_device_array(rows):
        return rows
    with stream if stream is not None else contextlib.nullcontext():
        return trim_polygons(rows)


def columns(bb: BoxBatch, keep, label_offset: int = 0, stream=None, may_move=frozenset(),
            width_stream=None) -> dict:
    """The columns of ``bb``'s list targets, each with a row for each box ``keep`` ((K,)
    ascending indices on the host; None: every box, as views of ``bb``'s arrays): ``boxes``
    float32, ``labels`` int64 + ``label_offset``, then ``bb``'s fields in order (``polygons``
    cut to :func:`trimmed_polygons`), with ``masks`` where the boxes carry polygons or bitmap
    masks and no masks (made for the kept boxes only: ops/instance_masks.py ``union_masks``,
    ``bitmasks`` folded into them). Arrays whose ids are in ``may_move`` (:func:`movable`) are
    compacted in place (:func:`kept`). A device batch's work runs on cupy's current stream,
    which the caller sets to ``stream`` (and its allocator), ``width_stream`` (after the batch's
    event) reading the polygons' width."""
    kx = keep
    if keep is not None and bb.device == "gpu":  # (one upload: the masks' gathers take it too)
        kx = backend.upload(np.asarray(keep, np.int64), stream)
    fields = dict(bb.fields)
    if ("polygons" in fields or "bitmasks" in fields) and "masks" not in fields:
        from ..ops.instance_masks import union_masks

        # torchvision's Mask R-CNN takes masks; only the kept boxes' are made
        fields["masks"] = made = union_masks(bb, keep, stream, kx)
    else:
        made = None
    fields.pop("bitmasks", None)  # (in masks now)
    if "polygons" in fields:
        fields["polygons"] = trimmed_polygons(fields["polygons"], width_stream)
    cols = {"boxes": bb.boxes, "labels": bb.labels, **fields}
    out = {}
    for k, v in cols.items():
        if keep is not None and v is not made:
            v = kept(v, keep, kx if backend.is_device_array(v) else keep,
                     in_place=id(v) in may_move)
        out[k] = v
    xp = backend.xp_for("gpu" if backend.is_device_array(out["labels"]) else "cpu")
    out["boxes"] = out["boxes"].astype(np.float32, copy=False)
    labels = out["labels"].astype(xp.int64)  # (a copy: the offset is added to it)
    if label_offset:
        labels += label_offset
    out["labels"] = labels
    return out
