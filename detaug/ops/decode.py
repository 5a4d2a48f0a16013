"""Image decoding: Pillow on the host ('cpu'), nvImageCodec on the GPU ('mixed').

CPU fast path: a baseline JPEG (one scan) whose Pillow mode is RGB or L, whose entropy-coded data
hold no marker but restarts and end with the EOI, is decoded by OpenCV's ``imdecode`` (about 1.6x
faster than Pillow here), EXIF orientation ignored. Its pixels are Pillow's (both libjpeg-turbo,
same IDCT and upsampling: checked on every JPEG of examples/ and the tests, and on mutated files,
tests/ops/test_decode_fast_path.py). Everything else goes to Pillow, as before: progressive and
CMYK JPEGs, other formats, GRAY from a colour JPEG (Pillow's RGB -> L is not libjpeg's Y), data
OpenCV refuses, and any file whose structure the scan doubts: OpenCV accepts some corrupt data
that Pillow refuses (a marker inside the entropy-coded data, a truncated file), so the errors and
the skips on bad data stay Pillow's, word for word. The header is always parsed by Pillow first
(its errors and the pixel limit below come before any pixel is decoded).

``reduce=r`` (r in 1..8; CPU only, off by default): decode at 1/r (libjpeg's DCT scaling at 2,
4, 8), sizes and boxes as detaug/ops/decode_reduced.py says.

EXIF orientation is never applied (boxes refer to the stored pixel grid), on either backend. A
decoded size that differs from the annotated size is an error naming the file.

Resource limit (CPU decode): an image whose header declares more than ``MAX_PIXELS`` pixels
(width x height) is refused before any pixel is decoded (a PNG bomb declaring 30,000 x 30,000
is a few kB on disk and 2.7 GB decoded): a SampleError naming the file and the limit, or a
counted skip under ``on_error="skip"``. Set ``detaug.ops.decode.MAX_PIXELS`` (``None``: no
limit of ours). Pillow keeps its own hard limit, ``2 * PIL.Image.MAX_IMAGE_PIXELS``
(178,956,970 by default): to decode larger images raise both.
"""
from __future__ import annotations

import io

import numpy as np

from ..core import shapes as S
from ..core.batch import EncodedBatch, ImageBatch
from ..core.errors import SampleError
from ..graph.arg_check import BOOL, Num, declare_kinds, declare_ranges
from . import gpu_decode
from .decode_reduced import REDUCE, block_mean, reduced_hw
from .registry import register

MAX_PIXELS = 178_956_970  # width x height; see the module docstring

_MODES = {"RGB": ("RGB", 3), "BGR": ("RGB", 3), "GRAY": ("L", 1)}


def decode_pillow(buf, output_type="RGB"):
    """Decode one encoded image to uint8 HWC. Grayscale, palette and CMYK JPEGs become 3
    channels when RGB/BGR is asked; 16-bit grayscale is scaled to 8 bits. Raises on truncated
    or corrupt data (Pillow's own errors), and ValueError on pixels with no 8-bit scale
    (floats, signed or 32-bit ints beyond 16 bits), which Pillow would clip silently."""
    from PIL import Image

    mode, _ = _MODES[output_type]
    with Image.open(io.BytesIO(memoryview(buf))) as im:  # lazy: reads the header only
        check_pixels(im.size)
        fast = _opencv_jpeg(buf, im, output_type)
        if fast is not None:
            return fast
        im.load()
        if im.mode.startswith("I") or im.mode == "F":
            # 16-bit grayscale: Pillow's convert("L") clips at 255 (an image of mean 127 came
            # out 98% white); scale to 8 bits instead, v * 255 / 65535 rounded
            im = Image.fromarray(_to_8bit(_sixteen_bit(im)))
        if im.mode != mode:
            im = im.convert(mode)
        a = np.asarray(im)
    if a.ndim == 2:
        a = a[:, :, None]
    if output_type == "BGR":
        a = np.ascontiguousarray(a[:, :, ::-1])
    return a


