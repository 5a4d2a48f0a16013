"""Color kernels on uint8 HWC images: brightness/contrast and DALI's YIQ-space hsv.

A batch is a dense array ``(B, H, W, C)`` or a list of B ``(H, W, C)`` arrays of their own
sizes; the output has the same layout and dtype, always in new memory (inputs are never
written). Per-sample parameters are ``(B,)`` arrays (a scalar is broadcast). Values are
computed in floating point, rounded half up (``floor(x + 0.5)``) and clamped to ``[0, 255]``.

``<name>_numpy`` is the reference (float64); ``<name>_cupy`` makes one launch of a kernel of
``color.cu`` for the whole batch (float32 math, so results may differ from the twin by one
grey level where a value lies within float32 rounding of a .5 tie). A ragged cupy batch is
written into one flat buffer, returned as a list of views into it.
"""
from __future__ import annotations

import numpy as np

from ..core import recycle
from ..core.backend import upload

from .launch import get_kernel, launch
from .warp_copy import _put  # the finish of an OpenCV call made into a target

_SRC = "color.cu"
_BLOCK = 256
_MAX_GRID_X = 1024     # grid-stride over a sample's elements beyond this
_MAX_GRID_Y = 65535    # grid-stride over samples beyond this

# NTSC RGB -> YIQ, the constants DALI uses; YIQ -> RGB is its exact inverse (as DALI computes
# it), so hue 0 / saturation 1 / value 1 is the identity.
RGB_TO_YIQ = np.array([[0.299, 0.587, 0.114],
                       [0.596, -0.274, -0.321],
                       [0.211, -0.523, 0.311]], dtype=np.float64)
YIQ_TO_RGB = np.linalg.inv(RGB_TO_YIQ)


# ----------------------------------------------------------------------------- batch helpers


def _as_list(images, *, channels=None):
    """(list of (H, W, C) arrays, dense?) after checking layout and dtype."""
    dense = not isinstance(images, (list, tuple))
    if dense and images.ndim != 4:
        raise ValueError(f"a dense batch must be (B, H, W, C), got shape {images.shape}")
    items = list(images) if not dense else [images[i] for i in range(images.shape[0])]
    for i, im in enumerate(items):
        if im.ndim != 3 or im.dtype != np.uint8:
            raise ValueError(f"sample {i}: expected uint8 (H, W, C), got {im.dtype} {im.shape}")
        if channels is not None and im.shape[2] != channels:
            raise ValueError(f"sample {i}: expected {channels} channels, got {im.shape[2]}")
    return items, dense


def _per_sample(xp, value, batch_size, dtype):
    if xp is not np and not isinstance(value, xp.ndarray):
        value = np.asarray(value, dtype=dtype)
        value = upload(np.ascontiguousarray(np.broadcast_to(value, (batch_size,)))) if value.ndim < 2 else value
    a = xp.asarray(value, dtype=dtype)
    if a.ndim > 1 or (a.ndim == 1 and a.shape[0] != batch_size):
        raise ValueError(f"per-sample parameter must be a scalar or ({batch_size},), got {a.shape}")
    return xp.ascontiguousarray(xp.broadcast_to(a, (batch_size,)))


def _round_clamp_u8(x, out=None):
    """``floor(x + 0.5)`` clamped to [0, 255], as uint8 (into ``out`` when given). ``x`` is a
    float temporary of the caller's and is overwritten (no further full-size arrays)."""
    np.add(x, 0.5, out=x)
    np.floor(x, out=x)
    np.clip(x, 0, 255, out=x)
    if out is None:
        return x.astype(np.uint8)
    np.copyto(out, x, casting="unsafe")
    return out


def _rgb_matrix_f64(m, im):
    """``m @ rgb`` per pixel in float64, each output ``(m[i, 0] r + m[i, 1] g) + m[i, 2] b``:
    ``cv2.transform`` on the float64 image (OpenCV's double path is that sum; about 10x
    NumPy's einsum, which sums in the same order: tests/kernels/test_color_kernels.py checks the two
    agree bit for bit on fresh random images). An empty image takes einsum."""
    x = im.astype(np.float64)
    if x.size == 0:
        return np.einsum("ij,hwj->hwi", m, x)
    import cv2

    return cv2.transform(x, np.ascontiguousarray(m, np.float64)).reshape(x.shape)


