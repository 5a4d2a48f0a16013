"""Pixel ops other than colour: gaussian blur, noise (gaussian, salt and pepper, shot), JPEG
compression and DALI's jitter. They take uint8 HWC images (a pending geometric chain is run
first), keep their sizes and dtype, and leave boxes alone (they take no boxes).

Random parameters are drawn per sample from the op's keyed stream; per-pixel noise comes from a
counter-based hash of a per-sample key (one draw) and the pixel's index (detaug/kernels/noise.py),
so the CPU twins and the CUDA kernels make the same noise.
"""
from __future__ import annotations

import io

import numpy as np

from ..core import shapes as S
from ..core.batch import ImageBatch
from ..graph import materialize as M
from ..graph.dispatch import launch, register_kernel
from ..kernels import blur as kbl
from ..kernels import noise as kn
from .geometry import per_sample
from .registry import Draw, register
from ..graph.arg_check import choice, declare_kinds, declare_ranges, MAX_SIDE, byte, count, finite, nonneg, positive, prob

# plans: their GPU bodies are one kernel over the images (graph/dispatch.py's launch), planned
# ahead where the images are
PIXEL = dict(devices=("cpu", "gpu"), inputs=(1, 1), kind="color", rule=S.same_canvas, plans=True,
             output_spec="uint8 images, same sizes")


def pixel_images(ctx, op, v) -> ImageBatch:
    """``v`` as uint8 HWC images with no pending geometry (the chain runs now)."""
    if not isinstance(v, ImageBatch):
        raise TypeError(f"{op.name}: takes images, got {type(v).__name__}")
    img = M.images(v, ctx)
    if img.layout != "HWC" or img.pixel_type != np.uint8:  # (no pixel read: planned images too)
        raise ValueError(f"{op.name}: takes uint8 HWC images; put normalize after it")
    return img


_NOISE = ("noise", "noise.gaussian", "noise.salt_and_pepper", "noise.shot")
register_kernel(_NOISE, "cpu", kn.noise_numpy)
register_kernel(_NOISE, "gpu", kn.noise_cupy)
register_kernel("jitter", "cpu", kn.jitter_numpy)
register_kernel("jitter", "gpu", kn.jitter_cupy)
register_kernel("gaussian_blur", "cpu", kbl.gaussian_blur_cv2)
register_kernel("gaussian_blur", "reference", kbl.gaussian_blur_numpy)
register_kernel("gaussian_blur", "gpu", kbl.gaussian_blur_cupy)


def drawn(op, name, value, u):
    """A parameter per sample: a (lo, hi) tuple or list is drawn uniformly with ``u`` (B,)
    uniforms; a number or a per-sample input (an array) is taken as it is."""
    if isinstance(value, (tuple, list)):
        if len(value) != 2:
            raise ValueError(f"{op.name}: {name} takes a number or a (lo, hi) range, got {value!r}")
        lo, hi = float(value[0]), float(value[1])
        if hi < lo:
            raise ValueError(f"{op.name}: {name} range ({lo}, {hi}) needs lo <= hi")
        return lo + (hi - lo) * u
    return per_sample(value, len(u))


KEY = (Draw("key", 1, "bits"),)  # the per-sample key of the per-pixel draws (kernels/noise.py)


# ---- gaussian blur ----------------------------------------------------------------------------
def _per_axis(op, name, value, b):
    """(B, 2) float64 (H, W) from a number or a pair (one value or one per axis), or from a
    per-sample input (an array: (B,) or (B, 2))."""
    if isinstance(value, np.ndarray) and value.ndim >= 1:
        a = np.asarray(value, np.float64).reshape(b, -1)
        if a.shape[1] in (1, 2):
            return np.broadcast_to(a, (b, 2)).copy()
    else:
        a = np.asarray(value, np.float64).reshape(-1)
        if a.size in (1, 2):
            return np.broadcast_to(a, (b, 2)).copy()
    raise ValueError(f"{op.name}: {name} takes one value or one per axis (2), got {value!r}")


