"""DALI's decoder-fused random crop, ``fn.decoders.image_random_crop`` (old names
``fn.image_decoder_random_crop``, ``ops.ImageDecoderRandomCrop``), and the DALI decoder
arguments every decoder accepts.

The window is DALI's RandomCropGenerator (dali/util/random_crop_generator.cc), drawn from
detaug's keyed per-sample streams (same rule and distributions, other values than DALI's
generator): per attempt an area fraction ``A ~ U(random_area)`` and an aspect ratio
``r = exp(U(log r0, log r1))``; ``w = round(sqrt(A W H r))``, ``h = round(sqrt(A W H / r))`` (at
least 1; halves away from zero, float32 as DALI's ``roundf``); accepted when ``w <= W``,
``h <= H`` and ``w / h`` lies in ``random_aspect_ratio``. Before any attempt, an image too wide
(``H * maxW < min area``, ``maxW = max(1, int(H * r1))``) takes ``(maxW, H)``, one too tall
``(W, maxH)``, ``maxH = max(1, int(W / r0))``. After ``num_attempts`` failures the fallback is the
whole image with its aspect ratio clamped into the range (``(maxW, H)`` or ``(W, maxH)``), scaled
down to at most ``random_area[1]`` of the image's area (each side times ``sqrt(scale)``,
truncated, at least 1). The anchor is uniform over the integer positions: ``x`` in
``0 .. W - w``, ``y`` in ``0 .. H - h``. (torchvision's RandomResizedCrop centres its fallback;
DALI's places it at random, as here; with the whole image in range the two agree.)

On the GPU (``device='mixed'``) the files are decoded by nvImageCodec in one batched call and the
window is a matrix on the decoded images' pending chain: it joins the warp of the ops that follow
(``fn.resize``, ``fn.crop_mirror_normalize``), so the crop costs no launch and no copy of its
own. nvImageCodec's region decode (decoding only the window's MCUs) is not used: the whole image
is decoded, as DALI's hardware decoder does for most images.
"""
from __future__ import annotations

import numpy as np

from ..core import geometry as G
from ..ops.decode import (DECODER_HINTS, check_decoder_args, decode_image, decoded_rule,
                          decoder_declaration)
from ..ops.geometry import apply_geometry, pair
from ..ops.registry import register
from ..graph.arg_check import BOOL, count, declare_kinds, declare_ranges, positive


def random_crop_windows(u, sizes, area, aspect, attempts):
    """DALI's random crop windows (see the module's docstring) for a batch, every attempt of
    every sample at once; each sample takes its first attempt that fits.

    Args:
        u: (B, 2 * attempts + 2) uniforms in [0, 1): per attempt (area, log-ratio), then (x, y).
        sizes: (B, 2) (H, W); area, aspect: (min, max) pairs; attempts: the number of attempts.
    Returns:
        (B, 4) int64 windows [x0, y0, x1, y1].

    Float32 as DALI's generator computes (its ``roundf`` / ``sqrtf``); the aspect ratio's
    ``exp`` is taken in float64 and rounded to float32 (the same value on every CPU).
    """
    f32 = np.float32
    u = np.asarray(u, np.float64)
    sizes = np.asarray(sizes, np.int64).reshape(-1, 2)
    H, W = sizes[:, 0], sizes[:, 1]
    r0, r1 = f32(aspect[0]), f32(aspect[1])
    a0, a1 = f32(area[0]), f32(area[1])
    hw = (H * W).astype(f32)
    min_area = hw * a0
    max_w = np.maximum(1, (H.astype(f32) * r1).astype(np.int64))
    max_h = np.maximum(1, (W.astype(f32) * (f32(1) / r0)).astype(np.int64))
    too_wide = H * max_w < min_area
    too_tall = ~too_wide & (W * max_h < min_area)
    # the attempts, (B, attempts)
    target = (a0 + (a1 - a0) * u[:, 0:2 * attempts:2].astype(f32)) * hw[:, None]
    lo, hi = np.log(np.float64(r0)), np.log(np.float64(r1))
    ratio = np.exp(lo + (hi - lo) * u[:, 1:2 * attempts:2].astype(f32).astype(np.float64)).astype(f32)
    w = np.maximum(1, _roundf(np.sqrt(target * ratio)).astype(np.int64))
    h = np.maximum(1, _roundf(np.sqrt(target / ratio)).astype(np.int64))
    r = w.astype(f32) / h.astype(f32)
    ok = (w <= W[:, None]) & (h <= H[:, None]) & (r >= r0) & (r <= r1)
    first = ok.argmax(1)
    rows = np.arange(len(sizes))
    cw, ch = w[rows, first], h[rows, first]
    # no attempt fitted: the whole image, its aspect clamped into range, shrunk to area[1]
    whole = W.astype(f32) / H.astype(f32)
    fw = np.where(whole > r1, max_w, W)
    fh = np.where(whole > r1, H, np.where(whole < r0, max_h, H))
    shrink = np.sqrt(np.minimum(f32(1), a1 * hw / (fw * fh).astype(f32)))
    fw = np.maximum(1, (fw.astype(f32) * shrink).astype(np.int64))
    fh = np.maximum(1, (fh.astype(f32) * shrink).astype(np.int64))
    failed = ~ok.any(1)
    cw, ch = np.where(failed, fw, cw), np.where(failed, fh, ch)
    cw = np.where(too_wide, max_w, np.where(too_tall, W, cw))
    ch = np.where(too_wide, H, np.where(too_tall, max_h, ch))
    # the anchor: uniform over the integer positions (DALI's uniform_int_distribution)
    x = np.minimum((u[:, -2] * (W - cw + 1)).astype(np.int64), W - cw)
    y = np.minimum((u[:, -1] * (H - ch + 1)).astype(np.int64), H - ch)
    return np.stack([x, y, x + cw, y + ch], -1)


