"""Geometric ops of today's detection recipes, and DALI's ``warp_affine``.

* ``perspective``: torchvision's ``perspective(img, startpoints, endpoints)`` and
  ``RandomPerspective(distortion_scale, p)``, a homography;
* ``scale_jitter``: large-scale jitter (Detectron2's ``ResizeScale`` + ``FixedSizeCrop``,
  torchvision v2's ``ScaleJitter``);
* ``random_shortest_size``: multi-scale training resize (torchvision v2's
  ``RandomShortestSize``, Detectron2's ``ResizeShortestEdge``);
* ``warp_affine``: DALI's, with the boxes following.

Like every geometric op (ops/geometry.py) each one only plans a per-sample matrix (input ->
output continuous coordinates, docs/design.md) and joins the batch's pending chain: the image
is warped and the boxes transformed once, where the chain ends. A perspective makes the chain
projective: the warp samples through the inverse with the perspective divide, and boxes become
the enclosing box of their 4 corners mapped with the divide, clipped at every canvas.
"""
from __future__ import annotations

import numpy as np

from ..core import geometry as G
from ..core import shapes as S
from ..core.batch import BoxBatch, ImageBatch
from .border import warp_border
from ..graph.arg_check import choice, declare_kinds, declare_ranges, finite, positive, prob, side
from .geometry import GEO, apply_geometry, fixed_size_rule, pair, per_sample
from .registry import Draw, register


@S.image_rule
def _scale_jitter_rule(img, a):
    """The canvas ``size`` where the image is cropped and padded to it; else unknown."""
    return S.fixed(img, S.pair(a.get("size"))) if a.get("crop") and a.get("pad") else None


@S.image_rule
def _shortest_size_rule(img, a):
    """Within ``max_size`` where it is given; else unknown."""
    top = S.pair(a.get("max_size"))
    return S.within(img, top) if top else None


def _plans_warp_affine(a, device) -> bool:
    """Planned as the other geometric ops where a fill is given; DALI's border repeat (no
    fill_value) warps on the host, unfused."""
    return a.get("fill_value") is not None


def _warp_affine_rule(ins, a):
    """The canvas ``size`` where given, else the input's."""
    return (fixed_size_rule if S.pair(a.get("size")) else S.same_canvas)(ins, a)


# ---- perspective --------------------------------------------------------------------------------
def random_perspective_points(u, sizes, distortion_scale):
    """torchvision's ``RandomPerspective._get_params`` for a batch: (start, end), each (B, 4, 2),
    from 8 uniforms per sample ``u`` (B, 8) (``randint(lo, hi)`` is ``lo + floor(u (hi - lo))``).

    With ``half = size // 2`` and ``bound = int(distortion_scale * half) + 1`` per axis, the
    corners top-left, top-right, bottom-right, bottom-left of ``[0, W - 1] x [0, H - 1]`` (as
    torchvision writes them: pixel indices used as coordinates) move to integer points drawn
    in ``[0, bound)`` from their own sides."""
    h, w = sizes[:, 0].astype(np.float64), sizes[:, 1].astype(np.float64)
    ds = np.asarray(distortion_scale, np.float64)
    bh = np.floor(ds * np.floor(h / 2)) + 1
    bw = np.floor(ds * np.floor(w / 2)) + 1
    near_x, near_y = np.floor(u[:, 0] * bw), np.floor(u[:, 1] * bh)
    far_x, near_y2 = w - bw + np.floor(u[:, 2] * bw), np.floor(u[:, 3] * bh)
    far_x2, far_y = w - bw + np.floor(u[:, 4] * bw), h - bh + np.floor(u[:, 5] * bh)
    near_x2, far_y2 = np.floor(u[:, 6] * bw), h - bh + np.floor(u[:, 7] * bh)
    end = np.stack([np.stack([near_x, near_y], -1), np.stack([far_x, near_y2], -1),
                    np.stack([far_x2, far_y], -1), np.stack([near_x2, far_y2], -1)], 1)
    z = np.zeros_like(w)
    start = np.stack([np.stack([z, z], -1), np.stack([w - 1, z], -1),
                      np.stack([w - 1, h - 1], -1), np.stack([z, h - 1], -1)], 1)
    return start, end