def blur_plan(op, args, b, u):
    """(window (B, 2) int, sigma (B, 2) float64), (H, W) per sample, from the arguments (DALI's
    and torchvision's rules); ``u`` (B,) uniforms for sigma_range."""
    if args["kernel_size"] is not None and args["window_size"] is not None:
        raise ValueError(f"{op.name}: give kernel_size (torchvision's, (kx, ky)) or window_size "
                         "(DALI's, (h, w)), not both")
    if args["sigma"] is not None and args["sigma_range"] is not None:
        raise ValueError(f"{op.name}: give sigma (DALI's, per axis) or sigma_range (torchvision's "
                         "(min, max), drawn per sample), not both")
    win = None
    if args["kernel_size"] is not None:
        win = _per_axis(op, "kernel_size", args["kernel_size"], b)[:, ::-1].copy()  # (kx, ky)
        name = "kernel_size"
    elif args["window_size"] is not None:
        win = _per_axis(op, "window_size", args["window_size"], b)
        name = "window_size"
    if win is not None and (np.any(win < 1) or np.any(win % 2 != 1)):
        raise ValueError(f"{op.name}: {name} must be odd and positive, got {args[name]!r}")
    sigma = None
    if args["sigma_range"] is not None:
        lo, hi = (float(v) for v in args["sigma_range"])
        if not 0 < lo <= hi:
            raise ValueError(f"{op.name}: sigma_range {args['sigma_range']!r} needs 0 < min <= max")
        sigma = np.repeat((lo + (hi - lo) * u)[:, None], 2, 1)
    elif args["sigma"] is not None:
        sigma = _per_axis(op, "sigma", args["sigma"], b)
        if np.any(sigma < 0) or (win is None and np.any(sigma <= 0)):
            raise ValueError(f"{op.name}: sigma must be positive (0 only with a window_size, "
                             f"which then gives it), got {args['sigma']!r}")
    if sigma is None and win is None:
        raise ValueError(f"{op.name}: give sigma, sigma_range, window_size or kernel_size")
    if win is None:
        win = kbl.window_from_sigma(sigma)
    if sigma is None:
        sigma = kbl.sigma_from_window(win)
    else:  # DALI: a sigma of 0 where a window is given is computed from the window
        sigma = np.where(sigma > 0, sigma, kbl.sigma_from_window(win))
    return win.astype(np.int64), sigma


declare_ranges("gaussian_blur", sigma=nonneg(1024.0, form='pair'), window_size=count(1, 2049,
               form='pair'), kernel_size=count(1, 2049, form='pair'), sigma_range=positive(1024.0,
               form='range'), probability=prob())
def _gaussian_blur_plan(op, args, draws, b, images=None):
    """(wx, wy): each sample's separable weights (a one-tap 1 where it is not blurred)."""
    win, sigma = blur_plan(op, args, b, draws["sigma"][:, 0])
    on = draws["apply"][:, 0] < _fraction(op, "probability", per_sample(args["probability"], b))
    one = np.ones(1, np.float32)  # a one-tap kernel of weight 1 copies the sample exactly
    wy = [kbl.gaussian_weights(int(win[i, 0]), sigma[i, 0]) if on[i] else one for i in range(b)]
    wx = [kbl.gaussian_weights(int(win[i, 1]), sigma[i, 1]) if on[i] else one for i in range(b)]
    return wx, wy


