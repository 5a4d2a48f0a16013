"""Per-pixel random kernels on uint8 HWC images: noise (gaussian, salt and pepper, shot), erase
(rectangles filled with a value or random bytes) and DALI's jitter. NumPy twins and the cupy
launchers of ``pixel.cu``'s ``pixel_noise``, ``erase`` and ``jitter``.

Every random value is ``counter_bits(key, n)`` (detaug/core/rng.py: SplitMix64 of the sample's
key and a counter), where the key is one draw per sample from the op's keyed stream and ``n``
the element's index in its sample (``(y * W + x) * C + c``), or the pixel's (``y * W + x``)
where all channels share a draw. The CUDA kernels compute the same words, so the CPU and the GPU
make the same noise: integer draws (salt and pepper, erase, jitter) give equal bytes; the
gaussian and shot draws go through ``log`` / ``cos`` / ``exp``, whose CUDA and C library results
may differ in the last bit, which changes a byte only where the value falls within that bit of a
rounding tie.

Shared rules: a uniform is ``(word >> 11) * 2**-53``; a normal is Box-Muller on the words
``2n`` and ``2n + 1`` (``sqrt(-2 log u1) cos(2 pi u2)``, u1 >= 1e-300); values are computed in
float64, clamped to [0, 255] and rounded half up.
"""
from __future__ import annotations

import numpy as np

from ..core.backend import upload_many
from ..core.rng import counter_bits, to_unit
from .color import _as_list as _items  # the batch check every uint8 HWC kernel shares
from .color import _pack_numpy as _pack
from .launch import get_kernel, launch

_SRC = "pixel.cu"
_OPTIONS = ("-std=c++17", "--fmad=false")
_BLOCK = 256
_MAX_GRID_X = 1024
_MAX_GRID_Y = 65535
MODES = {"gaussian": 0, "salt_and_pepper": 1, "shot": 2}
SHOT_INVERSION_MAX = 32.0  # pixel.cu: below it Poisson by inversion, from it a rounded normal


def _round_clamp(v):
    return np.floor(np.clip(v, 0.0, 255.0) + 0.5).astype(np.uint8)


def normal_at(key, n):
    """Standard normal values at counters ``n`` of ``key`` (Box-Muller on words 2n, 2n + 1)."""
    n = np.asarray(n, np.uint64)
    u1 = np.maximum(to_unit(counter_bits(key, 2 * n)), 1e-300)
    u2 = to_unit(counter_bits(key, 2 * n + np.uint64(1)))
    return np.sqrt(-2.0 * np.log(u1)) * np.cos(2.0 * np.pi * u2)


INVERSION_STEPS = 1000  # pixel.cu's poisson_at stops its search there


def inversion_table(lams):
    """(m, INVERSION_STEPS) float64: the cumulative probabilities F(0..999) of Poisson(lam) for
    each of ``lams``, summed term by term exactly as pixel.cu's loop does (p = exp(-lam), then
    p = p * (lam / k), F = F + p)."""
    lams = np.asarray(lams, np.float64)
    p = np.exp(-lams)
    f = p.copy()
    table = np.empty((len(lams), INVERSION_STEPS))
    table[:, 0] = f
    for k in range(1, INVERSION_STEPS):
        p = p * (lams / float(k))
        f = f + p
        table[:, k] = f
        if not p.any():            # every term has underflowed: F stays where it is
            table[:, k + 1:] = f[:, None]
            break
    return table


