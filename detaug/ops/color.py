"""Colour ops. normalize and crop_mirror_normalize end the geometric chain and are fused into its
warp (one pass: sample, normalise, change layout and dtype); brightness_contrast and hsv take
uint8 images and keep them uint8."""
from __future__ import annotations

import numpy as np

from ..graph import materialize as M
from ..graph.dispatch import launch, register_kernel
from ..kernels import color as kc
from ..core import geometry as G
from ..core import shapes as S
from ..core.batch import ImageBatch
from .geometry import apply_geometry, crop_plan, per_sample, window_hw
from .registry import register
from ..graph.arg_check import (STR, Num, count, declare_kinds, declare_ranges, finite, nonneg,
                               positive, prob, side)

_DTYPES = {"float32": np.float32, "float16": np.float16, "uint8": np.uint8,
           np.float32: np.float32, np.float16: np.float16, np.uint8: np.uint8}


def _dtype(op, value):
    """float32 / float16 / uint8 from a string, a NumPy type or a DALIDataType (types.FLOAT)."""
    try:
        return _DTYPES[str(value) if not isinstance(value, type) else value]
    except KeyError:
        raise ValueError(f"{op.name}: dtype {value!r} is not available: float32 (types.FLOAT), "
                         "float16 (types.FLOAT16) or uint8 (types.UINT8)") from None


def _layout(value):
    from ..core import types

    return types.layout(value)


def _mean_std(args, channels):
    mean = np.broadcast_to(np.asarray(args["mean"], np.float64), (channels,)).copy()
    std = np.broadcast_to(np.asarray(args["std"], np.float64), (channels,)).copy()
    if np.any(std == 0):
        raise ValueError("std must be non-zero")
    return mean, std


def _itemsize(dtype) -> int:
    name = str(dtype).lower()
    return 2 if "16" in name else 1 if "uint8" in name else 4


@S.image_rule
def _normalize_rule(img, a):
    """The input's canvas in the output dtype (a fixed crop window: that canvas)."""
    dtype = a.get("output_dtype") if a.get("output_dtype") is not None else a.get("dtype")
    ch, itemsize = 4 if a.get("pad_output") else img.channels, _itemsize(dtype or "float32")
    crop = window_hw(a)
    if crop:
        return S.Img(crop, None, ch, itemsize)
    return S.Img(img.hw, None if img.hw else img.bound, ch, itemsize)


def _images(op, v) -> ImageBatch:
    if not isinstance(v, ImageBatch):
        raise TypeError(f"{op.name}: takes images, got {type(v).__name__}")
    return v


declare_ranges("normalize", mean=finite(form='seq'), std=positive(form='seq'),
               stddev=positive(form='seq'), scale=finite(), shift=finite(), epsilon=nonneg(),
               ddof=count(0), axes=Num(integer=True, form='seq'))
def _plans_normalize(a, device) -> bool:
    """Planned with the warp where mean and std are given (statistics of the pixels, DALI's
    defaults, need the pixels)."""
    return a["mean"] is not None and (a["std"] is not None or a["stddev"] is not None)


@register("normalize", rule=_normalize_rule, roles={"warp_epilogue"}, plans=_plans_normalize,
          devices=("cpu", "gpu"), inputs=(1, 1), kind="color",
          args={"mean": None, "std": None, "output_layout": "HWC", "dtype": "float32",
                "stddev": None, "axes": None, "axis_names": None, "batch": False, "scale": 1.0,
                "shift": 0.0, "epsilon": 0.0, "ddof": 0},
          output_spec="float32/float16 (B, H, W, C) or (B, C, H, W)",
          arg_docs={"mean": "per channel, pixel units; None: each sample's own mean (DALI)",
                    "std": "per channel; None: each sample's own standard deviation (DALI)",
                    "stddev": "DALI's name for std",
                    "axes": "DALI: axes the statistics reduce over (default all: one mean per "
                            "sample); (0, 1) / axis_names='HW' gives one per channel",
                    "batch": "DALI: statistics over the whole batch instead of per sample",
                    "epsilon": "DALI: added to the variance before its square root"},
          doc="(x - mean) / std * scale + shift, HWC or CHW, float32/float16; mean/std per channel "
              "(pixel units), or, left out, each sample's own statistics as DALI's normalize; "
              "given both, fused into the preceding geometric chain's warp")
