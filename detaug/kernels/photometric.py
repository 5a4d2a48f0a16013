"""Photometric kernels on HWC RGB images (uint8, or float32 in [0, 1]): torchvision's staged
colour adjustments (SSD's photometric distortion, grayscale) and DALI's colour twist.

**Staged adjustments** (:func:`photometric_numpy`, kernels ``photometric_*`` of
``photometric.cu``) follow torchvision v2's functional kernels step by step, in float32, each
step clamped to the dtype's range and, for uint8, cast back (truncated) as torchvision does:

* brightness ``b``: ``x * b`` (``adjust_brightness``);
* contrast ``c``: ``x * c + m * (1 - c)``, ``m`` the image's mean grayscale (uint8: of the
  floored grayscale) at that step (``adjust_contrast``);
* saturation ``s``: ``x * s + g * (1 - s)``, ``g`` the pixel's grayscale (uint8: floored)
  (``adjust_saturation``);
* hue ``h`` (a fraction of a turn, ``[-0.5, 0.5]``): RGB -> HSV (uint8 scaled by 1/255),
  ``H = (H + h) mod 1``, HSV -> RGB (uint8: ``trunc(x * 255.999)``) (``adjust_hue``);
* channel permutation: ``out[c] = in[perm[c]]`` (``permute_channels``), one of :data:`PERMS`;
* grayscale: ``0.2989 R + 0.587 G + 0.114 B`` (uint8: truncated) in 1 or 3 channels
  (``rgb_to_grayscale``).

Grayscale values are summed left to right in float32. Each step runs where its bit is set in a
sample's ``flags``, in the order of ``RandomPhotometricDistort``: brightness, contrast (here when
``CONTRAST_FIRST``), saturation, hue, contrast (here otherwise), permutation, grayscale. The
twin does every float operation in float32 in the kernel's order (uint8 steps through tables of
the same float32 values), and the kernel is compiled without fused multiply-adds, so the two
agree bit for bit; the contrast mean is an integer sum (floored grayscale, or float grayscale in
fixed point 2^-24), the same in any order, so the device's atomics give the same batch every run.

**Colour twist** (:func:`color_twist_numpy`, kernels ``color_twist_<in>_<out>``): one affine map
``out = M @ rgb + offset`` per sample (:func:`color_twist_matrices`, DALI's composition); a uint8
output is rounded half up and clamped to ``[0, 255]``, a float output is not clamped (DALI). The
twin computes in float64, the kernel in float32: uint8 results may differ by one grey level.

A batch is a dense ``(B, H, W, 3)`` array or a list of ``(H, W, 3)`` arrays of their own sizes;
the output has the same form, in new memory (inputs are never written). Per-sample parameters
are ``(B,)`` arrays (a scalar is broadcast).
"""
from __future__ import annotations

import cv2
import numpy as np

from ..core.backend import upload_many
from .color import RGB_TO_YIQ, YIQ_TO_RGB
from .launch import get_kernel, launch

_SRC = "photometric.cu"
_OPTIONS = ("-std=c++17", "--fmad=false")
_BLOCK = 256
_MAX_GRID_X = 1024
_MAX_GRID_Y = 65535
_REDUCE_PIXELS_PER_THREAD = 16

BRIGHTNESS, CONTRAST, CONTRAST_FIRST, SATURATION, HUE, PERMUTE, GRAY = 1, 2, 4, 8, 16, 32, 64
# The six permutations of (0, 1, 2) in lexicographic order (photometric.cu's PD_PERMS).
PERMS = np.array([[0, 1, 2], [0, 2, 1], [1, 0, 2], [1, 2, 0], [2, 0, 1], [2, 1, 0]], np.int64)
GRAY_WEIGHTS = np.array([0.2989, 0.587, 0.114], np.float32)

_F = np.float32
_FIXED = 16777216.0  # 2^24: the fixed point of float images' grayscale sums (photometric.cu PD_FIXED)


# ----------------------------------------------------------------------------- batch helpers


def _as_list(images, dtypes=(np.uint8, np.float32)):
    """(list of (H, W, 3) arrays, dense?, dtype) after checking layout and dtype."""
    dense = not isinstance(images, (list, tuple))
    if dense and images.ndim != 4:
        raise ValueError(f"a dense batch must be (B, H, W, 3), got shape {images.shape}")
    items = list(images) if not dense else [images[i] for i in range(images.shape[0])]
    dtype = np.dtype(images.dtype if dense else (items[0].dtype if items else np.uint8))
    for i, im in enumerate(items):
        if im.ndim != 3 or im.shape[2] != 3:
            raise ValueError(f"sample {i}: expected (H, W, 3) RGB, got shape {im.shape}")
        if im.dtype not in dtypes or im.dtype != dtype:
            raise ValueError(f"sample {i}: expected {' or '.join(np.dtype(d).name for d in dtypes)} "
                             f"(one dtype for the batch), got {im.dtype}")
    return items, dense, dtype


