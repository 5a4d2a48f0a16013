"""Batched GPU decode with nvImageCodec (the library DALI decodes with), with a CPU fallback
inside the same op for what the GPU cannot or must not decode.

nvImageCodec 0.9 decodes a truncated JPEG without an error and returns None for bytes it
cannot parse, so: a JPEG without its end-of-image marker is sent to the CPU decoder (Pillow
raises on truncation, and the error names the file), and a None result is decoded on the CPU,
which either succeeds (a format the GPU path lacks) or raises with the file named.
"""
from __future__ import annotations

import atexit
import collections
import functools
import threading
import warnings
import weakref

import numpy as np

from ..core.backend import upload
from ..core.batch import DeviceImages, EncodedBatch, ImageBatch, PlannedImages
from ..core.errors import NotPlannable, SampleError

_lock = threading.Lock()
# One decoder per (device, live thread): a Decoder is not safe for concurrent decode calls (seen
# on nvImageCodec 0.9: shared by two device workers, it returned wrong pixels). Decoders are never
# destroyed while the process runs: images they decoded may outlive the thread that decoded them
# (seen: a decoder dropped with its thread, then freeing its images crashed the process). A new
# thread that gets a dead thread's id reuses that decoder, which is then free.
_decoders = {}
# Decoded images are released a few batches later, not as soon as the warp is queued, so that a
# free inside the decoder's allocator never waits on work still queued on the stream. The queue
# belongs to the pipeline, which empties it before its streams go (an image freed after the
# stream it was decoded on was destroyed crashed the process).
_pipelines = weakref.WeakSet()


class StreamBound:
    """The owners of decoded images, as one owner that keeps the stream they were decoded on.

    nvImageCodec frees an image on the stream it was decoded on, so an image freed after its
    stream was destroyed crashed the process: a DALI-mode pipeline hands out its decoded images
    as they are, and a program that kept them past the pipeline freed them at a later garbage
    collection (a segmentation fault). The stream is held here through a module-level table,
    never by this object, so it is never part of a garbage cycle with the images (whose
    finalisers run in any order, PEP 442). When the last owner of a stream goes, the stream is
    only retired: it is dropped at the next decode (:func:`_sweep`, in plain code, after the
    collection that freed the images has finished), or at exit after every image."""

    __slots__ = ("owners", "_sid", "__weakref__")

    def __init__(self, owners, stream):
        _sweep()
        self.owners, self._sid = owners, id(stream)
        with _held_lock:
            _streams_held.setdefault(self._sid, [stream, 0])[1] += 1
        _bound.add(self)

    def release(self):
        """Let the images go; the stream is retired once no owner of it is left."""
        self.owners = None
        sid, self._sid = self._sid, None
        if sid is None:
            return
        with _held_lock:
            entry = _streams_held.get(sid)
            if entry is not None:
                entry[1] -= 1
                if entry[1] <= 0:
                    _retired.append(_streams_held.pop(sid)[0])

    def __del__(self):
        self.release()


_bound = weakref.WeakSet()
# its own lock, reentrant: a finaliser (release) may run inside any allocation, also while this
# thread holds it, or holds the decoders' lock
_held_lock = threading.RLock()
_streams_held = {}  # id(stream) -> [stream, owners alive]
_retired = []  # streams whose images are gone (or going, in a collection under way)


def _sweep():
    """Drop the streams retired before now (never called from a finaliser, so any collection
    that retired one has finished freeing its images)."""
    with _held_lock:
        if not _retired:
            return
        gone, _retired[:] = list(_retired), []
    del gone


def keep_queue(pipe):
    q = getattr(pipe, "_decoded_keep", None)
    if q is None:
        q = pipe._decoded_keep = collections.deque(maxlen=8)
        _pipelines.add(pipe)
    return q


def _decoder(device_id: int):
    from nvidia import nvimgcodec

    key = (device_id, threading.get_ident())
    with _lock:
        if key not in _decoders:
            _decoders[key] = warm_up(nvimgcodec.Decoder(device_id=device_id), device_id)
        return _decoders[key]


@functools.lru_cache(maxsize=None)
def _tiny_jpeg() -> bytes:
    """A 16 x 16 baseline 4:2:0 JPEG (made once with Pillow)."""
    import io

    from PIL import Image

    buf = io.BytesIO()
    Image.new("RGB", (16, 16), (90, 140, 200)).save(buf, "JPEG", quality=90)
    return buf.getvalue()