def normalize(ctx, op, inputs, args):
    img = _images(op, inputs[0])
    std = args["std"] if args["std"] is not None else args["stddev"]
    if args["std"] is not None and args["stddev"] is not None:
        raise ValueError(f"{op.name}: give std or stddev (DALI's name), not both")
    scale, shift = float(args["scale"]), float(args["shift"])
    dtype, layout = _dtype(op, args["dtype"]), _layout(args["output_layout"])
    if args["mean"] is not None and std is not None:
        mean, std = _mean_std({"mean": args["mean"], "std": std}, img.channels)
        if scale == 0:
            raise ValueError(f"{op.name}: scale must be non-zero")
        # (x - m) / s * scale + shift == (x - (m - shift * s / scale)) / (s / scale)
        return M.images(img, ctx, mean=mean - shift * std / scale, std=std / scale, dtype=dtype,
                        layout=layout)
    return _standardize(ctx, op, img, args, std, scale, shift, dtype, layout)


def _reduce_axes(op, args) -> tuple:
    """Axes of an HWC sample that DALI's normalize reduces over (default: all of them)."""
    names = args["axis_names"]
    if names is not None:
        if set(str(names)) - set("HWC"):
            raise ValueError(f"{op.name}: axis_names {names!r}: images have axes H, W, C")
        return tuple("HWC".index(c) for c in str(names))
    if args["axes"] is None:
        return (0, 1, 2)
    return tuple(int(a) % 3 for a in np.atleast_1d(args["axes"]))


def _standardize(ctx, op, img, args, std, scale, shift, dtype, layout):
    """DALI's normalize where mean or stddev is left out: computed from the data (each sample's,
    or the batch's with batch=True) over the reduced axes, the variance with ``ddof`` and
    ``epsilon``: out = (x - mean) * scale / sqrt(var + epsilon) + shift."""
    axes = _reduce_axes(op, args)
    x = M.images(img, ctx, mean=np.zeros(img.channels), std=np.ones(img.channels), dtype=np.float32)
    xp = __import__("cupy") if x.device == "gpu" else np
    samples = [x.data[k] for k in range(x.batch_size)] if x.is_dense else list(x.data)
    given_mean = None if args["mean"] is None else xp.asarray(np.broadcast_to(
        np.asarray(args["mean"], np.float64), (img.channels,)), xp.float32)
    given_std = None if std is None else xp.asarray(np.broadcast_to(
        np.asarray(std, np.float64), (img.channels,)), xp.float32)

    def stats(arrays):
        a = arrays[0] if len(arrays) == 1 else None
        if a is None:  # batch statistics: the reduced axes of every sample together
            flat = xp.concatenate([xp.moveaxis(s, [*axes], list(range(len(axes)))).reshape(
                -1, *[s.shape[i] for i in range(3) if i not in axes]) for s in arrays])
            m = flat.mean(0, dtype=xp.float64, keepdims=False)
            v = ((flat - m) ** 2).sum(0) / max(flat.shape[0] - int(args["ddof"]), 1)
            shape = [1 if i in axes else arrays[0].shape[i] for i in range(3)]
            return m.reshape(shape), v.reshape(shape)
        m = a.mean(axis=axes, dtype=xp.float64, keepdims=True)
        n = int(np.prod([a.shape[i] for i in axes]))
        v = ((a - m) ** 2).sum(axis=axes, keepdims=True) / max(n - int(args["ddof"]), 1)
        return m, v

    batch_stats = stats(samples) if args["batch"] and samples else None
    out = []
    for s in samples:
        m, v = batch_stats or stats([s])
        if given_mean is not None:
            m = given_mean.reshape(1, 1, -1)
        inv = (1.0 / xp.sqrt(v + float(args["epsilon"]))) if given_std is None else 1.0 / given_std.reshape(1, 1, -1)
        if given_std is None and not args["epsilon"]:
            inv = xp.where(v > 0, inv, 0.0)  # a constant sample standardises to 0 (DALI: no inf)
        r = ((s - m) * (inv * scale) + shift).astype(dtype)
        out.append(xp.ascontiguousarray(r.transpose(2, 0, 1)) if layout == "CHW" else r)
    if samples and all(o.shape == out[0].shape for o in out):
        return ImageBatch(xp.stack(out), x.device, layout)
    return ImageBatch(out, x.device, layout)