@register("gaussian_blur", host_plan=_gaussian_blur_plan, draws=(Draw("sigma"), Draw("apply")),
          **PIXEL,
          args={"sigma": None, "window_size": None, "kernel_size": None, "sigma_range": None,
                "probability": 1.0},
          per_sample=("sigma", "window_size", "probability"),
          arg_docs={"sigma": "DALI's: standard deviation in pixels, one value or (sigma_h, "
                             "sigma_w), per sample; left out, 0.3 * ((window - 1) / 2 - 1) + 0.8",
                    "window_size": "DALI's: kernel diameter (odd), one value or (h, w); left "
                                   "out, 2 * ceil(3 * sigma) + 1",
                    "kernel_size": "torchvision's: kernel size (odd), one value or (kx, ky)",
                    "sigma_range": "torchvision GaussianBlur's sigma=(min, max): sigma drawn "
                                   "uniformly per sample, the same on both axes",
                    "probability": "chance that a sample is blurred (else it is copied)"},
          doc="Gaussian blur, sigma per sample (DALI's sigma / window_size or torchvision's "
              "kernel_size / sigma range); separable, borders reflected (torchvision's); "
              "OpenCV on the CPU (the NumPy twin with backend.set_cpu_warp('reference'))")
def gaussian_blur(ctx, op, inputs, args, params):
    return launch(ctx, op, pixel_images(ctx, op, inputs[0]), *params, per_sample=(0, 1))


# ---- noise ------------------------------------------------------------------------------------
def _fraction(op, name, v):
    if np.any((v < 0) | (v > 1)):
        raise ValueError(f"{op.name}: {name} must lie in [0, 1]")
    return v


NOISE_DEFAULTS = {"mode": "gaussian", "mean": 0.0, "std": 10.0, "amount": 0.05,
                  "salt_vs_pepper": 0.5, "per_channel": None, "probability": 1.0}


declare_kinds("noise", mode=choice("gaussian", "salt_and_pepper"))
declare_ranges("noise", mean=finite(), std=nonneg(255.0, form='range'), amount=prob(form='range'),
               salt_vs_pepper=prob(form='range'), probability=prob())
def _noise_plan(op, args, draws, b, images=None):
    """(keys, mode, params, per_channel) of the noise kernel."""
    keys = draws["key"][:, 0]
    mode = args["mode"]
    if mode not in ("gaussian", "salt_and_pepper"):
        raise ValueError(f"{op.name}: mode {mode!r}: expected 'gaussian' or 'salt_and_pepper' "
                         "(fn.noise.shot for shot noise)")
    other = ("amount", "salt_vs_pepper") if mode == "gaussian" else ("mean", "std")
    for k in other:  # an argument of the other mode is not ignored in silence
        v = args[k]
        if isinstance(v, np.ndarray) or v != NOISE_DEFAULTS[k]:
            raise ValueError(f"{op.name}: {k} is an argument of mode "
                             f"{'salt_and_pepper' if mode == 'gaussian' else 'gaussian'}, not of {mode!r}")
    on = draws["apply"][:, 0] < _fraction(op, "probability", per_sample(args["probability"], b))
    level, svp = draws["level"][:, 0], draws["salt_vs_pepper"][:, 0]
    params = np.zeros((b, 4))
    if mode == "gaussian":
        std = drawn(op, "std", args["std"], level)
        if np.any(std < 0):
            raise ValueError(f"{op.name}: std must be >= 0")
        params[:, 0] = np.where(on, per_sample(args["mean"], b), 0.0)
        params[:, 1] = np.where(on, std, 0.0)
    else:
        params[:, 0] = np.where(on, _fraction(op, "amount", drawn(op, "amount", args["amount"], level)), 0.0)
        params[:, 1] = _fraction(op, "salt_vs_pepper", drawn(op, "salt_vs_pepper", args["salt_vs_pepper"], svp))
        params[:, 2], params[:, 3] = 255.0, 0.0
    per_channel = (mode == "gaussian") if args["per_channel"] is None else bool(args["per_channel"])
    return keys, mode, params, per_channel


