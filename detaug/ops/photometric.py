"""Photometric ops: SSD's photometric distortion and grayscale as torchvision v2 computes them,
and DALI's linear colour ops (color_twist, hue, saturation: ColorTwist; brightness, contrast:
BrightnessContrast).

They consume pixels, so they end a pending geometric chain (its one warp runs first). Images are
HWC RGB, uint8 (kept uint8) or float32 (kept float32; torchvision's ops then take values in
[0, 1], DALI's contrast centre is 0.5). Random parameters are drawn per sample on the host from
the keyed streams (detaug/core/rng.py) and drive the CPU twin and the GPU kernel alike
(detaug/kernels/photometric.py has the exact math).
"""
from __future__ import annotations

import numpy as np

from ..graph import materialize as M
from ..graph.dispatch import launch, register_kernel
from ..core import shapes as S
from ..core.batch import ImageBatch
from ..kernels import photometric as kp
from .color import _DTYPES, _dtype, plans_uint8
from .geometry import pair, per_sample
from .registry import Draw, register
from ..graph.arg_check import declare_ranges, Num, count, finite, nonneg, prob

_DALI_HINTS = {"preserve": "DALI keeps an op whose output is unused; detaug runs every op in the "
                           "graph that an output needs",
               "bytes_per_sample_hint": "DALI's allocation tuning"}


def _rgb_images(ctx, op, v) -> ImageBatch:
    """The batch's pixels (its pending chain warped), checked: HWC, 3 channels, uint8 or float32."""
    if not isinstance(v, ImageBatch):
        raise TypeError(f"{op.name}: takes images, got {type(v).__name__}")
    img = M.images(v, ctx)
    if img.layout != "HWC":
        raise ValueError(f"{op.name}: takes HWC images, got {img.layout} (normalise to CHW after "
                         "the colour ops)")
    if img.batch_size and img.channels != 3:
        raise ValueError(f"{op.name}: takes 3-channel RGB images, got {img.channels} channels")
    if _image_dtype(img) not in (np.uint8, np.float32):
        raise ValueError(f"{op.name}: takes uint8 or float32 images, got {_image_dtype(img)}")
    return img


def _image_dtype(img: ImageBatch):
    return img.pixel_type


_STAGED = ("photometric_distort", "grayscale")  # one staged kernel (kernels/photometric.py)
register_kernel(_STAGED, "cpu", kp.photometric_numpy)
register_kernel(_STAGED, "gpu", kp.photometric_cupy)


@S.image_rule
def _grayscale_rule(img, a):
    """The input's canvas and dtype in num_output_channels channels."""
    return S.Img(None, img.hw or img.bound, int(a.get("num_output_channels") or 3), img.itemsize)


@S.image_rule
def _linear_rule(img, a):
    """The input's canvas in the output dtype (the input's unless dtype is given)."""
    if a.get("dtype") is None:
        return S.within(img, img.hw or img.bound)
    dtype = a["dtype"]
    try:
        size = np.dtype(_DTYPES[dtype if isinstance(dtype, type) else str(dtype)]).itemsize
    except KeyError:  # refused when the op runs
        return None
    return S.Img(None, img.hw or img.bound, img.channels, size)


def _probability(op, value, b, name="p"):
    p = per_sample(value, b)
    if np.any((p < 0) | (p > 1)) or np.any(np.isnan(p)):
        raise ValueError(f"{op.name}: {name} must be in [0, 1], got {value!r}")
    return p


def _range(op, args, name, lo_bound, hi_bound=np.inf):
    try:
        lo, hi = pair(args[name], name)
    except (TypeError, ValueError):
        raise ValueError(f"{op.name}: {name} must be a (min, max) pair, got {args[name]!r}") from None
    if not lo_bound <= lo <= hi <= hi_bound:
        raise ValueError(f"{op.name}: {name} {args[name]!r} must satisfy {lo_bound} <= min <= max"
                         + (f" <= {hi_bound}" if np.isfinite(hi_bound) else ""))
    return lo, hi


