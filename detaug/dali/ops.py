"""DALI's ops on plain tensors, under DALI's names and with DALI's semantics, so that DALI programs
port by changing their imports (``nvidia.dali`` -> ``detaug``).

detaug's own box-aware ops move an ImageBatch and its BoxBatch together. DALI's detection ops
work on separate tensors instead: boxes are (n, 4) float arrays per sample, normalised to [0, 1]
(``ratio=True``), ``ltrb`` (x0, y0, x1, y1) or xywh; labels are int arrays beside them; a crop is
an (anchor, shape) pair of relative coordinates that ``slice`` / ``decoders.image_slice`` apply to
the image. Here such a batch is a list of per-sample NumPy arrays (a stacked array where the
samples share a shape), on the host. Random draws come from detaug's keyed per-sample streams:
the distributions and rules are DALI's, the individual draws are not DALI's generator's.

Old class names (``ops.COCOReader``, ``ops.FileReader``, ``ops.nvJPEGDecoder``, ...) are
registered here as aliases or as DALI-mode readers (see ``sources.py``).
"""
from __future__ import annotations

import numpy as np

from ..graph import materialize as M
from ..core import geometry as G
from ..core import shapes as S
from ..core import types as _types
from ..core.backend import is_device_array
from ..core.batch import BoxBatch, ImageBatch
from ..core.deferred import HostUpload, host_value
from ..ops.geometry import GEO, apply_geometry, per_sample, round_half_away
from ..ops.decode import (DECODER_HINTS, check_decoder_args, decoded_rule, decoder_declaration,
                          plans_decode)
from ..ops.registry import register
from ..graph.arg_check import (BOOL, MAX_SIDE, Num, byte, choice, count, declare_kinds,
                               declare_ranges, finite, nonneg, positive, prob)
from .tensors import batch_of, samples_of  # noqa: F401  (DALI's tensor lists: dali/tensors.py)

HOST = dict(devices=("cpu",), kind="other")


_LAYOUTS = {"xyXY": (0, 1, 2, 3), "xyWH": None}


def to_ltrb(b, layout):
    b = np.asarray(b, np.float32).reshape(-1, 4)
    if layout == "xyXY":
        return b.copy()
    return np.concatenate([b[:, :2], b[:, :2] + b[:, 2:]], 1)


def from_ltrb(b, layout):
    if layout == "xyXY":
        return b.astype(np.float32)
    return np.concatenate([b[:, :2], b[:, 2:] - b[:, :2]], 1).astype(np.float32)


def _box_layout(op, bbox_layout, ltrb):
    layout = bbox_layout or ("xyXY" if ltrb else "xyWH")
    if layout not in _LAYOUTS:
        raise ValueError(f"{op.name}: bbox_layout {layout!r} is not supported; detaug takes 'xyXY' "
                         "(ltrb=True) and 'xyWH'")
    return layout


# ---- random_bbox_crop ------------------------------------------------------------------------------
def _iou_all(crop, boxes, kind):
    """IoU (or intersection / box area, kind='overlap') of one crop [x0, y0, x1, y1] with boxes."""
    iw = np.clip(np.minimum(crop[2], boxes[:, 2]) - np.maximum(crop[0], boxes[:, 0]), 0, None)
    ih = np.clip(np.minimum(crop[3], boxes[:, 3]) - np.maximum(crop[1], boxes[:, 1]), 0, None)
    inter = iw * ih
    area_b = (boxes[:, 2] - boxes[:, 0]) * (boxes[:, 3] - boxes[:, 1])
    if kind == "overlap":
        return np.where(area_b > 0, inter / np.where(area_b > 0, area_b, 1), 0)
    union = (crop[2] - crop[0]) * (crop[3] - crop[1]) + area_b - inter
    return np.where(union > 0, inter / np.where(union > 0, union, 1), 0)


