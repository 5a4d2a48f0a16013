"""DALI's ops on plain per-sample tensors that DALI's detection examples use around the image
ops: SSD's ``box_encoder``, ``coord_transform`` / ``coord_flip``, ``peek_image_shape`` /
``shapes``, ``cat`` / ``stack`` / ``reshape`` and ``constant`` (a Python value given where DALI
takes an input). A batch is a (B, ...) array or a list of per-sample arrays (dali/ops.py's
``samples_of`` / ``batch_of``), as DALI's TensorList. ``box_encoder``, ``coord_flip``,
``coord_transform``, ``cat``, ``stack``, ``reshape`` and ``shapes`` run on 'cpu' and 'gpu' (a GPU
pipeline's batches on the device: cupy arrays, or lists of them): their bodies read host
arguments and shapes only and call their kernel for the batch's device (graph/dispatch.py;
detaug/kernels/tensors.py: one function over NumPy or cupy), so nothing comes back to the host.
"""
from __future__ import annotations

import functools

import io

import numpy as np
from PIL import Image

from ..core import shapes as S
from ..core import types as _types
from ..core.backend import is_device_array
from ..core.batch import EncodedBatch, ImageBatch
from ..graph.dispatch import kernel, register_kernel
from ..kernels import tensors as kt
from ..ops.registry import register
from .tensors import arg_rows, batch_of, samples_of, tensors_of
from ..graph import arg_check as AC

HOST = dict(devices=("cpu",), kind="other")


def _one_unknown(ins, args) -> S.Out:
    """One output whose sizes are known once the op runs (a tensor's shape is its data's)."""
    return S.Out((None,))


def _encoded_rule(ins, args) -> S.Out:
    """box_encoder: (anchors, 4) float32 and (anchors,) int32 per sample."""
    if args.get("anchors") is None:
        return S.Out((None, None))
    m = int(np.size(args["anchors"])) // 4
    return S.Out((S.Array(16 * m), S.Array(4 * m)))


# on the host and on the device, the same kernel over NumPy or cupy (kernels/tensors.py)
TENSOR = dict(devices=("cpu", "gpu"), kind="other", plans=False)
for _names, _fn, _gpu in ((("box_encoder",), kt.box_encoder_xp, kt.box_encoder_cupy),
                          (("coord_flip",), kt.coord_flip_xp, kt.coord_flip_cupy),
                          (("coord_transform",), kt.coord_transform_xp, kt.coord_transform_cupy),
                          (("cat", "stack"), kt.join_xp, kt.join_cupy),
                          (("shapes",), kt.host_values_xp, kt.host_values_cupy),
                          (("reshape",), kt.dense_if_equal_xp, kt.dense_if_equal_cupy)):
    register_kernel(_names, "cpu", functools.partial(_fn, np))
    register_kernel(_names, "gpu", _gpu)


# ---- box_encoder ---------------------------------------------------------------------------------
def box_encoder_one(boxes, labels, anchors, criteria, offset, means, stds):
    """DALI's BoxEncoder for one sample: :func:`~detaug.kernels.tensors.box_encoder_xp` on a
    batch of one (its docstring states the encoding). Returns ((m, 4) float32, (m,) int32)."""
    out, lab = kt.box_encoder_xp(np, [np.asarray(boxes, np.float32).reshape(-1, 4)],
                                 [np.asarray(labels).reshape(-1)], anchors, criteria, offset,
                                 means, stds)
    return out[0], lab[0]


AC.declare_ranges("box_encoder", anchors=AC.finite(form="seq"), criteria=AC.prob(),
                  means=AC.finite(form="seq"), stds=AC.positive(form="seq"))
