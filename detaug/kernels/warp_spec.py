"""Host preparation of the warp (detaug/kernels/warp.py): the arguments of its three
implementations validated into one :class:`_Spec` of per-sample arrays (inverse matrices, taps,
region, fill, normalisation), so that the twin, the OpenCV path and the CUDA launch read the same
values. The math is in warp.py's docstring."""
from __future__ import annotations

import numpy as np

from ..core.batch import DeviceImages
from ..core.geometry import canvas_rects, clamp_of_rect

_OUT_DTYPES = (np.dtype(np.uint8), np.dtype(np.float32), np.dtype(np.float16))
_LAYOUTS = ("HWC", "CHW")


class _Spec:
    """Validated, per-sample arrays shared by the three implementations."""

    __slots__ = ("images", "B", "C", "in_shapes", "in_pitches", "inv", "taps", "out_sizes", "fill",
                 "mean", "std", "out_dtype", "layout", "rect", "clamp", "slabs", "slab_fill", "nslab",
                 "proj")


def _per_sample_channels(value, B, C, name, default=None):
    """Broadcast a scalar, ``(C,)`` or ``(B, C)`` argument to a ``(B, C)`` float64 array."""
    if value is None:
        if default is None:
            return None
        value = default
    arr = np.asarray(value, dtype=np.float64)
    if arr.ndim == 0 or arr.shape == (C,) or arr.shape == (1,):
        return np.broadcast_to(arr, (B, C)).copy()
    if arr.shape == (B, C):
        return arr.copy()
    raise ValueError(f"{name} must be a scalar, shape ({C},) or ({B}, {C}); got {arr.shape}")


def _as_image_list(images):
    if hasattr(images, "ndim") and not isinstance(images, (list, tuple)):
        if images.ndim != 4:
            raise ValueError(f"a dense image batch must be (B, H, W, C); got {images.shape}")
        return [images[b] for b in range(images.shape[0])]
    return list(images)


def _projective_scale(inv: np.ndarray, out_sizes) -> np.ndarray:
    """(B, 2): the largest norms of the columns of the inverse map's Jacobian over the output
    canvas, for projective ``inv`` (B, 3, 3), taken at its 4 corners and its centre. With
    ``(x, y) = (N0, N1) / w`` the Jacobian's column k is ``(inv[0, k] - x inv[2, k],
    inv[1, k] - y inv[2, k]) / w``; its scale is a smooth function of ``1 / w``, which is
    monotone along every line of a canvas the map keeps on one side of the horizon, so the
    corners bound it."""
    h, w = (np.asarray(out_sizes, np.float64)[:, i] for i in (0, 1))
    pts = np.stack([np.stack([0 * w, 0 * h], -1), np.stack([w, 0 * h], -1), np.stack([0 * w, h], -1),
                    np.stack([w, h], -1), np.stack([w / 2, h / 2], -1)], 1)  # (B, 5, 2)
    num = pts @ np.swapaxes(inv[:, :2, :2], 1, 2) + inv[:, None, :2, 2]
    den = pts @ inv[:, 2, :2, None] + inv[:, None, 2, 2:3]
    with np.errstate(divide="ignore", invalid="ignore"):
        xy = num / den
        cols = [np.hypot(inv[:, None, 0, k] - xy[..., 0] * inv[:, None, 2, k],
                         inv[:, None, 1, k] - xy[..., 1] * inv[:, None, 2, k]) / np.abs(den[..., 0])
                for k in (0, 1)]
    s = np.stack([c.max(1) for c in cols], -1)
    return np.where(np.isfinite(s), s, np.inf)


def taps_for(inv: np.ndarray, antialias: bool, max_taps: int, out_sizes=None) -> np.ndarray:
    """Supersampling taps ``(nx, ny)`` per sample from the inverse matrices ``(B, 3, 3)``. For
    a projective sample (a perspective in the chain; ``out_sizes`` (B, 2) then needed) the
    local scale varies over the output: the taps are set by the most shrunk point of the
    canvas (:func:`_projective_scale`), for the whole sample, so no part is under-sampled and
    the less shrunk parts take more taps than they need (the same box filter over each output
    pixel, sampled more finely)."""
    B = inv.shape[0]
    if not antialias:
        return np.ones((B, 2), dtype=np.int64)
    s = np.hypot(inv[:, 0, :2], inv[:, 1, :2])  # (B, 2): norms of inv(A)'s columns 0 and 1
    proj = _proj_rows(inv)
    if proj.any():
        s = s.copy()
        s[proj] = _projective_scale(inv[proj], np.asarray(out_sizes)[proj])
    return np.clip(np.ceil(np.minimum(s, 2.0 * max_taps) - 1e-3), 1, max_taps).astype(np.int64)


