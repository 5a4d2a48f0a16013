"""Affine or projective warp with antialiasing and a fused normalize / layout / dtype epilogue.

Three implementations share one signature and one piece of math:

* :func:`warp_numpy` -- the float64 reference twin (readable, slow);
* :func:`warp_cv2`   -- the CPU backend's fast path (OpenCV), tested against the twin;
* :func:`warp_cupy`  -- one CUDA launch per batch (``warp.cu``), tested against the twin.

Math (docs/design.md coordinates: an image of ``W x H`` covers ``[0, W] x [0, H]``, pixel ``(i, j)``
has its centre at ``(j + 0.5, i + 0.5)``). ``matrices[b]`` maps INPUT coordinates to OUTPUT
coordinates; the warp samples through its inverse. Let ``A`` be the 2x2 part of ``M`` and
``sx = ||inv(A)[:, 0]||``, ``sy = ||inv(A)[:, 1]||`` (input pixels per output pixel step). With
``antialias`` the taps per axis are ``nx = clamp(ceil(sx - 1e-3), 1, max_taps)`` (``ny`` alike),
otherwise ``nx = ny = 1``. Output pixel ``(i, j)`` is the mean over ``a < nx, b < ny`` of the
bilinear sample at the input point ``inv(M) @ (j + (a + 0.5) / nx, i + (b + 0.5) / ny, 1)``:
(a projective ``M``, last row not ``[0, 0, 1]``: the point is divided by its third coordinate,
``x = ((a00 ox + a01 oy) + a02) / ((a20 ox + a21 oy) + a22)`` and ``y`` alike, ``inv(M)`` scaled to
``a22 = 1``; the taps ``nx, ny`` are then those of the most shrunk of the output canvas's corners
and centre, :func:`taps_for`; the CPU path uses ``cv2.warpPerspective``);
with ``u = x - 0.5, v = y - 0.5`` the four taps are ``floor(u) + {0, 1}`` x ``floor(v) + {0, 1}``
with the usual bilinear weights, clamped to the image (edge pixels replicate); a sample point
outside the source domain ``[0, W) x [0, H)`` takes ``fill`` as a whole. So a resize or a crop
inside the image never darkens its borders, and what a rotation or a paste brings in from outside
is exactly ``fill``. A fused chain passes its ``region`` (:func:`detaug.core.geometry.valid_region`):
the domain is then the rect ``[x_lo, x_hi) x [y_lo, y_hi)`` within the image (source
coordinates; ``fill`` outside it), the taps are clamped to its columns ``[cx0, cx1]`` and rows ``[cy0, cy1]``, and a
point whose output position ``(ox, oy)`` violates a slab ``0 <= (a ox + b oy) + c < r`` takes
that slab's fill (the first violated slab wins, before the rect). Then, per channel,
``out = (value - mean[c]) / std[c]`` when normalizing; a ``uint8`` output is
``clip(floor(value + 0.5), 0, 255)`` (no normalize allowed with ``uint8``).
"""
from __future__ import annotations

import math

import numpy as np

from ..core import recycle
from ..core.backend import upload_many
from ..core.batch import DeviceImages
# the points outside a warp's region (the twin's and the OpenCV path's fill)
from .warp_region import _fill_outside, _inside_masks, _slab_inside, _source_points
# the host preparation shared by the three implementations (detaug/kernels/warp_spec.py)
from .warp_spec import _Spec, _allocate_numpy, _is_dense, _out_shape, _prepare, taps_for
from . import resize_lines as RL
# the OpenCV path's flips by cv2.flip, and its in-place finish
from .warp_copy import _copy_steps, _put
_BLOCK = 256
_PIX_PER_LANE = 16  # output pixels per lane (a warp covers 32 * 16 consecutive output pixels)
_OPTIONS = ("-std=c++17", f"-DDETAUG_WARP_PPL={_PIX_PER_LANE}")  # warp.cu's compile options


def _finish(value: np.ndarray, spec: _Spec, b: int) -> np.ndarray:
    """Epilogue on a float HWC ``value``: normalize, round/cast, layout."""
    if spec.mean is not None:
        value = (value - spec.mean[b]) / spec.std[b]
    if spec.out_dtype == np.uint8:
        value = np.clip(np.floor(value + 0.5), 0, 255)
    if spec.layout == "CHW":
        value = value.transpose(2, 0, 1)
    return value.astype(spec.out_dtype)