@register("box_encoder", **TENSOR, rule=_encoded_rule, inputs=(2, 2), outputs=2,
          input_names=("bboxes", "labels"),
          args={"anchors": None, "criteria": 0.5, "offset": False, "scale": 1.0,
                "means": (0.0, 0.0, 0.0, 0.0), "stds": (1.0, 1.0, 1.0, 1.0)},
          hints={"scale": "DALI multiplies box and anchor by it before the offsets, which cancels "
                          "in SSD's ratios: the offsets do not depend on it"},
          arg_docs={"anchors": "the anchors, ltrb, flattened (4 floats per anchor), as DALI",
                    "criteria": "an anchor takes its best box when their IoU is > criteria",
                    "offset": "give SSD's normalised offsets instead of the matched boxes",
                    "means": "[x y w h] subtracted from the offsets", "stds": "[x y w h] "
                             "dividing the offsets"},
          output_spec="per sample: encoded boxes (anchors, 4) float32 (centre form [cx, cy, w, h] "
                      "or offsets), labels (anchors,) int32 (0: background)",
          doc="DALI's box_encoder: SSD's matching of ltrb boxes to anchors (each box's best anchor, "
              "then every anchor over criteria), boxes in centre form or as offsets")
def box_encoder(ctx, op, inputs, args):
    if args["anchors"] is None:
        raise ValueError(f"{op.name}: anchors is required (ltrb, 4 floats per anchor)")
    anchors = np.asarray(args["anchors"], np.float32).reshape(-1, 4)
    means = np.asarray(args["means"], np.float32).reshape(4)
    stds = np.asarray(args["stds"], np.float32).reshape(4)
    if (stds == 0).any():
        raise ValueError(f"{op.name}: stds must not be 0")
    boxes, labels = tensors_of(op, inputs[0], "bboxes"), tensors_of(op, inputs[1], "labels")
    if len(boxes) != len(labels):
        raise ValueError(f"{op.name}: bboxes and labels have different batch sizes")
    try:
        return kernel(ctx, op, op.device)(boxes, labels, anchors, float(args["criteria"]),
                                          bool(args["offset"]), means, stds)
    except ValueError as e:
        raise ValueError(f"{op.name}: {e}") from None


# ---- coordinates -----------------------------------------------------------------------------------
AC.declare_ranges("coord_transform", M=AC.finite(form="seq"), T=AC.finite(form="seq"),
                  MT=AC.finite(form="seq"))
@register("coord_transform", **TENSOR, rule=_one_unknown, inputs=(1, 1), input_names=("coords",),
          args={"M": None, "T": None, "MT": None, "dtype": None}, per_sample=("M", "T", "MT"),
          arg_docs={"M": "the matrix (ndim x ndim; a scalar scales), or one per sample",
                    "T": "the translation (ndim; a scalar for all), or one per sample",
                    "MT": "M and T as one ndim x (ndim + 1) matrix (e.g. fn.transforms.*), or "
                          "one per sample", "dtype": "output type (default float32)"},
          output_spec="per sample (n, ndim) points: out = M @ p + T",
          doc="DALI's coord_transform: points (n, ndim) per sample mapped by an affine matrix, "
              "out = M @ p + T (MT = [M | T])")
def coord_transform(ctx, op, inputs, args):
    pts = tensors_of(op, inputs[0], "coords")
    b = len(pts)
    shapes = [p.shape for p in pts] if isinstance(pts, list) else [pts.shape[1:]] * b
    nds = {s[-1] if len(s) else 1 for s in shapes}
    if len(nds) > 1:
        raise ValueError(f"{op.name}: the samples' points have different dimensions {sorted(nds)}")
    nd = nds.pop() if nds else 1
    if isinstance(pts, list):  # each sample's points as rows (n, nd): views
        pts = [p.reshape(-1, nd) for p in pts]
    else:
        pts = pts.reshape(b, -1, nd)
    m, t = _affine_rows(op, args, b, nd)
    dt = np.float32 if args["dtype"] is None else _types.to_numpy_type(args["dtype"])
    return kernel(ctx, op, op.device)(pts, m, t, dt)