def warm_up(decoder, device_id: int):
    """Make ``decoder`` decode the same pixels whatever it decoded before: nvImageCodec fixes
    how many images of a call its hardware JPEG decoder takes from the decoder's FIRST call
    (that count rounded up to a multiple of the engines; the rest go to the CUDA decoder, whose
    pixels differ by up to 3 levels: benchmarks/RESULTS.md, findings). A first call of
    CHUNK images, the most any later call holds, gives every later image to the hardware
    decoder where it can take it, in a decode process and in a thread alike. Returns it."""
    import cupy as cp
    from nvidia import nvimgcodec

    with cp.cuda.Device(device_id):
        s = cp.cuda.Stream(non_blocking=True)
        blob = _tiny_jpeg()
        out = decoder.decode([nvimgcodec.CodeStream(blob) for _ in range(CHUNK)],
                             params=decode_params("RGB"), cuda_stream=s.ptr)
        s.synchronize()
        del out
    return decoder


@atexit.register
def _release():
    """At exit, images (kept by pipelines, or handed out and still held) before their decoders."""
    for pipe in list(_pipelines):
        pipe._decoded_keep.clear()
    for bound in list(_bound):
        bound.release()
    _retired.clear()
    _decoders.clear()


def _wrap(cp, image):
    """A cupy view of a decoded image, without the host wait that cupy's CUDA-array-interface
    import would make on the producer's stream: the decode was queued on the pipeline's own
    stream, so stream order already makes the pixels ready for the kernels that follow. The view
    keeps ``image`` (the owner of the memory) alive. Used only for the rare image whose layout is
    not plain rows of HWC pixels."""
    cai = image.__cuda_array_interface__
    shape = tuple(cai["shape"])
    dtype = np.dtype(cai["typestr"])
    strides = cai.get("strides")
    nbytes = (int(np.prod(shape)) * dtype.itemsize if strides is None
              else sum((n - 1) * st for n, st in zip(shape, strides)) + dtype.itemsize)
    mem = cp.cuda.UnownedMemory(cai["data"][0], nbytes, image)
    return cp.ndarray(shape, dtype, cp.cuda.MemoryPointer(mem, 0), strides=strides)


def _describe(cai):
    """(pointer, (H, W, C), row pitch) of a decoded uint8 image from its CUDA array interface, or
    None where its layout is not rows of packed HWC pixels."""
    shape = cai["shape"]
    if cai["typestr"] != "|u1" or len(shape) not in (2, 3):
        return None
    h, w = shape[0], shape[1]
    c = shape[2] if len(shape) == 3 else 1
    st = cai.get("strides")
    if st is None:
        return cai["data"][0], (h, w, c), w * c
    if st[1] != c or (len(st) == 3 and st[2] != 1):
        return None
    return cai["data"][0], (h, w, c), st[0]


CHUNK = 64


def jpeg_complete(buf) -> bool:
    """True unless ``buf`` is a JPEG whose end-of-image marker is missing (a truncated file).
    nvImageCodec decodes a truncated JPEG without an error, so the GPU path checks this first."""
    b = bytes(buf[:2])
    if b != b"\xff\xd8":
        return True
    tail = bytes(buf[-64:]).rstrip(b"\x00")
    return tail.endswith(b"\xff\xd9")


def code_streams(data) -> list:
    """nvImageCodec CodeStreams of encoded buffers, their headers parsed; None where the GPU
    path must not or cannot take a file: a JPEG without its end-of-image marker (nvImageCodec
    decodes a truncated JPEG without an error) or bytes whose header it cannot parse. Those go
    to the CPU decoder, which decodes them or raises naming the file."""
    from nvidia import nvimgcodec

    out = []
    for buf in data:
        s = None
        if jpeg_complete(buf):
            try:
                s = nvimgcodec.CodeStream(buf)
                if s.height <= 0 or s.width <= 0:  # (the header is parsed here, lazily)
                    s = None
            except Exception:  # not an image it can parse: the CPU decoder judges
                s = None
        out.append(s)
    return out


@functools.lru_cache(maxsize=None)
def decode_params(output_type: str):
    """nvImageCodec DecodeParams for 'RGB' or 'GRAY' (EXIF orientation off, 8 bits)."""
    from nvidia import nvimgcodec

    cs = nvimgcodec.ColorSpec
    # nvImageCodec 0.9 names sRGB 'SRGB' (older releases: 'RGB')
    spec = cs.GRAY if output_type == "GRAY" else getattr(cs, "SRGB", None) or cs.RGB
    return nvimgcodec.DecodeParams(apply_exif_orientation=False, color_spec=spec,
                                   allow_any_depth=False)


