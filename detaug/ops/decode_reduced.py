"""Reduced-scale CPU decode (``fn.decoders.image(..., reduce=r)``, r in 1..8; off by default):
libjpeg-turbo's DCT scaling decodes a JPEG straight to 1/r of its size, for pipelines that shrink
the image anyway (the YOLO recipe's longer side to 640 from larger sources).

Sizes: a source of W x H decodes to ``ceil(W / r) x ceil(H / r)`` (libjpeg's scaled size). Pixel
``(i, j)`` of the output stands for the source's pixels ``[r i, r i + r) x [r j, r j + r)``, so the
continuous coordinates map by ``x -> x / r`` (the engine's convention: pixel centres at
``j + 0.5``); boxes passed to the decoder come back scaled by exactly that, on a canvas of the
reduced size (DESIGN.md: boxes refer to the decoded pixel grid; the annotated size is checked as
``ceil(annotated / r)``).

Not the pixels of a full decode and a resize: the DCT scaling keeps the low frequencies of each
8 x 8 block. Measured 2026-11-28 on the benchmark's 64 COCO-like JPEGs (600-640 x 448-500, 4:2:0)
against the full decode's mean of each r x r block (the area resize at exactly 1/r, the same
pixel map): mean absolute difference 0.58 / 0.49 / 0.41 levels at r = 2 / 4 / 8 (worst image
2.6 / 1.4 / 0.8; largest pixel 42 / 19 / 14 levels, at sharp edges; pixels off by more than 2
levels 4.5 / 1.9 / 0.3 %). Against ``cv2.resize(INTER_AREA)`` to the rounded-up size (a scale
slightly off 1/r when W or H is not a multiple of r) 2.4 / 3.4 / 4.6 levels, mostly that shift.
Cost, one thread: 1.10 / 0.93 / 0.77 ms an image against 1.5-1.7 for a full decode and a resize
(the entropy decoding, which the scaling does not shorten, is most of it).

Paths (``detaug.ops.decode.decode_reduced``; this module holds the sizes and the block mean):
a plain baseline JPEG (decode.py's fast-path test) by OpenCV's ``IMREAD_REDUCED_*``;
other JPEGs by Pillow's ``draft`` (the same libjpeg scaling); both at p, the largest power of two
dividing r, and the rest of r (3, 5, 7) by the block mean below. Anything else (PNG, a JPEG too
small to scale) decoded in full and reduced by the mean of each r x r block (edge pixels
repeated to fill the last block), rounded half up: the same pixel-to-source map.
"""
from __future__ import annotations

import numpy as np

REDUCE = tuple(range(1, 9))  # 2, 4, 8 by libjpeg; 3, 5, 6, 7 partly by the block mean


def reduced_hw(h, w, r: int):
    """The decoded (h, w) of an h x w source at 1/r (libjpeg's: rounded up)."""
    return -(-int(h) // r), -(-int(w) // r)


def block_mean(a: np.ndarray, r: int) -> np.ndarray:
    """uint8 HWC to ``ceil(H / r) x ceil(W / r)``: each output pixel the mean of its r x r source
    block (the last row and column of blocks filled by repeating the edge), rounded half up."""
    h, w, c = a.shape
    oh, ow = reduced_hw(h, w, r)
    pad = np.pad(a, ((0, oh * r - h), (0, ow * r - w), (0, 0)), mode="edge")
    s = pad.reshape(oh, r, ow, r, c).sum((1, 3), dtype=np.uint32)
    return ((s + (r * r) // 2) // (r * r)).astype(np.uint8)
