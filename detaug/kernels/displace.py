"""DALI's displacement filters ``water`` and ``sphere``: each output pixel (x, y) (integer
indices) samples the input at a point computed from its indices, not through a matrix.

DALI's rules (dali/operators/image/remap/water.h, sphere.h, displacement_filter_impl_cpu.h and
kernels/imgproc/sampler.h), computed in float32 as DALI's CPU operator does:

- water: ``(x + ampl_x * sin(freq_x * y + phase_x), y + ampl_y * cos(freq_y * x + phase_y))``;
- sphere: with ``mid = (W / 2, H / 2)``, ``d = int(max(mid))`` and ``t = (x, y) + 0.5 - mid``,
  the point ``mid + t * |t| / d``;
- ``INTERP_NN`` takes the pixel at ``floor`` of the point; ``INTERP_LINEAR`` blends the four
  pixels around the point less (0.5, 0.5) (pixel centres at +0.5); a tap outside the image
  takes ``fill`` (each tap on its own); uint8 results are rounded half up and clamped, float32
  results kept as they are.

The NumPy twins run on the host; on the device ``displace.cu`` makes a batch in one launch
(:func:`water_cupy`, :func:`sphere_cupy`), with the twin's float32 operations in its order.
"""
from __future__ import annotations

import numpy as np

from ..core.backend import upload_many
from .launch import get_kernel, launch

F32 = np.float32
_SRC = "displace.cu"
_OPTIONS = ("-std=c++17", "--fmad=false")
_BLOCK = 256
_MAX_GRID_X = 1024
_MAX_GRID_Y = 65535


def _grid(h: int, w: int):
    """(x, y) float32 index grids of an (h, w) image."""
    return (np.broadcast_to(np.arange(w, dtype=F32)[None, :], (h, w)),
            np.broadcast_to(np.arange(h, dtype=F32)[:, None], (h, w)))


def water_points(h, w, ampl_x, ampl_y, freq_x, freq_y, phase_x, phase_y):
    """(sx, sy) float32 (h, w): the input point each output pixel of water samples."""
    x, y = _grid(h, w)
    sx = x + F32(ampl_x) * np.sin(F32(freq_x) * y + F32(phase_x))
    sy = y + F32(ampl_y) * np.cos(F32(freq_y) * x + F32(phase_y))
    return sx.astype(F32), sy.astype(F32)


def sphere_points(h, w):
    """(sx, sy) float32 (h, w): the input point each output pixel of sphere samples."""
    x, y = _grid(h, w)
    mid_x, mid_y = F32(w * 0.5), F32(h * 0.5)
    d = F32(int(max(mid_x, mid_y)))  # DALI's ``const int d``: truncated
    tx, ty = x + F32(0.5) - mid_x, y + F32(0.5) - mid_y
    rad = np.sqrt(tx * tx + ty * ty) / d
    return (mid_x + rad * tx).astype(F32), (mid_y + rad * ty).astype(F32)


def _taps(img, xi, yi, fill):
    """img's pixels at integer (xi, yi) (h, w, C), ``fill`` (C,) where outside the image."""
    h, w = img.shape[:2]
    inside = (xi >= 0) & (xi < w) & (yi >= 0) & (yi < h)
    v = img[np.clip(yi, 0, h - 1), np.clip(xi, 0, w - 1)]
    return np.where(inside[..., None], v, fill.astype(img.dtype)[None, None, :])


def sample(img: np.ndarray, sx: np.ndarray, sy: np.ndarray, linear: bool, fill) -> np.ndarray:
    """``img`` (H, W, C) uint8 or float32 sampled at (sx, sy) (h, w) float32 by DALI's sampler,
    with the constant border ``fill`` (C,); same dtype as ``img``."""
    fill = np.asarray(fill)
    if not linear:
        return _taps(img, np.floor(sx).astype(np.int64), np.floor(sy).astype(np.int64), fill)
    x, y = sx - F32(0.5), sy - F32(0.5)
    x0f, y0f = np.floor(x), np.floor(y)
    x0, y0 = x0f.astype(np.int64), y0f.astype(np.int64)
    qx, qy = (x - x0f)[..., None], (y - y0f)[..., None]
    px = F32(1) - qx
    s00, s01 = _taps(img, x0, y0, fill).astype(F32), _taps(img, x0 + 1, y0, fill).astype(F32)
    s10, s11 = _taps(img, x0, y0 + 1, fill).astype(F32), _taps(img, x0 + 1, y0 + 1, fill).astype(F32)
    s0 = s00 * px + s01 * qx
    s1 = s10 * px + s11 * qx
    v = s0 + (s1 - s0) * qy
    if img.dtype == np.uint8:  # DALI's ConvertSat on the host: std::round, then clamp
        return np.clip(np.floor(v + F32(0.5)), 0, 255).astype(np.uint8)
    return v.astype(img.dtype)