def decode_chunks(decoder, srcs, output_type, chunk, stream_ptr, images=None) -> list:
    """Decode CodeStreams ``srcs`` in calls of at most ``chunk`` images: with nvImageCodec 0.9,
    smaller calls decoded faster than one call for the whole batch (timed on the same
    images). ``images``: nvImageCodec Images to decode into, one per source (a
    decode process's ring regions), else the decoder makes its own. None where an image could
    not be decoded, and for every image of a call that raised (a warning says so): the caller
    hands those to the CPU decoder, one by one, which decodes each or names the file it cannot."""
    params = decode_params(output_type)
    results = []
    for lo in range(0, len(srcs), chunk):
        part = srcs[lo:lo + chunk]
        into = {} if images is None else {"images": images[lo:lo + chunk]}
        try:
            results.extend(decoder.decode(part, params=params, cuda_stream=stream_ptr, **into))
        except (RuntimeError, ValueError) as e:  # nvImageCodec's errors (others propagate):
            # not the whole batch unnamed, but each image on the CPU, which names a bad file
            warnings.warn(f"nvImageCodec raised on a call of {len(part)} images ({type(e).__name__}: "
                          f"{e}); they are decoded on the CPU", RuntimeWarning, stacklevel=2)
            if images is not None:  # whatever the failed call queued into the caller's buffers
                import cupy as cp   # is done before the CPU-decoded pixels are written there

                cp.cuda.runtime.deviceSynchronize()
            results.extend([None] * len(part))
    return results


def decode_batch(ctx, enc, output_type: str, cpu_decode) -> ImageBatch:
    """Decode a batch with nvImageCodec, in the pipeline's decode processes (for a reader that
    handed over paths only) or here. The result is a :class:`DeviceImages` described by host arrays. BGR is decoded as RGB
    (on the GPU and by the Pillow fallback alike) and swapped once, at the end.
    ``cpu_decode(enc, k, output_type)`` decodes sample k on the host (uint8 HWC, or SampleError
    naming the file): the fallback for files the GPU must not or cannot take."""
    chunk = max(1, min(CHUNK, ctx.pipeline.batch_size))
    if getattr(ctx, "planning", False):
        return ImageBatch(_planned(ctx, enc, output_type, chunk, cpu_decode), "gpu")
    images = _decode(ctx, enc, "RGB" if output_type == "BGR" else output_type, chunk, cpu_decode)
    if output_type == "BGR":
        images = DeviceImages.from_arrays([a[:, :, ::-1] for a in images.as_list()],
                                          images.device_id)
    return ImageBatch(images, "gpu")


def _decode(ctx, enc, output_type, chunk, cpu_decode) -> DeviceImages:
    """Decode ``enc`` ('RGB' or 'GRAY') on ``ctx.stream``: in the pipeline's decode processes for
    a reader that handed over paths only (the lease goes to ``ctx.leases``), else here; the sizes
    checked against the annotated ones. A file that fails raises SampleError naming it."""
    service = getattr(ctx.pipeline, "_decode_service", None)
    if service is not None and enc.data is None:  # a paths-only reader: the processes read
        # (or, while they come up, the pipeline's own decoder: runtime/gpu/early_decode.py)
        early = getattr(service, "early", None)
        key = (getattr(ctx, "epoch", 0), getattr(ctx, "batch_index", 0))  # (the launch's order)
        via = early if early is not None and early.take(service, key) else service
        images, errors = via.decode(enc.paths, output_type, chunk, ctx.stream)
        if images is not None:
            ctx.leases.append(images.owners)
        if errors:
            k, msg = errors[0]
            if k < 0:
                raise RuntimeError(msg)
            raise SampleError(msg, k, enc.paths[k])
    else:
        import cupy as cp

        images = _decode_here(ctx, enc, output_type, chunk, cp.cuda.Device().id, cpu_decode)
    _check_sizes(images.shapes, enc)
    return images


