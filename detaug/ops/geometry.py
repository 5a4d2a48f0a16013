"""Geometric ops. Each one only plans: it computes a per-sample matrix (input -> output
continuous coordinates) and output size on the host, and composes them into the batch's pending
chain; the image is warped and the boxes transformed once, where the chain ends (detaug/core/batch.py)."""
from __future__ import annotations

import numpy as np

from ..graph import materialize as M
from ..core import geometry as G
from ..core import shapes as S
from ..core.batch import BoxBatch, ImageBatch
from .registry import Draw, register
from ..graph.arg_check import (BOOL, MAX_SIDE, Num, check_canvas, choice, count, declare_kinds,
                               declare_ranges, finite,
                               positive, prob, side)

GEO = dict(devices=("cpu", "gpu"), inputs=(1, 2), kind="geometric",
           outputs=lambda n, a: n,
           output_spec="same inputs: images (uint8 HWC, new sizes) and boxes (xyxy, same fields)")


# ---- output rules (detaug/core/shapes.py): the sizes each op's outputs take, from its inputs' ----
def window_hw(a):
    """A fixed crop window's (h, w) from crop / crop_h and crop_w, each DALI's float32 argument
    truncated as its crop takes it (``static_cast<int>``), at least 1; or None."""
    v = a.get("crop") if S.pair(a.get("crop")) else None
    if v is None and a.get("crop_h") is not None and a.get("crop_w") is not None:
        v = (a["crop_h"], a["crop_w"]) if S.pair((a["crop_h"], a["crop_w"])) else None
    if v is None:
        return None
    v = (v, v) if np.ndim(v) == 0 else v
    return tuple(max(int(np.float32(x)), 1) for x in v)


@S.image_rule
def fixed_size_rule(img, a):
    """Every sample on the canvas ``size`` (unknown when size is not a constant)."""
    return S.fixed(img, S.pair(a.get("size")))


@S.image_rule
def _crop_rule(img, a):
    """A fixed window is the canvas; otherwise at most the input."""
    hw = window_hw(a)
    return S.fixed(img, hw) if hw else S.within(img, img.hw or img.bound)


@S.image_rule
def _resize_rule(img, a):
    """size / resize_x and resize_y: that canvas, or within it where the aspect is kept (None where
    it covers size: larger along one side); resize_longer / max_size: within it; else unknown."""
    size = S.pair(a.get("size"))
    if size is None and a.get("resize_x") is not None and a.get("resize_y") is not None:
        size = S.pair((a["resize_y"], a["resize_x"]))
    if size is not None:
        mode, keep = a.get("mode") or "default", a.get("keep_aspect")
        if mode == "not_smaller" or keep == "cover":
            return None
        return S.within(img, size) if keep or mode == "not_larger" else S.fixed(img, size)
    for key in ("resize_longer", "max_size"):
        if S.pair(a.get(key)) is not None:
            return S.within(img, S.pair(a[key]))
    return None


@S.image_rule
def _rotate_rule(img, a):
    """``size``; the input's canvas where it is kept; else within the square of the diagonal."""
    if S.pair(a.get("size")):
        return S.fixed(img, S.pair(a["size"]))
    src = img.hw or img.bound
    if not (a.get("expand") or a.get("keep_size") is False):
        return S.within(img, src)
    d = None if src is None else int(np.ceil(np.hypot(*src))) + 1
    return S.within(img, None if d is None else (d, d))


@S.image_rule
def _zoom_out_rule(img, a):
    """Within the input times the largest ratio."""
    src, r = img.hw or img.bound, a.get("ratio")
    top = max(r) if isinstance(r, (tuple, list)) else r
    if src is None or not isinstance(top, (int, float)):
        return None
    return S.within(img, (int(np.ceil(src[0] * top)), int(np.ceil(src[1] * top))))


def per_sample(value, b, dtype=np.float64):
    """A scalar or per-sample argument as a (B,) array."""
    a = np.asarray(value, dtype=dtype)
    return np.broadcast_to(a.reshape(-1) if a.ndim else a, (b,)).copy()