def water_numpy(images, params, linear, masks, fills) -> list:
    """Each image of ``images`` through water with its row of ``params`` (B, 6: ampl_x, ampl_y,
    freq_x, freq_y, phase_x, phase_y), where ``masks``; else copied."""
    out = []
    for im, p, m, f in zip(images, params, masks, fills):
        if not m:
            out.append(im.copy())
            continue
        sx, sy = water_points(im.shape[0], im.shape[1], *p)
        out.append(sample(im, sx, sy, linear, f))
    return out


def sphere_numpy(images, linear, masks, fills) -> list:
    """Each image of ``images`` through sphere where ``masks``; else copied."""
    out = []
    for im, m, f in zip(images, masks, fills):
        if not m:
            out.append(im.copy())
            continue
        sx, sy = sphere_points(im.shape[0], im.shape[1])
        out.append(sample(im, sx, sy, linear, f))
    return out


# ----------------------------------------------------------------------------- cupy
def _displace_cupy(images, mode, params, linear, masks, fills, stream):
    """One launch of displace.cu's ``displace`` over ``images`` (a dense (B, H, W, C) cupy array
    or a list of (H, W, C) ones, uint8 or float32): outputs of the same form, dtype and sizes."""
    import cupy as cp

    s = stream if stream is not None else cp.cuda.get_current_stream()
    with s:
        dense = not isinstance(images, (list, tuple))
        items = [cp.ascontiguousarray(im) for im in images]
        if dense:
            out = cp.empty(images.shape, images.dtype)
            outs = [out[i] for i in range(out.shape[0])]
        else:
            outs = [cp.empty(im.shape, im.dtype) for im in items]
            out = outs
        b = len(items)
        most = max((int(im.size) for im in items), default=0)
        if most == 0:
            return out
        if len({im.dtype for im in items}) > 1 or any(
                im.dtype not in (np.uint8, np.float32) or im.ndim != 3 for im in items):
            raise ValueError("water / sphere: uint8 or float32 HWC images, one dtype a batch")
        meta = np.array([[*im.shape, int(m)] for im, m in zip(items, masks)], np.int64)
        fills = np.ascontiguousarray(np.asarray(fills, np.float32).reshape(b, -1))
        ptrs = np.array([[im.data.ptr for im in items], [o.data.ptr for o in outs]], np.uint64)
        d = upload_many([ptrs, meta, np.ascontiguousarray(np.asarray(params, F32).reshape(b, 6)),
                         fills], s)
        grid = (max(1, min((most + _BLOCK - 1) // _BLOCK, _MAX_GRID_X)), min(b, _MAX_GRID_Y), 1)
        launch(get_kernel(_SRC, "displace", _OPTIONS), grid, (_BLOCK, 1, 1),
               (d[0][0], d[0][1], d[1], d[2], d[3], np.int32(fills.shape[1]), np.int32(mode),
                np.int32(bool(linear)), np.int32(items[0].dtype == np.uint8), np.int32(b)),
               stream=s, name="displace")
    return out


def water_cupy(images, params, linear, masks, fills, *, stream=None):
    """The device variant of :func:`water_numpy` (one launch)."""
    return _displace_cupy(images, 0, params, linear, masks, fills, stream)


def sphere_cupy(images, linear, masks, fills, *, stream=None):
    """The device variant of :func:`sphere_numpy` (one launch)."""
    b = len(images)
    return _displace_cupy(images, 1, np.zeros((b, 6), F32), linear, masks, fills, stream)