def _points(value, b, name):
    a = np.asarray(value, np.float64)
    if a.size == 8:
        return np.broadcast_to(a.reshape(1, 4, 2), (b, 4, 2))
    if a.size == 8 * b:
        return a.reshape(b, 4, 2)
    raise ValueError(f"perspective: {name} must be 4 points [[x, y], ...] (or per sample (B, 4, 2)); "
                     f"got shape {a.shape}")


def checked_homography(start, end, sizes, names=("startpoints", "endpoints")):
    """:func:`geometry.homography` (start -> end), refused where it sends part of the input
    canvas through the horizon (the last row's value at a canvas corner not > 0)."""
    m = G.homography(start, end)
    h, w = sizes[:, 0].astype(np.float64), sizes[:, 1].astype(np.float64)
    cx = np.stack([0 * w, w, w, 0 * w], 1)
    cy = np.stack([0 * h, 0 * h, h, h], 1)
    den = m[:, 2, 0, None] * cx + m[:, 2, 1, None] * cy + m[:, 2, 2, None]
    bad = ~(den > 0).all(1)
    if bad.any():
        raise ValueError(f"perspective: {names[0]} -> {names[1]} of samples "
                         f"{np.nonzero(bad)[0].tolist()} folds the image through the horizon "
                         "(a corner would map to infinity)")
    return m


declare_ranges("perspective", startpoints=finite(form='seq'), endpoints=finite(form='seq'),
               distortion_scale=prob(), p=prob(), fill=finite(form='seq'))
@register("perspective", draws=(Draw("corners", 8), Draw("apply")), rule=S.same_canvas, plans=True,
          **GEO,
          args={"startpoints": None, "endpoints": None, "distortion_scale": None, "p": None,
                "fill": 0.0, "antialias": True},
          per_sample=("startpoints", "endpoints", "distortion_scale", "p"),
          arg_docs={"startpoints": "4 points [[x, y], ...] (top-left, top-right, bottom-right, "
                                   "bottom-left, as torchvision) in continuous coordinates, or "
                                   "per sample (B, 4, 2); with endpoints",
                    "endpoints": "where the startpoints go (same shape)",
                    "distortion_scale": "random mode (no points): torchvision RandomPerspective's "
                                        "corner displacement, 0.5 when not given",
                    "p": "probability of applying, per sample: 1 with points, 0.5 in random mode "
                         "when not given",
                    "antialias": "supersample where the perspective shrinks (taps set by the most "
                                 "shrunk corner of the canvas); False: one bilinear sample a pixel "
                                 "(torchvision's perspective)"},
          doc="homography mapping startpoints onto endpoints (torchvision's perspective), or "
              "torchvision's RandomPerspective (distortion_scale, p) drawn per sample; canvas kept, "
              "boxes: enclosing box of the 4 corners mapped with the divide")
def perspective(ctx, op, inputs, args, draws):
    given = args["startpoints"] is not None or args["endpoints"] is not None
    if given and (args["startpoints"] is None or args["endpoints"] is None):
        raise ValueError("perspective: startpoints and endpoints go together")
    if given and args["distortion_scale"] is not None:
        raise ValueError("perspective: distortion_scale is for random corners; with startpoints "
                         "and endpoints it has no meaning")

    def plan(sizes, boxes):
        b = len(sizes)
        # drawn in every mode, so that the streams do not depend on the args
        u = np.concatenate([draws["corners"], draws["apply"]], 1)
        if given:
            start = _points(args["startpoints"], b, "startpoints")
            end = _points(args["endpoints"], b, "endpoints")
            p = per_sample(1.0 if args["p"] is None else args["p"], b)
        else:
            ds = per_sample(0.5 if args["distortion_scale"] is None else args["distortion_scale"], b)
            if ((ds < 0) | (ds > 1)).any():
                raise ValueError(f"perspective: distortion_scale must lie in [0, 1], got {ds}")
            start, end = random_perspective_points(u[:, :8], sizes, ds)
            p = per_sample(0.5 if args["p"] is None else args["p"], b)
        on = u[:, 8] < p
        if not given:
            # torchvision's corners [0, W - 1] coincide on a 1-pixel side, and on a tiny image
            # three drawn corners can fall on a line (no homography; torchvision renders a
            # least-squares guess): such a sample is left as it is. Any other draw is rendered,
            # as torchvision renders it, even one that folds a corner through the horizon
            on &= (sizes >= 2).all(1) & ~G.degenerate_quads(start, end)
        m = G.identity(b)
        if on.any():
            m[on] = (checked_homography(start[on], end[on], sizes[on]) if given
                     else G.homography(start[on], end[on]))
        return m, sizes, None

    return apply_geometry(ctx, op, inputs, plan, fill=args["fill"],
                          antialias=bool(args["antialias"]))