def pair_per_sample(value, b, name):
    """(a (B,), b (B,)) from a number, a pair, or one pair per sample ((B, 2): DALI's tensor
    argument, e.g. ``size=fn.random.uniform(range=..., shape=2)``)."""
    a = np.asarray(value, np.float64)
    if a.ndim == 2 and a.shape == (b, 2):
        return a[:, 0].copy(), a[:, 1].copy()
    if a.ndim == 1 and a.size == b and b != 2 and b != 1:
        return a.copy(), a.copy()  # one number per sample: a square
    x, y = pair(value, name)
    return np.full(b, x), np.full(b, y)


def pair(value, name):
    """(a, b) from a scalar or a 2-sequence."""
    if np.ndim(value) == 0:
        return float(value), float(value)
    v = tuple(float(x) for x in value)
    if len(v) != 2:
        raise ValueError(f"{name} must be a number or a pair, got {value!r}")
    return v


def apply_geometry(ctx, op, inputs, plan, fill=None, box_mode=None, antialias=True, filter=None,
                   roi=False):
    """Shared body of every geometric op.

    ``plan(sizes (B, 2) int (H, W), boxes: BoxBatch | None) -> (matrices (B, 3, 3),
    out_sizes (B, 2), keep: host bool mask over the boxes or None)``.
    Inputs: (images[, boxes]) or (boxes,) alone (then the boxes' canvas gives the sizes).
    ``antialias=False`` turns supersampling off for the fused warp of the chain this op joins
    (:attr:`detaug.core.batch.Geometry.antialias`): one bilinear sample per output pixel.
    ``filter='triangle'`` gives the chain DALI's resampling filter
    (:attr:`detaug.core.batch.Geometry.filter`, kernels/resample.py); ``roi=True`` marks the op
    a resampling of a region of interest (:attr:`detaug.core.batch.Step.roi`: its canvas
    clamps no tap).
    """
    images = next((i for i in inputs if isinstance(i, ImageBatch)), None)
    boxes = next((i for i in inputs if isinstance(i, BoxBatch)), None)
    if images is None and boxes is None or len(inputs) != (images is not None) + (boxes is not None):
        raise TypeError(f"{op.name}: takes (images), (images, boxes) or (boxes); got "
                        f"{[type(i).__name__ for i in inputs]}")
    sizes = images.sizes() if images is not None else boxes.canvas
    if boxes is not None and images is not None and len(boxes.canvas) != len(sizes):
        raise ValueError(f"{op.name}: {len(sizes)} images but boxes for {len(boxes.canvas)}")
    m, out_sizes, keep = plan(np.asarray(sizes, np.int64), boxes)
    out_sizes = np.maximum(np.asarray(out_sizes, np.int64).reshape(-1, 2), 1)
    check_canvas(op.name, out_sizes)
    outs = []
    for v in inputs:
        if isinstance(v, ImageBatch):
            f = None if fill is None else np.broadcast_to(
                np.asarray(fill, np.float64).reshape(len(sizes), -1) if np.ndim(fill) == 2
                else np.asarray(fill, np.float64), (len(sizes), v.channels))
            outs.append(join_chain(ctx, v, m, out_sizes, f, antialias=antialias, filter=filter,
                                   roi=roi))
        else:
            reg = G.canvas_region(m, v.content_region(), out_sizes)
            b = v.with_geometry(v.pending().then(m, out_sizes, box_mode=box_mode,
                                                 roi=roi)).replace(region=reg)
            outs.append(b.drop(keep) if keep is not None else b)
    return tuple(outs)


def join_chain(ctx, images: ImageBatch, m, out_sizes, fill=None, antialias=True, filter=None,
               roi=False) -> ImageBatch:
    """``images`` with an op of matrices ``m`` (B, 3, 3) to ``out_sizes`` (B, 2) joined to their
    pending chain (the rest as :meth:`detaug.core.batch.Geometry.then`), or, where
    :func:`resamples_apart`, starting a new chain on the chain's image, made first. Every op
    that joins an image chain (the geometric ops, mosaic's tiles) goes through here."""
    if resamples_apart(images.geometry, m, filter):
        images = M.images(images, ctx)
    return images.with_geometry(images.pending().then(m, out_sizes, fill, antialias=antialias,
                                                      filter=filter, roi=roi))


