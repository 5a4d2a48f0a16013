"""DALI's ``fn.transforms.*``: per-sample 2-D affine matrices, 2x3 float32 ``[[a, b, tx],
[c, d, ty]]`` mapping a point ``p`` to ``A @ p + t`` (the convention of ``fn.warp_affine``'s
``matrix`` with ``inverse_map=False`` and of ``fn.coord_transform``'s ``MT``). Each op may take a
transform as its input: the result is the new one applied after it (``reverse_order=True``:
before it). ``transforms.combine`` applies its inputs in order. Host only ('cpu').
"""
from __future__ import annotations

import numpy as np

from ..ops.registry import register
from .tensors import arg_rows, samples_of
from ..graph import arg_check as AC

TRANSFORM = dict(devices=("cpu",), inputs=(0, 1), kind="other", input_names=("input",))
ORDER_DOC = {"reverse_order": "apply this transform before the input's (default: after it)"}


def _rows(v, b, width, name, op):
    return arg_rows(v, b, width, name, op, " (2-D transforms)")


def _homog(m23):
    """(B, 2, 3) -> (B, 3, 3)."""
    out = np.zeros((len(m23), 3, 3))
    out[:, :2] = m23
    out[:, 2, 2] = 1
    return out


def _finish(ctx, op, inputs, args, m33):
    """This op's (B, 3, 3) matrices composed with its input's, as (B, 2, 3) float32."""
    if inputs:
        prev = np.stack([np.asarray(s, np.float64).reshape(2, 3) for s in
                         samples_of(op, inputs[0], "input")])
        prev = _homog(prev)
        m33 = prev @ m33 if args["reverse_order"] else m33 @ prev
    return m33[:, :2].astype(np.float32)


def _about(m22, center):
    """(B, 3, 3) of the linear part ``m22`` (B, 2, 2) about ``center`` (B, 2)."""
    m = np.zeros((len(m22), 3, 3))
    m[:, :2, :2] = m22
    m[:, :2, 2] = center - np.einsum("bij,bj->bi", m22, center)
    m[:, 2, 2] = 1
    return m


AC.declare_ranges("transforms.translation", offset=AC.finite(form="seq"))
@register("transforms.translation", **TRANSFORM, args={"offset": None, "reverse_order": False},
          per_sample=("offset",),
          arg_docs={"offset": "(tx, ty), or one pair per sample", **ORDER_DOC},
          output_spec="(B, 2, 3) float32 affine matrices",
          doc="DALI's transforms.translation: the matrix [[1, 0, tx], [0, 1, ty]]")
def translation(ctx, op, inputs, args):
    if args["offset"] is None:
        raise ValueError(f"{op.name}: offset is required")
    b = ctx.batch_size
    m = np.tile(np.eye(3), (b, 1, 1))
    m[:, :2, 2] = _rows(args["offset"], b, 2, "offset", op)
    return _finish(ctx, op, inputs, args, m)


AC.declare_ranges("transforms.scale", scale=AC.finite(form="seq"), center=AC.finite(form="seq"),
                  ndim=AC.count(1, 3))
@register("transforms.scale", **TRANSFORM,
          args={"scale": None, "center": None, "ndim": None, "reverse_order": False},
          per_sample=("scale", "center"),
          arg_docs={"scale": "(sx, sy), or one pair per sample",
                    "center": "the fixed point (default the origin)",
                    "ndim": "the number of dimensions: 2 only (detaug's transforms are 2-D)",
                    **ORDER_DOC},
          output_spec="(B, 2, 3) float32 affine matrices",
          doc="DALI's transforms.scale: scale by (sx, sy) about center")
def scale(ctx, op, inputs, args):
    if args["scale"] is None:
        raise ValueError(f"{op.name}: scale is required")
    if args["ndim"] not in (None, 2):
        raise NotImplementedError(f"{op.name}: ndim={args['ndim']}: detaug's transforms are 2-D")
    b = ctx.batch_size
    s = _rows(args["scale"], b, 2, "scale", op)
    c = np.zeros((b, 2)) if args["center"] is None else _rows(args["center"], b, 2, "center", op)
    return _finish(ctx, op, inputs, args, _about(np.einsum("bi,ij->bij", s, np.eye(2)), c))


AC.declare_ranges("transforms.rotation", angle=AC.finite(), center=AC.finite(form="seq"),
                  axis=AC.finite(form="seq"))
@register("transforms.rotation", **TRANSFORM,
          args={"angle": None, "center": None, "axis": None, "reverse_order": False},
          per_sample=("angle", "center"),
          arg_docs={"angle": "degrees, or one per sample (e.g. fn.random.uniform)",
                    "center": "the fixed point (default the origin)", "axis": "3-D only: refused",
                    **ORDER_DOC},
          output_spec="(B, 2, 3) float32 affine matrices",
          doc="DALI's transforms.rotation: [[cos, -sin], [sin, cos]] of angle degrees about center")