declare_ranges("photometric_distort", brightness=nonneg(form='range'),
               contrast=nonneg(form='range'), saturation=nonneg(form='range'), hue=Num(-0.5, 0.5,
               form='range'), p=prob())
def _distort_plan(op, args, draws, b, images=None):
    """The staged kernel's (iparams, fparams) of SSD's distortion, from the draws."""
    parts = ("brightness", "contrast", "saturation", "hue")
    ranges = [_range(op, args, "brightness", 0.0), _range(op, args, "contrast", 0.0),
              _range(op, args, "saturation", 0.0), _range(op, args, "hue", -0.5, 0.5)]
    p = _probability(op, args["p"], b)
    u = {k: v[:, 0] for k, v in draws.items()}  # one uniform each per sample
    factors = [lo + (hi - lo) * u[k] for k, (lo, hi) in zip(parts, ranges)]
    flags = np.zeros(b, np.int64)
    for k, bit in zip(parts, (kp.BRIGHTNESS, kp.CONTRAST, kp.SATURATION, kp.HUE)):
        flags |= np.where(u["apply_" + k] < p, bit, 0)
    flags |= np.where(u["contrast_first"] < 0.5, kp.CONTRAST_FIRST, 0)
    flags |= np.where(u["apply_permute"] < p, kp.PERMUTE, 0)
    perm = np.minimum((u["permutation"] * len(kp.PERMS)).astype(np.int64), len(kp.PERMS) - 1)
    return kp.photometric_params(b, flags, *factors, perm=perm)


@register("photometric_distort", rule=S.same_canvas, plans=True, host_plan=_distort_plan,
          draws=tuple(Draw(n) for n in (
              "apply_brightness", "brightness", "apply_contrast", "contrast", "apply_saturation",
              "saturation", "apply_hue", "hue", "contrast_first", "apply_permute", "permutation")),
          devices=("cpu", "gpu"), inputs=(1, 1), kind="color",
          args={"brightness": (0.875, 1.125), "contrast": (0.5, 1.5), "saturation": (0.5, 1.5),
                "hue": (-0.05, 0.05), "p": 0.5},
          per_sample=("p",),
          arg_docs={"brightness": "range of the brightness factor (adjust_brightness: x * b)",
                    "contrast": "range of the contrast factor (adjust_contrast: blend with the "
                                "image's mean grayscale)",
                    "saturation": "range of the saturation factor (adjust_saturation: blend with "
                                  "the pixel's grayscale)",
                    "hue": "range of the hue shift, in turns, within [-0.5, 0.5] (adjust_hue)",
                    "p": "probability of each part (brightness, contrast, saturation, hue, channel "
                         "permutation), drawn apart per sample"},
          output_spec="images of the input's dtype (uint8 or float32 in [0, 1]), same sizes",
          doc="SSD's photometric distortion as torchvision v2's RandomPhotometricDistort, per "
              "sample: brightness, contrast (before or after the saturation and hue, at random), "
              "saturation, hue, channel permutation, each with probability p")
def photometric_distort(ctx, op, inputs, args, params):
    return launch(ctx, op, _rgb_images(ctx, op, inputs[0]), *params)


def _grayscale_plan(op, args, draws, b, images=None):
    """The staged kernel's (iparams, fparams): grey where the draw is under p."""
    channels = args["num_output_channels"]
    if channels not in (1, 3):
        raise ValueError(f"{op.name}: num_output_channels must be 1 or 3, got {channels!r}")
    p = _probability(op, args["p"], b)
    gray = draws["apply"][:, 0] < p
    if channels == 1 and not gray.all():
        raise ValueError(f"{op.name}: num_output_channels=1 needs p=1 (a sample left in colour "
                         f"keeps 3 channels), got p={args['p']!r}")
    return kp.photometric_params(b, np.where(gray, kp.GRAY, 0), out_channels=channels)