# --------------------------------------------------------------------------- NumPy twin
def _bilinear(img: np.ndarray, x: np.ndarray, y: np.ndarray, clamp) -> np.ndarray:
    """Bilinear samples of ``img`` (H, W, C float64) at continuous points ``x, y`` (any shape),
    taps clamped to columns ``clamp[0]..clamp[1]`` and rows ``clamp[2]..clamp[3]``."""
    u, v = x - 0.5, y - 0.5
    u0, v0 = np.floor(u), np.floor(v)
    fu, fv = u - u0, v - v0
    out = np.zeros(x.shape + (img.shape[2],))
    for dv, wv in ((0, 1.0 - fv), (1, fv)):
        for du, wu in ((0, 1.0 - fu), (1, fu)):
            # clip as float before the int cast: far-away points must not overflow
            xc = np.clip(u0 + du, clamp[0], clamp[1]).astype(np.intp)
            yc = np.clip(v0 + dv, clamp[2], clamp[3]).astype(np.intp)
            out += (wu * wv)[..., None] * img[yc, xc]
    return out


def _warp_one_numpy(img, inv, nx, ny, out_hw, spec, b) -> np.ndarray:
    h, w = out_hw
    src = img.astype(np.float64)
    rect, clamp = spec.rect[b], spec.clamp[b]
    jj, ii = np.meshgrid(np.arange(w, dtype=np.float64), np.arange(h, dtype=np.float64))
    acc = np.zeros((h, w, img.shape[2]))
    for tb in range(ny):
        oy = ii + (tb + 0.5) / ny
        for ta in range(nx):
            ox = jj + (ta + 0.5) / nx
            x, y = _source_points(inv, ox, oy)
            inside = (x >= rect[0]) & (x < rect[1]) & (y >= rect[2]) & (y < rect[3])
            x, y = np.where(inside, x, 0.0), np.where(inside, y, 0.0)  # no NaN into the taps
            value = np.where(inside[..., None], _bilinear(src, x, y, clamp), spec.fill[b])
            for k in range(int(spec.nslab[b]) - 1, -1, -1):  # the first slab wins: applied last
                value = np.where(_slab_inside(spec.slabs[b, k], ox, oy)[..., None], value,
                                 spec.slab_fill[b, k])
            acc += value
    return acc / (nx * ny)


def warp_numpy(images, matrices, out_sizes, *, fill=0.0, antialias=True, max_taps=8,
               mean=None, std=None, out_dtype=np.uint8, layout="HWC", region=None):
    """Reference twin of the warp (float64 throughout, then the epilogue).

    Args:
        images: list of B uint8 ``(H, W, C)`` arrays (sizes may differ, C in 1, 3) or one
            dense ``(B, H, W, C)`` array; or float32 ones (host only), warped in float to a
            float32 output (``out_dtype`` float32: no rounding).
        matrices: ``(B, 3, 3)`` affine matrices mapping input to output coordinates.
        out_sizes: ``(B, 2)`` ``(H_out, W_out)``.
        fill: scalar, ``(C,)`` or ``(B, C)`` in input pixel units (before normalize).
        antialias, max_taps: supersampling where the warp shrinks (see module docstring).
        mean, std: optional scalar, ``(C,)`` or ``(B, C)``; ``out = (value - mean) / std``.
        out_dtype: uint8 (round half up, clamp; no normalize), float32 or float16 (float32
            only from float32 images).
        layout: "HWC" or "CHW".
        region: None (the whole source image), or a fused chain's ``(rect, clamp, slabs,
            slab_fill, nslab)`` from :func:`detaug.core.geometry.valid_region` (module docstring).

    Returns:
        One dense ``(B, H, W, C)`` / ``(B, C, H, W)`` array when all output sizes are equal,
        else a list of B arrays; ``[]`` for B = 0.
    """
    spec = _prepare(images, matrices, out_sizes, fill, antialias, max_taps, mean, std,
                    out_dtype, layout, region)
    out = _allocate_numpy(spec)
    for b in range(spec.B):
        value = _warp_one_numpy(spec.images[b], spec.inv[b], int(spec.taps[b, 0]),
                                int(spec.taps[b, 1]), spec.out_sizes[b], spec, b)
        out[b][...] = _finish(value, spec, b)
    return out


# --------------------------------------------------------------------------- OpenCV path
_T_MINUS = np.array([[1.0, 0, -0.5], [0, 1.0, -0.5], [0, 0, 1.0]])
_T_PLUS = np.array([[1.0, 0, 0.5], [0, 1.0, 0.5], [0, 0, 1.0]])