def _pack_numpy(outs, dense, images):
    if dense:
        return np.stack(outs) if outs else np.empty_like(images)
    return outs


def hsv_matrices(hue, saturation, value, xp=np):
    """Per-sample (B, 3, 3) float32 matrices ``value * YIQ_TO_RGB @ R @ RGB_TO_YIQ`` applied
    to RGB column vectors, where R keeps Y and maps ``(I, Q) -> saturation * (cos h I + sin h Q,
    -sin h I + cos h Q)``, h = hue in radians (DALI's hue_mat / sat_mat / val_mat).

    ``xp`` is numpy or cupy; the parameters are (B,) arrays of that module."""
    h = xp.deg2rad(xp.asarray(hue, dtype=xp.float64))
    s = xp.asarray(saturation, dtype=xp.float64)
    v = xp.asarray(value, dtype=xp.float64)
    r = xp.zeros(h.shape + (3, 3), dtype=xp.float64)
    r[:, 0, 0] = 1.0
    r[:, 1, 1] = s * xp.cos(h)
    r[:, 1, 2] = s * xp.sin(h)
    r[:, 2, 1] = -s * xp.sin(h)
    r[:, 2, 2] = s * xp.cos(h)
    m = xp.asarray(YIQ_TO_RGB) @ r @ xp.asarray(RGB_TO_YIQ)
    return (v[:, None, None] * m).astype(xp.float32)


# ----------------------------------------------------------------------------- NumPy twins


def brightness_contrast_numpy(images, brightness, contrast, *, contrast_center=128.0):
    """``out = round_half_up(brightness * (center + contrast * (v - center)))`` clamped to
    ``[0, 255]``, per sample (DALI's fn.brightness_contrast). Any channel count.

    Args / Shape: images (B, H, W, C) uint8 or list of (H, W, C) uint8; brightness, contrast
    (B,) or scalars. Returns: same layout, uint8, new arrays."""
    items, dense = _as_list(images)
    br = _per_sample(np, brightness, len(items), np.float64)
    ct = _per_sample(np, contrast, len(items), np.float64)
    c = float(contrast_center)
    outs = [_round_clamp_u8(br[i] * (c + ct[i] * (im.astype(np.float64) - c)))
            for i, im in enumerate(items)]
    return _pack_numpy(outs, dense, images)


def hsv_numpy(images, hue, saturation, value):
    """DALI's fn.hsv as a linear map in YIQ space: each RGB pixel (0..255, float) becomes
    ``M_b @ rgb`` with ``M_b = hsv_matrices(...)[b]`` (hue shift in degrees, saturation and value
    multipliers), rounded half up and clamped. Images must have 3 channels (RGB).

    Args / Shape: images (B, H, W, 3) uint8 or list of (H, W, 3) uint8; hue, saturation, value
    (B,) or scalars. Returns: same layout, uint8, new arrays."""
    items, dense = _as_list(images, channels=3)
    b = len(items)
    mats = hsv_matrices(_per_sample(np, hue, b, np.float64), _per_sample(np, saturation, b, np.float64),
                        _per_sample(np, value, b, np.float64)).astype(np.float64)
    if dense:  # rounded straight into the batch (no per-sample arrays stacked afterwards)
        out = recycle.empty(images.shape, images.dtype)
        scratch = {}
        for i, im in enumerate(items):
            _hsv_one(mats[i], im, out[i], scratch)
        return out
    scratch = {}
    return [_hsv_one(mats[i], im, np.empty_like(im), scratch) for i, im in enumerate(items)]


# the float32 sum's distance from the float64 one is below 4 * 2^-24 * 255 * (row sum of |m|):
# the matrix entries are float32 values (hsv_matrices), so only 3 products and 2 sums round;
# the margin is 8 times that
_F32_MARGIN = 255.0 * 2.0 ** -19