def _per_sample(value, b, dtype=np.float64):
    a = np.asarray(value, dtype=dtype)
    if a.ndim > 1 or (a.ndim == 1 and a.shape[0] != b):
        raise ValueError(f"per-sample parameter must be a scalar or ({b},), got {a.shape}")
    return np.ascontiguousarray(np.broadcast_to(a, (b,)))


def _pack(outs, dense, like_shape, dtype, channels):
    if not dense:
        return outs
    if outs:
        return np.stack(outs)
    return np.empty(tuple(like_shape[:3]) + (channels,), dtype)


def photometric_params(b, flags, brightness=1.0, contrast=1.0, saturation=1.0, hue=0.0, perm=0,
                       out_channels=3):
    """The kernel's per-sample parameters: ``iparams (B, 4) int32`` [flags, permutation index,
    output channels, 0] and ``fparams (B, 8) float32`` [b, c, 1 - c, s, 1 - s, h, 0, 0], where
    ``1 - c`` and ``1 - s`` are computed in float64 before rounding (torchvision's ``alpha``)."""
    flags = _per_sample(flags, b, np.int64)
    perm = _per_sample(perm, b, np.int64)
    if np.any((perm < 0) | (perm >= len(PERMS))):
        raise ValueError(f"permutation index must be in 0..{len(PERMS) - 1}")
    if out_channels not in (1, 3):
        raise ValueError(f"out_channels must be 1 or 3, got {out_channels}")
    if out_channels == 1 and np.any((flags & GRAY) == 0):
        raise ValueError("a 1-channel output needs every sample turned to grayscale")
    c, s = _per_sample(contrast, b), _per_sample(saturation, b)
    ip = np.zeros((b, 4), np.int32)
    ip[:, 0], ip[:, 1], ip[:, 2] = flags, perm, out_channels
    fp = np.zeros((b, 8), np.float32)
    fp[:, 0], fp[:, 1], fp[:, 2] = _per_sample(brightness, b), c, 1.0 - c
    fp[:, 3], fp[:, 4], fp[:, 5] = s, 1.0 - s, _per_sample(hue, b)
    return ip, fp


# ----------------------------------------------------------------------------- NumPy twins


_LEVELS = np.arange(256, dtype=np.float32)
_GRAY_LUT = _LEVELS[None, :] * GRAY_WEIGHTS[:, None]          # uint8 v -> v * w_c, as float32
_GRAY_LUT_3 = np.ascontiguousarray(_GRAY_LUT.T[None])            # (1, 256, 3): cv2.LUT per channel
_SEL = np.array([[0, 3, 1], [2, 0, 1], [1, 0, 3], [1, 2, 0], [3, 1, 0], [0, 1, 2]])  # (v, p, q, t)


def _settle(x, u8):
    x = np.minimum(np.maximum(x, _F(0)), _F(255) if u8 else _F(1))
    return np.floor(x) if u8 else x


def _gray(x):
    """0.2989 R + 0.587 G + 0.114 B summed left to right in float32; uint8 x through exact
    per-level product tables (the same float32 products)."""
    if x.dtype == np.uint8:
        p = _lut(x, _GRAY_LUT_3)
        return (p[..., 0] + p[..., 1]) + p[..., 2]
    return x[..., 0] * GRAY_WEIGHTS[0] + x[..., 1] * GRAY_WEIGHTS[1] + x[..., 2] * GRAY_WEIGHTS[2]


def _levels(x, lut):
    """uint8 x through a 256-entry float32 table of settled values (every uint8 step ends on an
    integer: the table holds exactly what the float32 step gives for each level)."""
    return _lut(x, _settle(lut, True).astype(np.uint8))


def _lut(x, table):
    """``table[x]`` for uint8 (H, W, 3) x: OpenCV's LUT (a lookup, no arithmetic), per channel
    where the table has 3 channels; NumPy indexing for an empty image."""
    if x.size == 0:
        return table.reshape(256, -1)[x, np.arange(3) if table.ndim == 3 else 0]
    return cv2.LUT(np.ascontiguousarray(x), table).reshape(x.shape)


def _brightness(x, b, u8):
    return _levels(x, _LEVELS * b) if u8 else _settle(x * b, False)