# ---- large-scale jitter / shortest side -----------------------------------------------------------
_ROUNDING = ("round", "trunc")


def _rounding(op, value):
    if value not in _ROUNDING:
        raise ValueError(f"{op.name}: rounding must be 'round' (Detectron2) or 'trunc' "
                         f"(torchvision's int()), got {value!r}")
    return value


def scale_jitter_plan(u, sizes, size, scale_range, rounding, crop, pad):
    """(matrices (B, 3, 3), out sizes (B, 2)) of large-scale jitter from 2 uniforms per sample.

    ``scale = lo + (hi - lo) u0``; the image is resized keeping its aspect ratio by
    ``min(th scale / h, tw scale / w)`` to ``round`` (Detectron2's ``ResizeScale``:
    ``np.round(size * output_scale)``, halves to even) or ``trunc`` (torchvision's
    ``ScaleJitter``: ``int(size * min(tw / w, th / h) * scale)``) of its size, at least 1.
    Then, with ``crop``, a window of at most ``(th, tw)`` at ``round(max(new - target, 0) u1)``
    (one uniform for both axes, as Detectron2's ``FixedSizeCrop``); with ``pad``, the canvas
    is padded at the bottom and right up to ``(th, tw)``."""
    th, tw = size
    lo, hi = scale_range
    h, w = sizes[:, 0].astype(np.float64), sizes[:, 1].astype(np.float64)
    scale = lo + (hi - lo) * u[:, 0]
    if rounding == "round":
        s = np.minimum(th * scale / h, tw * scale / w)
        nh, nw = np.round(h * s), np.round(w * s)
    else:
        r = np.minimum(tw / w, th / h) * scale
        nh, nw = np.trunc(h * r), np.trunc(w * r)
    nh, nw = np.maximum(nh, 1), np.maximum(nw, 1)
    m = G.scale(nw / w, nh / h)
    oh, ow = nh, nw
    if crop:
        oy = np.round(np.maximum(nh - th, 0) * u[:, 1])
        ox = np.round(np.maximum(nw - tw, 0) * u[:, 1])
        m = G.translate(-ox, -oy) @ m
        oh, ow = np.minimum(nh, th), np.minimum(nw, tw)
    if pad:
        oh, ow = np.maximum(oh, th), np.maximum(ow, tw)
    return m, np.stack([oh, ow], -1)


declare_kinds("scale_jitter", rounding=choice("round", "trunc"))
declare_ranges("scale_jitter", size=side(), scale_range=positive(1000.0, form='range'),
               fill=finite(form='seq'))
@register("scale_jitter", draws=(Draw("scale"), Draw("crop")), rule=_scale_jitter_rule, plans=True,
          **GEO,
          args={"size": None, "scale_range": (0.1, 2.0), "crop": True, "pad": True,
                "fill": 128.0, "rounding": "round", "antialias": True},
          arg_docs={"size": "the target (h, w): the scale is relative to fitting it, and the "
                            "output is cropped / padded to it",
                    "scale_range": "(min_scale, max_scale) of the uniform scale, per sample",
                    "crop": "crop a larger image to size at a random position (Detectron2's "
                            "FixedSizeCrop); False: torchvision's ScaleJitter (resize only)",
                    "pad": "pad a smaller image at the bottom and right up to size",
                    "fill": "the padding's value (Detectron2's pad_value 128)",
                    "rounding": "'round' (Detectron2's ResizeScale) or 'trunc' (torchvision)"},
          doc="large-scale jitter (LSJ): resize keeping the aspect ratio by a factor drawn in "
              "scale_range of fitting size, then crop and pad to size; fused")
def scale_jitter(ctx, op, inputs, args, draws):
    if args["size"] is None:
        raise ValueError("scale_jitter: size=(h, w) is required")
    size = pair(args["size"], "size")
    lo, hi = pair(args["scale_range"], "scale_range")
    if not 0 < lo <= hi:
        raise ValueError(f"scale_jitter: scale_range must be 0 < min <= max, got {(lo, hi)}")
    rounding = _rounding(op, args["rounding"])

    def plan(sizes, boxes):
        u = np.concatenate([draws["scale"], draws["crop"]], 1)
        m, out = scale_jitter_plan(u, sizes, size, (lo, hi), rounding, bool(args["crop"]),
                                   bool(args["pad"]))
        return m, out, None

    return apply_geometry(ctx, op, inputs, plan, fill=args["fill"],
                          antialias=bool(args["antialias"]))