def _scan_start(a8: np.ndarray) -> int:
    """The offset of the first scan's entropy-coded data (after the SOS segment) of a JPEG whose
    segments before it follow one another with no junk between (``FF xx`` + length each), or
    0 when they do not (Pillow then decodes the file: its parser skips junk)."""
    n, at = a8.size, 2
    while at + 4 <= n:
        if a8[at] != 0xFF or not 0xC0 <= a8[at + 1] <= 0xFE or 0xD0 <= a8[at + 1] <= 0xD9:
            return 0
        end = at + 2 + (int(a8[at + 2]) << 8 | int(a8[at + 3]))
        if a8[at + 1] == 0xDA:
            return end if end < n else 0
        at = end
    return 0


def _plain_baseline_jpeg(a8: np.ndarray, start: int) -> bool:
    """True when the bytes from ``start`` (the first scan's data, after its SOS header) hold no
    marker but restarts (``FF D0..D7``), stuffed bytes (``FF 00``) and fill bytes, and end with
    the EOI (``FF D9``): one scan, not truncated, no marker in its data. Such files decode to
    the same pixels, or fail the same way, in OpenCV and Pillow (mutated files, the fast path's
    test); a second scan (progressive), a marker within the data or a missing EOI go to Pillow,
    whose errors on them OpenCV does not raise."""
    n = a8.size
    if start <= 0 or n - start < 2 or a8[n - 2] != 0xFF or a8[n - 1] != 0xD9:
        return False
    data = a8[start:n - 1]
    ff = np.flatnonzero(data == 0xFF)
    nxt = a8[start + ff + 1]
    marker = (nxt != 0x00) & (nxt != 0xFF) & ((nxt < 0xD0) | (nxt > 0xD7))
    return int(np.count_nonzero(marker)) == 1 and bool(marker[-1]) and ff[-1] == n - 2 - start


def _opencv_jpeg(buf, im, output_type):
    """The pixels of a plain baseline JPEG by OpenCV (see the module docstring), or None: the
    caller decodes with Pillow. ``im``: the file opened by Pillow (header parsed, nothing
    decoded)."""
    if im.format != "JPEG" or im.mode not in ("RGB", "L") or \
            (output_type == "GRAY" and im.mode != "L"):
        return None
    try:
        import cv2
    except ImportError:  # pragma: no cover - a core dependency
        return None
    a8 = np.frombuffer(memoryview(buf), np.uint8)
    if not _plain_baseline_jpeg(a8, _scan_start(a8)):
        return None
    if output_type == "GRAY":
        flag = cv2.IMREAD_GRAYSCALE
    elif output_type == "RGB" and hasattr(cv2, "IMREAD_COLOR_RGB"):  # OpenCV >= 4.10
        flag = cv2.IMREAD_COLOR_RGB
    else:
        flag = cv2.IMREAD_COLOR
    a = cv2.imdecode(a8, flag | cv2.IMREAD_IGNORE_ORIENTATION)  # EXIF: stored pixel grid
    if a is None or a.shape[:2] != (im.size[1], im.size[0]):
        return None  # OpenCV refused it: Pillow decodes it or names the fault
    if a.ndim == 2:
        return a[:, :, None]
    if output_type == "RGB" and flag == cv2.IMREAD_COLOR:
        a = cv2.cvtColor(a, cv2.COLOR_BGR2RGB)
    return a