declare_kinds("crop_mirror_normalize", out_of_bounds_policy=STR)  # DALI's other words: NotImplementedError
declare_ranges("crop_mirror_normalize", crop=side(integer=False), crop_h=side(integer=False,
               form='scalar'), crop_w=side(integer=False, form='scalar'), crop_pos_x=prob(),
               crop_pos_y=prob(), mirror=count(0, 1), mean=finite(form='seq'),
               std=positive(form='seq'), fill=finite(form='seq'), scale=finite(), shift=finite(),
               fill_values=finite(form='seq'))
@register("crop_mirror_normalize", rule=_normalize_rule, roles={"warp_epilogue"}, plans=True,
          devices=("cpu", "gpu"), inputs=(1, 2), kind="color",
          outputs=lambda n, a: n,
          args={"crop": None, "crop_h": None, "crop_w": None, "crop_pos_x": 0.5, "crop_pos_y": 0.5,
                "mirror": 0, "mean": 0.0, "std": 1.0, "output_layout": "CHW", "dtype": "float32",
                "fill": 0.0, "output_dtype": None, "image_type": None, "scale": 1.0, "shift": 0.0,
                "pad_output": False, "fill_values": None, "out_of_bounds_policy": None},
          arg_docs={"output_dtype": "DALI's older name for dtype (types.FLOAT, types.FLOAT16)",
                    "output_layout": "'CHW' / types.NCHW or 'HWC' / types.NHWC",
                    "crop_pos_x": "window anchor = round(pos * (W - crop_w)), halves rounded up "
                                  "(DALI's rounding)"},
          hints={"image_type": "DALI's older argument (RGB, BGR, GRAY: checked); the values do "
                               "not depend on it"},
          per_sample=("mirror", "crop_pos_x", "crop_pos_y", "crop", "crop_h", "crop_w"),
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

    if args["pad_output"]:
        raise NotImplementedError(f"{op.name}: pad_output=True (DALI's fourth channel) is not "
                                  "implemented in detaug")
    if args["out_of_bounds_policy"] not in (None, "pad"):
        raise NotImplementedError(f"{op.name}: out_of_bounds_policy="
                                  f"{args['out_of_bounds_policy']!r}: detaug fills a window that "
                                  "reaches outside the image ('pad')")
    if args["image_type"] is not None:
        from ..core import types

        types.image_type(args["image_type"])
    fill = args["fill"] if args["fill_values"] is None else args["fill_values"]
    dtype = _dtype(op, args["output_dtype"] if args["output_dtype"] is not None else args["dtype"])
    scale, shift = float(args["scale"]), float(args["shift"])
    outs = apply_geometry(ctx, op, inputs, plan, fill=fill)
    res = []
    for v in outs:
        if isinstance(v, ImageBatch):
            mean, std = _mean_std(args, v.channels)
            v = M.images(v, ctx, mean=mean - shift * std / scale, std=std / scale, dtype=dtype,
                         layout=_layout(args["output_layout"]))
        res.append(v)
    return tuple(res)


def _rgb(ctx, op, img) -> ImageBatch:
    """The batch's pixels (its pending chain warped), 3 channels."""
    img = M.images(_images(op, img), ctx)
    if img.batch_size and img.channels != 3:
        raise ValueError(f"{op.name}: colour ops take 3-channel images")
    return img


register_kernel("brightness_contrast", "cpu", kc.brightness_contrast_numpy)
register_kernel("brightness_contrast", "gpu", kc.brightness_contrast_cupy)
register_kernel("hsv", "cpu", kc.hsv_numpy)
register_kernel("hsv", "gpu", kc.hsv_cupy)

declare_ranges("brightness_contrast", brightness=nonneg(), contrast=nonneg(),
               contrast_center=finite(), brightness_shift=finite())


def _per_sample_args(*names):
    """A host plan: the arguments ``names``, one value per sample."""
    def plan(op, args, draws, b, images=None):
        return tuple(per_sample(args[k], b) for k in names)

    return plan


def _typed(op, img, dtype, maps):
    """DALI's ``dtype=`` of a colour op, on the host: each image mapped in float64 by
    ``maps[b](x)`` (its input uint8 or float), then converted to ``dtype``: uint8 rounded
    half up and clamped to [0, 255] (as detaug's uint8 kernels), a float type as it is (no
    clamp: DALI's float output keeps the input's 0..255 range)."""
    from ..core import types as _t

    dt = _t.to_numpy_type(dtype)
    if img.device == "gpu":
        raise NotImplementedError(f"{op.name}: dtype={dtype!r} runs on the CPU only for now "
                                  "(the GPU kernels write uint8)")
    if img.batch_size and img.channels != 3:
        raise ValueError(f"{op.name}: colour ops take 3-channel images")
    outs = []
    for k, im in enumerate(list(img.data)):
        x = maps[k](np.asarray(im, np.float64))
        if dt == np.uint8:
            x = np.clip(np.floor(x + 0.5), 0, 255)
        elif not np.issubdtype(dt, np.floating):
            raise ValueError(f"{op.name}: dtype {dtype!r}: detaug's colour ops give uint8 or float")
        outs.append(x.astype(dt))
    return ImageBatch(np.stack(outs) if img.is_dense else outs, img.device, img.layout)


def plans_uint8(a, device) -> bool:
    """The planning of a colour op whose GPU body is one kernel over the images (its launch
    planned ahead: graph/dispatch.py's KernelLaunch): where it gives uint8 (dtype None or uint8;
    a float output is made where it runs)."""
    from ..core import types as _t

    try:
        return a.get("dtype") is None or _t.to_numpy_type(a["dtype"]) == np.uint8
    except (TypeError, ValueError, KeyError):  # refused when the op runs
        return False


def _plain_uint8(img, dtype) -> bool:
    from ..core import types as _t

    return (dtype is None or _t.to_numpy_type(dtype) == np.uint8) and img.pixel_type == np.uint8


@register("brightness_contrast", rule=S.same_canvas, plans=plans_uint8,
          host_plan=_per_sample_args("brightness", "contrast", "brightness_shift"),
          devices=("cpu", "gpu"), inputs=(1, 1), kind="color",
          args={"brightness": 1.0, "contrast": 1.0, "contrast_center": 128.0, "dtype": None,
                "brightness_shift": 0.0},
          per_sample=("brightness", "contrast", "brightness_shift"),
          output_spec="uint8 images (or dtype), same sizes",
          arg_docs={"dtype": "DALI's output type: uint8 (default) or float (CPU only; "
                             "unclamped, in the input's 0..255 range), from uint8 or float images",
                    "brightness_shift": "DALI's shift, in units of the output's range (255 for "
                                        "uint8, 1 for float): added after the scaling (CPU only "
                                        "where not 0)"},
          doc="out = brightness_shift * R_out + brightness * (center + contrast * (x - center)), "
              "per sample")
def brightness_contrast(ctx, op, inputs, args, params):
    br, co, shift = params
    c = float(args["contrast_center"])
    img = _rgb(ctx, op, inputs[0])
    if not _plain_uint8(img, args["dtype"]) or np.any(shift):
        from ..core import types as _t

        r_out = 255.0 if _t.to_numpy_type(args["dtype"] or "uint8") == np.uint8 else 1.0
        return _typed(op, img, args["dtype"] or "uint8",
                      [lambda x, k=k: shift[k] * r_out + br[k] * (c + co[k] * (x - c))
                       for k in range(img.batch_size)])
    return launch(ctx, op, img, br, co, contrast_center=c)


declare_ranges("hsv", hue=finite(), saturation=nonneg(), value=nonneg())
@register("hsv", rule=S.same_canvas, plans=plans_uint8,
          host_plan=_per_sample_args("hue", "saturation", "value"), devices=("cpu", "gpu"),
          inputs=(1, 1), kind="color",
          args={"hue": 0.0, "saturation": 1.0, "value": 1.0, "dtype": None},
          per_sample=("hue", "saturation", "value"), output_spec="uint8 images (or dtype), same sizes",
          arg_docs={"dtype": "DALI's output type: uint8 (default) or float (CPU only; "
                             "unclamped, unrounded), from uint8 or float images"},
          doc="hue shift (degrees), saturation and value factors, per sample (DALI's YIQ form)")
def hsv(ctx, op, inputs, args, params):
    img = _rgb(ctx, op, inputs[0])
    if not _plain_uint8(img, args["dtype"]):
        mats = kc.hsv_matrices(*params).astype(np.float64)
        return _typed(op, img, args["dtype"] or "uint8",
                      [lambda x, k=k: x @ mats[k].T for k in range(img.batch_size)])
    return launch(ctx, op, img, *params)
