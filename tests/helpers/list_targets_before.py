"""The torch adapter's list targets as it made them before its columns were views and kept
columns (detaug/adapters/box_lists.py): the reference its tests compare with, bit for bit."""
import numpy as np
import torch

from detaug.core.instances import trim_polygons
from detaug.kernels import masks as km
from detaug.ops import instance_masks


def previous_box_list(bb, label_offset, device_polygons=False):
    """The list targets of the host BoxBatch ``bb`` as the adapter made them before: every
    column a tensor, masks of every box (the dropped ones' polygons NaN), the valid rows by
    ``index_select``, then split. ``device_polygons``: ``bb`` is the host copy of a device
    batch, whose polygons were cut to their width (host ones were handed as they are)."""
    valid = np.ones(bb.num_boxes, bool) if bb.valid is None else np.asarray(bb.valid, bool)
    counts = np.bincount(bb.sample_index()[valid], minlength=bb.batch_size)
    fields = dict(bb.fields)
    if ("polygons" in fields or "bitmasks" in fields) and "masks" not in fields:
        per_box = np.repeat(bb.canvas, np.diff(bb.offsets), axis=0)
        out_hw = tuple(int(v) for v in bb.canvas.max(0))
        bits = fields.get("bitmasks")
        if bits is not None:
            bits = instance_masks.fit_planes(bits, out_hw)
        if "polygons" in fields:
            rows = np.where(valid[:, None, None], fields["polygons"], np.nan)
            masks = km.polygon_masks_coco(rows, per_box, out_hw)
            if bits is not None:
                masks |= bits
        else:
            masks = bits
        fields["masks"] = masks
    fields.pop("bitmasks", None)
    cols = {"boxes": torch.from_numpy(bb.boxes).to(torch.float32),
            "labels": torch.from_numpy(bb.labels).to(torch.int64) + label_offset,
            **{k: torch.from_numpy(np.ascontiguousarray(
                trim_polygons(v) if k == "polygons" and device_polygons else v))
               for k, v in fields.items()}}
    if not valid.all():
        idx = torch.from_numpy(np.nonzero(valid)[0])
        cols = {k: v.index_select(0, idx) for k, v in cols.items()}
    split = {k: torch.split(v, counts.tolist()) for k, v in cols.items()}
    out = [{k: split[k][s] for k in cols} for s in range(bb.batch_size)]
    if "masks" in cols:
        for d, (h, w) in zip(out, bb.canvas.tolist()):
            d["masks"] = d["masks"][:, :h, :w]
    return out


def same_targets(got, want):
    """``got`` (list targets, on any device) equal ``want``'s: the same keys in the same order,
    dtypes, shapes and values (NaN equal to NaN)."""
    assert len(got) == len(want)
    for g, w in zip(got, want):
        g = {k: v.cpu() for k, v in g.items()}
        assert list(g) == list(w)  # the same keys, in the same order
        for k in w:
            assert g[k].dtype == w[k].dtype and g[k].shape == w[k].shape, k
            assert torch.equal(torch.nan_to_num(g[k]) if g[k].is_floating_point() else g[k],
                               torch.nan_to_num(w[k]) if w[k].is_floating_point() else w[k]), k