def resamples_apart(g, m, filter) -> bool:
    """Whether an op of matrices ``m`` (B, 3, 3) asking for ``filter`` resamples the image that
    the pending chain ``g`` makes instead of joining it: where DALI's filter is involved (the
    chain's or the op's, :attr:`detaug.core.batch.Geometry.filter`) and both resample (the op's
    map and a step of the chain are not :func:`detaug.core.geometry.axis_copy` for some sample:
    the chain's image is then made first, for every sample). DALI's resize filters its own
    input, so two resizes filter twice, the second the first's rounded image, and a rotation
    after a resize reads the resized image: one composed map would filter once. detaug's own
    chains (no op asking for DALI's filter) stay one warp."""
    if g is None or "triangle" not in (filter, g.filter) or G.axis_copy(m).all():
        return False
    return any(not G.axis_copy(s.matrix).all() for s in g.steps)


# ---- flip -------------------------------------------------------------------------------------
declare_ranges("flip", horizontal=count(0, 1), vertical=count(0, 1))
@register("flip", rule=S.same_canvas, plans=True, **GEO, args={"horizontal": 1, "vertical": 0},
          per_sample=("horizontal", "vertical"),
          doc="mirror horizontally and/or vertically, per sample (x -> W - x)")
def flip(ctx, op, inputs, args):
    def plan(sizes, boxes):
        b = len(sizes)
        return (G.flip(sizes[:, 1], sizes[:, 0], per_sample(args["horizontal"], b),
                       per_sample(args["vertical"], b)), sizes, None)

    return apply_geometry(ctx, op, inputs, plan)


# ---- crop -------------------------------------------------------------------------------------
def _crop_size(args, sizes):
    b = len(sizes)
    if args.get("crop") is not None:
        return pair_per_sample(args["crop"], b, "crop")
    # (a per-sample crop_h / crop_w is an array: `or` would ask for its truth value)
    ch = args["crop_h"] if _given(args.get("crop_h")) else sizes[:, 0]
    cw = args["crop_w"] if _given(args.get("crop_w")) else sizes[:, 1]
    return per_sample(ch, b), per_sample(cw, b)


def round_half_away(x):
    """C's round(): halves away from zero (DALI's std::round / llround), not NumPy's to-even."""
    x = np.asarray(x, np.float64)
    return np.sign(x) * np.floor(np.abs(x) + 0.5)


def _f32(x):
    """A float argument as DALI holds it: rounded to float32, then taken in double."""
    return np.asarray(x, np.float32).astype(np.float64)


def crop_plan(args, sizes):
    """Integer crop windows: anchor = round(pos * (in - crop)) with ``pos`` in float32 (DALI's
    crop_pos_x/y), so that a crop moves pixels exactly; a window reaching past the image is
    filled with ``fill``."""
    b = len(sizes)
    if args.get("window") is not None:
        w = np.asarray(args["window"], np.float64).reshape(-1, 4)
        w = np.broadcast_to(w, (b, 4))
        x0, y0 = np.round(w[:, 0]), np.round(w[:, 1])
        cw, ch = np.round(w[:, 2]) - x0, np.round(w[:, 3]) - y0
    else:
        # DALI's crop size is its float32 argument truncated (static_cast<int>), not rounded
        ch, cw = (np.trunc(_f32(v)) for v in _crop_size(args, sizes))
        px = per_sample(args.get("crop_pos_x", 0.5), b)
        py = per_sample(args.get("crop_pos_y", 0.5), b)
        # DALI's rounding (std::round: halves away from zero), not NumPy's to-even: a crop of
        # an odd margin at crop_pos 0.5 starts at the upper half pixel, as DALI's does; the
        # position is DALI's float32 argument, multiplied in double (0.7 * 5 is 3.5, but
        # 0.7f * 5 is 3.4999999: the window starts at 3)
        x0 = round_half_away(_f32(px) * (sizes[:, 1] - cw))
        y0 = round_half_away(_f32(py) * (sizes[:, 0] - ch))
    cw, ch = np.maximum(cw, 1), np.maximum(ch, 1)
    return G.translate(-x0, -y0), np.stack([ch, cw], -1)


# a crop narrower than a pixel keeps one (its sides truncated as DALI's, at least 1)
declare_ranges("crop", crop=positive(MAX_SIDE, size=True, form='pair'),
               crop_h=positive(MAX_SIDE, size=True), crop_w=positive(MAX_SIDE, size=True),
               crop_pos_x=prob(), crop_pos_y=prob(),
               window=finite(form='seq'), fill=finite(form='seq'))