_STRIP_BYTES = 1 << 19  # float32 work buffers of a strip of rows: kept in the CPU's cache


def _hsv_one(m, im, out, scratch):
    """``out = clip(floor(m @ rgb + 0.5), 0, 255)`` with the float64 sum of
    :func:`_rgb_matrix_f64`, bit for bit, at about a third of its cost: OpenCV's float32
    transform, rounded at ``y - eps`` and ``y + eps`` (``eps`` 8x the float32 sum's error
    bound, ``_F32_MARGIN``); where the two agree the float64 sum rounds the same, and the
    values where they differ (near a .5, about ``2 eps`` of them: a few thousand of a 640 x 640
    image) are summed again in float64, once for the whole image. The float32 passes run over
    strips of rows whose buffers stay in cache (on a memory-bound machine the passes over a
    whole image's floats cost more than the math); ``y + eps`` is rounded straight into
    ``out``, ``y - eps`` into a uint8 image of the caller's scratch, scanned once at the end.
    ``out``: a uint8 array of ``im``'s shape (written); ``scratch``: a dict of the work
    buffers, kept by the caller for the batch's next image."""
    if im.size == 0:
        return _round_clamp_u8(_rgb_matrix_f64(m, im), out=out)
    h, w = im.shape[:2]
    rows = max(1, min(h, _STRIP_BYTES // (12 * w)))
    if scratch.get("shape") != (rows, w):
        scratch.update(shape=(rows, w), x=np.empty((rows, w, 3), np.float32),
                       y=np.empty((rows, w, 3), np.float32))
    if scratch.get("low") is None or scratch["low"].size < im.size:
        scratch["low"] = np.empty(im.size, np.uint8)
    low = scratch["low"][:im.size].reshape(im.shape)
    m32 = m.astype(np.float32)
    eps = float(_F32_MARGIN * np.abs(m).sum(1).max())
    lo, hi = low.reshape(-1), out.reshape(-1)
    n8 = im.size // 8 * 8
    lo64, hi64 = lo[:n8].view(np.uint64), hi[:n8].view(np.uint64)
    words, done = [], 0
    for r0 in range(0, h, rows):
        n = min(rows, h - r0)
        _hsv_strip(m32, eps, im[r0:r0 + n], out[r0:r0 + n], scratch["x"][:n],
                   scratch["y"][:n], low[r0:r0 + n])
        # the strip's whole 8-byte words compared while they are in cache
        end = (r0 + n) * w * 3 // 8
        words.append(done + np.flatnonzero(lo64[done:end] != hi64[done:end]))
        done = end
    flat = _differing(lo, hi, np.concatenate(words))  # index into out, flat
    if flat.size:
        pix, ch = np.divmod(flat, 3)
        v = im.reshape(-1, 3)[pix].astype(np.float64)
        r = m[ch]
        val = (r[:, 0] * v[:, 0] + r[:, 1] * v[:, 1]) + r[:, 2] * v[:, 2]
        out.reshape(-1)[flat] = np.clip(np.floor(val + 0.5), 0, 255)
    return out


def _differing(a: np.ndarray, b: np.ndarray, words=None) -> np.ndarray:
    """The indices where two flat contiguous uint8 arrays differ, ascending. Compared 8 bytes
    at a time (the differing bytes are a few in a thousand here): a scan of whole words, then
    the bytes of the few words that differ; about 4x faster than cv2.compare + findNonZero.
    ``words``: the differing whole words, ascending, where the caller has scanned them."""
    n8 = a.size // 8 * 8
    if words is None:
        words = np.flatnonzero(a[:n8].view(np.uint64) != b[:n8].view(np.uint64))
    idx = (words[:, None] * 8 + np.arange(8)).reshape(-1)
    idx = idx[a[idx] != b[idx]]
    tail = n8 + np.flatnonzero(a[n8:] != b[n8:])
    return np.concatenate([idx, tail]) if tail.size else idx


def _hsv_strip(m32, eps, im, out, x, y, low):
    """One strip of :func:`_hsv_one`: ``out`` and ``low`` the float32 sum rounded at ``y + eps``
    and ``y - eps`` (``x``, ``y``: its float work buffers)."""
    import cv2

    np.copyto(x, im)
    _put(y, cv2.transform(x, m32, dst=y))
    # below 0 rounds to 0 either way, and convertScaleAbs takes |.| (threshold, not cv2.max:
    # max's scalar is a 4-vector, which a 1 x 1 image takes for a second operand)
    _put(y, cv2.threshold(y, 0.0, 0.0, cv2.THRESH_TOZERO, dst=y)[1])
    _put(low, cv2.convertScaleAbs(y, dst=low, alpha=1.0, beta=-eps))
    _put(out, cv2.convertScaleAbs(y, dst=out, alpha=1.0, beta=eps))


# ----------------------------------------------------------------------------- cupy


def _launch_per_sample(cp, kernel_name, images, channels, unit, params, stream):
    """Shared launcher: builds per-sample pointers and element counts (``unit`` = "byte" or
    "pixel"), allocates the output (dense, or one flat buffer with views) and launches once."""
    s = stream if stream is not None else cp.cuda.get_current_stream()
    with s:
        dense = not isinstance(images, (list, tuple))
        if dense:
            images = cp.ascontiguousarray(images)
        items, _ = _as_list(images, channels=channels)
        items = [cp.ascontiguousarray(im) for im in items]
        sizes = [int(im.size) for im in items]
        if dense:
            out = cp.empty_like(images)
            outs = [out[i] for i in range(out.shape[0])]
        else:
            flat = cp.empty((sum(sizes),), dtype=cp.uint8)
            ends = np.cumsum([0] + sizes)
            outs = [flat[ends[i]:ends[i + 1]].reshape(im.shape) for i, im in enumerate(items)]
            out = outs
        b = len(items)
        if b == 0 or max(sizes) == 0:
            return out
        per = 1 if unit == "byte" else 3
        meta = np.empty((3, b), dtype=np.uint64)
        meta[0] = [im.data.ptr for im in items]
        meta[1] = [o.data.ptr for o in outs]
        meta[2] = [n // per for n in sizes]
        meta_d = upload(meta, stream)
        grid = (max(1, min((max(sizes) // per + _BLOCK - 1) // _BLOCK, _MAX_GRID_X)),
                min(b, _MAX_GRID_Y), 1)
        args = (meta_d[0], meta_d[1], meta_d[2], np.int32(b)) + tuple(params(cp, b))
        launch(get_kernel(_SRC, kernel_name), grid, (_BLOCK, 1, 1), args, stream=s,
               name=kernel_name)
    return out


def brightness_contrast_cupy(images, brightness, contrast, *, contrast_center=128.0, stream=None):
    """cupy twin of :func:`brightness_contrast_numpy` (one launch, float32 math)."""
    import cupy as cp

    def params(cp, b):
        return (_per_sample(cp, brightness, b, cp.float32), _per_sample(cp, contrast, b, cp.float32),
                np.float32(contrast_center))

    return _launch_per_sample(cp, "brightness_contrast", images, None, "byte", params, stream)


def hsv_cupy(images, hue, saturation, value, *, stream=None):
    """cupy twin of :func:`hsv_numpy` (one launch; the (B, 3, 3) matrices are composed by
    elementwise cupy ops from the per-sample parameters, host or device)."""
    import cupy as cp

    def params(cp, b):
        host = not any(isinstance(v, cp.ndarray) for v in (hue, saturation, value))
        if host:  # host parameters: build the matrices on the host, one small upload
            m = upload(hsv_matrices(_per_sample(np, hue, b, np.float64),
                                    _per_sample(np, saturation, b, np.float64),
                                    _per_sample(np, value, b, np.float64)).astype(np.float32))
        else:
            m = hsv_matrices(_per_sample(cp, hue, b, cp.float64), _per_sample(cp, saturation, b, cp.float64),
                             _per_sample(cp, value, b, cp.float64), xp=cp)
        return (cp.ascontiguousarray(m),)

    return _launch_per_sample(cp, "hsv", images, 3, "pixel", params, stream)