def _contrast(x, fp, u8):
    """Blend with the mean grayscale: uint8, of the floored grayscale; float, of the grayscale in
    fixed point (round(g * 2^24)). Both are integer sums, exact in any order (the kernel's too)."""
    g = _gray(x)
    if u8:
        total = float(np.floor(g).astype(np.int64).sum())
    else:
        total = float(np.rint(g.astype(np.float64) * _FIXED).astype(np.int64).sum()) * (1.0 / _FIXED)
    other = _F(total / max(g.size, 1)) * fp[2]
    return _levels(x, _LEVELS * fp[1] + other) if u8 else _settle(x * fp[1] + other, False)


def _saturation(x, s, one_minus, u8):
    g = _gray(x)
    if u8:
        g = np.floor(g)
    v = x.astype(np.float32) * s + (g * one_minus)[..., None]
    return _settle(v, u8).astype(x.dtype)


def _hue(x, factor, u8):
    """torchvision's _rgb_to_hsv / _hsv_to_rgb in float32, photometric.cu's pd_hue (exact
    equivalents where faster: fmod(a, 1) for a in [5/6, 11/6] is a - (a >= 1))."""
    shape = x.shape
    planes = np.ascontiguousarray(x.reshape(-1, 3).T, np.float32)
    if u8:
        planes *= _F(1.0 / 255.0)
    r, g, b = planes
    maxc, minc = np.maximum(r, np.maximum(g, b)), np.minimum(r, np.minimum(g, b))
    eqc = maxc == minc
    rng = maxc - minc
    s = rng / np.where(eqc, _F(1), maxc)
    div = np.where(eqc, _F(1), rng)
    rc, gc, bc = (maxc - r) / div, (maxc - g) / div, (maxc - b) / div
    on_r = maxc == r
    h = (gc + _F(4)) - rc
    np.copyto(h, (rc + _F(2)) - bc, where=(maxc == g) & ~on_r)
    np.copyto(h, bc - gc, where=on_r)
    a = h * _F(1.0 / 6.0) + _F(1)
    h = a - (a >= _F(1)).astype(np.float32)
    h = h + factor
    h = h - np.floor(h)
    h6 = h * _F(6)
    fi = np.floor(h6)
    f = h6 - fi
    i = fi.astype(np.intp)
    i[i >= 6] -= 6
    sxf, oms = s * f, _F(1) - s
    vpqt = np.empty((maxc.size, 4), np.float32)
    vpqt[:, 0] = maxc
    vpqt[:, 1] = np.clip(oms * maxc, _F(0), _F(1))
    vpqt[:, 2] = np.clip((_F(1) - sxf) * maxc, _F(0), _F(1))
    vpqt[:, 3] = np.clip((sxf + oms) * maxc, _F(0), _F(1))
    flat = (np.arange(maxc.size) * 4)[:, None] + _SEL[i]
    out = vpqt.reshape(-1)[flat].reshape(shape)
    return _settle(out * _F(255.999), True).astype(np.uint8) if u8 else out


def _photometric_one(im, ip, fp):
    """One sample's steps in RandomPhotometricDistort's order. A uint8 image stays uint8 between
    steps (each ends on an integer); the contrast mean is taken at the step, as the kernel's
    reduction recomputes it."""
    flags, u8 = int(ip[0]), im.dtype == np.uint8
    x = im if u8 else im.astype(np.float32)
    if flags & BRIGHTNESS:
        x = _brightness(x, fp[0], u8)
    if flags & CONTRAST and flags & CONTRAST_FIRST:
        x = _contrast(x, fp, u8)
    if flags & SATURATION:
        x = _saturation(x, fp[3], fp[4], u8)
    if flags & HUE:
        x = _hue(x, fp[5], u8)
    if flags & CONTRAST and not flags & CONTRAST_FIRST:
        x = _contrast(x, fp, u8)
    if flags & PERMUTE:
        x = x[..., PERMS[int(ip[1])]]
    if flags & GRAY:
        g = _gray(x)
        x = np.repeat((np.floor(g) if u8 else g)[..., None], 3, -1)
    return np.ascontiguousarray(x[..., :int(ip[2])]).astype(im.dtype)


def photometric_numpy(images, iparams, fparams):
    """The staged adjustments of each sample (module docstring), parameters from
    :func:`photometric_params`. Returns: the batch's form, dtype kept, ``iparams[:, 2]``
    channels (the same for every sample), new arrays."""
    items, dense, dtype = _as_list(images)
    iparams, fparams = np.asarray(iparams), np.asarray(fparams, np.float32)
    if len(iparams) != len(items) or len(fparams) != len(items):
        raise ValueError(f"{len(items)} images but parameters for {len(iparams)}")
    outs = [_photometric_one(im, iparams[i], fparams[i]) for i, im in enumerate(items)]
    channels = int(iparams[0, 2]) if len(iparams) else 3
    return _pack(outs, dense, getattr(images, "shape", (0, 0, 0)), dtype, channels)