@register("crop", rule=_crop_rule, plans=True, **GEO,
          args={"crop": None, "crop_h": None, "crop_w": None, "crop_pos_x": 0.5,
                               "crop_pos_y": 0.5, "window": None, "fill": 0.0},
          per_sample=("crop", "crop_pos_x", "crop_pos_y", "crop_h", "crop_w", "window"),
          doc="crop a window: crop=(h, w) at crop_pos_x/y in [0, 1], or window=(x0, y0, x1, y1)")
def crop(ctx, op, inputs, args):
    def plan(sizes, boxes):
        m, out = crop_plan(args, sizes)
        return m, out, None

    return apply_geometry(ctx, op, inputs, plan, fill=args["fill"])


# ---- resize / letterbox -------------------------------------------------------------------------
def _given(v) -> bool:
    """An extent argument that is set: a per-sample array, or a scalar other than None / 0."""
    return v is not None and (np.ndim(v) > 0 or bool(v))


def resize_sizes(args, sizes):
    """Output (H, W) per sample, rounded to integers (the matrix then scales exactly onto them):
    :func:`requested_sizes` rounded, at least 1."""
    return np.maximum(np.round(requested_sizes(args, sizes)), 1)


def requested_sizes(args, sizes):
    """Output (H, W) per sample as asked, before rounding (a float: ``resize_shorter=256`` of a
    375 x 500 image asks for 341.33 columns).
    ``resize_shorter``, ``resize_longer``, ``resize_x``, ``resize_y`` and ``max_size`` may be
    per-sample (a (B,) array: DALI's tensor arguments, e.g. ``fn.random.uniform(...)``)."""
    h, w = sizes[:, 0].astype(np.float64), sizes[:, 1].astype(np.float64)

    def val(v):
        return per_sample(v, len(sizes))

    size, shorter, longer = args.get("size"), args.get("resize_shorter"), args.get("resize_longer")
    rx, ry = args.get("resize_x"), args.get("resize_y")
    if size is not None or (_given(rx) and _given(ry)):
        oh, ow = pair_per_sample(size, len(sizes), "size") if size is not None else (val(ry), val(rx))
        if args.get("keep_aspect"):
            s = (np.maximum if args["keep_aspect"] == "cover" else np.minimum)(oh / h, ow / w)
            oh, ow = h * s, w * s
        else:
            oh, ow = np.broadcast_to(oh, h.shape) * 1.0, np.broadcast_to(ow, w.shape) * 1.0
    elif _given(shorter) or _given(longer) or _given(rx) or _given(ry):
        if _given(shorter):
            s = val(shorter) / np.minimum(h, w)
        elif _given(longer):
            s = val(longer) / np.maximum(h, w)
        else:
            s = val(rx) / w if _given(rx) else val(ry) / h
        if _given(args.get("max_size")):
            s = np.minimum(s, val(args["max_size"]) / np.maximum(h, w))
        oh, ow = h * s, w * s
    else:
        raise ValueError("resize needs size=, resize_shorter=, resize_longer= or resize_x/resize_y")
    return np.stack([oh, ow], -1)


declare_kinds("resize", mode=choice("default", "stretch", "not_larger", "not_smaller"),
              subpixel_scale=BOOL)
declare_ranges("resize", size=Num(0, MAX_SIDE, form='pair', size=True),
               resize_shorter=Num(0, MAX_SIDE, size=True), resize_longer=Num(0, MAX_SIDE,
               size=True), resize_x=Num(0, MAX_SIDE, size=True), resize_y=Num(0, MAX_SIDE,
               size=True), max_size=side(integer=False, form='scalar'))
@register("resize", rule=_resize_rule, plans=True, **GEO,
          args={"size": None, "resize_shorter": None, "resize_longer": None,
                                 "resize_x": None, "resize_y": None, "max_size": None,
                                 "keep_aspect": False, "antialias": True, "interp_type": None,
                                 "min_filter": None, "mag_filter": None, "mode": "default",
                                 "subpixel_scale": None},
          per_sample=("size", "resize_shorter", "resize_longer", "resize_x", "resize_y",
                      "max_size"),
          arg_docs={"interp_type": "DALI's filter: INTERP_LINEAR (bilinear, antialiased when "
                                   "shrinking unless antialias=False) or INTERP_TRIANGULAR "
                                   "(antialiased); the others raise. Images alone (DALI's "
                                   "form) or any filter argument given: DALI's triangle filter "
                                   "of radius in / out; with boxes, detaug's mean of bilinear "
                                   "samples",
                    "mode": "DALI's: 'default' / 'stretch', 'not_larger' (keep_aspect), "
                            "'not_smaller' (cover both sizes)",
                    "subpixel_scale": "DALI's: a fractional output size keeps its scale (the "
                                      "input region moved about its centre) instead of "
                                      "scaling onto the rounded size; default: True in "
                                      "DALI's form (images alone), False with boxes"},
          doc="resize to size=(h, w) (stretch, or keep_aspect), resize_shorter/longer, max_size")