declare_ranges("noise.gaussian", mean=finite(), stddev=nonneg())
@register("noise", host_plan=_noise_plan,
          draws=(Draw("apply"), Draw("level"), Draw("salt_vs_pepper"), *KEY), **PIXEL,
          args=NOISE_DEFAULTS,
          per_sample=("mean", "std", "amount", "salt_vs_pepper", "probability"),
          arg_docs={"mode": "'gaussian' (mean, std) or 'salt_and_pepper' (amount, salt_vs_pepper)",
                    "mean": "gaussian: added to every value (pixel units)",
                    "std": "gaussian: standard deviation in pixel units (0..255); a (lo, hi) "
                           "range draws it uniformly per sample",
                    "amount": "salt_and_pepper: fraction of pixels replaced; a (lo, hi) range "
                              "draws it per sample",
                    "salt_vs_pepper": "salt_and_pepper: fraction of the replaced pixels that "
                                      "are salt (255), the rest pepper (0); a range draws it",
                    "per_channel": "draw per channel (True) or once per pixel for every channel "
                                   "(False); None: True for gaussian, False for salt_and_pepper",
                    "probability": "chance that a sample gets noise at all"},
          doc="additive gaussian noise (std per sample) or salt and pepper (amount, "
              "salt_vs_pepper per sample); per-pixel draws keyed, the same on CPU and GPU")
def noise(ctx, op, inputs, args, params):
    return launch(ctx, op, pixel_images(ctx, op, inputs[0]), *params, per_sample=(0, 2))


def _noise_gaussian_plan(op, args, draws, b, images=None):
    """(keys, mode, params, per_channel) of the noise kernel."""
    keys = draws["key"][:, 0]
    std = per_sample(args["stddev"], b)
    if np.any(std < 0):
        raise ValueError(f"{op.name}: stddev must be >= 0")
    params = np.zeros((b, 4))
    params[:, 0], params[:, 1] = per_sample(args["mean"], b), std
    return keys, "gaussian", params, True


@register("noise.gaussian", host_plan=_noise_gaussian_plan, draws=KEY, **PIXEL,
          args={"mean": 0.0, "stddev": 1.0},
          per_sample=("mean", "stddev"),
          arg_docs={"mean": "DALI's: mean of the noise (pixel units)",
                    "stddev": "DALI's: standard deviation of the noise (pixel units)"},
          doc="DALI's gaussian noise: out = x + N(mean, stddev) per element, rounded and clamped")
def noise_gaussian(ctx, op, inputs, args, params):
    return launch(ctx, op, pixel_images(ctx, op, inputs[0]), *params, per_sample=(0, 2))


def _noise_salt_and_pepper_plan(op, args, draws, b, images=None):
    """(keys, mode, params, per_channel) of the noise kernel."""
    keys = draws["key"][:, 0]
    params = np.zeros((b, 4))
    params[:, 0] = _fraction(op, "prob", per_sample(args["prob"], b))
    params[:, 1] = _fraction(op, "salt_vs_pepper", per_sample(args["salt_vs_pepper"], b))
    params[:, 2] = 255.0 if args["salt_val"] is None else per_sample(args["salt_val"], b)
    params[:, 3] = 0.0 if args["pepper_val"] is None else per_sample(args["pepper_val"], b)
    return keys, "salt_and_pepper", params, bool(args["per_channel"])


declare_ranges("noise.salt_and_pepper", prob=prob(), salt_vs_pepper=prob(), salt_val=finite(),
               pepper_val=finite())
@register("noise.salt_and_pepper", host_plan=_noise_salt_and_pepper_plan, draws=KEY, **PIXEL,
          args={"prob": 0.05, "salt_vs_pepper": 0.5, "salt_val": None, "pepper_val": None,
                "per_channel": False},
          per_sample=("prob", "salt_vs_pepper", "salt_val", "pepper_val"),
          arg_docs={"prob": "DALI's: probability of a value (pixel, or element with "
                            "per_channel) being replaced",
                    "salt_vs_pepper": "DALI's: probability that a replaced value is salt",
                    "salt_val": "DALI's: salt value (None: 255 for uint8)",
                    "pepper_val": "DALI's: pepper value (None: 0 for uint8)",
                    "per_channel": "DALI's: draw per channel (True) or per pixel (False)"},
          doc="DALI's salt and pepper noise (prob, salt_vs_pepper, salt_val, pepper_val per sample)")