def _planned(ctx, enc, output_type, chunk, cpu_decode) -> PlannedImages:
    """The images the decode will make of ``enc``, planned ahead (no GPU call): their shapes
    are the annotated sizes, which the decode checks (:func:`decode_planned`)."""
    if output_type not in ("RGB", "GRAY"):
        raise NotPlannable(f"output_type {output_type!r}")
    sizes = None if enc.sizes is None else np.asarray(enc.sizes, np.int64).reshape(-1, 2)
    if sizes is None or len(sizes) != len(enc) or not (sizes > 0).all():
        raise NotPlannable("the reader does not know every image's size")
    c = np.full((len(sizes), 1), 1 if output_type == "GRAY" else 3, np.int64)
    enc = EncodedBatch(enc.data, enc.paths, sizes)  # (code streams are parsed where it decodes)
    return PlannedImages(np.concatenate([sizes, c], 1), enc, output_type, chunk, cpu_decode)


def decode_planned(ctx, planned: PlannedImages) -> DeviceImages:
    """Decode planned images on ``ctx.stream``: in the pipeline's decode processes (their lease
    goes to ``ctx.leases``) or here. A file that fails, or decodes to another size than
    planned, raises SampleError naming it."""
    enc = planned.enc
    images = _decode(ctx, enc, planned.output_type, planned.chunk, planned.cpu_decode)
    bad = np.nonzero(images.shapes[:, 2] != planned.shapes[:, 2])[0]
    if len(bad):
        k = int(bad[0])
        raise SampleError(f"{enc.paths[k]}: decoded to {images.shapes[k, 2]} channels, "
                          f"{planned.shapes[k, 2]} expected", k, enc.paths[k])
    return images


def _decode_here(ctx, enc, output_type, chunk, dev, cpu_decode) -> DeviceImages:
    """Decode in this thread, on the pipeline's stream: the decoded buffers themselves (no
    copy); files the GPU must not or cannot take are decoded by Pillow and uploaded."""
    import cupy as cp

    n = len(enc)
    streams = enc.streams if enc.streams is not None else code_streams(enc.data)
    gpu_idx = [k for k in range(n) if streams[k] is not None]
    results = decode_chunks(_decoder(dev), [streams[k] for k in gpu_idx], output_type, chunk,
                            ctx.stream.ptr)
    # the pipeline owns the decoded images from here, and frees them while its streams exist
    # (close): an nvImageCodec image freed after its stream is gone crashes the process
    keep_queue(ctx.pipeline).append(results)
    ptrs = np.zeros(n, np.uint64)
    shapes = np.zeros((n, 3), np.int64)
    pitches = np.zeros(n, np.int64)
    owners = [results]
    done = np.zeros(n, bool)
    r = a = None
    try:
        for k, r in zip(gpu_idx, results):
            if r is None:
                continue
            d = _describe(r.__cuda_array_interface__)
            if d is None:  # an unusual layout: a packed copy (stream-ordered after the decode)
                a = cp.ascontiguousarray(_wrap(cp, r))
                a = a if a.ndim == 3 else a[:, :, None]
                owners.append(a)
                d = (a.data.ptr, a.shape, a.strides[0])
            ptrs[k], shapes[k], pitches[k] = d
            done[k] = True
        for k in np.nonzero(~done)[0]:  # the CPU decoder raises, naming the file, where it fails
            a = upload(cpu_decode(enc, k, output_type), ctx.stream)
            owners.append(a)
            ptrs[k], shapes[k], pitches[k] = a.data.ptr, a.shape, a.strides[0]
    except BaseException:
        # the traceback keeps this frame alive, maybe past close() (a test's pytest.raises, a
        # logged error): it must not hold the decoded images (the garbage collector freeing them
        # after the pipeline was closed, with its device memory, ended in a segmentation fault)
        results = owners = r = a = None
        raise
    # the stream travels with the images: whoever holds them holds it (StreamBound)
    return DeviceImages(ptrs, shapes, pitches, StreamBound(owners, ctx.stream), dev)


def _check_sizes(shapes, enc):
    """The decoded sizes against the annotated ones (0 = unknown), for the whole batch at once."""
    if enc.sizes is None or not len(shapes):
        return
    want = np.asarray(enc.sizes, np.int64).reshape(-1, 2)
    bad = np.nonzero(((want != 0) & (want != shapes[:, :2])).any(1))[0]
    if len(bad):
        k = int(bad[0])
        (h, w), (dh, dw) = want[k], shapes[k, :2]
        raise SampleError(f"{enc.paths[k]}: decoded size {dw}x{dh} differs from the annotated size "
                          f"{w}x{h}", k, enc.paths[k])
