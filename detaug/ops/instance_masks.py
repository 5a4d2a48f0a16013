"""Instance masks made at the output: each box's polygons rasterised on its canvas as COCO
makes them (pycocotools' ``frPyObjects``, ``merge`` and ``decode``; core/polygon_fill.py),
united with the box's bitmap mask where the reader gives one (``bitmasks``: moved through the
geometric ops with the boxes; a box holding both gets the pixels of either).

On the GPU one launch for every box of the batch (kernels/masks.cu), reading the moved
polygons where they are: no copy to the host in the graph. The masks ride the BoxBatch as the
per-box field ``masks`` (N, H, W) uint8, so that a box dropped drops its mask, padding pads it
(0) and the torch adapter's list targets hand it over as torchvision's ``masks``."""
from __future__ import annotations

import contextlib

import numpy as np

from ..core import shapes as S
from ..core.batch import BoxBatch
from ..core.polygon_fill import plane_size
from ..graph import materialize as M
from ..kernels import masks as km
from .registry import register


# boxes a sample whose masks a label map is made from, held while it runs (COCO's mean is 7.3)
LABEL_MAP_BOXES = 8


def _masks_rule(ins, args):
    """Boxes on their input's canvas, each carrying a mask of that canvas's pixels (uint8); with
    ``pixelwise`` an int32 label map of the canvas, made from such masks (held while it runs)."""
    boxes = ins[0] if ins and isinstance(ins[0], S.Boxes) else None
    canvas = boxes.canvas if boxes is not None else None
    hw = None if canvas is None else (canvas.hw or canvas.bound)
    if hw is None:
        return S.Out((None,))
    px = int(hw[0]) * int(hw[1])
    if args.get("pixelwise"):
        return S.Out((S.Array(4 * px),), working=LABEL_MAP_BOXES * px)
    return S.Out((S.Boxes(canvas, box_bytes=px),))


# plans=False: planned ahead, it would rasterise in the host worker and upload every mask; it
# runs where the batch is, on the device from the moved polygons
@register("instance_masks", devices=("cpu", "gpu"), inputs=(1, 1), kind="box", plans=False,
          rule=_masks_rule, args={"pixelwise": False},
          arg_docs={"pixelwise": "DALI's pixelwise_masks instead: (B, H, W, 1) int32, each pixel "
                                 "the label + 1 (DALI's labels) of the highest-labelled kept box "
                                 "covering it, 0 where none does"},
          output_spec="BoxBatch with the field masks (N, H, W) uint8 0/1: each box's polygons "
                      "on its sample's canvas, united with its bitmasks, (H, W) the batch's "
                      "largest canvas (the field bitmasks is consumed); with pixelwise a (B, H, "
                      "W, 1) int32 label map (0 outside a sample's canvas)",
          doc="rasterise each box's polygons (readers.coco(polygons=True)) to a mask on its "
              "canvas, as COCO does (pycocotools), united with its bitmap mask (readers.coco / "
              "readers.voc(bitmasks=True)); after the last geometric op")
def instance_masks(ctx, op, inputs, args):
    b = inputs[0]
    if not isinstance(b, BoxBatch):
        raise TypeError(f"{op.name}: takes boxes (a BoxBatch from a reader), got "
                        f"{type(b).__name__}")
    if "polygons" not in b.fields and "bitmasks" not in b.fields:
        raise ValueError(f"{op.name}: the boxes carry no polygons and no bitmap masks; read "
                         "them with readers.coco(..., polygons=True) or bitmasks=True")
    b = M.boxes(b, ctx)  # the shapes moved through the pending chain, clipped to the canvas
    masks = union_masks(b, stream=getattr(ctx, "stream", None))
    if args["pixelwise"]:
        return _label_map(b, masks, ctx)
    # the host copy (planning's) keeps its fields: nothing on the host reads a mask
    fields = {k: v for k, v in b.fields.items() if k != "bitmasks"}
    return b.replace(fields={**fields, "masks": masks})