def resize(ctx, op, inputs, args):
    from ..core import types

    for k in ("interp_type", "min_filter", "mag_filter"):
        if args[k] is not None:
            f = types.interp_type(args[k], op.name, k)
            if f == "triangular" and not args["antialias"]:
                raise ValueError(f"{op.name}: {k}=INTERP_TRIANGULAR antialiases; it cannot be "
                                 "combined with antialias=False")
    mode = args["mode"]
    if mode not in ("default", "stretch", "not_larger", "not_smaller"):
        raise ValueError(f"{op.name}: mode must be 'default', 'stretch', 'not_larger' or 'not_smaller'")
    if mode != "default" and not (args["size"] is not None or
                                  (_given(args["resize_x"]) and _given(args["resize_y"]))):
        raise NotImplementedError(f"{op.name}: mode={mode!r} needs both output extents here "
                                  "(size= or resize_x and resize_y)")
    size = args["size"]
    if size is not None and np.ndim(size) == 2 and (np.asarray(size) <= 0).any():
        raise ValueError(f"{op.name}: a per-sample size needs both extents > 0 (the 0 extent "
                         "that keeps the aspect ratio is for a size given once)")
    if size is not None and np.ndim(size) == 1 and 0 in [float(v) for v in size]:
        # DALI: an extent of 0 is computed to keep the aspect ratio (size=(0, 300): width 300)
        oh, ow = pair(size, "size")
        args = {**args, "size": None, "resize_y": oh or None, "resize_x": ow or None}
        if not (oh or ow):
            raise ValueError(f"{op.name}: size={tuple(size)}: at least one extent must be > 0")
    if mode == "not_larger":
        args = {**args, "keep_aspect": True}
    elif mode == "not_smaller":
        args = {**args, "keep_aspect": "cover"}

    filt = resize_filter(inputs, args)
    sub = args["subpixel_scale"]
    sub = filt == "triangle" if sub is None else bool(sub)

    def plan(sizes, boxes):
        req = requested_sizes(args, sizes)
        out = np.maximum(np.round(req), 1)
        return (subpixel_matrix(sizes, req, out) if sub else
                G.scale(out[:, 1] / sizes[:, 1], out[:, 0] / sizes[:, 0])), out, None

    return apply_geometry(ctx, op, inputs, plan, antialias=bool(args["antialias"]),
                          filter=filt, roi=filt == "triangle")


def subpixel_matrix(sizes, req, out):
    """(B, 3, 3): DALI's ``subpixel_scale=True`` resize of (H, W) ``sizes`` asked for the
    fractional ``req`` (B, 2) and made ``out`` (rounded): the scale ``req / in`` kept, the input
    region moved about its centre by ``adj = out / req`` (clamped to 10, as DALI's
    CalculateSampleParams), so output ``o`` samples input ``in / 2 + (o - out / 2) * in * adj /
    out``. Where ``req`` is ``out`` (within 1e-6) it is the plain ``scale(out / in)``."""
    sizes, req, out = (np.asarray(v, np.float64) for v in (sizes, req, out))
    adj = np.minimum(out / np.maximum(req, 1e-300), 10.0)
    k = out / (sizes * adj)  # output pixels per input pixel
    t = out / 2 - k * sizes / 2
    exact = np.abs(req - out) <= 1e-6
    k = np.where(exact, out / sizes, k)
    t = np.where(exact, 0.0, t)
    return G.translate(t[:, 1], t[:, 0]) @ G.scale(k[:, 1], k[:, 0])


def resize_filter(inputs, args) -> str:
    """DALI's triangle filter (kernels/resample.py) for DALI's form of the resize: images alone
    (DALI's resize takes one input), or any of DALI's filter arguments given; detaug's box-aware
    form (images with their boxes) keeps detaug's warp ('box')."""
    dali = (not any(isinstance(v, BoxBatch) for v in inputs)
            or any(args.get(k) is not None for k in ("interp_type", "min_filter", "mag_filter")))
    return "triangle" if dali else "box"