def _roundf(x):
    """C's roundf: halves away from zero."""
    return np.sign(x) * np.floor(np.abs(x) + 0.5)


declare_kinds("decoders.image_random_crop", adjust_orientation=BOOL)
declare_ranges("decoders.image_random_crop", random_area=positive(1.0, form='range'),
               random_aspect_ratio=positive(form='range'), num_attempts=count(1, 1 << 16))
@register("decoders.image_random_crop", rule=decoded_rule, plans=False, roles={"decoder"},
          devices=("cpu", "mixed"), inputs=(1, 1), kind="other",
          input_names=("encoded",), aliases=("image_decoder_random_crop",),
          args={"output_type": "RGB", "random_area": (0.08, 1.0),
                "random_aspect_ratio": (0.75, 1.333333), "num_attempts": 10,
                **decoder_declaration()},
          hints={k: why for k, why in DECODER_HINTS.items()},
          arg_docs={"random_area": "the window's area as a fraction of the image's, drawn "
                                   "uniformly from [min, max]",
                    "random_aspect_ratio": "the window's width / height, drawn log-uniformly "
                                           "from [min, max]",
                    "num_attempts": "draws before the fallback (the whole image, its aspect "
                                    "clamped into range, shrunk to random_area's max)",
                    "adjust_orientation": "DALI's EXIF rotation: only False is accepted (boxes "
                                          "refer to the stored pixels)",
                    "dtype": "only types.UINT8"},
          output_spec="ImageBatch uint8 HWC of the window sizes (a pending crop on the GPU, fused "
                      "into the next warp)",
          doc="DALI's decoders.image_random_crop: decode, then a random window of DALI's "
              "RandomCropGenerator (random_area, random_aspect_ratio, num_attempts, fallback), "
              "drawn per sample from detaug's keyed streams")
def image_random_crop(ctx, op, inputs, args):
    check_decoder_args(op, args)
    area = pair(args["random_area"], "random_area")
    aspect = pair(args["random_aspect_ratio"], "random_aspect_ratio")
    attempts = int(args["num_attempts"])
    if not 0 < area[0] <= area[1] or not 0 < aspect[0] <= aspect[1] or attempts < 1:
        raise ValueError(f"{op.name}: random_area and random_aspect_ratio need 0 < min <= max, "
                         f"num_attempts >= 1; got random_area={area}, random_aspect_ratio="
                         f"{aspect}, num_attempts={attempts}")
    images = decode_image(ctx, op, inputs, {"output_type": args["output_type"]})

    def plan(sizes, boxes):
        u = ctx.rng(op).uniform(2 * attempts + 2)
        win = random_crop_windows(u, sizes, area, aspect, attempts)
        out = np.stack([win[:, 3] - win[:, 1], win[:, 2] - win[:, 0]], -1)
        return G.translate(-win[:, 0].astype(np.float64), -win[:, 1].astype(np.float64)), out, None

    return apply_geometry(ctx, op, [images], plan)[0]