def _affine_rows(op, args, b, nd):
    """coord_transform's (B, nd, nd) matrices and (B, nd) translations, float64, from M / T
    or MT (scalars, one for all, or one per sample)."""
    if args["MT"] is not None:
        if args["M"] is not None or args["T"] is not None:
            raise ValueError(f"{op.name}: MT cannot be given with M or T (as DALI)")
        mt = arg_rows(args["MT"], b, nd * (nd + 1), "MT", op).reshape(b, nd, nd + 1)
        return np.ascontiguousarray(mt[:, :, :nd]), np.ascontiguousarray(mt[:, :, nd])
    mv = np.asarray(1.0 if args["M"] is None else args["M"], np.float64)
    m = (np.broadcast_to(np.eye(nd) * float(mv.reshape(-1)[0]), (b, nd, nd)) if mv.size == 1
         else arg_rows(mv, b, nd * nd, "M", op).reshape(b, nd, nd))
    tv = np.asarray(0.0 if args["T"] is None else args["T"], np.float64)
    t = (np.full((b, nd), float(tv.reshape(-1)[0])) if tv.size == 1
         else arg_rows(tv, b, nd, "T", op))
    return m, t


REGISTRY_DEFAULTS = {"flip_x": 1, "flip_y": 0, "flip_z": 0, "center_x": 0.5, "center_y": 0.5,
                     "center_z": 0.5}


AC.declare_ranges("coord_flip", flip_x=AC.count(0, 1), flip_y=AC.count(0, 1),
                  flip_z=AC.count(0, 1), center_x=AC.finite(), center_y=AC.finite(),
                  center_z=AC.finite())
@register("coord_flip", **TENSOR, rule=_one_unknown, inputs=(1, 1), input_names=("coords",),
          args={"layout": None, **REGISTRY_DEFAULTS},
          per_sample=("flip_x", "flip_y", "flip_z", "center_x", "center_y", "center_z"),
          arg_docs={"layout": "the order of the coordinates ('xy' by default for 2-D points)",
                    "flip_x": "mirror x (1) or not (0)", "flip_y": "mirror y",
                    "flip_z": "mirror z", "center_x": "the mirror's x: x -> 2 * center_x - x",
                    "center_y": "the mirror's y", "center_z": "the mirror's z"},
          output_spec="per sample (n, ndim) points, same dtype",
          doc="DALI's coord_flip: mirror normalised points, x -> 2 * center_x - x where flip_x")
def coord_flip(ctx, op, inputs, args):
    pts = tensors_of(op, inputs[0], "coords")
    b = len(pts)
    nds = {p.shape[-1] for p in pts} if isinstance(pts, list) else {pts.shape[-1]} if b else set()
    if not nds:
        return pts
    if len(nds) > 1:
        raise ValueError(f"{op.name}: the samples' points have different dimensions {sorted(nds)}")
    nd = nds.pop()
    layout = args["layout"] or "xyz"[:nd]
    if len(layout) != nd or set(layout) - set("xyz"):
        raise ValueError(f"{op.name}: layout {layout!r} does not fit {nd}-D points")
    for name in set("xyz") - set(layout):
        for k in (f"flip_{name}", f"center_{name}"):  # silently unused: refused
            if np.any(np.asarray(args[k]) != REGISTRY_DEFAULTS[k]):
                raise ValueError(f"{op.name}: {k} is given but the points have no {name} "
                                 f"coordinate (layout {layout!r})")
    flips = np.stack([_per_sample(args[f"flip_{n}"], b) != 0 for n in layout], 1)
    centers = np.stack([_per_sample(args[f"center_{n}"], b) for n in layout], 1)
    if isinstance(pts, list):  # each sample's points as rows (n, nd): views
        shapes = [p.shape for p in pts]
        out = kernel(ctx, op, op.device)([p.reshape(-1, nd) for p in pts], flips, centers)
        return [o.reshape(s) for o, s in zip(out, shapes)]
    out = kernel(ctx, op, op.device)(pts.reshape(b, -1, nd), flips, centers)
    return out.reshape(pts.shape)