declare_ranges("letterbox", size=side(), fill=finite(form='seq'))
@register("letterbox", rule=fixed_size_rule, plans=True, **GEO,
          args={"size": None, "fill": 114.0, "center": True},
          doc="fit into size=(h, w) keeping the aspect ratio, centred (or top-left with "
              "center=False, as keras-retinanet pads), padding with fill")
def letterbox(ctx, op, inputs, args):
    def plan(sizes, boxes):
        oh, ow = pair(args["size"], "size")
        inner = resize_sizes({"size": (oh, ow), "keep_aspect": True}, sizes)
        ox = np.floor((ow - inner[:, 1]) / 2) * bool(args["center"])
        oy = np.floor((oh - inner[:, 0]) / 2) * bool(args["center"])
        m = G.translate(ox, oy) @ G.scale(inner[:, 1] / sizes[:, 1], inner[:, 0] / sizes[:, 0])
        return m, np.tile([oh, ow], (len(sizes), 1)), None

    return apply_geometry(ctx, op, inputs, plan, fill=args["fill"])


# ---- rotate / affine ---------------------------------------------------------------------------
def expanded_size(linear, sizes):
    """(B, 2) (H, W) of the canvas that holds the whole image turned by ``linear`` about its
    centre, by torchvision's rule (``_compute_affine_output_size``, after PIL): the turned image
    spans ``[c - e / 2, c + e / 2]`` per axis (``c`` the half size, ``e`` the turned extent);
    both ends are truncated to 1e-4 (so that rounding noise never adds a pixel), and the canvas
    is ``ceil(max) - floor(min)``: rounded outward, never cutting a corner. A quarter turn gives
    the turned size exactly (torchvision v2 turns those with rot90)."""
    h, w = sizes[:, 0].astype(np.float64), sizes[:, 1].astype(np.float64)
    ext = np.stack([np.abs(linear[:, 1, 0]) * w + np.abs(linear[:, 1, 1]) * h,
                    np.abs(linear[:, 0, 0]) * w + np.abs(linear[:, 0, 1]) * h], -1)
    half = np.stack([h, w], -1) / 2
    hi = np.ceil(np.trunc((half + ext / 2) * 1e4) / 1e4)
    lo = np.floor(np.trunc((half - ext / 2) * 1e4) / 1e4)
    # quarter turns are exact turns (the turned size, as torchvision v2's rotate, which uses
    # rot90 for them): the general rule would add a pixel where one side is odd
    quarter = np.isin(linear.reshape(len(linear), -1), (-1.0, 0.0, 1.0)).all(1)
    return np.maximum(np.where(quarter[:, None], ext, hi - lo), 1)


def dali_rotated_size(angle_deg, sizes):
    """DALI's rotate canvas (keep_size=False): ceil(|cos| w + |sin| h - 0.01) (and h alike), one
    more where its parity differs from the input side it mostly comes from (less blur)."""
    a = np.deg2rad(np.asarray(angle_deg, np.float64))
    c, s = np.abs(np.cos(a)), np.abs(np.sin(a))
    h, w = sizes[:, 0].astype(np.float64), sizes[:, 1].astype(np.float64)
    ow, oh = np.ceil(c * w + s * h - 1e-2), np.ceil(c * h + s * w - 1e-2)
    pw = np.where(s <= c, w % 2, h % 2)
    ph = np.where(s <= c, h % 2, w % 2)
    ow += (ow % 2) != pw
    oh += (oh % 2) != ph
    return np.stack([oh, ow], -1)


def _dali_rotate(op, args):
    """The fill of rotate called with DALI's arguments (keep_size, fill_value, size,
    interp_type): DALI enlarges the canvas unless keep_size=True; without fill_value it repeats
    the border (None: ops/border.py's warp, on the CPU)."""
    from ..core import types

    if args["interp_type"] is not None:
        types.interp_type(args["interp_type"], op.name)
    if args["interp_type"] is not None and types.interp_type(args["interp_type"], op.name) != \
            "linear" and args["fill_value"] is None:
        raise NotImplementedError(f"{op.name}: without fill_value (DALI's border repeat) only "
                                  "INTERP_LINEAR is available")
    return args["fill_value"]  # None: DALI's border repeat (ops/border.py)