def color_twist_matrices(brightness, contrast, saturation, hue, half_range):
    """(B, 3, 4) float64 maps ``[M | offset]``, DALI's ColorTwist:
    ``M = brightness * contrast * YIQ_TO_RGB @ H(hue) @ S(saturation) @ RGB_TO_YIQ`` (hue in
    degrees, rotating the IQ plane; saturation scaling it) and ``offset = (half_range -
    half_range * contrast) * brightness`` (half_range: 128 for integer input, 0.5 for float):
    ``out = brightness * (half_range + contrast * (twist(rgb) - half_range))``."""
    br, ct = np.asarray(brightness, np.float64), np.asarray(contrast, np.float64)
    h = np.deg2rad(np.asarray(hue, np.float64))
    s = np.asarray(saturation, np.float64)
    r = np.zeros(h.shape + (3, 3))
    r[:, 0, 0] = 1.0
    r[:, 1, 1], r[:, 1, 2] = s * np.cos(h), s * np.sin(h)
    r[:, 2, 1], r[:, 2, 2] = -s * np.sin(h), s * np.cos(h)
    m = (br * ct)[:, None, None] * (YIQ_TO_RGB @ r @ RGB_TO_YIQ)
    off = (half_range - half_range * ct) * br
    return np.concatenate([m, np.broadcast_to(off[:, None, None], (len(off), 3, 1))], -1)


def _twist_store(v, out_dtype):
    if np.dtype(out_dtype) == np.uint8:
        return np.floor(np.clip(v, 0, 255) + 0.5).astype(np.uint8)
    return v.astype(out_dtype)


def color_twist_numpy(images, mats, out_dtype=None):
    """``out = M_b @ rgb + offset_b`` per pixel (float64), ``mats`` (B, 3, 4) from
    :func:`color_twist_matrices`; stored as ``out_dtype`` (default: the input's): uint8 rounded
    half up and clamped, float32 as it is."""
    items, dense, dtype = _as_list(images)
    out_dtype = np.dtype(out_dtype or dtype)
    if out_dtype not in (np.uint8, np.float32):
        raise ValueError(f"color twist output dtype must be uint8 or float32, got {out_dtype}")
    mats = np.asarray(mats, np.float64)
    if mats.shape != (len(items), 3, 4):
        raise ValueError(f"mats must be ({len(items)}, 3, 4), got {mats.shape}")
    outs = [_twist_store(np.einsum("ij,hwj->hwi", mats[i, :, :3], im.astype(np.float64))
                         + mats[i, :, 3], out_dtype) for i, im in enumerate(items)]
    return _pack(outs, dense, getattr(images, "shape", (0, 0, 0)), out_dtype, 3)


def color_twist_cv2(images, mats, out_dtype=None):
    """The CPU backend's :func:`color_twist_numpy`: OpenCV's ``transform`` (float32 math, uint8
    saturated with rounding to nearest, ties to even) for uint8 -> uint8 and float32 -> float32,
    about 30x faster; within one grey level (uint8) or 1e-5 relative (float) of the twin. Other
    dtype pairs and empty images take the twin."""
    items, dense, dtype = _as_list(images)
    out_dtype = np.dtype(out_dtype or dtype)
    mats = np.asarray(mats, np.float64)
    if out_dtype != dtype or mats.shape != (len(items), 3, 4):
        return color_twist_numpy(images, mats, out_dtype)
    outs = [cv2.transform(np.ascontiguousarray(im), mats[i]) if im.size else
            color_twist_numpy([im], mats[i:i + 1], out_dtype)[0] for i, im in enumerate(items)]
    return _pack(outs, dense, getattr(images, "shape", (0, 0, 0)), out_dtype, 3)


# ----------------------------------------------------------------------------- cupy


def _meta(items, outs):
    """(3, B) uint64 rows of the kernels' per-sample table: input pointers, output pointers,
    pixel counts; and the pixel counts as a list."""
    pixels = [int(im.shape[0] * im.shape[1]) for im in items]
    meta = np.empty((3, len(items)), np.uint64)
    meta[0] = [im.data.ptr for im in items]
    meta[1] = [o.data.ptr for o in outs]
    meta[2] = pixels
    return meta, pixels