declare_ranges("grayscale", p=prob(), num_output_channels=count(1, 3))
def _plans_grayscale(a, device) -> bool:
    """Planned ahead where it keeps 3 channels (a planned launch keeps its input's shapes)."""
    return a.get("num_output_channels") == 3


@register("grayscale", rule=_grayscale_rule, plans=_plans_grayscale, host_plan=_grayscale_plan,
          draws=(Draw("apply"),), devices=("cpu", "gpu"), inputs=(1, 1), kind="color",
          args={"p": 1.0, "num_output_channels": 3},
          per_sample=("p",),
          arg_docs={"p": "probability that a sample is turned grey (torchvision's RandomGrayscale); "
                         "1: every sample (Grayscale)",
                    "num_output_channels": "3 (grey in every channel) or 1; 1 needs p=1"},
          output_spec="images of the input's dtype, num_output_channels channels, same sizes",
          doc="0.2989 R + 0.587 G + 0.114 B (torchvision's rgb_to_grayscale: uint8 truncated), "
              "with probability p per sample, in 3 channels or 1")
def grayscale(ctx, op, inputs, args, params):
    return launch(ctx, op, _rgb_images(ctx, op, inputs[0]), *params)


# ---- DALI's colour twist and brightness / contrast families --------------------------------------
# color_twist, hue and saturation are DALI's ColorTwist (one YIQ map, values not rescaled between
# dtypes); brightness and contrast are DALI's BrightnessContrast kernels (the values not rescaled
# between dtypes either; brightness_shift in units of the output's range). All of them run as one
# per-sample affine map of RGB (one launch).
_DEFAULTS = {"brightness": 1.0, "contrast": 1.0, "saturation": 1.0, "hue": 0.0,
             "brightness_shift": 0.0, "contrast_center": None}
_DOCS = {"brightness": "factor >= 0 (0 black, 1 unchanged)",
         "contrast": "factor >= 0 about the middle of the range (128 for uint8, 0.5 for float; 0 "
                     "grey, 1 unchanged)",
         "saturation": "factor >= 0 (0 grey, 1 unchanged), scaling the YIQ chroma",
         "hue": "rotation of the YIQ chroma, in degrees",
         "brightness_shift": "added, in units of the output range (255 for uint8, 1 for float)",
         "contrast_center": "the level contrast keeps, in input units; None: the middle of the "
                            "input's range (128 for uint8, 0.5 for float)",
         "dtype": "output dtype: None keeps the input's; uint8 (types.UINT8) or float32 "
                  "(types.FLOAT)",
         "image_type": "colour space of the images: RGB only (types.RGB)"}
_FULL_RANGE = {np.dtype(np.uint8): 255.0, np.dtype(np.float32): 1.0}
_HALF_RANGE = {np.dtype(np.uint8): 128.0, np.dtype(np.float32): 0.5}


def _check_rgb(op, args):
    from ..core import types

    try:
        rgb = types.image_type(args["image_type"]) == "RGB"
    except ValueError:
        rgb = False
    if not rgb:
        raise ValueError(f"{op.name}: image_type {args['image_type']!r} is not supported: detaug's "
                         "colour ops take RGB images (types.RGB)")