_CANVAS_SAID: set = set()


def _warn_canvas_once(op) -> None:
    """fn.rotate with neither expand= nor any of DALI's arguments: detaug keeps the canvas where
    DALI enlarges it; say so once per process, naming the arguments that choose."""
    if "rotate" in _CANVAS_SAID:
        return
    _CANVAS_SAID.add("rotate")
    import warnings

    warnings.warn(f"{op.name}: detaug keeps the input size (fill 0) where DALI's rotate enlarges "
                  "the canvas: pass keep_size=False, fill_value=0 for DALI's canvas, or "
                  "expand=False / expand=True for detaug's (this warning then goes)", UserWarning,
                  stacklevel=2)


declare_kinds("rotate", expand=BOOL, keep_size=BOOL, box_mode=choice("corners", "ellipse"))
declare_ranges("rotate", angle=finite(), fill=finite(form='seq'), fill_value=finite(form='seq'),
               size=side(integer=False))
@register("rotate", rule=_rotate_rule, plans=True, **GEO,
          args={"angle": 0.0, "expand": None, "fill": 0.0, "box_mode": "corners",
                                 "keep_size": None, "fill_value": None, "size": None,
                                 "interp_type": None},
          arg_docs={"keep_size": "DALI: False (DALI's default when any DALI argument is given) "
                                 "enlarges the canvas by DALI's rule, True keeps it",
                    "fill_value": "DALI's fill; given DALI's arguments without it, the border "
                                  "repeats as DALI's (CPU only, not fused)",
                    "size": "DALI: the output (H, W), image centred"},
          per_sample=("angle",),
          doc="rotate by angle degrees counter-clockwise about the centre; keep canvas (fill 0) "
              "or expand=True (canvas rounded outward as torchvision's, image centred); boxes: "
              "'corners' (enclosing box) or 'ellipse'")
def rotate(ctx, op, inputs, args):
    if args["box_mode"] not in ("corners", "ellipse"):
        raise ValueError(f"{op.name}: box_mode must be 'corners' or 'ellipse'")

    dali = any(args[k] is not None for k in ("keep_size", "fill_value", "size", "interp_type"))
    fill = _dali_rotate(op, args) if dali else args["fill"]
    if not dali and args["expand"] is None:
        _warn_canvas_once(op)

    def plan(sizes, boxes):
        angle = per_sample(args["angle"], len(sizes))
        lin = G.rotation_linear(angle)
        if dali and args["size"] is not None:
            out = np.tile(np.asarray(pair(args["size"], "size")), (len(sizes), 1))
        elif dali and not args["keep_size"]:
            out = dali_rotated_size(angle, sizes)
        else:
            out = expanded_size(lin, sizes) if args["expand"] else sizes.astype(np.float64)
        m = G.linear_about(lin, sizes[:, ::-1] / 2.0, out[:, ::-1] / 2.0)
        return m, out, None

    if dali and fill is None:
        from .border import warp_border

        return warp_border(ctx, op, inputs, plan, lambda v: apply_geometry(
            ctx, op, [v], plan, box_mode=args["box_mode"])[0])
    return apply_geometry(ctx, op, inputs, plan, fill=fill, box_mode=args["box_mode"])


declare_ranges("affine", rotate=finite(), scale=positive(), scale_y=positive(),
               translate_x=finite(), translate_y=finite(), shear_x=Num(-90.0, 90.0, lo_open=True,
               hi_open=True), shear_y=Num(-90.0, 90.0, lo_open=True, hi_open=True),
               perspective_x=finite(), perspective_y=finite(), fill=finite(form='seq'))
@register("affine", rule=S.same_canvas, plans=True, **GEO,
          args={"rotate": 0.0, "scale": 1.0, "scale_y": None, "translate_x": 0.0,
                                 "translate_y": 0.0, "shear_x": 0.0, "shear_y": 0.0,
                                 "perspective_x": 0.0, "perspective_y": 0.0, "fill": 0.0,
                                 "box_mode": "corners", "antialias": True},
          per_sample=("rotate", "scale", "scale_y", "translate_x", "translate_y", "shear_x", "shear_y",
                      "perspective_x", "perspective_y"),
          doc="about the centre: x -> T(c + t) R(rotate) S(scale) Sh(shear) P(perspective) T(-c) x "
              "(P: Ultralytics' perspective terms, with the divide); canvas kept")