def shortest_size_plan(choice, sizes, min_size, max_size, rounding):
    """(matrices, out sizes) of a shortest-side resize to ``min_size[choice]`` (B,), the
    longer side capped at ``max_size``.

    ``trunc`` (torchvision's ``RandomShortestSize``): ``r = s / min(h, w)``, ``r = min(r,
    max_size / max(h, w))``, ``new = int(size * r)``. ``round`` (Detectron2's
    ``ResizeShortestEdge.get_output_shape``): the short side becomes ``s`` and the other
    ``s / min(h, w) * long``; where the longer exceeds ``max_size`` both are scaled by
    ``max_size / longer``; then ``int(x + 0.5)``."""
    h, w = sizes[:, 0].astype(np.float64), sizes[:, 1].astype(np.float64)
    s = np.asarray(min_size, np.float64)[choice]
    if rounding == "trunc":
        r = s / np.minimum(h, w)
        if max_size is not None:
            r = np.minimum(r, float(max_size) / np.maximum(h, w))
        nh, nw = np.trunc(h * r), np.trunc(w * r)
    else:
        scale = s / np.minimum(h, w)
        nh = np.where(h < w, s, scale * h)
        nw = np.where(h < w, scale * w, s)
        if max_size is not None:
            big = np.maximum(nh, nw)
            k = np.where(big > max_size, float(max_size) / big, 1.0)
            nh, nw = np.where(big > max_size, nh * k, nh), np.where(big > max_size, nw * k, nw)
        nh, nw = np.floor(nh + 0.5), np.floor(nw + 0.5)
    nh, nw = np.maximum(nh, 1), np.maximum(nw, 1)
    return G.scale(nw / w, nh / h), np.stack([nh, nw], -1)


declare_kinds("random_shortest_size", rounding=choice("round", "trunc"))
declare_ranges("random_shortest_size", min_size=side(form='seq'), max_size=side(form='scalar'))
@register("random_shortest_size", draws=(Draw("choice"),), rule=_shortest_size_rule, plans=True,
          **GEO,
          args={"min_size": None, "max_size": None, "rounding": "trunc", "antialias": True},
          arg_docs={"min_size": "the shorter side's length, or a list to draw it from per sample",
                    "max_size": "cap of the longer side",
                    "rounding": "'trunc' (torchvision's RandomShortestSize) or 'round' "
                                "(Detectron2's ResizeShortestEdge)"},
          doc="multi-scale resize: shorter side drawn from min_size per sample, longer side at "
              "most max_size, aspect ratio kept; fused")
def random_shortest_size(ctx, op, inputs, args, draws):
    if args["min_size"] is None:
        raise ValueError("random_shortest_size: min_size (an int or a list) is required")
    sizes_list = np.atleast_1d(np.asarray(args["min_size"], np.float64)).reshape(-1)
    if len(sizes_list) == 0 or (sizes_list <= 0).any():
        raise ValueError(f"random_shortest_size: min_size must be positive, got {args['min_size']!r}")
    if args["max_size"] is not None and float(args["max_size"]) <= 0:
        raise ValueError(f"random_shortest_size: max_size must be positive, got {args['max_size']!r}")
    rounding = _rounding(op, args["rounding"])

    def plan(sizes, boxes):
        n = len(sizes_list)  # (SampleRNG.integers: uniform on [0, n))
        choice = np.minimum((draws["choice"][:, 0] * n).astype(np.int64), n - 1)
        m, out = shortest_size_plan(choice, sizes, sizes_list, args["max_size"], rounding)
        return m, out, None

    return apply_geometry(ctx, op, inputs, plan, antialias=bool(args["antialias"]))