def _dali_linear(ctx, op, inputs, args):
    """DALI's ColorTwist (color_twist, hue, saturation): out = brightness * (c0 + contrast *
    (YIQ twist(rgb) - c0)), c0 the middle of the input's range, not rescaled to the output dtype.
    DALI's BrightnessContrast (brightness, contrast): out = shift * R_out + brightness * (center
    + contrast * (x - center)), R_out the output dtype's full range (255, or 1 for float), with
    no factor for the input's range (DALI 2.4's documentation and its test reference
    ``bricon_ref``: a uint8 image asked for float keeps its 0..255 values)."""
    if "image_type" in args:
        _check_rgb(op, args)
    img = _rgb_images(ctx, op, inputs[0])
    b = img.batch_size
    vals = {k: per_sample(args[k] if k in args else d, b) for k, d in _DEFAULTS.items()
            if k != "contrast_center"}
    # (negative, NaN and infinite factors are refused by the declared ranges: graph/arg_check.py)
    in_dtype = _image_dtype(img)
    out_dtype = in_dtype if args["dtype"] is None else np.dtype(_dtype(op, args["dtype"]))
    if out_dtype not in _FULL_RANGE:
        raise ValueError(f"{op.name}: dtype {args['dtype']!r}: colour ops give uint8 or float32")
    if op.schema.name in ("brightness", "contrast"):
        center = args.get("contrast_center")
        center = _HALF_RANGE[in_dtype] if center is None else per_sample(center, b)
        norm = vals["brightness"]  # DALI: no input-range factor (bricon_ref)
        mats = np.zeros((b, 3, 4))
        mats[:, [0, 1, 2], [0, 1, 2]] = (norm * vals["contrast"])[:, None]
        mats[:, :, 3] = (vals["brightness_shift"] * _FULL_RANGE[out_dtype]
                         + norm * (center - vals["contrast"] * center))[:, None]
    else:
        mats = kp.color_twist_matrices(vals["brightness"], vals["contrast"], vals["saturation"],
                                       vals["hue"], _HALF_RANGE[in_dtype])
    return launch(ctx, op, img, mats, out_dtype)


_LINEAR = ("color_twist", "saturation", "hue", "brightness", "contrast")  # one affine map of RGB
register_kernel(_LINEAR, "gpu", kp.color_twist_cupy)
register_kernel(_LINEAR, "reference", kp.color_twist_numpy)
# OpenCV's transform, within a grey level of the twin (as the CPU warp is)
register_kernel(_LINEAR, "cpu", kp.color_twist_cv2)


def _register_dali(name, params, doc, image_type=True):
    args = {k: _DEFAULTS[k] for k in params}
    args.update({"dtype": None, **({"image_type": "RGB"} if image_type else {}), "preserve": False,
                 "bytes_per_sample_hint": 0})
    register(name, rule=_linear_rule, plans=plans_uint8, devices=("cpu", "gpu"), inputs=(1, 1),
             kind="color", args=args,
             per_sample=tuple(k for k in params), hints=_DALI_HINTS,
             arg_docs={k: _DOCS[k] for k in args if k in _DOCS},
             output_spec="3-channel images, same sizes, the input's dtype unless dtype is given",
             doc=doc)(_dali_linear)


_register_dali("color_twist", ("brightness", "contrast", "saturation", "hue"),
               "DALI's color_twist: hue (degrees) and saturation in YIQ, then contrast about the "
               "middle of the range and brightness, per sample, as one linear map")
_register_dali("saturation", ("saturation",), "DALI's saturation: the YIQ chroma scaled, per sample")
_register_dali("hue", ("hue",), "DALI's hue: the YIQ chroma rotated by hue degrees, per sample")
_register_dali("brightness", ("brightness", "brightness_shift"),
               "DALI's brightness: out = brightness_shift * R_out + brightness * x (R_out: 255 for "
               "uint8, 1 for float; no input-range factor, as DALI), per sample", image_type=False)
_register_dali("contrast", ("contrast", "contrast_center"),
               "DALI's contrast: out = c + contrast * (x - c), c = contrast_center (default 128 for "
               "uint8, 0.5 for float), converted to the output dtype (values kept, as DALI), "
               "per sample",
               image_type=False)

declare_ranges("brightness", brightness=nonneg(), brightness_shift=finite())
declare_ranges("contrast", contrast=nonneg(), contrast_center=finite())
declare_ranges("color_twist", brightness=nonneg(), contrast=nonneg(), saturation=nonneg(),
               hue=finite())
declare_ranges("hue", hue=finite())
declare_ranges("saturation", saturation=nonneg())