def noise_salt_and_pepper(ctx, op, inputs, args, params):
    return launch(ctx, op, pixel_images(ctx, op, inputs[0]), *params, per_sample=(0, 2))


def _noise_shot_plan(op, args, draws, b, images=None):
    """(keys, mode, params, per_channel) of the noise kernel."""
    keys = draws["key"][:, 0]
    params = np.zeros((b, 4))
    params[:, 0] = per_sample(args["factor"], b)
    return keys, "shot", params, True


declare_ranges("noise.shot", factor=finite())
@register("noise.shot", host_plan=_noise_shot_plan, draws=KEY, **PIXEL, args={"factor": 20.0},
          per_sample=("factor",),
          arg_docs={"factor": "DALI's: out = poisson(x / factor) * factor (<= 0: no noise)"},
          doc="DALI's shot noise: out = poisson(x / factor) * factor, rounded and clamped "
              "(Poisson by inversion; a rounded normal from a mean of 32)")
def noise_shot(ctx, op, inputs, args, params):
    return launch(ctx, op, pixel_images(ctx, op, inputs[0]), *params, per_sample=(0, 2))


# ---- jitter -----------------------------------------------------------------------------------
def fill_bytes(op, name, value, b, c):
    """(B, C) uint8 fill from a number, one per channel, or a per-sample (B,) input; rounded half
    up and clamped to [0, 255]."""
    a = np.asarray(value, np.float64)
    if a.ndim == 1 and a.size == c and not isinstance(value, np.ndarray):
        a = np.broadcast_to(a, (b, c))
    elif a.ndim <= 1 and a.size in (1, b):
        a = np.broadcast_to(a.reshape(-1, 1), (b, c))
    elif a.shape != (b, c):
        raise ValueError(f"{op.name}: {name} takes one value or one per channel ({c}), got {value!r}")
    return np.floor(np.clip(a, 0, 255) + 0.5).astype(np.uint8)


declare_ranges("jitter", nDegree=count(1, MAX_SIDE), fill_value=byte(), mask=count(0, 1))
def _jitter_plan(op, args, draws, b, images):
    """(keys, nDegree, masks, fills) of the jitter kernel (fills in the images' channels)."""
    keys = draws["key"][:, 0]
    interp = args["interp_type"]
    if interp is not None and str(getattr(interp, "value", interp)).lower() not in ("nn", "interp_nn"):
        raise NotImplementedError(f"{op.name}: interp_type {args['interp_type']!r}: jitter moves "
                                  "whole pixels (INTERP_NN), as DALI's does")
    nd = int(args["nDegree"])
    if nd < 1:
        raise ValueError(f"{op.name}: nDegree must be >= 1, got {args['nDegree']!r}")
    if not isinstance(images, ImageBatch):
        raise TypeError(f"{op.name}: takes images, got {type(images).__name__}")
    masks = per_sample(args["mask"], b).astype(np.int64)
    fills = fill_bytes(op, "fill_value", args["fill_value"], b, images.channels)
    return keys, nd, masks, fills


@register("jitter", host_plan=_jitter_plan, roles={"plan_reads_images"}, draws=KEY, **PIXEL,
          args={"nDegree": 2, "fill_value": 0.0, "interp_type": None, "mask": 1},
          per_sample=("mask",),
          arg_docs={"nDegree": "DALI's: each pixel is taken from one displaced by "
                               "(rand mod nDegree) - nDegree // 2 in x and in y",
                    "fill_value": "DALI's: value where the displaced pixel lies outside",
                    "interp_type": "DALI's: INTERP_NN only (nearest pixel)",
                    "mask": "DALI's: 1 jitters the sample, 0 copies it (per sample)"},
          doc="DALI's jitter: each pixel replaced by a random neighbour within nDegree // 2")