def _per_sample(v, b) -> np.ndarray:
    """(B,) float64 of a scalar argument or its per-sample values (sample s takes s mod their
    count, as before)."""
    a = np.asarray(v, np.float64).reshape(-1)
    return a[np.arange(b) % len(a)]


# ---- shapes ---------------------------------------------------------------------------------------
def _image_shape(buf) -> tuple:
    try:
        im = Image.open(io.BytesIO(np.asarray(buf, np.uint8).tobytes()))
    except Exception as e:  # noqa: BLE001  (Pillow raises several types for a bad header)
        raise ValueError(f"peek_image_shape: cannot read the image header ({e})") from None
    bands = len(im.getbands())
    return (im.size[1], im.size[0], 3 if im.mode in ("P", "CMYK", "YCbCr") else bands)


@register("peek_image_shape", **HOST, inputs=(1, 1), input_names=("encoded",),
          aliases=("experimental.peek_image_shape",),
          args={"dtype": "int64", "image_type": None, "adjust_orientation": False},
          arg_docs={"dtype": "output type (DALI's default INT64)",
                    "image_type": "colour space the shape's channels count for (RGB: 3)",
                    "adjust_orientation": "False only: EXIF orientation is not applied "
                                          "(docs/dali.md)"},
          output_spec="(B, 3) [H, W, C] of the encoded images, from their headers",
          doc="DALI's peek_image_shape: [H, W, C] of each encoded image from its header, without "
              "decoding")
def peek_image_shape(ctx, op, inputs, args):
    if args["adjust_orientation"]:
        raise NotImplementedError(f"{op.name}: adjust_orientation=True is not implemented "
                                  "(detaug keeps the stored pixel grid: docs/dali.md)")
    v = inputs[0]
    bufs = v.data if isinstance(v, EncodedBatch) else samples_of(op, v, "encoded")
    shapes = np.array([_image_shape(b) for b in bufs], np.int64).reshape(-1, 3)
    it = args["image_type"]
    if it is not None:  # the channels of the decoded type, as DALI's
        shapes[:, 2] = 1 if str(getattr(it, "value", it)).upper() == "GRAY" else 3
    return shapes.astype(_types.to_numpy_type(args["dtype"]))


@register("shapes", **TENSOR, rule=_one_unknown, inputs=(1, 1), input_names=("data",),
          args={"dtype": "int64"},
          arg_docs={"dtype": "output type (DALI's default INT64)"},
          output_spec="(B, ndim) each sample's shape",
          doc="DALI's shapes: each sample's shape as a 1-D tensor (images: [H, W, C]), on the "
              "device of its input")
def shapes(ctx, op, inputs, args):
    v = inputs[0]
    dt = _types.to_numpy_type(args["dtype"])
    if isinstance(v, ImageBatch):  # from the sizes the batch holds on the host: no pixel read
        raw = v.raw
        stored = (raw.shapes if hasattr(raw, "ptrs") else raw.launch.shapes
                  if hasattr(raw, "launch") else [a.shape for a in raw])
        c = np.array([s[-1] if v.layout == "HWC" else s[0] for s in stored], np.int64)
        hw = np.concatenate([v.sizes().reshape(-1, 2), c.reshape(-1, 1)], 1)
        out = (hw if v.layout == "HWC" else hw[:, [2, 0, 1]]).astype(dt)
    else:
        t = tensors_of(op, v, "data")
        dims = [a.shape for a in t] if isinstance(t, list) else [t.shape[1:]] * len(t)
        out = batch_of([np.array(d, dt) for d in dims])
    return kernel(ctx, op, op.device)(out)