def rotation(ctx, op, inputs, args):
    if args["angle"] is None:
        raise ValueError(f"{op.name}: angle is required")
    if args["axis"] is not None:
        raise NotImplementedError(f"{op.name}: axis= is for 3-D rotations; detaug's are 2-D")
    b = ctx.batch_size
    a = np.deg2rad(_rows(args["angle"], b, 1, "angle", op)[:, 0])
    c = np.zeros((b, 2)) if args["center"] is None else _rows(args["center"], b, 2, "center", op)
    r = np.stack([np.stack([np.cos(a), -np.sin(a)], 1), np.stack([np.sin(a), np.cos(a)], 1)], 1)
    return _finish(ctx, op, inputs, args, _about(r, c))


AC.declare_ranges("transforms.shear", shear=AC.finite(form="seq"),
                  angles=AC.Num(-90.0, 90.0, lo_open=True, hi_open=True, form="seq"),
                  center=AC.finite(form="seq"))
@register("transforms.shear", **TRANSFORM,
          args={"shear": None, "angles": None, "center": None, "reverse_order": False},
          per_sample=("shear", "angles", "center"),
          arg_docs={"shear": "(sx, sy): x += sx * y, y += sy * x", "angles": "the shear as "
                    "angles in degrees (shear = tan(angle))",
                    "center": "the fixed point (default the origin)", **ORDER_DOC},
          output_spec="(B, 2, 3) float32 affine matrices",
          doc="DALI's transforms.shear: [[1, sx], [sy, 1]] about center")
def shear(ctx, op, inputs, args):
    if (args["shear"] is None) == (args["angles"] is None):
        raise ValueError(f"{op.name}: give exactly one of shear and angles")
    b = ctx.batch_size
    s = (_rows(args["shear"], b, 2, "shear", op) if args["shear"] is not None
         else np.tan(np.deg2rad(_rows(args["angles"], b, 2, "angles", op))))
    c = np.zeros((b, 2)) if args["center"] is None else _rows(args["center"], b, 2, "center", op)
    m = np.stack([np.stack([np.ones(b), s[:, 0]], 1), np.stack([s[:, 1], np.ones(b)], 1)], 1)
    return _finish(ctx, op, inputs, args, _about(m, c))


AC.declare_ranges("transforms.crop", from_start=AC.finite(form="seq"),
                  from_end=AC.finite(form="seq"), to_start=AC.finite(form="seq"),
                  to_end=AC.finite(form="seq"))
@register("transforms.crop", **TRANSFORM,
          args={"from_start": (0.0, 0.0), "from_end": (1.0, 1.0), "to_start": (0.0, 0.0),
                "to_end": (1.0, 1.0), "absolute": False, "reverse_order": False},
          per_sample=("from_start", "from_end", "to_start", "to_end"),
          arg_docs={"from_start": "the source box's start", "from_end": "its end",
                    "to_start": "the destination box's start", "to_end": "its end",
                    "absolute": "order each box's start and end (min, max) first", **ORDER_DOC},
          output_spec="(B, 2, 3) float32 affine matrices",
          doc="DALI's transforms.crop: the matrix that maps the box [from_start, from_end] onto "
              "[to_start, to_end]")
def crop(ctx, op, inputs, args):
    b = ctx.batch_size
    fs, fe, ts, te = (_rows(args[k], b, 2, k, op) for k in ("from_start", "from_end",
                                                            "to_start", "to_end"))
    if args["absolute"]:
        fs, fe = np.minimum(fs, fe), np.maximum(fs, fe)
        ts, te = np.minimum(ts, te), np.maximum(ts, te)
    if (fe == fs).any():
        raise ValueError(f"{op.name}: the source box is empty")
    s = (te - ts) / (fe - fs)
    m = np.zeros((b, 3, 3))
    m[:, 0, 0], m[:, 1, 1], m[:, 2, 2] = s[:, 0], s[:, 1], 1
    m[:, :2, 2] = ts - fs * s
    return _finish(ctx, op, inputs, args, m)


@register("transforms.combine", devices=("cpu",), inputs=(2, 64), kind="other",
          input_names=("input0",), args={"reverse_order": False}, arg_docs=dict(ORDER_DOC),
          output_spec="(B, 2, 3) float32 affine matrices",
          doc="DALI's transforms.combine: its input transforms applied one after another (the "
              "first one first)")
def combine(ctx, op, inputs, args):
    mats = [_homog(np.stack([np.asarray(s, np.float64).reshape(2, 3)
                             for s in samples_of(op, v, f"input {k}")]))
            for k, v in enumerate(inputs)]
    out = mats[0]
    for m in mats[1:]:
        out = out @ m if args["reverse_order"] else m @ out
    return out[:, :2].astype(np.float32)