def poisson_at(key, n, lam, values=None, rows=None):
    """Poisson(lam) draws at counters ``n``: inversion on the uniform u of word 2n (the first k
    with u <= F(k), at most 1000) for lam < 32; from 32, the normal approximation
    ``max(0, round_half_up(lam + sqrt(lam) z))`` (mean and variance lam). The inversion looks u
    up in a table of F per distinct lam (``values``, with ``rows`` the index of each element's lam
    there, as the shot noise of a uint8 image gives them; else found here) by a binary search,
    which gives the same k as the kernel's linear one."""
    lam = np.asarray(lam, np.float64)
    n = np.asarray(n, np.uint64)
    out = np.zeros(lam.shape, np.float64)
    big = lam >= SHOT_INVERSION_MAX
    if big.any():
        lb = lam[big]
        out[big] = np.maximum(np.floor(lb + np.sqrt(lb) * normal_at(key, n[big]) + 0.5), 0.0)
    small = (lam > 0) & ~big
    if small.any():
        if values is None:
            values, rows = np.unique(lam[small], return_inverse=True)
            rows_s = rows
        else:
            rows_s = np.asarray(rows)[small]
        table = np.concatenate([inversion_table(values), np.full((len(values), 1), np.inf)], 1)
        u = to_unit(counter_bits(key, 2 * n[small]))
        lo = np.zeros(len(u), np.int64)
        hi = np.full(len(u), INVERSION_STEPS, np.int64)
        for _ in range(INVERSION_STEPS.bit_length()):  # lower bound: the first k with F(k) >= u
            mid = (lo + hi) >> 1
            below = table[rows_s, mid] < u
            lo = np.where(below, mid + 1, lo)
            hi = np.where(below, hi, mid)
        out[small] = lo
    return out


# ----------------------------------------------------------------------------- noise


def noise_one_numpy(img, key, mode, params, per_channel):
    """One image with the noise of ``mode`` (a key of MODES) and ``params`` (4 floats, see
    pixel.cu's pixel_noise)."""
    h, w, c = img.shape
    x = img.reshape(-1).astype(np.float64)
    e = np.arange(x.size, dtype=np.uint64)
    n = e if per_channel else e // np.uint64(max(c, 1))
    p0, p1, p2, p3 = (float(v) for v in params)
    if mode == "gaussian":
        out = _round_clamp(x + p0 + p1 * normal_at(key, n))
    elif mode == "salt_and_pepper":
        u = to_unit(counter_bits(key, 2 * n))
        v = to_unit(counter_bits(key, 2 * n + np.uint64(1)))
        out = np.where(u < p0, _round_clamp(np.where(v < p1, p2, p3)), img.reshape(-1))
    elif mode == "shot":
        out = (_round_clamp(poisson_at(key, n, x / p0, np.arange(256) / p0, img.reshape(-1)) * p0)
               if p0 > 0 else img.reshape(-1).copy())
    else:
        raise ValueError(f"noise mode {mode!r}: expected one of {sorted(MODES)}")
    return out.astype(np.uint8).reshape(h, w, c)


def noise_numpy(images, keys, mode, params, per_channel=True):
    """The NumPy twin of ``pixel_noise``.

    Args / Shape: images (B, H, W, C) uint8 or list of (H, W, C); keys (B,) uint64; mode
    'gaussian' (params: mean, stddev), 'salt_and_pepper' (amount, salt_vs_pepper, salt value,
    pepper value) or 'shot' (factor); params (B, 4) float64 (unused columns ignored);
    per_channel: one draw per element (True) or per pixel (False). Returns: same layout, uint8.
    """
    items, dense = _items(images)
    keys = np.asarray(keys, np.uint64).reshape(-1)
    params = np.asarray(params, np.float64).reshape(len(items), 4)
    outs = [noise_one_numpy(im, keys[i], mode, params[i], per_channel) for i, im in enumerate(items)]
    return _pack(outs, dense, images)


# ----------------------------------------------------------------------------- erase