# ---- cat / stack / reshape / constant ----------------------------------------------------------------
def _joined(ctx, op, inputs, args, new_axis):
    if args["axis_name"] is not None:
        raise NotImplementedError(f"{op.name}: axis_name= needs layouts; give axis=")
    cols = [tensors_of(op, v, f"input {k}") for k, v in enumerate(inputs)]
    if len({len(c) for c in cols}) > 1:
        raise ValueError(f"{op.name}: the inputs have different batch sizes")
    try:
        return kernel(ctx, op, op.device)(cols, int(args["axis"]), new_axis)
    except (ValueError, IndexError) as e:  # (NumPy's and cupy's words for shapes that differ)
        raise ValueError(f"{op.name}: {e}") from None


AC.declare_ranges("cat", axis=AC.count(-64, 64))
@register("cat", **TENSOR, rule=_one_unknown, inputs=(1, 64), input_names=("input0",),
          args={"axis": 0, "axis_name": None},
          arg_docs={"axis": "the axis the samples are joined along", "axis_name": "not supported"},
          output_spec="per sample, the inputs' samples joined along axis",
          doc="DALI's cat: join the inputs' samples along an existing axis, per sample")
def cat(ctx, op, inputs, args):
    return _joined(ctx, op, inputs, args, False)


AC.declare_ranges("stack", axis=AC.count(-64, 64))
@register("stack", **TENSOR, rule=_one_unknown, inputs=(1, 64), input_names=("input0",),
          args={"axis": 0, "axis_name": None},
          arg_docs={"axis": "the new axis", "axis_name": "not supported"},
          output_spec="per sample, the inputs' samples stacked along a new axis",
          doc="DALI's stack: stack the inputs' samples along a new axis, per sample")
def stack(ctx, op, inputs, args):
    return _joined(ctx, op, inputs, args, True)


AC.declare_ranges("reshape", shape=AC.count(-1, AC.MAX_PIXELS, form="seq"),
                  rel_shape=AC.finite(form="seq"), src_dims=AC.count(-1, 64, form="seq"))
@register("reshape", **TENSOR, rule=_one_unknown, inputs=(1, 2),
          input_names=("data", "shape_input"),
          args={"shape": None, "rel_shape": None, "layout": None, "src_dims": None},
          per_sample=("shape", "rel_shape"),
          hints={"layout": "DALI's layout name of the output; detaug's plain tensors carry none"},
          arg_docs={"shape": "the new shape (one -1 is inferred), or one per sample",
                    "rel_shape": "the new shape relative to the input's (floats)",
                    "src_dims": "the input dims to keep, in order (-1 inserts a unit dim)"},
          output_spec="per sample, the same elements in the new shape",
          doc="DALI's reshape: each sample's elements in a new shape (shape=, rel_shape=, "
              "src_dims= or a second input, on the host)")
def reshape(ctx, op, inputs, args):
    data = tensors_of(op, inputs[0], "data")
    b = len(data)
    given = inputs[1] if len(inputs) == 2 else args["shape"]
    if is_device_array(given) or (isinstance(given, list) and any(map(is_device_array, given))):
        raise ValueError(f"{op.name}: a shape input on the GPU would be read back to the host; "
                         "give the shape as an argument (shape=, rel_shape=, src_dims=; per "
                         "sample from a host op)")
    in_shapes = [a.shape for a in data] if isinstance(data, list) else [data.shape[1:]] * b
    shapes = [_new_shape(op, args, given, s, sh) for s, sh in enumerate(in_shapes)]
    for s, (sh, new) in enumerate(zip(in_shapes, shapes)):
        n, known = int(np.prod(sh)), [d for d in new if d != -1]
        if (len(known) == len(new) and int(np.prod(new)) != n) or sum(d == -1 for d in new) > 1 \
                or (len(known) < len(new) and (int(np.prod(known)) == 0 or n % int(np.prod(known)))):
            raise ValueError(f"{op.name}: sample {s} of shape {tuple(sh)} cannot take the shape "
                             f"{new}")
    if not isinstance(data, list) and all(sh == shapes[0] for sh in shapes):
        return data.reshape((b,) + tuple(shapes[0]))  # one view of the whole batch
    views = [a.reshape(sh) for a, sh in zip(list(data), shapes)]
    return kernel(ctx, op, op.device)(views)