def _index_inverse(inv: np.ndarray, nx: int, ny: int) -> np.ndarray:
    """Inverse map in OpenCV's pixel-index coordinates (centres at integers) for the
    supersampled ``(ny * H, nx * W)`` grid: ``T(-0.5) @ inv(diag(nx, ny, 1) @ M) @ T(+0.5)``."""
    big_inv = inv @ np.diag([1.0 / nx, 1.0 / ny, 1.0])
    return _T_MINUS @ big_inv @ _T_PLUS


def _reaches_outside(inv, nx, ny, out_hw, spec, b) -> bool:
    """Whether any sample point of the output grid falls outside the region (the sample points'
    hull is the parallelogram of the four extreme ones, and the region is convex).

    A homography: where its divide (and each projective slab's) is positive at the four extreme
    points, it is positive over their hull, which it maps onto the hull of their images (a
    projective map keeps lines and convexity where the divide keeps its sign); so the grid is
    inside when those four points are, each by a margin (1e-7 of a pixel, relative) that
    rounding in the per-point test cannot cross. Otherwise (a divide not positive, a point
    within the margin): True, and every point is tested."""
    h, w = out_hw
    px, py = np.meshgrid([0.5 / nx, w - 0.5 / nx], [0.5 / ny, h - 0.5 / ny])
    if not spec.proj[b]:
        inside, slabs = _inside_masks(inv, px, py, spec, b, grid=False)
        return not (inside.all() and all(m.all() for m in slabs))
    if not ((inv[2, 0] * px + inv[2, 1] * py) + inv[2, 2] > 0).all():
        return True
    x, y = _source_points(inv, px, py)
    rect = spec.rect[b]
    if not _inside_by_margin([(x, rect[0], rect[1]), (y, rect[2], rect[3])]):
        return True
    for k in range(int(spec.nslab[b])):
        sl = spec.slabs[b, k]
        den = (sl[4] * px + sl[5] * py) + sl[6] if len(sl) > 4 else np.ones_like(px)
        if not (den > 0).all():
            return True
        if not _inside_by_margin([(((sl[0] * px + sl[1] * py) + sl[2]) / den, 0.0, sl[3])]):
            return True
    return False


def _inside_by_margin(tests) -> bool:
    """All values ``v`` of each ``(v, lo, hi)`` in ``[lo, hi)`` with a relative margin."""
    for v, lo, hi in tests:
        eps = 1e-7 * (1.0 + np.abs(v))
        if not ((v - eps >= lo) & (v + eps < hi)).all():
            return False
    return True


def _unit_steps(m_idx, src_hw, out_hw):
    """(rows, cols) slices of the source that an inverse index map with unit steps (+-1 on the
    diagonal, 0 off it) and integer offsets reads, all inside the source; else None. Such a map
    (an integer crop, a flip, a paste) samples pixel centres exactly: OpenCV's warp would copy
    the same pixels, slower."""
    if m_idx.shape[0] != 2 or m_idx[0, 1] != 0 or m_idx[1, 0] != 0:
        return None
    out = []
    for (step, off), n_out, n_src in (((m_idx[1, 1], m_idx[1, 2]), out_hw[0], src_hw[0]),
                                      ((m_idx[0, 0], m_idx[0, 2]), out_hw[1], src_hw[1])):
        if abs(step) != 1 or abs(off - round(off)) > 1e-9:
            return None
        first, step = int(round(off)), int(step)
        last = first + step * (n_out - 1)
        if min(first, last) < 0 or max(first, last) >= n_src:
            return None
        stop = last + step
        out.append(slice(first, None if stop < 0 else stop, step))
    return tuple(out)


