"""DALI's displacement filters: ``water`` (a wave displacement in x and y) and ``sphere`` (the
image bulged onto a sphere). Each output pixel samples the input at a point computed from its
own indices (detaug/kernels/displace.py), not through a matrix, so the ops run on their own
(a pending geometric chain is run first) and take images only: a box cannot follow a
non-affine warp exactly, and a boxes input is refused by name. On the host (the NumPy twins)
and on the device (``displace.cu``, one launch per batch), uint8 or float32 HWC images, sizes
and dtype kept.
"""
from __future__ import annotations

import math

import numpy as np

from ..core import shapes as S
from ..core.batch import ImageBatch
from ..graph import materialize as M
from ..graph.arg_check import count, declare_ranges, finite
from ..graph.dispatch import launch, register_kernel
from ..kernels import displace as kd
from .geometry import per_sample
from .registry import register

register_kernel("water", "cpu", kd.water_numpy)
register_kernel("sphere", "cpu", kd.sphere_numpy)
register_kernel("water", "gpu", kd.water_cupy)
register_kernel("sphere", "gpu", kd.sphere_cupy)


def _images_only(name):
    """Trace-time check: one input (images); a second one (boxes) is refused by name."""
    def rewrite(inputs, kwargs):
        if len(inputs) > 1:
            raise TypeError(f"{name}: takes images only, got {len(inputs)} inputs: boxes cannot "
                            f"follow {name}'s displacement (it is not an affine map, so a box's "
                            "image is no box); apply it to the images alone")
        return inputs, kwargs
    return rewrite


def _linear(op, interp) -> bool:
    """True for INTERP_LINEAR, False for INTERP_NN (DALI's default); other filters raise."""
    if interp is None:
        return False
    v = str(getattr(interp, "value", interp)).lower().replace("interp_", "")
    if v not in ("nn", "linear"):
        raise NotImplementedError(f"{op.name}: interp_type {interp!r}: INTERP_NN or INTERP_LINEAR "
                                  "only, as DALI's displacement filters")
    return v == "linear"


def _common(ctx, op, v, args):
    """(images, linear, masks (B,), fills (B, C)) of a displacement filter."""
    if isinstance(v, (list, tuple, np.ndarray)) and all(
            isinstance(a, np.ndarray) and a.ndim == 3 for a in v):
        v = ImageBatch(v if isinstance(v, np.ndarray) else list(v), "cpu", "HWC")  # float HWC
    if not isinstance(v, ImageBatch):
        raise TypeError(f"{op.name}: takes images, got {type(v).__name__}")
    img = M.images(v, ctx)
    if img.layout != "HWC" or any(a.dtype not in (np.uint8, np.float32) for a in list(img.data[:1])):
        raise ValueError(f"{op.name}: takes uint8 or float32 HWC images")
    b = img.batch_size
    linear = _linear(op, args["interp_type"])
    masks = per_sample(args["mask"], b).astype(np.int64)
    fill = np.asarray(args["fill_value"], np.float64).reshape(-1)
    if fill.size != 1:
        raise ValueError(f"{op.name}: fill_value takes one number, got {args['fill_value']!r}")
    dtype = img.data[0].dtype if b else np.dtype(np.uint8)
    if dtype == np.uint8:
        if not 0 <= fill[0] <= 255:
            raise ValueError(f"{op.name}: fill_value must lie in 0..255 on uint8 images, "
                             f"got {args['fill_value']!r}")
        fill = np.floor(fill + 0.5)
    fills = np.broadcast_to(fill.astype(dtype), (b, img.channels if b else 1))
    return img, linear, masks, fills


COMMON_ARGS = {"interp_type": None, "fill_value": 0.0, "mask": 1}
COMMON_DOCS = {"interp_type": "DALI's: INTERP_NN (default: the pixel at floor of the point) or "
                              "INTERP_LINEAR (bilinear, pixel centres at +0.5)",
               "fill_value": "DALI's: the value of a sample tap outside the image (0..255 on "
                             "uint8 images)",
               "mask": "DALI's: 1 applies it to the sample, 0 copies it (per sample)"}
COMMON = dict(devices=("cpu", "gpu"), inputs=(1, 1), kind="color", rule=S.same_canvas,
              plans=False, output_spec="images of the input's dtype, same sizes",
              per_sample=("mask",))

declare_ranges("water", ampl_x=finite(), ampl_y=finite(), freq_x=finite(), freq_y=finite(),
               phase_x=finite(), phase_y=finite(), fill_value=finite(), mask=count(0, 1))


@register("water", **COMMON, rewrite=_images_only("water"),
          args={"ampl_x": 10.0, "ampl_y": 10.0, "freq_x": 2 * math.pi / 128,
                "freq_y": 2 * math.pi / 128, "phase_x": 0.0, "phase_y": 0.0, **COMMON_ARGS},
          arg_docs={"ampl_x": "DALI's: amplitude (pixels) of the wave moving x",
                    "ampl_y": "DALI's: amplitude (pixels) of the wave moving y",
                    "freq_x": "DALI's: frequency (radians a pixel of y) of the wave moving x",
                    "freq_y": "DALI's: frequency (radians a pixel of x) of the wave moving y",
                    "phase_x": "DALI's: phase (radians) of the wave moving x",
                    "phase_y": "DALI's: phase (radians) of the wave moving y", **COMMON_DOCS},
          doc="DALI's water: output pixel (x, y) samples the input at (x + ampl_x * sin(freq_x * y "
              "+ phase_x), y + ampl_y * cos(freq_y * x + phase_y)); images only")
def water(ctx, op, inputs, args):
    img, linear, masks, fills = _common(ctx, op, inputs[0], args)
    p = np.array([[args[k] for k in ("ampl_x", "ampl_y", "freq_x", "freq_y", "phase_x", "phase_y")]],
                 np.float32)
    params = np.broadcast_to(p, (img.batch_size, 6))
    return launch(ctx, op, img, params, linear, masks, fills, per_sample=(0, 2, 3))


declare_ranges("sphere", fill_value=finite(), mask=count(0, 1))


@register("sphere", **COMMON, rewrite=_images_only("sphere"), args=dict(COMMON_ARGS),
          arg_docs=COMMON_DOCS,
          doc="DALI's sphere: output pixel centre c samples the input at mid + (c - mid) * "
              "|c - mid| / d (mid the image's centre, d = int(max(W, H) / 2)); images only")
def sphere(ctx, op, inputs, args):
    img, linear, masks, fills = _common(ctx, op, inputs[0], args)
    return launch(ctx, op, img, linear, masks, fills, per_sample=(1, 2))