def _new_shape(op, args, given, s, in_shape) -> list:
    """Sample ``s``'s new shape (a -1 left for its reshape to infer)."""
    if args["src_dims"] is not None:
        dims = [int(d) for d in args["src_dims"]]
        dropped = set(range(len(in_shape))) - {d for d in dims if d >= 0}
        if any(in_shape[d] != 1 for d in dropped):
            raise ValueError(f"{op.name}: src_dims {dims} drops a dim of extent > 1")
        return [in_shape[d] if d >= 0 else 1 for d in dims]
    if given is not None:
        g = np.asarray(given)
        g = g[s] if g.ndim == 2 or (isinstance(given, list) and g.dtype == object) else g
        return [int(x) for x in np.asarray(g).reshape(-1)]
    if args["rel_shape"] is not None:
        r = np.asarray(args["rel_shape"], np.float64)
        r = r[s] if r.ndim == 2 else r
        return [int(np.floor(in_shape[k] * x)) if x >= 0 else -1 for k, x in enumerate(r)]
    raise ValueError(f"{op.name}: give shape=, rel_shape=, src_dims= or a shape input")


AC.declare_ranges("constant", fdata=AC.finite(form="seq"), idata=AC.finite(form="seq"),
                  shape=AC.shape())
@register("constant", devices=("cpu",), inputs=(0, 0), kind="other",
          args={"fdata": None, "idata": None, "shape": None, "dtype": None, "layout": None},
          hints={"layout": "DALI's layout name of the output; detaug's plain tensors carry none"},
          arg_docs={"fdata": "float values", "idata": "integer values",
                    "shape": "the shape of each sample (default: the values' own)",
                    "dtype": "output type (default float32 for fdata, int32 for idata)"},
          output_spec="(B, *shape): the same tensor for every sample",
          doc="DALI's constant: one tensor repeated for every sample (a Python value given "
              "where DALI takes an input becomes one)")
def constant(ctx, op, inputs, args):
    if (args["fdata"] is None) == (args["idata"] is None):
        raise ValueError(f"{op.name}: give exactly one of fdata and idata")
    ints = args["idata"] is not None
    vals = np.asarray(args["idata"] if ints else args["fdata"])
    dt = (np.int32 if ints else np.float32) if args["dtype"] is None \
        else _types.to_numpy_type(args["dtype"])
    shape = vals.shape if args["shape"] is None else tuple(int(x) for x in np.atleast_1d(args["shape"]))
    one = (np.broadcast_to(vals.reshape(()), shape) if vals.size == 1
           else vals.reshape(shape)).astype(dt)
    return np.broadcast_to(one, (ctx.batch_size,) + one.shape).copy()