def _resize_window(m_full, img_hw, out_hw, clamp):
    """((full H, full W), (rows, cols), inside) where an inverse index map ``m_full`` (on the
    whole image) is cv2.resize's (``x_src = (x + 0.5) sx - 0.5``, edges replicated) onto a full
    size whose scale is exactly the map's, then an integer window of it (a mosaic's tile:
    resize, then the part on the canvas); else None. ``inside``: every bilinear tap of the
    window lies in the clamp rectangle (so reading the whole image is reading the clamped
    one)."""
    if m_full.shape[0] != 2 or m_full[0, 1] != 0 or m_full[1, 0] != 0:
        return None
    full, window, inside = [], [], True
    for (sc, off), n_out, n_src, (c0, c1) in (
            ((m_full[1, 1], m_full[1, 2]), out_hw[0], img_hw[0], (clamp[2], clamp[3])),
            ((m_full[0, 0], m_full[0, 2]), out_hw[1], img_hw[1], (clamp[0], clamp[1]))):
        sc, off = float(sc), float(off)
        if not sc > 0:
            return None
        n_full = int(round(n_src / sc))
        first = (off + 0.5) / sc - 0.5
        if (n_full < 1 or abs(n_full * sc - n_src) > 1e-9 * n_src
                or abs(first - round(first)) > 1e-6):
            return None
        first = int(round(first))
        if first < 0 or first + n_out > n_full:
            return None
        lo = math.floor((first + 0.5) * sc - 0.5)
        hi = math.floor((first + n_out - 0.5) * sc - 0.5) + 1
        if min(max(lo, 0), n_src - 1) < c0 or min(max(hi, 0), n_src - 1) > c1:
            inside = False
        full.append(n_full)
        window.append(slice(first, first + n_out))
    return tuple(full), tuple(window), inside


def _corners_outside(inv, nx, ny, out_hw, rect) -> bool:
    """:func:`_reaches_outside` of an affine map into a region without slabs, in scalars: the
    four extreme sample points, mapped and tested as :func:`_inside_masks` maps and tests them
    (the same float64 operations in the same order)."""
    h, w = out_hw
    (a00, a01, a02), (a10, a11, a12) = inv[0].tolist(), inv[1].tolist()
    x_lo, x_hi, y_lo, y_hi = (float(v) for v in rect)
    for oy in (0.5 / ny, h - 0.5 / ny):
        for ox in (0.5 / nx, w - 0.5 / nx):
            x = a00 * ox + a01 * oy + a02
            y = a10 * ox + a11 * oy + a12
            if not (x >= x_lo and x < x_hi and y >= y_lo and y < y_hi):
                return True
    return False