def erase_one_numpy(img, rects, fill, random, key):
    """One image with ``rects`` ((k, 4) int y0, x0, y1, x1, half-open, clipped by the caller)
    filled with ``fill`` (C uint8) or, ``random``, with the top byte of word(key, element)."""
    out = img.copy()
    h, w, c = img.shape
    for y0, x0, y1, x1 in np.asarray(rects, np.int64).reshape(-1, 4):
        y0, x0, y1, x1 = max(y0, 0), max(x0, 0), min(y1, h), min(x1, w)
        if y1 <= y0 or x1 <= x0:
            continue
        if random:
            yy, xx, cc = np.meshgrid(np.arange(y0, y1), np.arange(x0, x1), np.arange(c), indexing="ij")
            e = ((yy * w + xx) * c + cc).astype(np.uint64)
            out[y0:y1, x0:x1] = (counter_bits(key, e) >> np.uint64(56)).astype(np.uint8)
        else:
            out[y0:y1, x0:x1] = np.asarray(fill, np.uint8)[:c]
    return out


def erase_numpy(images, rects, rect_offsets, fills, random, keys):
    """The NumPy twin of ``erase``.

    Args / Shape: images (B, H, W, C) uint8 or list; rects (R, 4) int (y0, x0, y1, x1) pixel
    rows / columns, half-open; rect_offsets (B + 1,): the rects of sample b are
    rects[rect_offsets[b]:rect_offsets[b + 1]]; fills (B, C) uint8; random (B,) bool (fill
    with random bytes instead); keys (B,) uint64. Returns: same layout, uint8, new arrays.
    """
    items, dense = _items(images)
    rects = np.asarray(rects, np.int64).reshape(-1, 4)
    o = np.asarray(rect_offsets, np.int64)
    fills = np.asarray(fills, np.uint8).reshape(len(items), -1)
    keys = np.asarray(keys, np.uint64).reshape(-1)
    outs = [erase_one_numpy(im, rects[o[i]:o[i + 1]], fills[i], bool(random[i]), keys[i])
            for i, im in enumerate(items)]
    return _pack(outs, dense, images)


# ----------------------------------------------------------------------------- jitter


def jitter_one_numpy(img, key, n_degree, mask, fill):
    """DALI's jitter on one image (see pixel.cu): pixel (y, x) takes (y + dy, x + dx)."""
    if not mask:
        return img.copy()
    h, w, c = img.shape
    p = np.arange(h * w, dtype=np.uint64)
    nd = np.uint64(n_degree)
    dx = (counter_bits(key, 2 * p) % nd).astype(np.int64) - n_degree // 2
    dy = (counter_bits(key, 2 * p + np.uint64(1)) % nd).astype(np.int64) - n_degree // 2
    y, x = np.divmod(np.arange(h * w, dtype=np.int64), w)
    sx, sy = x + dx, y + dy
    ok = (sx >= 0) & (sx < w) & (sy >= 0) & (sy < h)
    flat = img.reshape(-1, c)
    out = np.where(ok[:, None], flat[np.where(ok, sy * w + sx, 0)], np.asarray(fill, np.uint8)[:c])
    return out.astype(np.uint8).reshape(h, w, c)


def jitter_numpy(images, keys, n_degree, masks, fills):
    """The NumPy twin of ``jitter``: keys (B,) uint64, n_degree int >= 1, masks (B,) 0/1, fills
    (B, C) uint8."""
    items, dense = _items(images)
    keys = np.asarray(keys, np.uint64).reshape(-1)
    fills = np.asarray(fills, np.uint8).reshape(len(items), -1)
    outs = [jitter_one_numpy(im, keys[i], int(n_degree), int(masks[i]), fills[i])
            for i, im in enumerate(items)]
    return _pack(outs, dense, images)


# ----------------------------------------------------------------------------- cupy


def _outputs(cp, images):
    """(items, outs, out): contiguous inputs, per-sample outputs and what to return."""
    dense = not isinstance(images, (list, tuple))
    if dense:
        images = cp.ascontiguousarray(images)
    items, _ = _items(images)
    items = [cp.ascontiguousarray(im) for im in items]
    if dense:
        out = cp.empty(images.shape, cp.uint8)
        return items, [out[i] for i in range(out.shape[0])], out
    sizes = [int(im.size) for im in items]
    flat = cp.empty((sum(sizes),), cp.uint8)
    ends = np.cumsum([0] + sizes)
    outs = [flat[ends[i]:ends[i + 1]].reshape(im.shape) for i, im in enumerate(items)]
    return items, outs, outs