# ---- DALI's warp_affine ---------------------------------------------------------------------------
def dali_affine(matrix, b, inverse_map):
    """detaug's (B, 3, 3) input -> output matrix from DALI's 2x3 ``matrix`` (6 values, or per
    sample (B, 6) / (B, 2, 3)). DALI maps the destination pixel centre ``pos + 0.5`` through it
    and its samplers take pixel centres at ``+ 0.5``: the continuous coordinates of
    docs/design.md, so no half-pixel shift is needed. ``inverse_map=True`` (DALI's default):
    the matrix maps output to input, and is inverted here."""
    a = np.asarray(matrix, np.float64)
    if a.size == 6:
        a = np.broadcast_to(a.reshape(1, 2, 3), (b, 2, 3))
    elif a.size == 6 * b:
        a = a.reshape(b, 2, 3)
    else:
        raise ValueError(f"warp_affine: matrix must hold 6 values (M11, M12, M13, M21, M22, M23), "
                         f"or 6 per sample; got shape {a.shape}")
    m = G.identity(b)
    m[:, :2, :] = a
    if not np.isfinite(m).all() or (np.abs(np.linalg.det(m)) < 1e-12).any():
        raise ValueError("warp_affine: matrix must be finite and invertible")
    return np.linalg.inv(m) if inverse_map else m


def _positional_matrix(inputs, kwargs):
    """DALI's ``fn.warp_affine(images, mtx)``: without ``matrix=`` a second input is DALI's
    matrix input (detaug's boxes come with ``matrix=`` given), so it becomes ``matrix=``; a
    number or list given there is the matrix itself."""
    if len(inputs) == 2 and kwargs.get("matrix") is None:
        return inputs[:1], {**kwargs, "matrix": inputs[1]}
    return inputs, kwargs


declare_ranges("warp_affine", matrix=finite(form='seq'), size=side(integer=False),
               fill_value=finite(form='seq'))
@register("warp_affine", rule=_warp_affine_rule, plans=_plans_warp_affine, **GEO,
          rewrite=_positional_matrix,
          args={"matrix": None, "size": None, "fill_value": None, "interp_type": None,
                "inverse_map": True, "dtype": None, "bytes_per_sample_hint": 0, "preserve": False},
          per_sample=("matrix",),
          hints={"bytes_per_sample_hint": "DALI's allocation tuning",
                 "preserve": "every op of the graph is kept"},
          arg_docs={"matrix": "DALI's 2x3 (M11, M12, M13, M21, M22, M23), per sample allowed (DALI's "
                              "mtx input goes here); output -> input with inverse_map",
                    "size": "the output (H, W); default the input's",
                    "fill_value": "the value outside the image; without it the border "
                                  "repeats, as DALI's (CPU only, not fused)",
                    "interp_type": "INTERP_LINEAR (default: bilinear, no antialias, as DALI) or "
                                   "INTERP_TRIANGULAR (antialiased); others raise",
                    "inverse_map": "True: matrix maps output to input (DALI's default); False: "
                                   "input to output",
                    "dtype": "only uint8 (the input's type)"},
          doc="DALI's warp_affine (continuous coordinates, pixel centres at +0.5, as DALI's); "
              "boxes follow; joins the fused chain")
def warp_affine(ctx, op, inputs, args):
    from ..core import types

    if any(not isinstance(v, (ImageBatch, BoxBatch)) for v in inputs):
        raise TypeError("warp_affine: takes (images[, boxes]) with matrix=, or DALI's "
                        "(images, mtx)")
    matrix = args["matrix"]
    if matrix is None:
        raise ValueError("warp_affine: matrix= is required")
    if args["dtype"] is not None and types.to_numpy_type(args["dtype"]) != np.uint8:
        raise NotImplementedError("warp_affine: dtype other than uint8 is not available here; "
                                  "normalize after the geometric ops instead")
    interp = "linear" if args["interp_type"] is None else types.interp_type(args["interp_type"], op.name)
    if isinstance(matrix, (list, tuple)) and matrix and np.ndim(matrix[0]) >= 1:
        matrix = np.stack([np.asarray(x, np.float64).reshape(-1) for x in matrix])

    def plan(sizes, boxes):
        b = len(sizes)
        m = dali_affine(matrix, b, bool(args["inverse_map"]))
        if args["size"] is None:
            out = sizes
        else:
            out = np.tile(np.round(np.asarray(pair(args["size"], "size"))), (b, 1))
        return m, out, None

    if args["fill_value"] is None:
        if interp != "linear":
            raise NotImplementedError("warp_affine: without fill_value (the border repeat) only "
                                      "INTERP_LINEAR is available; give fill_value= for "
                                      "INTERP_TRIANGULAR")
        return warp_border(ctx, op, inputs, plan,
                           lambda v: apply_geometry(ctx, op, [v], plan)[0])
    return apply_geometry(ctx, op, inputs, plan, fill=args["fill_value"],
                          antialias=interp == "triangular")