def _cv2_one(cv2, img, inv, nx, ny, out_hw, spec, b, mean, std, out_dtype, layout, dst,
             resized=None):
    """Warp one sample into ``dst`` (its final layout and dtype). Large intermediates are
    avoided where OpenCV can write into ``dst`` directly (fresh pages are slow to fault in).
    Bilinear taps replicate the edge of the clamp rectangle (``BORDER_REPLICATE`` on that part
    of the image); where the grid reaches outside the region, the twin's own tests mark the
    points that take a fill.
    ``resized``: a dict shared by the call's samples, ``(id(image), H, W) -> image resized to
    (H, W)`` (a mosaic's image that is a tile of several groups is resized once: its tiles are
    windows of one resize, their lines that the clamp moves made apart)"""
    h, w = (int(s) for s in out_hw)
    C = img.shape[2]
    shrink = nx * ny > 1
    proj = bool(spec.proj[b])
    cx0, cx1, cy0, cy1 = (int(v) for v in spec.clamp[b])
    if proj:  # cv2.warpPerspective: the whole 3x3 map, shifted to the clamp rectangle's origin
        m_idx = _index_inverse(inv, nx, ny)
        m_idx[0] -= cx0 * m_idx[2]
        m_idx[1] -= cy0 * m_idx[2]
    else:
        m_idx = _index_inverse(inv, nx, ny)[:2]
        m_idx[0, 2] -= cx0
        m_idx[1, 2] -= cy0
    warp = cv2.warpPerspective if proj else cv2.warpAffine
    outside = (_corners_outside(inv, nx, ny, (h, w), spec.rect[b])
               if not proj and not spec.nslab[b] else
               _reaches_outside(inv, nx, ny, (h, w), spec, b))
    fills = [spec.fill[b]] + [spec.slab_fill[b, k] for k in range(int(spec.nslab[b]))]
    exact_fill = all(float(f).is_integer() and 0 <= f <= 255 for fv in fills for f in fv)
    src = img[cy0:cy1 + 1, cx0:cx1 + 1]
    src = src if (exact_fill or not outside) else src.astype(np.float32)
    flags = cv2.INTER_LINEAR | cv2.WARP_INVERSE_MAP
    plane = (lambda a: a[:, :, 0]) if C == 1 else (lambda a: a)
    # into dst as it is: uint8 to uint8, or float32 to float32 without normalisation (float
    # images warped in float: cv2.resize / warpAffine's float path, no rounding)
    direct = layout == "HWC" and not shrink and (
        (out_dtype == np.uint8 and src.dtype == np.uint8)
        or (out_dtype == np.float32 and src.dtype == np.float32 and mean is None and std is None))
    if direct and not outside:
        take = _unit_steps(m_idx, src.shape[:2], (h, w))
        if take is not None:  # a flip, an integer crop or paste: the pixels themselves
            _copy_steps(cv2, src, take, dst, plane)
            return
        m_full = m_idx.copy()
        m_full[0, 2] += cx0
        m_full[1, 2] += cy0
        fit = _resize_window(m_full, img.shape[:2], (h, w), (cx0, cx1, cy0, cy1))
        clamped = None
        if fit is not None and not fit[2]:
            # taps beyond the clamp rectangle (a mosaic tile's part on the canvas): the window
            # of the image's own resize (shared by its tiles), its lines whose taps leave the
            # rectangle made apart (kernels/resize_lines.py: uint8); elsewhere (float images,
            # an OpenCV whose rule is not the emulated one) the rectangle's edge replicated out
            # to the image's size
            if (img.dtype == np.uint8 and RL.emulable(img.shape[:2], fit[0])
                    and RL.emulation_holds()):
                clamped = (cx0, cx1, cy0, cy1)
            else:
                img = cv2.copyMakeBorder(src, cy0, img.shape[0] - 1 - cy1, cx0,
                                         img.shape[1] - 1 - cx1,
                                         cv2.BORDER_REPLICATE).reshape(img.shape)
        if fit is not None:  # a resize (then a window of it): cv2.resize, the same bilinear rule
            (fh, fw), (rows, cols), _ = fit
            key = (id(img), fh, fw)  # a bordered copy is new: never found
            full = None if resized is None else resized.get(key)
            if full is not None:
                np.copyto(plane(dst), full[rows, cols])
            elif (fh, fw) == (h, w) and clamped is None:
                _put(plane(dst), cv2.resize(plane(img), (w, h), dst=plane(dst),
                                            interpolation=cv2.INTER_LINEAR))
                full = plane(dst)  # the whole resize, in place: read by the image's other tiles
            else:
                full = recycle.empty((fh, fw) + plane(img).shape[2:], img.dtype)  # kept pages
                _put(full, cv2.resize(plane(img), (fw, fh), dst=full, interpolation=cv2.INTER_LINEAR))
                np.copyto(plane(dst), full[rows, cols])
            if resized is not None and img is spec.images[b]:
                resized[key] = full
            if clamped is not None:
                RL.fix_clamped(plane(dst), plane(img), (fh, fw), (rows, cols), clamped)
            return
    if direct:
        target = plane(dst)
        _put(target, warp(plane(src), m_idx, (w, h), dst=target, flags=flags,
                          borderMode=cv2.BORDER_REPLICATE))
        big = dst
    else:
        big = warp(plane(src), m_idx, (nx * w, ny * h), flags=flags,
                   borderMode=cv2.BORDER_REPLICATE)  # (H, W) where C == 1
    if outside:
        _fill_outside(big, inv, nx, ny, spec, b, fills)
    if direct:
        return
    if layout == "HWC":
        _cv2_epilogue(cv2, big, (w, h), shrink, mean, std, out_dtype, plane(dst))
    else:
        for c, p in enumerate(cv2.split(big) if C > 1 else [big]):
            _cv2_epilogue(cv2, p, (w, h), shrink, None if mean is None else mean[c:c + 1],
                          None if std is None else std[c:c + 1], out_dtype, dst[c])