def _proj_rows(m: np.ndarray) -> np.ndarray:
    """(B,) whether each (B, 3, 3) matrix is projective (last row not [0, 0, 1])."""
    return (m[:, 2, 0] != 0) | (m[:, 2, 1] != 0) | (m[:, 2, 2] != 1)


def _check_images(imgs) -> int:
    """Validate the images; return their common channel count."""
    C = None
    for b, img in enumerate(imgs):
        if img.ndim != 3 or img.shape[2] not in (1, 3) or img.shape[0] < 1 or img.shape[1] < 1:
            raise ValueError(f"image {b} must be HxWxC with C in (1, 3) and H, W >= 1; "
                             f"got {img.shape}")
        if img.dtype not in (np.uint8, np.float32):
            raise TypeError(f"image {b} must be uint8 or float32; got {img.dtype}")
        if img.dtype != imgs[0].dtype:
            raise TypeError(f"all images must have one dtype; image {b} is {img.dtype}, image 0 "
                            f"is {imgs[0].dtype}")
        if C is not None and img.shape[2] != C:
            raise ValueError(f"all images must have the same channel count; image {b} has "
                             f"{img.shape[2]}, image 0 has {C}")
        C = img.shape[2]
    return C or 1


def _check_geometry(matrices, out_sizes, B):
    """``(B, 3, 3)`` float64 invertible matrices (affine, or projective: a homography) and
    ``(B, 2)`` positive sizes."""
    mats = np.asarray(matrices, dtype=np.float64).reshape(-1, 3, 3) if B else np.zeros((0, 3, 3))
    if mats.shape != (B, 3, 3):
        raise ValueError(f"matrices must be ({B}, 3, 3); got {np.shape(matrices)}")
    if not np.all(np.isfinite(mats)):
        raise ValueError("matrices must be finite 3x3 matrices")
    det = mats[:, 0, 0] * mats[:, 1, 1] - mats[:, 0, 1] * mats[:, 1, 0]
    proj = _proj_rows(mats)
    if proj.any():
        det = np.where(proj, np.linalg.det(mats) / np.maximum(np.abs(mats).max((1, 2)), 1e-300) ** 3,
                       det)
    if np.any(np.abs(det) < 1e-12):
        bad = np.nonzero(np.abs(det) < 1e-12)[0].tolist()
        raise ValueError(f"singular matrix for samples {bad}")
    sizes = np.asarray(out_sizes, dtype=np.int64).reshape(-1, 2) if B else np.zeros((0, 2), int)
    if sizes.shape != (B, 2) or np.any(sizes < 1):
        raise ValueError(f"out_sizes must be ({B}, 2) positive (H_out, W_out); "
                         f"got {np.shape(out_sizes)}")
    return mats, sizes


def _device_images_channels(images) -> int:
    """The common channel count of a DeviceImages batch (checked from its shape table)."""
    sh = images.shapes
    if len(sh) == 0:
        return 1
    bad = np.nonzero((sh[:, 0] < 1) | (sh[:, 1] < 1) | ((sh[:, 2] != 1) & (sh[:, 2] != 3)))[0]
    if len(bad):
        raise ValueError(f"image {bad[0]} must be HxWxC with C in (1, 3) and H, W >= 1; "
                         f"got {tuple(sh[bad[0]])}")
    diff = np.nonzero(sh[:, 2] != sh[0, 2])[0]
    if len(diff):
        raise ValueError(f"all images must have the same channel count; image {diff[0]} has "
                         f"{sh[diff[0], 2]}, image 0 has {sh[0, 2]}")
    return int(sh[0, 2])


def _region(region, in_shapes, B, C):
    """(rect (B, 4), clamp (B, 4) int64, slabs (B, S, 4), slab_fill (B, S, C), nslab (B,)):
    the given region, checked, or the whole source image (no slabs)."""
    if region is None:
        rect = canvas_rects(in_shapes[:, :2])[:, [0, 2, 1, 3]]  # [0, W, 0, H]
        return (rect, clamp_of_rect(rect, in_shapes[:, :2]), np.zeros((B, 0, 7)),
                np.zeros((B, 0, C)), np.zeros(B, np.int64))
    rect, clamp, slabs, slab_fill, nslab = region
    rect = np.asarray(rect, np.float64).reshape(B, 4)
    clamp = np.asarray(clamp, np.int64).reshape(B, 4)
    slabs = np.asarray(slabs, np.float64)
    slabs = slabs.reshape(B, -1, slabs.shape[-1] if slabs.ndim == 3 and slabs.shape[-1] == 7 else 4)
    if slabs.shape[-1] == 4:  # affine slabs: denominator (0 ox + 0 oy) + 1
        slabs = np.concatenate([slabs, np.broadcast_to([0.0, 0.0, 1.0], slabs.shape[:2] + (3,))], -1)
    slab_fill = np.asarray(slab_fill, np.float64)
    slab_fill = np.broadcast_to(slab_fill.reshape(B, slabs.shape[1], -1) if slab_fill.size else
                                slab_fill, (B, slabs.shape[1], C)).copy()
    nslab = np.asarray(nslab, np.int64).reshape(B)
    if np.any(nslab < 0) or np.any(nslab > slabs.shape[1]):
        raise ValueError("region: nslab must lie in [0, slabs.shape[1]]")
    # the domain is the rect within the image (so that the kernel's taps stay inside it)
    hw = in_shapes[:, [1, 1, 0, 0]]
    rect = np.clip(rect, 0, hw)
    if (clamp < 0).any() or (clamp >= hw).any() or (clamp[:, 0::2] > clamp[:, 1::2]).any():
        raise ValueError("region: clamp must hold columns / rows of the image, lo <= hi")
    return rect, clamp, slabs, slab_fill, nslab


