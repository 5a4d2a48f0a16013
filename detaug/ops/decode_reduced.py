"""Reduced-scale CPU decode (``fn.decoders.image(..., reduce=r)``, r in 2, 4, 8; off by default):
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

Paths: a plain baseline JPEG (decode.py's fast-path test) by OpenCV's ``IMREAD_REDUCED_*``;
other JPEGs by Pillow's ``draft`` (the same libjpeg scaling); anything else (PNG, a JPEG too small
to scale) decoded in full and reduced by the mean of each r x r block (edge pixels repeated to
fill the last block), rounded half up: the same pixel-to-source map.
"""
from __future__ import annotations

import io

import numpy as np

REDUCE = (1, 2, 4, 8)


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


def _opencv_reduced(a8, im, output_type, r):
    import cv2

    from .decode import _plain_baseline_jpeg, _scan_start

    if im.mode not in ("RGB", "L") or (output_type == "GRAY" and im.mode != "L") or \
            not _plain_baseline_jpeg(a8, _scan_start(a8)):
        return None
    gray = output_type == "GRAY"
    flag = {2: cv2.IMREAD_REDUCED_GRAYSCALE_2 if gray else cv2.IMREAD_REDUCED_COLOR_2,
            4: cv2.IMREAD_REDUCED_GRAYSCALE_4 if gray else cv2.IMREAD_REDUCED_COLOR_4,
            8: cv2.IMREAD_REDUCED_GRAYSCALE_8 if gray else cv2.IMREAD_REDUCED_COLOR_8}[r]
    a = cv2.imdecode(a8, flag | cv2.IMREAD_IGNORE_ORIENTATION)
    if a is None or a.shape[:2] != reduced_hw(im.size[1], im.size[0], r):
        return None
    if a.ndim == 2:
        return a[:, :, None]
    return cv2.cvtColor(a, cv2.COLOR_BGR2RGB) if output_type == "RGB" else a


def decode_reduced(buf, output_type: str, r: int) -> np.ndarray:
    """Decode one encoded image at 1/r of its size (see the module docstring); errors as
    :func:`detaug.ops.decode.decode_pillow`'s."""
    from PIL import Image

    from .decode import check_pixels, decode_pillow

    if r == 1:
        return decode_pillow(buf, output_type)
    a8 = np.frombuffer(memoryview(buf), np.uint8)
    with Image.open(io.BytesIO(a8)) as im:
        check_pixels(im.size)
        w, h = im.size
        want = reduced_hw(h, w, r)
        if im.format == "JPEG":
            fast = _opencv_reduced(a8, im, output_type, r)
            if fast is not None:
                return fast
            if w >= r and h >= r and im.mode in ("RGB", "L", "CMYK"):
                im.draft(None, (w // r, h // r))  # libjpeg scale r (decode.py: Pillow's rule)
                if im.size == (want[1], want[0]):
                    return decode_pillow_image(im, output_type)
    return block_mean(decode_pillow(buf, output_type), r)


def decode_pillow_image(im, output_type: str) -> np.ndarray:
    """An opened Pillow JPEG (drafted) as uint8 HWC in ``output_type``, as decode_pillow's
    conversions."""
    mode = "L" if output_type == "GRAY" else "RGB"
    im.load()
    if im.mode != mode:
        im = im.convert(mode)
    a = np.asarray(im)
    if a.ndim == 2:
        a = a[:, :, None]
    return np.ascontiguousarray(a[:, :, ::-1]) if output_type == "BGR" else a