def _device_batch(cp, images, out_dtype, out_channels):
    """(items, outs, out, dense) with per-sample contiguous inputs and new outputs (dense, or
    views into one flat buffer)."""
    dense = not isinstance(images, (list, tuple))
    if dense:
        images = cp.ascontiguousarray(images)
    items, _, _ = _as_list(images)
    items = [cp.ascontiguousarray(im) for im in items]
    if dense:
        out = cp.empty(images.shape[:3] + (out_channels,), out_dtype)
        return items, [out[i] for i in range(out.shape[0])], out, dense
    shapes = [im.shape[:2] + (out_channels,) for im in items]
    ends = np.cumsum([0] + [int(np.prod(s)) for s in shapes])
    flat = cp.empty((int(ends[-1]),), out_dtype)
    outs = [flat[ends[i]:ends[i + 1]].reshape(s) for i, s in enumerate(shapes)]
    return items, outs, outs, dense


def _grid(pixels, b, per_thread=1):
    return (max(1, min(-(-max(pixels) // (_BLOCK * per_thread)), _MAX_GRID_X)), min(b, _MAX_GRID_Y), 1)


def photometric_cupy(images, iparams, fparams, *, stream=None):
    """cupy twin of :func:`photometric_numpy`: one launch, preceded by one reduction launch
    (per-sample grayscale sums into a device array) when a sample adjusts its contrast; the
    parameters, pointers and zeroed sums go up in one upload. Never waits for the device."""
    import cupy as cp

    s = stream if stream is not None else cp.cuda.get_current_stream()
    iparams = np.ascontiguousarray(iparams, np.int32)
    fparams = np.ascontiguousarray(fparams, np.float32)
    with s:
        dense = not isinstance(images, (list, tuple))
        dtype = np.dtype(images.dtype if dense else (images[0].dtype if len(images) else np.uint8))
        channels = int(iparams[0, 2]) if len(iparams) else 3
        items, outs, out, _ = _device_batch(cp, images, dtype, channels)
        if len(iparams) != len(items):
            raise ValueError(f"{len(items)} images but parameters for {len(iparams)}")
        meta, pixels = _meta(items, outs)
        b = len(items)
        if b == 0 or max(pixels) == 0:
            return out
        meta_d, ip_d, fp_d, sums = upload_many([meta, iparams, fparams, np.zeros(b, np.uint64)], s)
        tag = "u8" if dtype == np.uint8 else "f32"
        if np.any(iparams[:, 0] & CONTRAST):
            launch(get_kernel(_SRC, f"photometric_reduce_{tag}", _OPTIONS),
                   _grid(pixels, b, _REDUCE_PIXELS_PER_THREAD), (_BLOCK, 1, 1),
                   (meta_d[0], meta_d[2], np.int32(b), ip_d, fp_d, sums), stream=s,
                   name="photometric_reduce")
        launch(get_kernel(_SRC, f"photometric_{tag}", _OPTIONS), _grid(pixels, b), (_BLOCK, 1, 1),
               (meta_d[0], meta_d[1], meta_d[2], np.int32(b), ip_d, fp_d, sums), stream=s,
               name="photometric")
    return out


def color_twist_cupy(images, mats, out_dtype=None, *, stream=None):
    """cupy twin of :func:`color_twist_numpy` (one launch, float32 math)."""
    import cupy as cp

    s = stream if stream is not None else cp.cuda.get_current_stream()
    with s:
        dense = not isinstance(images, (list, tuple))
        dtype = np.dtype(images.dtype if dense else (images[0].dtype if len(images) else np.uint8))
        out_dtype = np.dtype(out_dtype or dtype)
        if out_dtype not in (np.uint8, np.float32):
            raise ValueError(f"color twist output dtype must be uint8 or float32, got {out_dtype}")
        items, outs, out, _ = _device_batch(cp, images, out_dtype, 3)
        mats = np.ascontiguousarray(mats, np.float32).reshape(-1, 12)
        if len(mats) != len(items):
            raise ValueError(f"mats must be ({len(items)}, 3, 4), got {len(mats)} maps")
        meta, pixels = _meta(items, outs)
        b = len(items)
        if b == 0 or max(pixels) == 0:
            return out
        meta_d, mats_d = upload_many([meta, mats], s)
        name = f"color_twist_{'u8' if dtype == np.uint8 else 'f32'}_{'u8' if out_dtype == np.uint8 else 'f32'}"
        launch(get_kernel(_SRC, name, _OPTIONS), _grid(pixels, b), (_BLOCK, 1, 1),
               (meta_d[0], meta_d[1], meta_d[2], np.int32(b), mats_d), stream=s, name="color_twist")
    return out