def _prepare(images, matrices, out_sizes, fill, antialias, max_taps, mean, std, out_dtype,
             layout, region=None) -> _Spec:
    if isinstance(images, DeviceImages):
        imgs, B = images, len(images)
        C = _device_images_channels(images)
        in_shapes, in_pitches = images.shapes, images.pitches
    else:
        imgs = _as_image_list(images)
        B = len(imgs)
        C = _check_images(imgs)
        in_shapes = np.array([img.shape for img in imgs], np.int64).reshape(-1, 3)
        in_pitches = in_shapes[:, 1] * in_shapes[:, 2]  # C-contiguous rows (see _device_inputs)
    mats, sizes = _check_geometry(matrices, out_sizes, B)
    if int(max_taps) < 1:
        raise ValueError("max_taps must be >= 1")
    out_dtype = np.dtype(out_dtype)
    if out_dtype not in _OUT_DTYPES:
        raise TypeError(f"out_dtype must be uint8, float32 or float16; got {out_dtype}")
    if layout not in _LAYOUTS:
        raise ValueError(f"layout must be 'HWC' or 'CHW'; got {layout!r}")
    if out_dtype == np.uint8 and (mean is not None or std is not None):
        raise ValueError("normalize (mean/std) needs a float out_dtype, not uint8")
    if B and not isinstance(images, DeviceImages) and imgs[0].dtype == np.float32 \
            and out_dtype != np.float32:
        # float images are warped in float and kept so: no rounding back to a byte grid
        raise ValueError(f"float32 images warp to float32, not {out_dtype}")

    spec = _Spec()
    spec.images, spec.B, spec.C = imgs, B, C
    spec.in_shapes, spec.in_pitches = in_shapes, in_pitches
    spec.inv = np.linalg.inv(mats) if B else mats.copy()
    proj = _proj_rows(mats)
    spec.inv[~proj, 2] = (0.0, 0.0, 1.0)
    if proj.any():  # homographies: the inverse scaled to a last entry of 1 where it is not 0
        d = spec.inv[proj, 2, 2]
        spec.inv[proj] /= np.where(d != 0, d, 1.0)[:, None, None]
    spec.proj = proj
    spec.taps = taps_for(spec.inv, antialias, int(max_taps), sizes)
    spec.out_sizes = sizes
    spec.fill = _per_sample_channels(fill, B, C, "fill")
    normalize = mean is not None or std is not None
    spec.mean = _per_sample_channels(mean, B, C, "mean", default=0.0) if normalize else None
    spec.std = _per_sample_channels(std, B, C, "std", default=1.0) if normalize else None
    if normalize and np.any(spec.std == 0):
        raise ValueError("std must be non-zero")
    spec.out_dtype, spec.layout = out_dtype, layout
    spec.rect, spec.clamp, spec.slabs, spec.slab_fill, spec.nslab = _region(region, in_shapes, B, C)
    return spec


def _out_shape(spec: _Spec, b: int) -> tuple:
    h, w = (int(s) for s in spec.out_sizes[b])
    return (h, w, spec.C) if spec.layout == "HWC" else (spec.C, h, w)


def _is_dense(spec: _Spec) -> bool:
    return spec.B > 0 and bool(np.all(spec.out_sizes == spec.out_sizes[0]))


def _allocate_numpy(spec: _Spec):
    """Dense ``(B, ...)`` buffer when all output sizes agree, else a list of arrays."""
    if _is_dense(spec):
        return np.empty((spec.B,) + _out_shape(spec, 0), dtype=spec.out_dtype)
    return [np.empty(_out_shape(spec, b), dtype=spec.out_dtype) for b in range(spec.B)]
