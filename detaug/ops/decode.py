"""Image decoding: Pillow on the host ('cpu'), nvImageCodec on the GPU ('mixed').

EXIF orientation is never applied (boxes refer to the stored pixel grid), on either backend. A
decoded size that differs from the annotated size is an error naming the file.
"""
from __future__ import annotations

import io

import numpy as np

from ..batch import ImageBatch
from ..executor import SampleError
from .registry import register
from .sources import EncodedBatch

_MODES = {"RGB": ("RGB", 3), "BGR": ("RGB", 3), "GRAY": ("L", 1)}


def decode_pillow(buf, output_type="RGB"):
    """Decode one encoded image to uint8 HWC. Grayscale, palette and CMYK JPEGs become 3
    channels when RGB/BGR is asked. Raises on truncated or corrupt data (Pillow's own errors)."""
    from PIL import Image

    mode, _ = _MODES[output_type]
    with Image.open(io.BytesIO(memoryview(buf))) as im:
        im.load()
        if im.mode != mode:
            im = im.convert(mode)
        a = np.asarray(im)
    if a.ndim == 2:
        a = a[:, :, None]
    if output_type == "BGR":
        a = np.ascontiguousarray(a[:, :, ::-1])
    return a


def _check_size(arr, enc, k):
    if enc.sizes is None:
        return
    h, w = enc.sizes[k]
    if (h and h != arr.shape[0]) or (w and w != arr.shape[1]):
        raise SampleError(f"{enc.paths[k]}: decoded size {arr.shape[1]}x{arr.shape[0]} differs from "
                          f"the annotated size {w}x{h}", k, enc.paths[k])


def _decode_one(enc, k, output_type):
    try:
        arr = decode_pillow(enc.data[k], output_type)
    except SampleError:
        raise
    except Exception as e:  # Pillow raises OSError, SyntaxError, ValueError... for bad data
        raise SampleError(f"{enc.paths[k]}: cannot decode image ({type(e).__name__}: {e})",
                          k, enc.paths[k]) from None
    _check_size(arr, enc, k)
    return arr


def jpeg_complete(buf) -> bool:
    """True unless ``buf`` is a JPEG whose end-of-image marker is missing (a truncated file).
    nvImageCodec decodes a truncated JPEG without an error, so the GPU path checks this first."""
    b = bytes(buf[:2])
    if b != b"\xff\xd8":
        return True
    tail = bytes(buf[-64:]).rstrip(b"\x00")
    return tail.endswith(b"\xff\xd9")


@register("decoders.image", devices=("cpu", "mixed"), inputs=(1, 1), kind="other",
          args={"output_type": "RGB", "hw_decoder_load": None, "use_fast_idct": None},
          output_spec="ImageBatch uint8 HWC (C=3 for RGB/BGR, 1 for GRAY), ragged",
          doc="decode JPEG/PNG/...: Pillow on the host, nvImageCodec on the GPU (mixed)")
def decode_image(ctx, op, inputs, args):
    enc = inputs[0]
    if not isinstance(enc, EncodedBatch):
        raise TypeError(f"{op.name}: decoders.image takes encoded images from a reader")
    out_type = args["output_type"]
    if out_type not in _MODES:
        raise ValueError(f"{op.name}: output_type must be one of {sorted(_MODES)}")
    if op.device == "mixed":
        from . import gpu_decode

        return gpu_decode.decode_batch(ctx, enc, out_type)
    images = ctx.map_samples(lambda k: _decode_one(enc, k, out_type), len(enc))
    return ImageBatch(images, "cpu")