# ---- slice of plain tensors -------------------------------------------------------------------------
def slice_tensors(op, data, anchor, shape, args):
    """DALI's slice of a plain tensor batch: per sample, along ``axes`` (indices; DALI's
    default (1, 0)), the window [anchor, anchor + shape), relative to the extents where
    ``normalized_anchor`` / ``normalized_shape`` (rounded as DALI: start and end each rounded
    half away from zero), else absolute; ``out_of_bounds_policy`` 'error', 'pad' (with
    ``fill_values``) or 'trim_to_shape'."""
    from ..ops.geometry import round_half_away

    if args["axis_names"] is not None:
        raise NotImplementedError(f"{op.name}: axis_names= on a plain tensor needs a layout; "
                                  "give axes= (indices)")
    axes = [int(a) for a in np.atleast_1d(args["axes"])]
    samples = samples_of(op, data, "data")
    b = len(samples)
    a_all = np.asarray(anchor, np.float64).reshape(b, -1) if np.size(anchor) != len(axes) \
        else np.broadcast_to(np.asarray(anchor, np.float64).reshape(1, -1), (b, len(axes)))
    s_all = np.asarray(shape, np.float64).reshape(b, -1) if np.size(shape) != len(axes) \
        else np.broadcast_to(np.asarray(shape, np.float64).reshape(1, -1), (b, len(axes)))
    if a_all.shape[1] != len(axes) or s_all.shape[1] != len(axes):
        raise ValueError(f"{op.name}: anchor and shape need one value per axis {axes}")
    policy = args["out_of_bounds_policy"]
    out = []
    for k, x in enumerate(samples):
        x = np.asarray(x)
        if any(not -x.ndim <= ax < x.ndim for ax in axes):
            raise ValueError(f"{op.name}: axes {axes} do not fit sample {k} of shape {x.shape}")
        ext = np.array([x.shape[ax] for ax in axes], np.float64)
        av = a_all[k] * ext if args["normalized_anchor"] else a_all[k]
        sv = s_all[k] * ext if args["normalized_shape"] else s_all[k]
        start = round_half_away(av).astype(np.int64)
        end = round_half_away(av + sv).astype(np.int64)
        if (end <= start).any():
            raise ValueError(f"{op.name}: sample {k}: an empty window")
        lo, hi = np.zeros(x.ndim, np.int64), np.array(x.shape, np.int64)
        outside = (start < 0).any() or (end > ext).any()
        if outside and policy == "error":
            raise ValueError(f"{op.name}: sample {k}: window {start.tolist()}..{end.tolist()} "
                             f"reaches outside its extents {ext.astype(int).tolist()} "
                             "(out_of_bounds_policy='error'; 'pad' fills, 'trim_to_shape' trims)")
        if policy == "trim_to_shape":
            start, end = np.clip(start, 0, ext.astype(np.int64)), np.clip(end, 0, ext.astype(np.int64))
        elif policy not in ("error", "pad"):
            raise ValueError(f"{op.name}: out_of_bounds_policy must be 'error', 'pad' or "
                             "'trim_to_shape'")
        for ax, s0, e0 in zip(axes, start, end):
            lo[ax], hi[ax] = s0, e0
        res = np.full(tuple(hi - lo), args["fill_values"], x.dtype)
        src = tuple(slice(max(lo[d], 0), min(hi[d], x.shape[d])) for d in range(x.ndim))
        dst = tuple(slice(max(lo[d], 0) - lo[d], min(hi[d], x.shape[d]) - lo[d])
                    for d in range(x.ndim))
        res[dst] = x[src]
        out.append(res)
    return batch_of(out) if isinstance(data, np.ndarray) else out


# the types of the arguments whose default (None) does not say it (ops/arg_docs.py's table)
def _declare_types():
    from ..ops import arg_docs as _ad
    from ..ops.registry import REGISTRY

    seq = vec = "sequence of float"
    types_ = {"slice": {"start": vec, "rel_start": vec, "end": vec, "rel_end": vec,
                        "rel_shape": vec},
              "box_encoder": {"anchors": seq},
              "coord_transform": {"M": vec, "T": vec, "MT": vec},
              "coord_flip": {"layout": "str | None"}, "peek_image_shape": {"image_type": "str | None"},
              "cat": {"axis_name": "str | None"}, "stack": {"axis_name": "str | None"},
              "reshape": {"rel_shape": vec, "src_dims": "sequence of int"},
              "constant": {"fdata": seq, "idata": "sequence of int"},
              "transforms.translation": {"offset": vec}, "transforms.scale": {
                  "scale": vec, "center": vec, "ndim": "int | None"},
              "transforms.rotation": {"angle": "float", "center": vec,
                                      "axis": "sequence of float"},
              "transforms.shear": {"shear": vec, "angles": vec, "center": vec},
              "readers.tfrecord": {"features": "dict", "index_path": "any"}}
    for op, args in types_.items():
        table = _ad.ARG_DOCS.setdefault(op, {})
        for k, t in args.items():
            table[k] = (t, REGISTRY[op].arg_docs.get(k, ""))


from . import transforms as _transforms  # noqa: E402,F401  (registered before its types)

_declare_types()