# rows of bitmap masks united with the polygons' masks at once, in bytes: the gathered rows are a
# temporary of at most this size (not one as large as the masks)
UNITE_BYTES = 16 << 20


def union_masks(b: BoxBatch, keep=None, stream=None, kx=None):
    """(K, H, W) uint8 0/1 of a materialised BoxBatch: the masks of the boxes ``keep`` ((K,)
    ascending box indices, on the host; None: every box, K = N), each box's polygons rasterised
    on its sample's canvas (kernels/masks.py), united with its ``bitmasks`` row; (H, W) the
    batch's largest canvas. Only the kept boxes' polygons are rasterised (the rows of a mask do
    not depend on the other boxes); a device batch in one launch on ``stream``, from the device
    pool the caller's thread allocates from. ``kx``: ``keep`` (int64) on the batch's device
    where the caller has it already (default: uploaded here)."""
    from ..core.backend import upload, xp_for

    dev = b.device == "gpu"
    xp = xp_for("gpu" if dev else "cpu")
    per_box = np.repeat(b.canvas, np.diff(b.offsets), axis=0)
    out_hw = plane_size(b.canvas)
    bits, rows = b.fields.get("bitmasks"), b.fields.get("polygons")
    on = stream if dev and stream is not None else contextlib.nullcontext()
    with on:  # (the device's gathers on the stream the masks are made on)
        if keep is None:
            kx = None
        else:
            keep = np.asarray(keep, np.int64)
            per_box = per_box[keep]
            if kx is None:
                kx = upload(keep, stream) if dev else keep
        if bits is not None:  # planes of at least every canvas: cut to the largest
            bits = fit_planes(bits, out_hw)
        if rows is None:
            return bits if kx is None else xp.take(bits, kx, axis=0)
        if kx is not None:
            rows = xp.take(rows, kx, axis=0)
    if dev:
        masks = km.polygon_masks_cupy(rows, per_box, out_hw, stream=stream)
    else:
        masks = km.polygon_masks_coco(rows, per_box, out_hw)
    if bits is not None:  # the same plane: the batch's largest canvas
        with on:
            _unite(masks, bits, kx, xp)
    return masks


def _unite(masks, bits, kx, xp) -> None:
    """``masks |= bits[kx]`` (``kx`` None: ``bits``), ``bits`` gathered in runs of rows of at most
    :data:`UNITE_BYTES`."""
    if kx is None:
        masks |= bits
        return
    per = max(1, UNITE_BYTES // max(1, int(np.prod(masks.shape[1:]))))
    for j in range(0, len(kx), per):
        masks[j:j + per] |= xp.take(bits, kx[j:j + per], axis=0)


def fit_planes(planes, hw):
    """(N, H, W) planes (host or device) cut or zero-padded at the bottom and right to ``hw``."""
    from ..core.backend import is_device_array, xp_for

    xp = xp_for("gpu" if is_device_array(planes) else "cpu")
    planes = planes[:, :int(hw[0]), :int(hw[1])]
    pad = ((0, 0), (0, int(hw[0]) - planes.shape[1]), (0, int(hw[1]) - planes.shape[2]))
    return xp.pad(planes, pad) if any(p[1] for p in pad) else planes


def _label_map(b: BoxBatch, masks, ctx):
    """(B, H, W, 1) int32: DALI's pixelwise masks from the boxes' masks (kernels/masks.py
    ``masks_to_labels``), a dropped box painting nothing."""
    if b.device == "gpu":
        import cupy as cp

        stream = getattr(ctx, "stream", None)
        with stream if stream is not None else cp.cuda.get_current_stream():
            value = (b.labels + 1).astype(cp.int32)
            if b.valid is not None:
                value = cp.where(b.valid, value, 0).astype(cp.int32)
            out = km.masks_to_labels_cupy(masks, b.offsets, value, stream=stream)
    else:
        value = (np.asarray(b.labels) + 1).astype(np.int32)
        if b.valid is not None:
            value = np.where(b.valid, value, 0).astype(np.int32)
        out = km.masks_to_labels_numpy(masks, b.offsets, value)
    return out[..., None]