def affine(ctx, op, inputs, args):
    def plan(sizes, boxes):
        b = len(sizes)
        sx = per_sample(args["scale"], b)
        sy = sx if args["scale_y"] is None else per_sample(args["scale_y"], b)
        lin = (G.rotation_linear(per_sample(args["rotate"], b))
               @ G.scale(sx, sy)[:, :2, :2]
               @ G.shear_linear(per_sample(args["shear_x"], b), per_sample(args["shear_y"], b)))
        c = sizes[:, ::-1] / 2.0
        t = np.stack([per_sample(args["translate_x"], b), per_sample(args["translate_y"], b)], -1)
        m = G.linear_about(lin, c, c + t)
        px, py = per_sample(args["perspective_x"], b), per_sample(args["perspective_y"], b)
        if px.any() or py.any():
            # Ultralytics' RandomPerspective: P = [[1, 0, 0], [0, 1, 0], [px, py, 1]] on the
            # centred coordinates, first: M = T(c + t) L P T(-c) = (T(c + t) L T(-c)) P_c with
            # P_c = T(c) P T(-c)
            p = G.identity(b)
            p[:, 2, 0], p[:, 2, 1] = px, py
            m = m @ G.translate(c[:, 0], c[:, 1]) @ p @ G.translate(-c[:, 0], -c[:, 1])
        return m, sizes, None

    return apply_geometry(ctx, op, inputs, plan, fill=args["fill"], box_mode=args["box_mode"],
                          antialias=bool(args["antialias"]))


# ---- zoom out (SSD expand / DALI paste) -----------------------------------------------------------
def zoom_out_windows(u, sizes, ratio, probability):
    """Where SSD's expand pastes each image: ``u`` (B, 4) uniforms in [0, 1) (zoom?, ratio,
    x, y), ``sizes`` (B, 2) (H, W). A sample zooms when ``u0 < probability``, by
    ``r = lo + (hi - lo) * u1``; its canvas is ``max(round(size * r), size)`` and the image's
    top-left corner ``floor(u * (canvas - size + 1))`` (clipped to ``[0, canvas - size]``), so
    every integer position is equally likely. Returns (x0 (B,), y0 (B,), canvas (B, 2) (H, W))."""
    lo, hi = ratio
    r = np.where(u[:, 0] < float(probability), lo + (hi - lo) * u[:, 1], 1.0)
    out = np.maximum(np.round(sizes * r[:, None]), sizes)
    x0 = np.floor(u[:, 2] * (out[:, 1] - sizes[:, 1] + 1)).clip(0, out[:, 1] - sizes[:, 1])
    y0 = np.floor(u[:, 3] * (out[:, 0] - sizes[:, 0] + 1)).clip(0, out[:, 0] - sizes[:, 0])
    return x0, y0, out


declare_ranges("zoom_out", ratio=Num(1.0, 64.0, form='range'), probability=prob(),
               fill=finite(form='seq'))
@register("zoom_out", draws=(Draw("zoom"), Draw("ratio"), Draw("x"), Draw("y")),
          rule=_zoom_out_rule, plans=True, **GEO,
          args={"ratio": (1.0, 4.0), "probability": 0.5, "fill": 0.0},
          doc="SSD expand: paste into a canvas ratio x larger (ratio range per sample) at a random "
              "integer position, with probability; boxes follow")
def zoom_out(ctx, op, inputs, args, draws):
    def plan(sizes, boxes):
        u = np.concatenate([draws[k] for k in ("zoom", "ratio", "x", "y")], 1)
        x0, y0, out = zoom_out_windows(u, sizes,
                                       pair(args["ratio"], "ratio"), args["probability"])
        return G.translate(x0, y0), out, None

    return apply_geometry(ctx, op, inputs, plan, fill=args["fill"])


@register("materialize", rule=S.same_canvas, plans=True,
          devices=("cpu", "gpu"), inputs=(1, 2), kind="other",
          outputs=lambda n, a: n, output_spec="same inputs, pending chain applied",
          doc="end the fused chain here: warp the images and transform the boxes now "
              "(for debugging and for comparing fused with op-by-op results)")
def materialize(ctx, op, inputs, args):
    return tuple(M.value(v, ctx) if isinstance(v, (ImageBatch, BoxBatch)) else v for v in inputs)