def _cv2_epilogue(cv2, big, wh, shrink, mean, std, out_dtype, target):
    """``big``: the supersampled grid as OpenCV returns it ((H, W) or (H, W, c), uint8 or
    float32) -> block mean, normalize, cast, written into ``target`` (same channels)."""
    c = 1 if big.ndim == 2 else big.shape[2]
    if out_dtype == np.uint8:
        if shrink:  # INTER_AREA with integer factors is the exact block mean
            big = cv2.resize(big, wh, interpolation=cv2.INTER_AREA)
        if big.dtype != np.uint8:
            big = np.clip(np.floor(big + 0.5), 0, 255)
        _put(target, big)
        return
    m = np.zeros(c) if mean is None else mean
    s = np.ones(c) if std is None else std
    if big.dtype == np.uint8:
        # normalize through a lookup table: float64 math, one rounding, and fast
        lut = (np.arange(256, dtype=np.float64)[:, None] - m) / s
        lut = lut.reshape(256, 1, c) if c > 1 else lut
        if not shrink and out_dtype == np.float16:
            # cv2.LUT has no float16 table: copy the half bits through a uint16 table
            lut16 = lut.astype(np.float16).view(np.uint16)
            _put(target.view(np.uint16), cv2.LUT(big, lut16, dst=target.view(np.uint16)))
            return
        lut = lut.astype(np.float32)
        final = out_dtype == np.float32 and not shrink
        val = cv2.LUT(big, lut, dst=target) if final else cv2.LUT(big, lut)
    else:
        val = (big - m.astype(np.float32)) * (1.0 / s).astype(np.float32)
    if shrink:  # normalize is affine per channel, so it commutes with the block mean
        if out_dtype == np.float32:
            val = cv2.resize(val, wh, dst=target, interpolation=cv2.INTER_AREA)
        else:
            val = cv2.resize(val, wh, interpolation=cv2.INTER_AREA)
    _put(target, val)


def warp_cv2(images, matrices, out_sizes, *, fill=0.0, antialias=True, max_taps=8,
             mean=None, std=None, out_dtype=np.uint8, layout="HWC", region=None, out=None):
    """OpenCV implementation of :func:`warp_numpy` (same arguments and returns).

    ``out``: optional dense array (B, ...) of the result's shape and dtype to write into (the
    caller's batch buffer: no per-sample allocation and no stacking afterwards), or a list of B
    arrays, sample b's shape and dtype each (views allowed: a mosaic's tiles written straight
    into their canvas); returned as given.

    Per sample: ``cv2.warpAffine`` (bilinear, ``BORDER_REPLICATE``, fill masked in) onto the supersampled
    ``(ny * H, nx * W)`` grid, whose pixel centres are exactly the twin's tap positions, then
    ``cv2.resize(INTER_AREA)`` (exact block mean for integer factors), then the epilogue.
    OpenCV quantises sub-pixel positions to 1/32 px and uses 15-bit fixed-point weights for
    uint8, and rounds the supersampled grid to uint8, so results differ from the twin by up to a
    few grey levels at sharp edges (tests/kernels/test_warp.py states the tolerances); constant images
    and integer-coordinate maps (identity, flips, 90-degree turns, crops) are exact. Fast paths
    (uint8 HWC, one tap, no point outside): unit-step maps copy the pixels; resize maps (and an
    integer window of one) take ``cv2.resize`` (11-bit weights: within one level of the twin),
    an image that is several samples' source (a mosaic's partner) resized once per call; where
    a clamp rectangle smaller than the image moves a window's taps, the lines it moves are made
    by OpenCV's own rule (kernels/resize_lines.py: the resize of the rectangle's edge replicated
    out to the image's size, bit for bit; that border copy itself where the installed OpenCV
    does not resize by the rule); a warp reaching outside its region tests its fill only on the
    grid lines not wholly inside.
    """
    import cv2

    spec = _prepare(images, matrices, out_sizes, fill, antialias, max_taps, mean, std,
                    out_dtype, layout, region)
    if out is None:
        out = _allocate_numpy(spec)
    elif isinstance(out, (list, tuple)):  # one target a sample (views into a canvas, say)
        want = [_out_shape(spec, b) for b in range(spec.B)]
        if len(out) != spec.B or any(o.shape != w or o.dtype != spec.out_dtype
                                     for o, w in zip(out, want)):
            raise ValueError(f"out must be {spec.B} arrays of shapes {want[:3]}... "
                             f"and dtype {spec.out_dtype}")
    elif not _is_dense(spec) or out.shape != (spec.B,) + _out_shape(spec, 0) or out.dtype != spec.out_dtype:
        raise ValueError(f"out must be a dense {(spec.B,) + _out_shape(spec, 0)} {spec.out_dtype} array")
    resized = {}
    for b in range(spec.B):
        _cv2_one(cv2, spec.images[b], spec.inv[b], int(spec.taps[b, 0]), int(spec.taps[b, 1]),
                 spec.out_sizes[b], spec, b,
                 None if spec.mean is None else spec.mean[b],
                 None if spec.std is None else spec.std[b], spec.out_dtype, spec.layout, out[b],
                 resized)
    return out