# ---- reduced-scale decode (decode_reduced.py's docstring: sizes, pixels, boxes) ----
def _opencv_reduced(a8, im, output_type, r):
    import cv2

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
    """Decode one encoded image at 1/r of its size (decode_reduced.py's docstring); errors as
    :func:`decode_pillow`'s. A JPEG is scaled by libjpeg at ``p``, the largest power of two
    dividing r (2, 4 or 8), and the rest, ``r / p`` (3, 5, 7; 3 for r = 6), by the block mean:
    ``ceil(ceil(W / p) / q) = ceil(W / r)`` and the pixel map stays ``x -> x / r``."""
    from PIL import Image

    if r == 1:
        return decode_pillow(buf, output_type)
    p = min(r & -r, 8)
    q = r // p
    a8 = np.frombuffer(memoryview(buf), np.uint8)
    with Image.open(io.BytesIO(a8)) as im:
        check_pixels(im.size)
        w, h = im.size
        want = reduced_hw(h, w, p)
        if im.format == "JPEG" and p > 1:
            part = _opencv_reduced(a8, im, output_type, p)
            if part is None and w >= p and h >= p and im.mode in ("RGB", "L", "CMYK"):
                im.draft(None, (w // p, h // p))  # libjpeg scale p (Pillow's rule, see tests)
                if im.size == (want[1], want[0]):
                    part = decode_pillow_image(im, output_type)
            if part is not None:
                return block_mean(part, q) if q > 1 else part
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


def _sixteen_bit(im) -> np.ndarray:
    """The samples of an integer or float grayscale image (Pillow modes ``I;16*``, ``I``,
    ``F``) as 16-bit values, or ValueError: signed 16-bit, 32-bit ints outside 0..65535 and
    floats have no defined 8-bit scale, and Pillow's conversion clips them silently."""
    if im.mode == "F":
        raise ValueError("32-bit float pixels (Pillow mode F): no 8-bit scale is defined; "
                         "convert the image to 8 or 16 bits first")
    if im.mode not in ("I", "I;16", "I;16B", "I;16L", "I;16N"):
        raise ValueError(f"signed or unusual integer pixels (Pillow mode {im.mode}): no 8-bit "
                         "scale is defined; convert the image to 8 or 16 bits first")
    a = np.asarray(im)
    if a.size and (a.min() < 0 or a.max() > 65535):
        raise ValueError(f"32-bit integer pixels (Pillow mode {im.mode}) from {a.min()} to "
                         f"{a.max()}, outside 0..65535: no 8-bit scale is defined; convert "
                         "the image to 8 or 16 bits first")
    return a


def _to_8bit(a16: np.ndarray) -> np.ndarray:
    """16-bit grayscale samples (0..65535) as uint8: ``floor(v * 255 / 65535 + 0.5)``."""
    v = np.clip(a16.astype(np.int64), 0, 65535)
    return ((v * 255 + 32767) // 65535).astype(np.uint8)


class PixelLimitError(ValueError):
    """An image header declares more pixels than ``MAX_PIXELS``."""


def check_pixels(size):
    """Raise PixelLimitError when ``(width, height)`` is over ``MAX_PIXELS``."""
    limit = MAX_PIXELS
    if limit is not None and size[0] * size[1] > limit:
        raise PixelLimitError(f"header declares {size[0]} x {size[1]} = {size[0] * size[1]:,} "
                              f"pixels, over the limit of {limit:,} "
                              "(detaug.ops.decode.MAX_PIXELS); refused before decoding")


def _check_size(arr, enc, k, reduce=1):
    if enc.sizes is None:
        return
    h, w = enc.sizes[k]
    eh, ew = reduced_hw(h, w, reduce)
    if (h and eh != arr.shape[0]) or (w and ew != arr.shape[1]):
        at = f" (at 1/{reduce}: {ew}x{eh})" if reduce != 1 else ""
        raise SampleError(f"{enc.paths[k]}: decoded size {arr.shape[1]}x{arr.shape[0]} differs from "
                          f"the annotated size {w}x{h}{at}", k, enc.paths[k])


def _decode_one(enc, k, output_type, reduce=1):
    try:
        arr = decode_reduced(enc.data[k], output_type, reduce) if reduce != 1 else \
            decode_pillow(enc.data[k], output_type)
    except SampleError:
        raise
    except PixelLimitError as e:
        raise SampleError(f"{enc.paths[k]}: {e}", k, enc.paths[k]) from None
    except Exception as e:  # noqa: BLE001
        from PIL import Image

        if isinstance(e, Image.DecompressionBombError):  # over Pillow's own hard limit
            raise SampleError(f"{enc.paths[k]}: {e}; refused before decoding (limits: "
                              f"detaug.ops.decode.MAX_PIXELS = {MAX_PIXELS}, and Pillow's "
                              "2 * PIL.Image.MAX_IMAGE_PIXELS)", k, enc.paths[k]) from None
        # Pillow raises OSError, SyntaxError, ValueError... for bad data
        raise SampleError(f"{enc.paths[k]}: cannot decode image ({type(e).__name__}: {e})",
                          k, enc.paths[k]) from None
    _check_size(arr, enc, k, reduce)
    return arr


def _decode_kept(cache, enc, k, output_type, reduce=1):
    """Sample ``k`` decoded, or found in ``cache`` (keyed by its bytes and the decode's
    arguments: the same pixels; detaug/runtime/decode_cache.py), its annotated size checked
    either way."""
    key = cache.key(enc.data[k], output_type, reduce)
    arr = cache.get(key)
    if arr is None:
        return cache.put(key, _decode_one(enc, k, output_type, reduce))
    _check_size(arr, enc, k, reduce)
    return arr


def as_encoded(op, v, sample_index=None) -> EncodedBatch:
    """Encoded images from a reader, or as DALI's external sources give them: a list of 1-D uint8
    arrays of the files' bytes (of any lengths), or a (B, L) uint8 array (one file a row).

    Fed samples have no file name: errors name them ``<op sample index i>``, ``i`` the sample's
    index in the epoch (``sample_index``; a per-sample callable's ``idx_in_epoch`` when not
    shuffled), so that each bad sample is counted once under ``on_error='skip'`` (named by its
    place in the batch, two bad samples at one place of two batches were counted once)."""
    if isinstance(v, EncodedBatch):
        return v
    rows = list(v) if isinstance(v, (list, tuple, np.ndarray)) else None
    if rows is None or not all(isinstance(r, np.ndarray) and r.dtype == np.uint8 and r.ndim == 1
                               for r in rows):
        raise TypeError(f"{op.name}: takes encoded images: a reader's first output, or 1-D uint8 "
                        f"arrays of file bytes (one per sample); got {type(v).__name__}")
    if sample_index is None or len(sample_index) != len(rows):
        names = [f"<{op.name} sample {k} of the batch>" for k in range(len(rows))]
    else:
        names = [f"<{op.name} sample index {int(i)}>" for i in sample_index]
    return EncodedBatch([np.ascontiguousarray(r) for r in rows], names)


# DALI's decoder arguments that tune its memory or codec and change no value here
DECODER_HINTS = {
    "hw_decoder_load": "DALI's share of images for the hardware JPEG decoder",
    "use_fast_idct": "nvJPEG's fast IDCT; Pillow and nvImageCodec decode as they always do",
    "device_memory_padding": "nvJPEG's device buffer preallocation",
    "host_memory_padding": "nvJPEG's pinned host buffer preallocation",
    "device_memory_padding_jpeg2k": "nvJPEG2000's device buffer preallocation",
    "host_memory_padding_jpeg2k": "nvJPEG2000's host buffer preallocation",
    "preallocate_width_hint": "the hardware decoder's preallocated width",
    "preallocate_height_hint": "the hardware decoder's preallocated height",
    "hybrid_huffman_threshold": "nvJPEG's host/device Huffman split",
    "affine": "DALI's thread affinity",
    "split_stages": "deprecated in DALI",
    "use_chunk_allocator": "deprecated in DALI",
    "memory_stats": "DALI's allocation statistics",
    "bytes_per_sample_hint": "DALI's output preallocation",
    "preserve": "DALI's pruning of unused ops (detaug runs what the outputs need)",
    "jpeg_fancy_upsampling": "the mixed decoder's chroma upsampling (detaug's CPU decoder, "
                             "Pillow, always upsamples smoothly; nvImageCodec decodes as it does)",
}
# DALI's decoder arguments that would change values: accepted at the value detaug gives
DECODER_CHECKED = {"adjust_orientation": None, "dtype": None}


def check_decoder_args(op, args) -> None:
    """Refuse, by name, a DALI decoder argument whose value detaug does not give."""
    if args.get("adjust_orientation"):
        raise NotImplementedError(f"{op.name}: adjust_orientation=True (EXIF orientation) is not "
                                  "applied: detaug's boxes refer to the stored pixel grid; pass "
                                  "adjust_orientation=False")
    dt = args.get("dtype")
    if dt is not None and str(getattr(dt, "name", dt)).lower() not in ("uint8", "types.uint8"):
        raise NotImplementedError(f"{op.name}: dtype={dt!r}: detaug's decoders give uint8 "
                                  "(types.UINT8); cast after decoding (fn.cast)")


def decoded_rule(ins, a):
    """Images within the bound of the encoded input's annotated sizes (at 1/reduce); 1 channel
    for GRAY; boxes, when given, on the images' canvas."""
    ch = 1 if "GRAY" in str(a.get("output_type", "RGB")).upper() else 3
    bound = ins[0].bound if ins and isinstance(ins[0], S.Encoded) else None
    r = a.get("reduce", 1)
    if bound is not None and r in REDUCE:
        bound = reduced_hw(bound[0], bound[1], r)
    img = S.Img(None, bound, ch, 1)
    if len(ins) < 2:
        return S.Out((img,))
    return S.Out((img, ins[1].on(img) if isinstance(ins[1], S.Boxes) else None))


def _reduced_boxes(op, boxes, images, r):
    """The reader's boxes on the grid of images decoded at 1/r: ``x -> x / r`` (see
    decode_reduced.py), canvas the decoded sizes."""
    from ..core.batch import BoxBatch

    if not isinstance(boxes, BoxBatch):
        raise TypeError(f"{op.name}: its second input must be boxes (a reader's), got "
                        f"{type(boxes).__name__}")
    if boxes.geometry is not None or boxes.region is not None or boxes.device != "cpu":
        raise ValueError(f"{op.name}: takes the boxes as a reader gives them (on the host, no op "
                         "applied before the decode)")
    boxes.require_xyxy()
    canvas = np.array([im.shape[:2] for im in images], np.int64).reshape(-1, 2)
    if len(canvas) != len(boxes.offsets) - 1:
        raise ValueError(f"{op.name}: {len(canvas)} images but boxes of "
                         f"{len(boxes.offsets) - 1} samples")
    if r == 1:
        return boxes.replace(canvas=canvas)
    from ..core.instances import SHAPE_FIELDS

    shaped = [k for k in SHAPE_FIELDS if k in boxes.fields]
    if shaped:  # only the boxes are scaled here: the shapes would stay on the full grid
        raise ValueError(f"{op.name}: reduce={r} scales the boxes only; the field(s) {shaped} "
                         "cannot follow (decode at full size, then resize)")
    scaled = (np.asarray(boxes.boxes, np.float64) / r).astype(np.float32)
    return boxes.replace(boxes=scaled, canvas=canvas)


def plans_decode(a, device) -> bool:
    """A GPU decode (mixed) of RGB or GRAY images plans on the host: its sizes are the
    annotated ones (the decode checks them)."""
    from ..core import types

    try:
        kind = types.image_type(a.get("output_type", "RGB"))
    except ValueError:
        return False
    return device == "mixed" and kind in ("RGB", "GRAY")


def _cpu_only_forms(inputs, kwargs):
    """At trace time: ``reduce`` as an int, and ``reduce`` > 1 or a boxes input only on
    the CPU (device='auto' then means 'cpu'; 'mixed' is refused, naming the argument)."""
    r = kwargs.get("reduce", 1)
    if isinstance(r, (int, float, np.number)) and not isinstance(r, bool) and r in REDUCE:
        r = kwargs["reduce"] = int(r)  # (others: refused by the declared range, by name)
    if r != 1 or len(inputs) > 1:
        what = f"reduce={r}" if r != 1 else "a boxes input"
        if kwargs.get("device") == "auto":
            kwargs = {**kwargs, "device": "cpu"}
        elif kwargs.get("device") == "mixed":
            raise NotImplementedError(f"decoders.image: {what} is CPU-only (device='cpu'); the "
                                      "GPU decoder decodes at full size and takes no boxes")
    return inputs, kwargs


def decoder_declaration() -> dict:
    """The hint and checked arguments every DALI-style decoder declares."""
    return {**{k: None for k in DECODER_HINTS}, **DECODER_CHECKED}


@register("decoders.image", rule=decoded_rule, plans=plans_decode,
          roles={"decoder", "decode_service", "decode_cache"}, devices=("cpu", "mixed"),
          inputs=(1, 2),
          outputs=lambda n, a: n, kind="other", rewrite=_cpu_only_forms,
          args={"output_type": "RGB", "reduce": 1, **decoder_declaration()},
          aliases=("image_decoder", "host_decoder", "nv_jpeg_decoder"),
          hints=dict(DECODER_HINTS),
          arg_docs={"adjust_orientation": "DALI's EXIF rotation: only False is accepted (boxes "
                                          "refer to the stored pixels)",
                    "dtype": "only types.UINT8",
                    "reduce": "CPU only, off (1) by default: decode at 1/r of the size, r in "
                              "1..8 (JPEG: libjpeg's DCT scaling at 2, 4, 8, a block mean for "
                              "the odd rest; not the pixels of a full decode and a resize); "
                              "sizes ceil(W / r) x ceil(H / r); pass the reader's boxes as a "
                              "second input to get them scaled (x / r)"},
          output_spec="ImageBatch uint8 HWC (C=3 for RGB/BGR, 1 for GRAY), ragged",
          doc="decode JPEG/PNG/...: Pillow on the host, nvImageCodec on the GPU (mixed); "
              "device='auto': 'mixed' where a GPU, cupy and nvImageCodec are present, else 'cpu'")
def decode_image(ctx, op, inputs, args):
    """Decode; with a second input (boxes), return (images, boxes) on the decoded grid."""
    check_decoder_args(op, args)
    enc = as_encoded(op, inputs[0], ctx.sample_index)
    from ..core import types

    try:
        out_type = types.image_type(args["output_type"])
    except ValueError:
        raise ValueError(f"{op.name}: output_type must be one of {sorted(_MODES)}") from None
    r = args.get("reduce", 1)
    if r not in REDUCE:
        raise ValueError(f"{op.name}: reduce must be a whole number in 1..8, got {r!r}")
    if op.device == "mixed" and (r != 1 or len(inputs) > 1):
        raise NotImplementedError(f"{op.name}: reduce={r} and a boxes input are CPU-only "
                                  "(device='cpu'); the GPU decoder decodes at full size")
    try:
        if op.device == "mixed":  # (fed bytes are decoded here: the GPU decode's errors come now)
            return gpu_decode.decode_batch(ctx, enc, out_type, _decode_one)
        cache = getattr(ctx, "decode_cache", None)
        cache = cache(op) if cache is not None else None
        if cache is None:
            images = ctx.map_samples(lambda k: _decode_one(enc, k, out_type, r), len(enc))
        else:
            images = ctx.map_samples(lambda k: _decode_kept(cache, enc, k, out_type, r), len(enc))
    except SampleError as e:
        fed = id(inputs[0]) in getattr(ctx, "fed_values", ())  # set by external_source
        if not fed or ctx.pipeline.on_error != "skip":
            raise
        # whole batches fed by an iterable or feed_input: on_error='skip' has nothing to put in
        # the sample's place (the same batch would come again, as many times as the epoch has
        # records), so the error is raised at once
        raise SampleError(f"{e} (fed by an iterable or feed_input, whose samples cannot be "
                          "replaced: on_error='skip' skips only a reader's or a per-sample "
                          "callable's samples)", None, e.path) from None
    if len(inputs) > 1:
        return ImageBatch(images, "cpu"), _reduced_boxes(op, inputs[1], images, r)
    return ImageBatch(images, "cpu")


declare_kinds("decoders.image", adjust_orientation=BOOL)
declare_ranges("decoders.image", reduce=Num(1, 8, integer=True, none=False))