def bbox_crop_one(u, boxes, options, scaling, aspect, n_attempts, all_above, kind, fixed=None,
                  prune=None):
    """DALI's RandomBBoxCrop for one sample, on its uniforms ``u`` (rounds x (1 + 5 * attempts)).

    Per round: pick an option (a threshold, or no crop); per attempt: w, h ~ U(scaling) relative to
    the image; a fixed aspect range (min == max) sets one side from the other (which one, random)
    and rescales to the larger extent; w / h must lie in ``aspect``; the anchor is uniform in
    [0, 1 - size]. With ``fixed`` (the relative (w, h) of DALI's crop_shape / input_shape) the
    window has that size and its anchor is uniform between 0 and 1 - size (a window larger than the
    image reaches out on both sides). Every box (any box unless ``all_above``) must reach the
    threshold. The boxes kept are those whose centre lies in the window (edges included), or with
    ``prune`` (DALI's bbox_prune_threshold) those that overlap it by at least that fraction of
    their own area (and by more than nothing); a window that keeps no box is refused. Returns
    (crop ltrb (4,), kept mask), or None when every round failed.
    """
    per = 1 + 5 * n_attempts
    for r in range(len(u) // per):
        v = u[r * per:(r + 1) * per]
        opt = options[min(int(v[0] * len(options)), len(options) - 1)]
        if opt is None:
            return np.array([0, 0, 1, 1], np.float64), np.ones(len(boxes), bool)
        for a in range(n_attempts):
            w_u, h_u, order, ax, ay = v[1 + 5 * a:6 + 5 * a]
            if fixed is not None:
                shape = np.asarray(fixed, np.float64)
            else:
                shape = np.array([scaling[0] + (scaling[1] - scaling[0]) * w_u,
                                  scaling[0] + (scaling[1] - scaling[0]) * h_u])
                if aspect[0] == aspect[1]:
                    ext = shape.max()
                    if shape[0] != shape[1]:
                        if order < 0.5:
                            shape[0] = shape[1] * aspect[0]
                        else:
                            shape[1] = shape[0] / aspect[0]
                    shape = ext * shape / shape.max()
                ratio = shape[0] / shape[1]
                if not (aspect[0] * (1 - 1e-6) <= ratio <= aspect[1] * (1 + 1e-6)):
                    continue
            anchor = np.array([ax * (1 - shape[0]), ay * (1 - shape[1])])
            crop = np.concatenate([anchor, anchor + shape])
            ious = None
            if len(boxes):
                ious = _iou_all(crop, boxes, kind)
                ok = (ious >= opt).all() if all_above else (ious >= opt).any()
                if not ok:
                    continue
            if prune is None:
                cx, cy = (boxes[:, 0] + boxes[:, 2]) / 2, (boxes[:, 1] + boxes[:, 3]) / 2
                keep = (cx >= crop[0]) & (cx <= crop[2]) & (cy >= crop[1]) & (cy <= crop[3])
            else:
                inter = ious if kind == "overlap" and ious is not None else _iou_all(crop, boxes, "overlap")
                keep = (inter > 0) & (inter >= prune)
            if len(boxes) and not keep.any():
                continue
            return crop, keep
    return None


def _fixed_window(op, args, b):
    """DALI's fixed-size mode: crop_shape and input_shape (absolute, in the order of shape_layout:
    'WH', DALI's default x, y order, or 'HW'; one pair, or one per sample) as (relative crop
    (B, 2) [w, h], input (B, 2) [w, h]), or None."""
    cs, ins, lay = args["crop_shape"], args["input_shape"], args["shape_layout"] or "WH"
    if cs is None and ins is None:
        return None
    if cs is None or ins is None:
        raise ValueError(f"{op.name}: crop_shape and input_shape go together (DALI's fixed-size "
                         "crop: the window's and the image's extents)")
    if lay not in ("WH", "HW"):
        raise ValueError(f"{op.name}: shape_layout {lay!r}: detaug's crops are 2-D, 'WH' or 'HW'")
    pairs = []
    for name, v in (("crop_shape", cs), ("input_shape", ins)):
        a = np.asarray(v, np.float64)
        a = a.reshape(-1, 2) if a.size in (2, 2 * b) else None
        if a is None or (a <= 0).any():
            raise ValueError(f"{op.name}: {name} needs 2 positive extents (or 2 per sample), "
                             f"got {np.asarray(v).tolist()}")
        pairs.append(np.broadcast_to(a, (b, 2)))
    cs, ins = pairs
    if tuple(args["scaling"]) != (1.0, 1.0) or tuple(args["aspect_ratio"]) != (1.0, 1.0):
        raise ValueError(f"{op.name}: crop_shape sets the window's size: scaling and aspect_ratio "
                         "cannot be given with it (as in DALI)")
    if lay == "HW":
        cs, ins = cs[:, ::-1], ins[:, ::-1]
    return cs / ins, ins


# rounds drawn at a time, and chunks drawn at most, when total_num_attempts is unlimited
UNLIMITED_CHUNK, UNLIMITED_CHUNKS = 64, 16


declare_kinds("random_bbox_crop", threshold_type=choice("iou", "overlap"))
declare_ranges("random_bbox_crop", thresholds=Num(0.0, 1.0, form='seq'),
               aspect_ratio=positive(form='range'), scaling=positive(form='range'),
               num_attempts=count(1, 1 << 16), total_num_attempts=count(-1, 1 << 24),
               crop_shape=positive(MAX_SIDE, form='seq'), input_shape=positive(MAX_SIDE,
               form='seq'), bbox_prune_threshold=prob())
@register("random_bbox_crop", **HOST, inputs=(1, 2),
          outputs=lambda n, a: 3 + (n == 2) + bool(a["output_bbox_indices"]),
          input_names=("boxes", "labels"),
          args={"thresholds": (0.0,), "allow_no_crop": True, "aspect_ratio": (1.0, 1.0),
                "scaling": (1.0, 1.0), "num_attempts": 1, "total_num_attempts": -1,
                "all_boxes_above_threshold": True, "threshold_type": "iou", "bbox_layout": None,
                "ltrb": True, "output_bbox_indices": False, "crop_shape": None, "input_shape": None,
                "shape_layout": None, "bbox_prune_threshold": None},
          per_sample=("crop_shape", "input_shape"),
          arg_docs={"crop_shape": "DALI's fixed-size mode: the window's absolute extents (with "
                                  "input_shape; order of shape_layout); anchor and shape are then "
                                  "absolute too",
                    "input_shape": "the image's absolute extents, for crop_shape",
                    "shape_layout": "the order of crop_shape / input_shape: 'WH' (default, x "
                                    "then y) or 'HW'",
                    "bbox_prune_threshold": "keep the boxes that overlap the window by at least "
                                            "this fraction of their area (default: the boxes whose "
                                            "centre is inside)"},
          output_spec="(anchor (B, 2) float32 [x, y], shape (B, 2) float32 [w, h], boxes per "
                      "sample (n, 4) float32 relative to the crop[, labels][, bbox_indices])",
          doc="DALI's random_bbox_crop on normalised box tensors: a prospective crop window "
              "(relative anchor and shape, for fn.slice / fn.decoders.image_slice) whose overlap "
              "with the boxes meets a threshold; boxes remapped, labels filtered (for detaug's "
              "crop of (images, boxes) see fn.random_iou_crop)")
def random_bbox_crop(ctx, op, inputs, args):
    if args["threshold_type"] not in ("iou", "overlap"):
        raise ValueError(f"{op.name}: threshold_type must be 'iou' or 'overlap'")
    prune = args["bbox_prune_threshold"]
    if prune is not None and not 0.0 <= float(prune) <= 1.0:
        raise ValueError(f"{op.name}: bbox_prune_threshold must be in [0, 1], got {prune}")
    layout = _box_layout(op, args["bbox_layout"], args["ltrb"])
    boxes = [to_ltrb(b, layout) for b in samples_of(op, inputs[0], "boxes")]
    labels = samples_of(op, inputs[1], "labels") if len(inputs) == 2 else None
    fixed = _fixed_window(op, args, len(boxes))
    thresholds = [float(t) for t in np.atleast_1d(args["thresholds"])]
    if not thresholds or any(not 0.0 <= t <= 1.0 for t in thresholds):
        raise ValueError(f"{op.name}: thresholds must be values in [0, 1], got {args['thresholds']}")
    options = thresholds + ([None] if args["allow_no_crop"] else [])
    scaling = tuple(float(s) for s in args["scaling"])
    aspect = tuple(float(s) for s in args["aspect_ratio"])
    if len(aspect) != 2 or len(scaling) != 2:
        raise ValueError(f"{op.name}: scaling and aspect_ratio are [min, max] pairs (2-D crops)")
    n_att = int(args["num_attempts"])
    limited = int(args["total_num_attempts"]) > 0
    rounds = int(args["total_num_attempts"]) if limited else UNLIMITED_CHUNK
    rng = ctx.rng(op)
    chunks = [rng.uniform(rounds * (1 + 5 * n_att))]
    anchors, shapes, out_boxes, out_labels, out_idx = [], [], [], [], []
    for s, b in enumerate(boxes):
        b64 = b.astype(np.float64)
        for c in range(1 if limited else UNLIMITED_CHUNKS):
            # DALI keeps drawing without total_num_attempts: further chunks of each sample's own
            # stream, drawn for the whole batch when a sample first needs them (a sample's
            # draws never depend on the others')
            if c == len(chunks):
                chunks.append(rng.uniform(rounds * (1 + 5 * n_att)))
            found = bbox_crop_one(chunks[c][s], b64, options, scaling, aspect,
                                  n_att, bool(args["all_boxes_above_threshold"]),
                                  args["threshold_type"], None if fixed is None else fixed[0][s],
                                  None if prune is None else float(prune))
            if found is not None:
                break
        # every round failed: the whole image, all boxes kept (DALI would keep drawing forever)
        crop, keep = found if found is not None else (np.array([0, 0, 1, 1.0]), np.ones(len(b), bool))
        ext = crop[2:] - crop[:2]
        kept = b[keep].astype(np.float64)
        mapped = np.clip((kept - np.tile(crop[:2], 2)) / np.tile(ext, 2), 0.0, 1.0)
        scale = 1.0 if fixed is None else fixed[1][s]  # fixed-size mode: absolute anchor, shape
        anchors.append((crop[:2] * scale).astype(np.float32))
        shapes.append((ext * scale).astype(np.float32))
        out_boxes.append(from_ltrb(mapped.reshape(-1, 4), layout))
        if labels is not None:
            out_labels.append(np.asarray(labels[s])[keep])
        out_idx.append(np.nonzero(keep)[0].astype(np.int32))
    outs = [np.stack(anchors), np.stack(shapes), out_boxes]
    if labels is not None:
        outs.append(out_labels)
    if args["output_bbox_indices"]:
        outs.append(out_idx)
    return tuple(outs)


# ---- bb_flip / bbox_paste on normalised boxes ---------------------------------------------------------
declare_ranges("bb_flip", horizontal=count(0, 1), vertical=count(0, 1))
@register("bb_flip", rule=S.boxes_follow, devices=("cpu",), inputs=(1, 1), kind="box",
          args={"horizontal": 1, "vertical": 0, "ltrb": False},
          per_sample=("horizontal", "vertical"),
          output_spec="boxes per sample (n, 4) float32, same layout",
          doc="DALI's bb_flip: mirror normalised boxes (x -> 1 - x), xywh or ltrb, per sample; "
              "given a BoxBatch it mirrors within each image's canvas, as fn.flip")
def bb_flip(ctx, op, inputs, args):
    v = inputs[0]
    b = len(v)
    hor = per_sample(args["horizontal"], b).astype(bool)
    ver = per_sample(args["vertical"], b).astype(bool)
    if isinstance(v, BoxBatch):
        def plan(sizes, boxes):
            return G.flip(sizes[:, 1], sizes[:, 0], hor, ver), sizes, None

        return apply_geometry(ctx, op, inputs, plan)[0]
    layout = "xyXY" if args["ltrb"] else "xyWH"
    out = []
    for s, box in enumerate(samples_of(op, v, "boxes")):
        lt = to_ltrb(box, layout)
        if hor[s]:
            lt[:, [0, 2]] = 1.0 - lt[:, [2, 0]]
        if ver[s]:
            lt[:, [1, 3]] = 1.0 - lt[:, [3, 1]]
        out.append(from_ltrb(lt, layout))
    return batch_of(out) if isinstance(v, np.ndarray) else out


declare_ranges("bbox_paste", ratio=Num(1.0, 64.0), paste_x=prob(), paste_y=prob())
@register("bbox_paste", rule=S.boxes_follow, devices=("cpu",), inputs=(1, 1), kind="box",
          args={"ratio": None, "paste_x": 0.5, "paste_y": 0.5, "ltrb": False},
          per_sample=("ratio", "paste_x", "paste_y"),
          output_spec="boxes per sample (n, 4) float32, same layout",
          doc="DALI's bbox_paste: normalised boxes moved as fn.paste moves their image: "
              "x -> paste_x * (1 - 1 / ratio) + x / ratio (for detaug's paste of (images, boxes) "
              "see fn.zoom_out)")
def bbox_paste(ctx, op, inputs, args):
    if isinstance(inputs[0], BoxBatch):
        raise TypeError(f"{op.name}: bbox_paste follows DALI and takes normalised box tensors; to "
                        "paste images and their BoxBatch together use fn.zoom_out or fn.paste")
    if args["ratio"] is None:
        raise ValueError(f"{op.name}: ratio is required")
    boxes = samples_of(op, inputs[0], "boxes")
    b = len(boxes)
    scale = 1.0 / per_sample(args["ratio"], b)
    if (scale > 1).any():
        raise ValueError(f"{op.name}: ratio must be >= 1")
    px = per_sample(args["paste_x"], b) * (1 - scale)
    py = per_sample(args["paste_y"], b) * (1 - scale)
    layout = "xyXY" if args["ltrb"] else "xyWH"
    out = []
    for s, box in enumerate(boxes):
        lt = to_ltrb(box, layout).astype(np.float64) * scale[s] + np.array([px[s], py[s]] * 2)
        out.append(from_ltrb(lt, layout))
    return batch_of(out) if isinstance(inputs[0], np.ndarray) else out


# ---- paste / slice / image_slice ----------------------------------------------------------------------
declare_ranges("paste", ratio=Num(1.0, 64.0), paste_x=prob(), paste_y=prob(), fill_value=byte(),
               min_canvas_size=nonneg(MAX_SIDE))
@register("paste", rule=S.unknown, plans=True, **{**GEO, "devices": ("cpu", "gpu")},
          args={"ratio": None, "paste_x": 0.5, "paste_y": 0.5, "fill_value": 0.0,
                "min_canvas_size": 0.0},
          per_sample=("ratio", "paste_x", "paste_y"),
          doc="DALI's paste: a canvas int(ratio * H) x int(ratio * W) (at least min_canvas_size) "
              "filled with fill_value, the image at int(paste_x * (W' - W)), int(paste_y * (H' - H)); "
              "boxes given beside it follow")
def paste(ctx, op, inputs, args):
    if args["ratio"] is None:
        raise ValueError(f"{op.name}: ratio is required")

    def plan(sizes, boxes):
        b = len(sizes)
        r = per_sample(args["ratio"], b)
        if (r < 1).any():
            raise ValueError(f"{op.name}: ratio must be >= 1")
        lo = float(args["min_canvas_size"])
        out = np.maximum(np.trunc(sizes * r[:, None]), lo).astype(np.int64)
        x0 = np.trunc(per_sample(args["paste_x"], b) * (out[:, 1] - sizes[:, 1]))
        y0 = np.trunc(per_sample(args["paste_y"], b) * (out[:, 0] - sizes[:, 0]))
        return G.translate(x0, y0), out, None

    return apply_geometry(ctx, op, inputs, plan, fill=args["fill_value"])


def slice_windows(op, sizes, anchor, shape, args):
    """(x0, y0, x1, y1) per sample, DALI's rounding: with both normalised, end =
    round((anchor + shape) * extent), start = round(anchor * extent) (halves away from zero)."""
    axes = args["axis_names"] or args["axes"]
    order = {"WH": (1, 0), "HW": (0, 1)}.get(axes if isinstance(axes, str) else "",
                                             tuple(int(a) for a in axes) if not isinstance(axes, str) else None)
    if order not in ((1, 0), (0, 1)):
        raise ValueError(f"{op.name}: axes/axis_names {axes!r}: detaug slices images along H and "
                         "W: (1, 0) / 'WH' or (0, 1) / 'HW'")
    # DALI's arguments are float32, multiplied in double: float32 first (0.35 is not 0.35f)
    a = np.asarray(anchor, np.float32).astype(np.float64).reshape(len(sizes), -1)
    s = np.asarray(shape, np.float32).astype(np.float64).reshape(len(sizes), -1)
    if a.shape[1] != 2 or s.shape[1] != 2:
        raise ValueError(f"{op.name}: anchor and shape need 2 values per sample")
    ext = sizes[:, list(order)].astype(np.float64)   # extents in the order of the anchor's values
    if args["normalized_anchor"] and args["normalized_shape"]:
        end = round_half_away((a + s) * ext)
        start = round_half_away(a * ext)
    else:
        av = a * ext if args["normalized_anchor"] else a
        sv = s * ext if args["normalized_shape"] else s
        end, start = round_half_away(av + sv), round_half_away(av)
    if order == (0, 1):
        start, end = start[:, ::-1], end[:, ::-1]
    win = np.concatenate([start, end], 1)   # x0, y0, x1, y1
    policy = args["out_of_bounds_policy"]
    inside = (win[:, :2] >= 0).all(1) & (win[:, 2] <= sizes[:, 1]) & (win[:, 3] <= sizes[:, 0])
    if policy == "error" and not inside.all():
        k = int(np.argmin(inside))
        raise ValueError(f"{op.name}: slice window {win[k].tolist()} of sample {k} reaches outside "
                         f"its {sizes[k, 1]}x{sizes[k, 0]} image (out_of_bounds_policy='error'; "
                         "'pad' fills, 'trim_to_shape' trims)")
    if policy == "trim_to_shape":
        win = np.clip(win, 0, np.concatenate([sizes[:, ::-1], sizes[:, ::-1]], 1))
    elif policy not in ("error", "pad"):
        raise ValueError(f"{op.name}: out_of_bounds_policy must be 'error', 'pad' or 'trim_to_shape'")
    return win


SLICE_ARGS = {"axes": (1, 0), "axis_names": None, "normalized_anchor": True, "normalized_shape": True,
              "out_of_bounds_policy": "error", "fill_values": 0.0}


def _slice_images(ctx, op, images, anchor, shape, args):
    def plan(sizes, boxes):
        win = slice_windows(op, sizes, anchor, shape, args)
        out = np.stack([win[:, 3] - win[:, 1], win[:, 2] - win[:, 0]], -1)
        if (out < 1).any():
            raise ValueError(f"{op.name}: a slice window is empty")
        return G.translate(-win[:, 0], -win[:, 1]), out, None

    return apply_geometry(ctx, op, [images], plan, fill=args["fill_values"])[0]


WINDOW_ARGS = {"start": None, "rel_start": None, "end": None, "rel_end": None, "shape": None,
               "rel_shape": None}


def window_from_args(op, args, b):
    """DALI's slice window given by arguments instead of inputs: (anchor, shape, args) with
    ``normalized_anchor`` / ``normalized_shape`` set by which were given (``rel_*``: relative
    to the extent, the others absolute); an end gives the shape as end - start."""
    a = {k: args[k] for k in WINDOW_ARGS}
    if a["start"] is not None and a["rel_start"] is not None:
        raise ValueError(f"{op.name}: start and rel_start are exclusive")
    ends = [k for k in ("end", "rel_end", "shape", "rel_shape") if a[k] is not None]
    if len(ends) != 1:
        raise ValueError(f"{op.name}: give the window's extent once: one of end, rel_end, shape, "
                         f"rel_shape (got {ends or 'none'}), or anchor and shape as inputs")
    rel_a = a["start"] is None
    start = np.asarray(a["rel_start"] if rel_a else a["start"], np.float64) \
        if (a["start"] is not None or a["rel_start"] is not None) else np.zeros(2)
    start = np.broadcast_to(start.reshape(-1, 2), (b, 2))
    key = ends[0]
    rel_s = key.startswith("rel_")
    ext = np.broadcast_to(np.asarray(a[key], np.float64).reshape(-1, 2), (b, 2))
    if key.endswith("end"):
        if rel_s != rel_a and (a["start"] is not None or a["rel_start"] is not None):
            raise ValueError(f"{op.name}: {key} and the start must both be relative or both "
                             "absolute")
        ext = ext - start
    return start, ext, {**args, "normalized_anchor": rel_a, "normalized_shape": rel_s}


declare_ranges("slice", axes=count(0, 1, form='seq'), fill_values=finite(form='seq'),
               **{k: finite(form="seq") for k in WINDOW_ARGS})
@register("slice", rule=S.unknown, plans=True, devices=("cpu", "gpu"), inputs=(1, 3),
          kind="geometric",
          input_names=("images", "anchor", "shape"), args={**SLICE_ARGS, **WINDOW_ARGS},
          per_sample=tuple(WINDOW_ARGS),
          arg_docs={"start": "the window's absolute start (instead of the anchor input)",
                    "rel_start": "the window's start relative to the extent",
                    "end": "the window's absolute end", "rel_end": "its relative end",
                    "shape": "the window's absolute extent", "rel_shape": "its relative extent"},
          output_spec="images (uint8 HWC) of the window sizes",
          doc="DALI's slice of images (or of plain tensors, along axes): anchor and shape per "
              "sample (inputs, or start / rel_start with shape / rel_shape / end / rel_end; "
              "relative by default, integer ones absolute, in the order of axes: (1, 0) = x, y), "
              "rounded as DALI; out_of_bounds_policy error / pad / trim_to_shape")
def slice_(ctx, op, inputs, args):
    planning = getattr(ctx, "planning", False)
    if planning:  # planned ahead: the plain tensors a device slice reads are on the host
        inputs = [host_value(v) for v in inputs]
    images = inputs[0]
    if len(inputs) == 2:
        raise TypeError(f"{op.name}: give the anchor and the shape inputs together")
    if len(inputs) == 3:
        if any(args[k] is not None for k in WINDOW_ARGS):
            raise ValueError(f"{op.name}: the window is given by inputs: start / shape "
                             "arguments cannot be given too")
        # DALI: integer anchors and shapes are absolute, whatever normalized_* say
        args = {**args, "normalized_anchor": args["normalized_anchor"] and not _ints(inputs[1]),
                "normalized_shape": args["normalized_shape"] and not _ints(inputs[2])}
        anchor, shape = _host(inputs[1]), _host(inputs[2])
    else:
        b = images.batch_size if isinstance(images, ImageBatch) else len(images)
        anchor, shape, args = window_from_args(op, args, b)
    if not isinstance(images, ImageBatch):  # a plain tensor batch (dali/tensor_ops.py)
        from .tensor_ops import slice_tensors

        out = slice_tensors(op, images, anchor, shape, args)
        # planned ahead on the device: uploaded when the launch is realised
        return HostUpload(out) if planning and op.device != "cpu" else out
    return _slice_images(ctx, op, images, anchor, shape, args)


def _ints(v) -> bool:
    """Whether a batch of anchors or shapes holds integers (DALI reads those as absolute)."""
    first = v[0] if isinstance(v, (list, tuple)) and len(v) else v
    return np.asarray(first).dtype.kind in "iu"


def _host(v):
    from ..core.backend import to_host

    return to_host(v) if not isinstance(v, (list, np.ndarray)) else np.asarray(v, np.float64)


declare_kinds("decoders.image_slice", adjust_orientation=BOOL)
declare_ranges("decoders.image_slice", axes=count(0, 1, form='seq'),
               fill_values=finite(form='seq'))
@register("decoders.image_slice", rule=decoded_rule, plans=plans_decode, roles={"decoder"},
          devices=("cpu", "mixed"), inputs=(3, 3), kind="other",
          input_names=("encoded", "anchor", "shape"),
          aliases=("image_decoder_slice", "host_decoder_slice"),
          args={"output_type": "RGB", **SLICE_ARGS, **decoder_declaration()},
          hints=dict(DECODER_HINTS),
          output_spec="ImageBatch uint8 HWC of the window sizes",
          doc="DALI's decoders.image_slice: decode, then slice as fn.slice (the anchor and shape "
              "of fn.random_bbox_crop)")
def image_slice(ctx, op, inputs, args):
    from ..ops.decode import decode_image

    check_decoder_args(op, args)
    images = decode_image(ctx, op, inputs[:1], {"output_type": args["output_type"]})
    return _slice_images(ctx, op, images, _host(inputs[1]), _host(inputs[2]), args)


# ---- cast / transpose / pad ---------------------------------------------------------------------------
@register("cast", rule=S.unknown, plans=False, devices=("cpu", "gpu"), inputs=(1, 1), kind="other",
          input_names=("data",),
          args={"dtype": None}, output_spec="same shape, the given dtype",
          doc="DALI's cast: convert the element type (types.FLOAT, 'float32', ...); images keep "
              "their layout")
def cast(ctx, op, inputs, args):
    if args["dtype"] is None:
        raise ValueError(f"{op.name}: dtype is required")
    dt = _types.to_numpy_type(args["dtype"])
    v = inputs[0]
    if isinstance(v, ImageBatch):
        v = M.images(v, ctx)
        data = v.data.astype(dt) if v.is_dense else [a.astype(dt) for a in v.data]
        return ImageBatch(data, v.device, v.layout)
    if isinstance(v, list):  # a ragged batch, on the host or (uploaded) on the device
        return [(a if is_device_array(a) else np.asarray(a)).astype(dt) for a in v]
    return v.astype(dt)


declare_ranges("transpose", perm=count(0, form='seq'))
@register("transpose", rule=S.unknown, plans=False, devices=("cpu", "gpu"), inputs=(1, 1),
          kind="other", input_names=("data",),
          args={"perm": None, "transpose_layout": True, "output_layout": None},
          output_spec="each sample's axes permuted by perm",
          doc="DALI's transpose: permute each sample's axes (HWC images: perm=(2, 0, 1) gives CHW)")
def transpose(ctx, op, inputs, args):
    perm = tuple(int(p) for p in args["perm"] or ())
    v = inputs[0]
    if isinstance(v, ImageBatch):
        moves = {("HWC", (2, 0, 1)): "CHW", ("CHW", (1, 2, 0)): "HWC", ("HWC", (0, 1, 2)): "HWC",
                 ("CHW", (0, 1, 2)): "CHW"}
        layout = moves.get((v.layout, perm))
        if layout is not None and not args["transpose_layout"] and layout != v.layout:
            raise ValueError(f"{op.name}: transpose_layout=False would name {layout} data "
                             f"{v.layout}: detaug's images carry their true layout")
        if layout is not None and args["output_layout"] not in (None, layout):
            raise ValueError(f"{op.name}: output_layout={args['output_layout']!r} is not the "
                             f"layout of the permuted images ({layout})")
        if layout is None:
            raise ValueError(f"{op.name}: perm {perm} of {v.layout} images: detaug lays images out "
                             "as HWC or CHW only")
        v = M.images(v, ctx)
        xp = __import__("cupy") if v.device == "gpu" else np
        data = (xp.ascontiguousarray(xp.transpose(v.data, (0,) + tuple(p + 1 for p in perm)))
                if v.is_dense else [xp.ascontiguousarray(xp.transpose(a, perm)) for a in v.data])
        return ImageBatch(data, v.device, layout)
    if not perm:
        raise ValueError(f"{op.name}: perm is required")
    if isinstance(v, list):  # a ragged batch, on the host or (uploaded) on the device
        return [a.transpose(perm).copy() if is_device_array(a)
                else np.ascontiguousarray(np.transpose(a, perm)) for a in v]
    xp = np if isinstance(v, np.ndarray) else __import__("cupy")
    return xp.ascontiguousarray(xp.transpose(v, (0,) + tuple(p + 1 for p in perm)))


declare_ranges("pad", fill_value=finite(), axes=Num(integer=True, form='seq'),
               shape=count(-1, MAX_SIDE, form='seq', size=True),
               align=count(1, MAX_SIDE, form='seq'))
@register("pad", **HOST, inputs=(1, 1), input_names=("data",),
          args={"fill_value": 0.0, "axes": None, "axis_names": None, "shape": None, "align": None},
          output_spec="(B, *largest shape) array, padded at the end of each axis",
          doc="DALI's pad: pad every sample at the end of its axes to the batch's largest extent "
              "(or shape=, align=) with fill_value; e.g. per-sample boxes to (B, M, 4)")
def pad(ctx, op, inputs, args):
    if args["axis_names"] is not None:
        raise NotImplementedError(f"{op.name}: axis_names= is not implemented; give axes= (indices)")
    arrays = samples_of(op, inputs[0], "data")
    if not arrays:
        return np.zeros((0,))
    ndim = arrays[0].ndim
    axes = range(ndim) if not args["axes"] else [int(a) % max(ndim, 1) for a in args["axes"]]
    target = list(np.max([a.shape for a in arrays], 0)) if ndim else []
    fixed = [ax for ax in range(ndim) if ax not in axes]
    if any(a.shape[ax] != target[ax] for a in arrays for ax in fixed):
        raise ValueError(f"{op.name}: axes={tuple(axes)}: the samples differ in extent along axes "
                         f"{fixed}, which are not padded (detaug's pad returns one dense array)")
    for k, ax in enumerate(axes):
        if args["shape"] is not None and int(args["shape"][k]) > 0:
            target[ax] = int(args["shape"][k])
        if args["align"] is not None:
            al = int(np.atleast_1d(args["align"])[min(k, len(np.atleast_1d(args["align"])) - 1)])
            target[ax] = -(-target[ax] // al) * al
    out = np.full((len(arrays), *target), args["fill_value"], arrays[0].dtype)
    for s, a in enumerate(arrays):
        if any(a.shape[ax] > target[ax] for ax in axes):
            raise ValueError(f"{op.name}: sample {s} of shape {a.shape} is larger than shape= {target}")
        out[(s, *[slice(0, n) for n in a.shape])] = a
    return out