# --------------------------------------------------------------------------- CUDA path
_KERNEL_DTYPE = {np.dtype(np.uint8): "u8", np.dtype(np.float32): "f32", np.dtype(np.float16): "f16"}
_META_INTS = 16  # in_h, in_w, in_pitch, out_h, out_w, nx, ny, out_offset, cx0, cx1, cy0, cy1,
#                 nslab, geo_offset, projective, 1 unused


def _device_inputs(cp, images):
    """Contiguous uint8 device images and their data pointers (dense batches stay one array;
    a DeviceImages batch already holds its pointers and owns its memory)."""
    if isinstance(images, DeviceImages):
        return [], images.ptrs
    if hasattr(images, "ndim") and not isinstance(images, (list, tuple)):
        dense = cp.ascontiguousarray(images)
        stride = dense.strides[0]
        ptrs = [dense.data.ptr + b * stride for b in range(dense.shape[0])]
        return [dense], ptrs
    keep = [cp.ascontiguousarray(img) for img in images]
    return keep, [img.data.ptr for img in keep]


def launch_plan(spec: _Spec) -> dict:
    """Host-side metadata of the CUDA launch (see warp.cu's header for the layout): everything
    but the input pointers. Kept apart from :func:`warp_cupy` so that tests can run the kernel's
    source on the CPU with the very same metadata."""
    B, C = spec.B, spec.C
    npix = spec.out_sizes[:, 0] * spec.out_sizes[:, 1]
    if int(npix.max()) * C >= 2**31 - 1:
        raise ValueError("an output image is too large for 32-bit pixel indexing")
    if B > 65535:
        raise ValueError("warp_cupy handles at most 65535 samples per call")
    if B and int(spec.in_pitches.max()) >= 2**31:
        raise ValueError("an input image row is too large for 32-bit indexing")
    offsets = np.zeros(B + 1, dtype=np.int64)
    np.cumsum(npix * C, out=offsets[1:])
    meta_i = np.empty((B, _META_INTS), dtype=np.int64)
    meta_i[:, 0:2] = spec.in_shapes[:, :2]
    meta_i[:, 2] = spec.in_pitches  # bytes per row of the uint8 HWC images
    meta_i[:, 3:5] = spec.out_sizes
    meta_i[:, 5:7] = spec.taps
    meta_i[:, 7] = offsets[:-1]
    meta_i[:, 8:12] = spec.clamp
    meta_i[:, 12] = spec.nslab
    meta_i[:, 14] = spec.proj
    meta_i[:, 15] = 0
    # per sample: inv(M) rows 0 and 1, the rect, inv(M) row 2, then the slabs (a, b, c, r,
    # d, e, f, fill[C]) each
    slabs = np.concatenate([spec.slabs, spec.slab_fill], -1).reshape(B, -1)
    geo = np.concatenate([spec.inv[:, :2, :].reshape(B, 6), spec.rect, spec.inv[:, 2, :], slabs], 1)
    meta_i[:, 13] = np.arange(B) * geo.shape[1]
    mean = spec.mean if spec.mean is not None else np.zeros((B, C))
    std = spec.std if spec.std is not None else np.ones((B, C))
    return dict(
        meta_i=meta_i,
        inv=np.ascontiguousarray(geo),
        meta_f=np.concatenate([spec.fill, mean, std], axis=1).astype(np.float32),
        offsets=offsets,
        # the _p kernel where a sample is projective (warp.cu: affine batches keep the kernel
        # that has no divide in it)
        name=f"warp_{_KERNEL_DTYPE[spec.out_dtype]}_{spec.layout.lower()}_c{C}"
             + ("_p" if spec.proj.any() else ""),
        grid=((int(npix.max()) + _BLOCK * _PIX_PER_LANE - 1) // (_BLOCK * _PIX_PER_LANE), B, 1),
        block=(_BLOCK, 1, 1),
    )


class WarpLaunch:
    """One :func:`warp_cupy` launch planned on the host: the kernel's metadata for every sample
    but the input pointers (:func:`launch_plan`), and the output's shape. Made by
    :func:`plan_warp` anywhere (a host worker process: no GPU call), run by :func:`launch_warp`."""

    __slots__ = ("plan", "B", "shapes", "out_dtype", "dense")

    def __init__(self, spec: _Spec):
        self.plan = launch_plan(spec)
        self.B, self.out_dtype, self.dense = spec.B, spec.out_dtype, _is_dense(spec)
        self.shapes = [_out_shape(spec, b) for b in range(spec.B)]

    def run(self, inputs, stream=None):
        """:func:`launch_warp` on ``inputs[0]`` (a DeviceImages: the planned images, made)."""
        return launch_warp(self, inputs[0].ptrs, inputs[0].pitches, stream)


def plan_warp(images, matrices, out_sizes, *, fill=0.0, antialias=True, max_taps=8, mean=None,
              std=None, out_dtype=np.uint8, layout="HWC", region=None) -> WarpLaunch:
    """The host half of :func:`warp_cupy` for a :class:`DeviceImages` batch (only its shapes and
    pitches are read: its pointers may be unknown yet), as a :class:`WarpLaunch`."""
    return WarpLaunch(_prepare(images, matrices, out_sizes, fill, antialias, max_taps, mean, std,
                               out_dtype, layout, region))


def launch_warp(wl: WarpLaunch, ptrs, pitches=None, stream=None):
    """The device half of :func:`warp_cupy`: the planned launch on images at ``ptrs`` (B,) whose
    rows are ``pitches`` (B,) bytes apart (default: as planned). ONE kernel launch; nothing is
    copied back. The output: one dense array, or a list of views into one flat buffer."""
    from .launch import get_kernel

    if wl.B == 0:
        return []
    plan = wl.plan
    meta_i = plan["meta_i"]
    if pitches is not None and not np.array_equal(pitches, meta_i[:, 2]):
        meta_i = meta_i.copy()
        meta_i[:, 2] = pitches
        if int(meta_i[:, 2].max()) >= 2**31:
            raise ValueError("an input image row is too large for 32-bit indexing")
    kernel = get_kernel("warp.cu", plan["name"], _OPTIONS)
    return launch_flat(kernel, plan, [np.asarray(ptrs, dtype=np.uint64), meta_i, plan["inv"],
                                      plan["meta_f"]], wl, stream)


def launch_flat(kernel, plan, host_args, spec, stream=None):
    """ONE launch of ``kernel`` on ``host_args`` (uploaded in one copy on ``stream``) into one
    flat output of ``spec.out_dtype``: dense ``(spec.B,) + spec.shapes[0]`` or one view a
    sample. The warp's and the resampling's device half (kernels/resample.py)."""
    import cupy as cp

    from .launch import launch

    offsets = plan["offsets"]
    stream = stream if stream is not None else cp.cuda.get_current_stream()
    with stream:
        args = tuple(upload_many(host_args, stream))
        flat = cp.empty(int(offsets[-1]), dtype=spec.out_dtype)
        out_arg = flat.view(cp.uint16) if spec.out_dtype == np.float16 else flat
        launch(kernel, plan["grid"], plan["block"], args + (out_arg,), stream=stream,
               name=plan["name"])
        del args  # freed in stream order (either pool), after this launch has read it
        if spec.dense:
            return flat.reshape((spec.B,) + spec.shapes[0])
        return [flat[offsets[b]:offsets[b + 1]].reshape(spec.shapes[b]) for b in range(spec.B)]


def warp_cupy(images, matrices, out_sizes, *, fill=0.0, antialias=True, max_taps=8,
              mean=None, std=None, out_dtype=np.uint8, layout="HWC", region=None, stream=None):
    """CUDA implementation of :func:`warp_numpy`: ONE kernel launch for the whole batch.

    ``images`` are cupy arrays (a list, ragged allowed, or one dense ``(B, H, W, C)``) or a
    :class:`DeviceImages`; ``matrices``, ``out_sizes``, ``fill``, ``mean`` and ``std`` are host
    values. Per-sample pointers, sizes, inverse matrices (float64), taps, output offsets and
    fill/mean/std are uploaded as four small arrays on ``stream`` (default: the current stream);
    nothing is copied back and nothing synchronises. A ragged result is a list of views into one
    flat buffer. The coordinate transform is float64, weights and sums float32. It is
    :func:`plan_warp` then :func:`launch_warp`.
    """
    import cupy as cp

    spec = _prepare(images, matrices, out_sizes, fill, antialias, max_taps, mean, std,
                    out_dtype, layout, region)
    if spec.B == 0:
        return []
    wl = WarpLaunch(spec)
    stream = stream if stream is not None else cp.cuda.get_current_stream()
    with stream:
        keep, ptrs = _device_inputs(cp, images)
        # `keep` may be freed once the launch is queued (stream-ordered pool)
        return launch_warp(wl, ptrs, None, stream)