def jitter(ctx, op, inputs, args, params):
    return launch(ctx, op, pixel_images(ctx, op, inputs[0]), *params, per_sample=(0, 2, 3))


# ---- JPEG -------------------------------------------------------------------------------------
JPEG_GPU = ("runs on the CPU only: nvImageCodec's Encoder writes its code streams to host "
            "memory, so a GPU round trip would copy every image to the host in the middle of the "
            "graph. Apply it to CPU images (fn.decoders.image(device='cpu') or the CPU backend), "
            "before the images go to the GPU")


def jpeg_roundtrip(img: np.ndarray, quality: int) -> np.ndarray:
    """``img`` (H, W, 1 or 3) uint8 encoded as JPEG with Pillow at ``quality`` (libjpeg's
    defaults: 4:2:0 chroma subsampling for RGB) and decoded again."""
    from PIL import Image

    gray = img.shape[2] == 1
    buf = io.BytesIO()
    Image.fromarray(img[..., 0] if gray else img).save(buf, format="JPEG", quality=int(quality))
    buf.seek(0)
    out = np.asarray(Image.open(buf).convert("L" if gray else "RGB"))
    return out[..., None] if gray else out


declare_ranges("jpeg_compression", quality=count(1, 100, form='range'), probability=prob())
@register_kernel("jpeg_compression", "cpu")
def jpeg_numpy(images, qualities, on) -> list:
    """Each image of ``images`` through :func:`jpeg_roundtrip` at its quality where ``on``, else
    copied."""
    return [jpeg_roundtrip(np.ascontiguousarray(im), q) if o else im.copy()
            for im, q, o in zip(images, qualities, on)]


@register("jpeg_compression", draws=(Draw("quality"), Draw("apply")), rule=S.same_canvas,
          plans=False, devices=("cpu",), inputs=(1, 1), kind="color",
          output_spec="uint8 images, same sizes",
          args={"quality": 50, "probability": 1.0}, per_sample=("quality", "probability"),
          aliases=("jpeg_compression_distortion",),
          unavailable={"gpu": JPEG_GPU},
          arg_docs={"quality": "JPEG quality 1..100: a number (DALI's, default 50), a (lo, hi) "
                               "range drawn per sample, both ends included (torchvision's JPEG), "
                               "or a per-sample input",
                    "probability": "chance that a sample is compressed (else it is copied)"},
          doc="JPEG compression artefacts: encode at a quality drawn per sample and decode "
              "(Pillow); CPU only")
def jpeg_compression(ctx, op, inputs, args, draws):
    img = pixel_images(ctx, op, inputs[0])
    b = img.batch_size
    u = draws["quality"][:, 0]
    on = draws["apply"][:, 0] < _fraction(op, "probability", per_sample(args["probability"], b))
    q = args["quality"]
    if isinstance(q, (tuple, list)):
        if len(q) != 2 or int(q[0]) > int(q[1]) or not 1 <= int(q[0]) <= int(q[1]) <= 100:
            raise ValueError(f"{op.name}: quality takes a number or a (lo, hi) range in 1..100 "
                             f"with lo <= hi, got {q!r}")
        lo, hi = int(q[0]), int(q[1])
        qs = np.minimum(lo + np.floor(u * (hi - lo + 1)).astype(np.int64), hi)
    else:
        qs = per_sample(q, b).astype(np.float64)
        if np.any(qs != np.round(qs)):
            raise ValueError(f"{op.name}: quality must be whole numbers, got {q!r}")
        qs = qs.astype(np.int64)
    if np.any((qs < 1) | (qs > 100)):
        raise ValueError(f"{op.name}: quality must lie in 1..100, got {q!r}")
    if b and img.channels not in (1, 3):
        raise ValueError(f"{op.name}: JPEG takes 1 or 3 channels, got {img.channels}")
    return launch(ctx, op, img, qs, on, per_sample=(0, 1))
