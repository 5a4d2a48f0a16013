"""Colour ops. normalize and crop_mirror_normalize end the geometric chain and are fused into its
warp (one pass: sample, normalise, change layout and dtype); brightness_contrast and hsv take
uint8 images and keep them uint8."""
from __future__ import annotations

import numpy as np

from .. import geometry as G
from ..batch import ImageBatch
from .geometry import apply_geometry, crop_plan, per_sample
from .registry import register

_DTYPES = {"float32": np.float32, "float16": np.float16, "uint8": np.uint8,
           np.float32: np.float32, np.float16: np.float16, np.uint8: np.uint8}


def _mean_std(args, channels):
    mean = np.broadcast_to(np.asarray(args["mean"], np.float64), (channels,)).copy()
    std = np.broadcast_to(np.asarray(args["std"], np.float64), (channels,)).copy()
    if np.any(std == 0):
        raise ValueError("std must be non-zero")
    return mean, std


def _images(op, v) -> ImageBatch:
    if not isinstance(v, ImageBatch):
        raise TypeError(f"{op.name}: takes images, got {type(v).__name__}")
    return v


@register("normalize", devices=("cpu", "gpu"), inputs=(1, 1), kind="color",
          args={"mean": 0.0, "std": 1.0, "output_layout": "HWC", "dtype": "float32"},
          output_spec="float32/float16 (B, H, W, C) or (B, C, H, W)",
          doc="(x - mean) / std per channel (pixel units), HWC or CHW, float32/float16; fused "
              "into the preceding geometric chain's warp")
def normalize(ctx, op, inputs, args):
    img = _images(op, inputs[0])
    mean, std = _mean_std(args, img.channels)
    return img.materialize(ctx, mean=mean, std=std, dtype=_DTYPES[args["dtype"]],
                           layout=args["output_layout"])


@register("crop_mirror_normalize", devices=("cpu", "gpu"), inputs=(1, 2), kind="color",
          outputs=lambda n, a: n,
          args={"crop": None, "crop_h": None, "crop_w": None, "crop_pos_x": 0.5, "crop_pos_y": 0.5,
                "mirror": 0, "mean": 0.0, "std": 1.0, "output_layout": "CHW", "dtype": "float32",
                "fill": 0.0},
          per_sample=("mirror", "crop_pos_x", "crop_pos_y"),
          output_spec="normalised images (and boxes, mirrored/cropped with them)",
          doc="DALI's crop + mirror (per sample) + normalize + layout in one pass; boxes follow")
def crop_mirror_normalize(ctx, op, inputs, args):
    def plan(sizes, boxes):
        b = len(sizes)
        if any(args[k] is not None for k in ("crop", "crop_h", "crop_w")):
            m, out = crop_plan(args, sizes)
        else:
            m, out = G.identity(b), sizes.astype(np.float64)
        mirror = per_sample(args["mirror"], b)
        m = G.flip(out[:, 1], out[:, 0], mirror, np.zeros(b)) @ m
        return m, out, None

    outs = apply_geometry(ctx, op, inputs, plan, fill=args["fill"])
    res = []
    for v in outs:
        if isinstance(v, ImageBatch):
            mean, std = _mean_std(args, v.channels)
            v = v.materialize(ctx, mean=mean, std=std, dtype=_DTYPES[args["dtype"]],
                              layout=args["output_layout"])
        res.append(v)
    return tuple(res)


def _color(ctx, op, img, numpy_fn, cupy_fn, *params):
    img = _images(op, img).materialize(ctx)
    if img.batch_size and img.channels != 3:
        raise ValueError(f"{op.name}: colour ops take 3-channel images")
    data = img.data
    if img.device == "gpu":
        out = cupy_fn(data, *params, stream=ctx.stream)
    else:
        out = numpy_fn(data, *params)
    return ImageBatch(out, img.device, img.layout)


@register("brightness_contrast", devices=("cpu", "gpu"), inputs=(1, 1), kind="color",
          args={"brightness": 1.0, "contrast": 1.0, "contrast_center": 128.0},
          per_sample=("brightness", "contrast"), output_spec="uint8 images, same sizes",
          doc="out = brightness * (center + contrast * (x - center)), per sample")
def brightness_contrast(ctx, op, inputs, args):
    from ..kernels import color as kc

    b = inputs[0].batch_size
    return _color(ctx, op, inputs[0],
                  lambda d, br, co: kc.brightness_contrast_numpy(d, br, co, contrast_center=args["contrast_center"]),
                  lambda d, br, co, stream=None: kc.brightness_contrast_cupy(
                      d, br, co, contrast_center=args["contrast_center"], stream=stream),
                  per_sample(args["brightness"], b), per_sample(args["contrast"], b))


@register("hsv", devices=("cpu", "gpu"), inputs=(1, 1), kind="color",
          args={"hue": 0.0, "saturation": 1.0, "value": 1.0},
          per_sample=("hue", "saturation", "value"), output_spec="uint8 images, same sizes",
          doc="hue shift (degrees), saturation and value factors, per sample (DALI's YIQ form)")
def hsv(ctx, op, inputs, args):
    from ..kernels import color as kc

    b = inputs[0].batch_size
    return _color(ctx, op, inputs[0], kc.hsv_numpy, kc.hsv_cupy, per_sample(args["hue"], b),
                  per_sample(args["saturation"], b), per_sample(args["value"], b))
