"""Kernels registered per (op, backend) and chosen in one place (torchvision's
``_register_kernel_internal`` / ``_get_kernel``): an op body asks for its kernel on the batch's
device and calls it; it never branches on the device itself.

Backends: 'gpu' (a CUDA kernel: it is handed the batch's stream as ``stream=``), 'cpu' (the
host's kernel: OpenCV where the op has one, else its NumPy twin) and 'reference' (the NumPy twin,
chosen on the host by ``backend.set_cpu_warp('reference')``; an op whose 'cpu' kernel is its twin
registers only 'cpu').
"""
from __future__ import annotations

import functools

import numpy as np

from ..core import backend as _backend
from ..core.batch import ImageBatch

BACKENDS = ("gpu", "cpu", "reference")
KERNELS: dict = {}


def register_kernel(op_names, backend: str, fn=None):
    """Register ``fn`` as the kernel of each op of ``op_names`` (a name or several) on
    ``backend``; usable as a decorator."""
    if backend not in BACKENDS:
        raise ValueError(f"backend {backend!r}: one of {BACKENDS}")
    names = (op_names,) if isinstance(op_names, str) else tuple(op_names)

    def deco(f):
        for n in names:
            KERNELS[(n, backend)] = f
        return f

    return deco if fn is None else deco(fn)


def backend_of(device: str) -> str:
    """The backend a batch on ``device`` runs on: 'gpu', or the host's ('cpu' / 'reference')."""
    if device == "gpu":
        return "gpu"
    return "reference" if _backend.cpu_warp() == "reference" else "cpu"


def get_kernel(op_name: str, device: str):
    """(kernel, backend) of ``op_name`` for a batch on ``device``."""
    be = backend_of(device)
    fn = KERNELS.get((op_name, be))
    if fn is None and be == "reference":
        be, fn = "cpu", KERNELS.get((op_name, "cpu"))
    if fn is None:
        raise NotImplementedError(f"{op_name}: no kernel registered for backend {be!r}")
    return fn, be


def kernel(ctx, op, device: str):
    """``op``'s kernel for a batch on ``device``, ready to call: a GPU kernel launches on the
    batch's stream."""
    fn, be = get_kernel(op.schema.name, device)
    return functools.partial(fn, stream=getattr(ctx, "stream", None)) if be == "gpu" else fn


def launch(ctx, op, img: ImageBatch, *params, per_sample=(), **static) -> ImageBatch:
    """``op``'s kernel on the images of ``img``: ``kernel(images, *params, **static)``, the
    images a dense array or a list. ``per_sample`` names the positions in ``params`` that hold
    one entry per sample: with them the host kernel runs over the host threads, one contiguous
    slice of the samples (and of those params) a thread; a GPU kernel takes the whole batch."""
    fn, be = get_kernel(op.schema.name, img.device)
    if be == "gpu":
        out = fn(img.data, *params, stream=ctx.stream, **static)
        return ImageBatch(out, img.device, img.layout)
    if not per_sample:
        return ImageBatch(fn(img.data, *params, **static), img.device, img.layout)
    data = img.data
    items = [data[i] for i in range(img.batch_size)]

    def chunk(lo, hi):
        return fn(items[lo:hi], *[p[lo:hi] if k in per_sample else p for k, p in enumerate(params)],
                  **static)

    outs = [o for part in ctx.map_chunks(chunk, len(items)) for o in part]
    if img.is_dense:
        return ImageBatch(np.stack(outs) if outs else np.empty_like(data), img.device, img.layout)
    return ImageBatch(outs, img.device, img.layout)
