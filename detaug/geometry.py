"""Per-sample 3x3 matrices in continuous pixel coordinates (DESIGN.md: an image of W x H covers
[0, W] x [0, H]; pixel (i, j) has its centre at (j + 0.5, i + 0.5)). Every matrix maps INPUT
coordinates to OUTPUT coordinates; all builders are vectorised over the batch: arguments are
scalars or (B,) arrays and the result is (B, 3, 3) float64."""
from __future__ import annotations

import numpy as np


def _batch(*args):
    arrays = [np.asarray(a, dtype=np.float64) for a in args]
    b = max((a.size for a in arrays if a.ndim), default=1)
    return [np.broadcast_to(a.reshape(-1) if a.ndim else a, (b,)) for a in arrays], b


def identity(b: int) -> np.ndarray:
    return np.tile(np.eye(3), (b, 1, 1))


def translate(tx, ty) -> np.ndarray:
    (tx, ty), b = _batch(tx, ty)
    m = identity(b)
    m[:, 0, 2], m[:, 1, 2] = tx, ty
    return m


def scale(sx, sy) -> np.ndarray:
    (sx, sy), b = _batch(sx, sy)
    m = identity(b)
    m[:, 0, 0], m[:, 1, 1] = sx, sy
    return m


def flip(width, height, horizontal, vertical) -> np.ndarray:
    """Mirror x -> W - x where ``horizontal`` and y -> H - y where ``vertical`` (0/1 per sample)."""
    (w, h, fh, fv), b = _batch(width, height, horizontal, vertical)
    m = identity(b)
    fh, fv = fh != 0, fv != 0
    m[fh, 0, 0], m[fh, 0, 2] = -1.0, w[fh]
    m[fv, 1, 1], m[fv, 1, 2] = -1.0, h[fv]
    return m


def cos_sin(degrees):
    """cos and sin of ``degrees``, exact (0, +-1) at multiples of 90 so that quarter turns move
    pixels exactly."""
    rad = np.deg2rad(degrees)
    c, s = np.cos(rad), np.sin(rad)
    quarter = np.isclose(np.mod(degrees, 90.0), 0.0) | np.isclose(np.mod(degrees, 90.0), 90.0)
    c = np.where(quarter, np.round(c), c)
    s = np.where(quarter, np.round(s), s)
    return c, s


def linear_about(linear: np.ndarray, center_in, center_out) -> np.ndarray:
    """The affine map x -> L (x - c_in) + c_out for (B, 2, 2) ``linear`` and (B, 2) centres."""
    b = len(linear)
    m = identity(b)
    m[:, :2, :2] = linear
    c_in = np.asarray(center_in, dtype=np.float64).reshape(b, 2)
    c_out = np.asarray(center_out, dtype=np.float64).reshape(b, 2)
    m[:, :2, 2] = c_out - (linear @ c_in[:, :, None])[:, :, 0]
    return m


def rotation_linear(degrees) -> np.ndarray:
    """(B, 2, 2) counter-clockwise rotation as displayed (y points down), as DALI and torchvision:
    a point right of the centre moves up."""
    (deg,), b = _batch(degrees)
    c, s = cos_sin(deg)
    return np.stack([np.stack([c, s], -1), np.stack([-s, c], -1)], -2)


def shear_linear(shear_x_deg, shear_y_deg) -> np.ndarray:
    (sx, sy), b = _batch(shear_x_deg, shear_y_deg)
    out = np.tile(np.eye(2), (b, 1, 1))
    out[:, 0, 1] = np.tan(np.deg2rad(sx))
    out[:, 1, 0] = np.tan(np.deg2rad(sy))
    return out


def apply_points(m: np.ndarray, pts: np.ndarray) -> np.ndarray:
    """Map (B, K, 2) points through (B, 3, 3) matrices."""
    # matmul, not einsum: einsum's set-up costs tens of microseconds on these tiny batches
    return pts @ np.swapaxes(m[:, :2, :2], 1, 2) + m[:, None, :2, 2]


def canvas_region(m: np.ndarray, region: np.ndarray, out_sizes_hw: np.ndarray) -> np.ndarray:
    """(B, 4) enclosing box of ``region`` (B, 4) mapped through ``m``, clipped to the output."""
    x0, y0, x1, y1 = (region[:, i] for i in range(4))
    corners = np.stack([np.stack([x0, y0], -1), np.stack([x1, y0], -1),
                        np.stack([x0, y1], -1), np.stack([x1, y1], -1)], 1)
    p = apply_points(m, corners)
    out = np.concatenate([p.min(1), p.max(1)], -1)
    hw = np.asarray(out_sizes_hw, np.float64)
    return np.clip(out, 0, np.stack([hw[:, 1], hw[:, 0], hw[:, 1], hw[:, 0]], -1))
