"""Box post-processing: clip and prune (one fused kernel with the pending transform), format
conversion at the edge, and padding to a dense (B, M, 4) tensor with counts."""
from __future__ import annotations

import warnings

import numpy as np

from ..core import backend
from ..core import shapes as S
from ..graph import materialize as M
from ..core.batch import BoxBatch, PaddedBoxes
from ..kernels import boxes as kb
from .instance_fields import pad_fields
from .registry import register
from ..graph.arg_check import declare_ranges, count, finite, nonneg, prob

BOX = dict(devices=("cpu", "gpu"), inputs=(1, 1), kind="box", plans=True)
BOX_ROW_BYTES = 32  # a padded box row: 4 coordinates, label, fields


def _padded_rule(ins, a):
    """(max_boxes or 100) rows of ``BOX_ROW_BYTES`` per sample, and of what each box carries
    besides (``Boxes.bytes_per_box``: a mask); unknown where that is."""
    n = a.get("max_boxes")
    extra = ins[0].bytes_per_box() if ins and isinstance(ins[0], S.Boxes) else 0
    if extra is None:
        return S.Out((None,))
    return S.Out((S.Array((int(n) if n else 100) * (BOX_ROW_BYTES + extra)),))


def _boxes(op, v) -> BoxBatch:
    if not isinstance(v, BoxBatch):
        raise TypeError(f"{op.name}: takes boxes (a BoxBatch from a reader), got {type(v).__name__}")
    return v


declare_ranges("prune_boxes", min_size=nonneg(), min_area=nonneg(), min_visibility=prob())
@register("prune_boxes", rule=S.boxes_follow, **BOX,
          args={"clip": True, "min_size": 0.0, "min_area": 0.0,
                                      "min_visibility": 0.0},
          aliases=("bbox_prune",), output_spec="BoxBatch, dropped boxes (and fields) masked out",
          doc="clip boxes to the canvas; drop boxes under min_size (w or h), min_area, or whose "
              "visible fraction after clipping is under min_visibility; fields follow")
def prune_boxes(ctx, op, inputs, args):
    return M.prune(_boxes(op, inputs[0]), ctx, clip=bool(args["clip"]),
                                       min_size=float(args["min_size"]),
                                       min_area=float(args["min_area"]),
                                       min_visibility=float(args["min_visibility"]))


@register("clip_boxes", rule=S.boxes_follow, **BOX,
          output_spec="BoxBatch clipped to the canvas; empty boxes dropped",
          doc="clip boxes to [0, W] x [0, H]; boxes left with no area are dropped")
def clip_boxes(ctx, op, inputs, args):
    return M.prune(_boxes(op, inputs[0]), ctx, clip=True)


def convert_format(xp, boxes, canvas_per_box, fmt, normalized):
    """xyxy -> fmt ('xyxy', 'xywh', 'cxcywh'), optionally divided by the canvas (W, H)."""
    x0, y0, x1, y1 = (boxes[:, i] for i in range(4))
    if fmt == "xyxy":
        out = xp.stack([x0, y0, x1, y1], 1)
    elif fmt == "xywh":
        out = xp.stack([x0, y0, x1 - x0, y1 - y0], 1)
    elif fmt == "cxcywh":
        out = xp.stack([(x0 + x1) / 2, (y0 + y1) / 2, x1 - x0, y1 - y0], 1)
    else:
        raise ValueError(f"unknown box format {fmt!r}: expected xyxy, xywh or cxcywh")
    if normalized:
        wh = canvas_per_box[:, ::-1]
        out = out / xp.concatenate([wh, wh], 1)
    return out.astype(xp.float32)


@register("box_convert", rule=S.boxes_follow, **BOX, args={"fmt": "xyxy", "normalized": False},
          output_spec="BoxBatch in the given format (geometric ops refuse it afterwards)",
          doc="convert boxes to xyxy / xywh / cxcywh, absolute or normalised to [0, 1]")
def box_convert(ctx, op, inputs, args):
    b = M.boxes(_boxes(op, inputs[0]), ctx)
    xp = backend.xp_for(b.device)
    per_box = np.repeat(b.canvas.astype(np.float32), np.diff(b.offsets), axis=0)
    out = convert_format(xp, b.boxes, xp.asarray(per_box), args["fmt"], args["normalized"])
    tag = args["fmt"] + ("_norm" if args["normalized"] else "")
    host = b._host_later(lambda h: h.replace(boxes=convert_format(np, h.boxes, per_box, args["fmt"],
                                                                  args["normalized"]), fmt=tag))
    return b.replace(boxes=out, fmt=tag, host=host)


declare_ranges("pad_boxes", max_boxes=count(0, 1 << 24), fill=finite())
@register("pad_boxes", rule=_padded_rule, **BOX, args={"max_boxes": None, "fill": 0.0},
          output_spec="PaddedBoxes: boxes (B, M, 4), labels/fields (B, M), counts (B,); "
                      "shaped fields (B, M, ...): keypoints 0, polygons/obb NaN past the real rows",
          doc="pad to a fixed max_boxes, or to the batch's largest count, with counts")
def pad_boxes(ctx, op, inputs, args):
    b = M.boxes(_boxes(op, inputs[0]), ctx)
    hv = b.host_view()
    counts = kb.kept_counts_numpy(hv.valid, hv.offsets)  # (B,) each sample's kept boxes
    most = int(counts.max()) if counts.size else 0
    m = args["max_boxes"]
    widths = None
    if m is None:
        m = most
        sizes = getattr(ctx, "sizes", None)
        if sizes is not None and len(sizes) > 1:
            # a launch of several batches: each batch is as wide as its own most boxes, as when
            # made alone (core/batch.split_batches cuts each to its width)
            bounds = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
            widths = tuple(int(counts[lo:hi].max(initial=0))
                           for lo, hi in zip(bounds[:-1], bounds[1:]))
    elif most > m:
        warnings.warn(f"{op.name}: a sample has {most} boxes, more than max_boxes={m}; "
                      "the first max_boxes are kept")
    fields = {"labels": b.labels, **b.fields}
    if b.device == "gpu":
        boxes, fields, cnt = pad_fields(b.boxes, fields, b.valid, b.offsets, int(m),
                                        device="gpu", pad=kb.pad_boxes_cupy, fill=args["fill"],
                                        stream=ctx.stream)
    else:
        boxes, fields, cnt = pad_fields(b.boxes, fields, b.valid, b.offsets, int(m),
                                        fill=args["fill"])
    out = PaddedBoxes(boxes=boxes, counts=cnt, **fields)
    out.widths = widths
    return out
