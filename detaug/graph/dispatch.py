"""Kernels registered per (op, backend) and chosen in one place (torchvision's
``_register_kernel_internal`` / ``_get_kernel``): an op body asks for its kernel on the batch's
device and calls it; it never branches on the device itself.

Backends: 'gpu' (a CUDA kernel: it is handed the batch's stream as ``stream=``), 'cpu' (the
host's kernel: OpenCV where the op has one, else its NumPy twin) and 'reference' (the NumPy twin,
chosen on the host by ``backend.set_cpu_warp('reference')``; an op whose 'cpu' kernel is its twin
registers only 'cpu').

On images planned ahead (a GPU launch planned on the host: detaug/runtime/gpu/plan_ahead.py),
:func:`launch` plans the kernel's launch instead of making it: a :class:`KernelLaunch` holding the
op's name and the very parameters its body passed, which calls the same registered GPU kernel
with them once the images are made (core/deferred.py). So an op whose body only computes its
parameters and calls :func:`launch` plans ahead as it declares (``OpSchema.plans``), with the
same bytes as a launch made at once.
"""
from __future__ import annotations

import functools

import numpy as np

from ..core import backend as _backend
from ..core.batch import ImageBatch
from ..core.deferred import DeferredLaunch, is_planned, stand_in

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
    if is_planned(img.raw):  # planned ahead: the launch runs once its images are made
        return ImageBatch(DeferredLaunch((img.raw,), KernelLaunch(op, img, params, static)),
                          img.device, img.layout)
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


class KernelLaunch:
    """``op``'s GPU kernel over planned images (``img``: no pending chain), planned on the host
    (core/deferred.py's launch): the kernel registered for (op, 'gpu') called as :func:`launch`
    calls it, ``kernel(images, *params, stream=, **static)``, on the images once made (a list
    of their views). The op keeps its input's shapes and uint8 pixels (an op that changes them
    does not declare that it plans); :meth:`run` checks what the kernel made against them. The
    images go to the kernel as one dense array where they lie packed one after another (a
    launch's dense output: as the op would be handed them made at once), else as a list."""

    __slots__ = ("name", "params", "static", "B", "shapes", "out_dtype", "dense")

    def __init__(self, op, img: ImageBatch, params, static):
        from ..core.errors import NotPlannable

        if img.device != "gpu" or img.geometry is not None or img.layout != "HWC":
            raise NotPlannable(f"{op.name}: a kernel over planned images with a pending chain, "
                               "or off the GPU")
        src = stand_in(img.raw)  # (uint8 HWC: NotPlannable otherwise)
        self.name, self.params, self.static = op.schema.name, tuple(params), dict(static)
        self.shapes = [tuple(int(v) for v in s) for s in src.shapes]
        self.B, self.out_dtype = len(self.shapes), np.dtype(np.uint8)
        self.dense = bool(self.B) and all(s == self.shapes[0] for s in self.shapes)

    def run(self, inputs, stream=None):
        """The kernel on ``inputs[0]`` (a DeviceImages: the images, made): its output."""
        fn, _ = get_kernel(self.name, "gpu")
        out = fn(_batch_of(inputs[0]), *self.params, stream=stream, **self.static)
        got = [tuple(int(v) for v in a.shape) for a in out]
        if got != self.shapes or any(a.dtype != self.out_dtype for a in out[:1]):
            raise RuntimeError(f"{self.name}: its kernel made images of shapes {got[:3]}..., "
                               f"{self.shapes[:3]}... were planned (an op that plans ahead keeps "
                               "its input's shapes and uint8 pixels)")
        return out


def _batch_of(d):
    """The images of ``d`` (a DeviceImages) as one dense (B, H, W, C) cupy array where they
    share one shape and lie packed one after another, else as a list of cupy views."""
    n = len(d)
    if n and bool((d.shapes == d.shapes[0]).all()):
        h, w, c = (int(v) for v in d.shapes[0])
        size = h * w * c
        if bool((d.pitches == w * c).all()) and bool(
                (d.ptrs == d.ptrs[0] + np.arange(n, dtype=np.uint64) * np.uint64(size)).all()):
            import cupy as cp

            mem = cp.cuda.UnownedMemory(int(d.ptrs[0]), n * size, d.owners, d.device_id)
            return cp.ndarray((n, h, w, c), np.uint8, cp.cuda.MemoryPointer(mem, 0))
    return d.as_list()
