"""DALI's border repeat: a warp whose bilinear taps are clamped to the image (the edge pixels
repeat), for the geometric ops DALI runs without a ``fill_value`` (``warp_affine``, ``rotate``).
Host only and not fused: the images are materialised and warped on their own."""
from __future__ import annotations

import numpy as np

from ..core.batch import ImageBatch
from ..graph import materialize as M


def warp_clamped(img, inv, out_hw):
    """DALI's warp without fill_value: each output pixel centre mapped through ``inv`` (output
    -> input, continuous coordinates) and sampled bilinearly with every tap clamped to the
    image (the border repeats); uint8 images rounded half up to uint8, float32 ones kept float32
    (not rounded). ``img`` (H, W, C)."""
    h, w = img.shape[:2]
    oy, ox = np.mgrid[0:out_hw[0], 0:out_hw[1]].astype(np.float64) + 0.5
    x = inv[0, 0] * ox + inv[0, 1] * oy + inv[0, 2] - 0.5
    y = inv[1, 0] * ox + inv[1, 1] * oy + inv[1, 2] - 0.5
    x0, y0 = np.floor(x), np.floor(y)
    fx, fy = (x - x0)[..., None], (y - y0)[..., None]
    xs = [np.clip(x0 + k, 0, w - 1).astype(np.intp) for k in (0, 1)]
    ys = [np.clip(y0 + k, 0, h - 1).astype(np.intp) for k in (0, 1)]
    src = img.astype(np.float64)
    top = src[ys[0], xs[0]] * (1 - fx) + src[ys[0], xs[1]] * fx
    bottom = src[ys[1], xs[0]] * (1 - fx) + src[ys[1], xs[1]] * fx
    v = top * (1 - fy) + bottom * fy
    if img.dtype == np.float32:
        return v.astype(np.float32)
    return np.clip(np.floor(v + 0.5), 0, 255).astype(np.uint8)


def warp_border(ctx, op, inputs, plan, move_boxes):
    """A geometric op without fill_value, DALI's border repeat (warp_affine, rotate), on the
    host: the images are materialised and warped here by ``plan(sizes, None) -> (matrices
    (B, 3, 3) input -> output, out sizes, _)`` (not fused); ``move_boxes(boxes)`` moves a box
    input by the same plan."""
    images = inputs[0]
    if images.device == "gpu":
        raise NotImplementedError(f"{op.name}: without fill_value (DALI's border repeat) it runs "
                                  "on the CPU only for now; give fill_value= on the GPU")
    img = M.images(images, ctx)
    sizes = np.asarray(img.sizes(), np.int64)
    m, out, _ = plan(sizes, None)
    out = np.maximum(np.asarray(out, np.int64).reshape(-1, 2), 1)
    inv = np.linalg.inv(m)
    data = [warp_clamped(np.asarray(a), inv[k], out[k]) for k, a in enumerate(list(img.data))]
    same = all(d.shape == data[0].shape for d in data)
    warped = ImageBatch(np.stack(data) if data and same and img.is_dense else data, "cpu",
                        img.layout)
    if len(inputs) == 1:
        return warped
    return (warped,) + tuple(move_boxes(v) for v in inputs[1:])
