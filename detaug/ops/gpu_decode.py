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
import threading
import weakref

import numpy as np

from ..backend import upload
from ..batch import ImageBatch
from .decode import _check_size, _decode_one, jpeg_complete

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
            _decoders[key] = nvimgcodec.Decoder(device_id=device_id)
        return _decoders[key]


@atexit.register
def _release():
    """At exit, images before their decoders."""
    for pipe in list(_pipelines):
        pipe._decoded_keep.clear()
    _decoders.clear()


def _wrap(cp, image):
    """A cupy view of a decoded image, without the host wait that cupy's CUDA-array-interface
    import would make on the producer's stream: the decode was queued on the pipeline's own
    stream, so stream order already makes the pixels ready for the kernels that follow. The view
    keeps ``image`` (the owner of the memory) alive."""
    cai = image.__cuda_array_interface__
    shape = tuple(cai["shape"])
    dtype = np.dtype(cai["typestr"])
    strides = cai.get("strides")
    nbytes = (int(np.prod(shape)) * dtype.itemsize if strides is None
              else sum((n - 1) * st for n, st in zip(shape, strides)) + dtype.itemsize)
    mem = cp.cuda.UnownedMemory(cai["data"][0], nbytes, image)
    return cp.ndarray(shape, dtype, cp.cuda.MemoryPointer(mem, 0), strides=strides)


def decode_batch(ctx, enc, output_type: str) -> ImageBatch:
    import cupy as cp
    from nvidia import nvimgcodec

    cs = nvimgcodec.ColorSpec
    # nvImageCodec 0.9 names sRGB 'SRGB' (older releases: 'RGB')
    spec = getattr(cs, "GRAY") if output_type == "GRAY" else getattr(cs, "SRGB", None) or getattr(cs, "RGB")
    params = nvimgcodec.DecodeParams(apply_exif_orientation=False, color_spec=spec,
                                     allow_any_depth=False)
    dev = cp.cuda.Device().id
    gpu_idx = [k for k in range(len(enc)) if jpeg_complete(enc.data[k])]
    results = _decoder(dev).decode([enc.data[k] for k in gpu_idx], params=params,
                                   cuda_stream=ctx.stream.ptr) if gpu_idx else []
    images = [None] * len(enc)
    for k, r in zip(gpu_idx, results):
        if r is not None:
            images[k] = _wrap(cp, r)
    for k in range(len(enc)):
        if images[k] is None:
            images[k] = upload(_decode_one(enc, k, output_type), ctx.stream)  # raises naming the file
        else:
            if images[k].ndim == 2:
                images[k] = images[k][:, :, None]
            _check_size(images[k], enc, k)
    if output_type == "BGR":
        images = [cp.ascontiguousarray(a[:, :, ::-1]) for a in images]
    keep_queue(ctx.pipeline).append(results)
    return ImageBatch(images, "gpu")