def _grid(items):
    most = max([int(im.size) for im in items], default=0)
    return (max(1, min((most + _BLOCK - 1) // _BLOCK, _MAX_GRID_X)), min(max(len(items), 1), _MAX_GRID_Y), 1)


def _ptrs(items, outs):
    return np.array([[im.data.ptr for im in items], [o.data.ptr for o in outs]], np.uint64).reshape(2, -1)


def noise_cupy(images, keys, mode, params, per_channel=True, *, stream=None):
    """cupy twin of :func:`noise_numpy` (one launch)."""
    import cupy as cp

    s = stream if stream is not None else cp.cuda.get_current_stream()
    with s:
        items, outs, out = _outputs(cp, images)
        b = len(items)
        if b == 0 or max(int(im.size) for im in items) == 0:
            return out
        if mode not in MODES:
            raise ValueError(f"noise mode {mode!r}: expected one of {sorted(MODES)}")
        meta = np.array([[im.size, im.shape[2]] for im in items], np.int64)
        d = upload_many([_ptrs(items, outs), meta, np.asarray(keys, np.uint64).reshape(b),
                         np.asarray(params, np.float64).reshape(b, 4)], s)
        launch(get_kernel(_SRC, "pixel_noise", _OPTIONS), _grid(items), (_BLOCK, 1, 1),
               (d[0][0], d[0][1], d[1], d[2], d[3], np.int32(b), np.int32(MODES[mode]),
                np.int32(bool(per_channel))), stream=s, name="pixel_noise")
    return out


def erase_cupy(images, rects, rect_offsets, fills, random, keys, *, stream=None):
    """cupy twin of :func:`erase_numpy` (one launch)."""
    import cupy as cp

    s = stream if stream is not None else cp.cuda.get_current_stream()
    with s:
        items, outs, out = _outputs(cp, images)
        b = len(items)
        if b == 0 or max(int(im.size) for im in items) == 0:
            return out
        meta = np.array([[im.size, im.shape[1], im.shape[2]] for im in items], np.int64)
        fills = np.ascontiguousarray(np.asarray(fills, np.uint8).reshape(b, -1))
        rects = np.asarray(rects, np.int32).reshape(-1, 4)
        d = upload_many([_ptrs(items, outs), meta, np.asarray(rect_offsets, np.int32),
                         rects if len(rects) else np.zeros((1, 4), np.int32), fills,
                         np.asarray(random, np.int32).reshape(b), np.asarray(keys, np.uint64).reshape(b)], s)
        launch(get_kernel(_SRC, "erase", _OPTIONS), _grid(items), (_BLOCK, 1, 1),
               (d[0][0], d[0][1], d[1], d[2], d[3], d[4], np.int32(fills.shape[1]), d[5], d[6],
                np.int32(b)), stream=s, name="erase")
    return out


def jitter_cupy(images, keys, n_degree, masks, fills, *, stream=None):
    """cupy twin of :func:`jitter_numpy` (one launch)."""
    import cupy as cp

    s = stream if stream is not None else cp.cuda.get_current_stream()
    with s:
        items, outs, out = _outputs(cp, images)
        b = len(items)
        if b == 0 or max(int(im.size) for im in items) == 0:
            return out
        meta = np.array([[*im.shape, int(m)] for im, m in zip(items, masks)], np.int64)
        fills = np.ascontiguousarray(np.asarray(fills, np.uint8).reshape(b, -1))
        d = upload_many([_ptrs(items, outs), meta, np.asarray(keys, np.uint64).reshape(b), fills], s)
        launch(get_kernel(_SRC, "jitter", _OPTIONS), _grid(items), (_BLOCK, 1, 1),
               (d[0][0], d[0][1], d[1], d[2], d[3], np.int32(fills.shape[1]), np.int32(n_degree),
                np.int32(b)), stream=s, name="jitter")
    return out
