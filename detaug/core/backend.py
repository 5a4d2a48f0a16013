"""Backend selection: NumPy on the host, cupy on the device. cupy is imported only when a GPU
batch is made; ``import detaug`` never imports it."""
from __future__ import annotations

import collections
import threading

import numpy as np

_CPU_WARP = {"impl": "opencv"}


def xp_for(device: str):
    """The array module of ``device`` ('cpu' or 'gpu')."""
    if device == "cpu":
        return np
    if device == "gpu":
        import cupy

        return cupy
    raise ValueError(f"unknown device {device!r}: expected 'cpu' or 'gpu'")


def is_device_array(a) -> bool:
    return type(a).__module__.split(".")[0] == "cupy"


def to_host(a):
    """Device-to-host copy; only the pipeline's output stage calls this."""
    return a.get() if is_device_array(a) else np.asarray(a)


def set_cpu_warp(impl: str) -> None:
    """Choose the CPU backend's warp: 'opencv' (fast, default) or 'reference' (the NumPy twin,
    used by the CPU/GPU parity tests and wherever bit-level agreement with the twin matters)."""
    if impl not in ("opencv", "reference"):
        raise ValueError(f"cpu warp must be 'opencv' or 'reference', not {impl!r}")
    _CPU_WARP["impl"] = impl


def cpu_warp() -> str:
    return _CPU_WARP["impl"]


def gpu_available() -> bool:
    try:
        import cupy

        return cupy.cuda.runtime.getDeviceCount() > 0
    except Exception:
        return False


class DeviceUnavailableError(RuntimeError):
    """A pipeline places ops on the GPU where there is none (or cupy / nvImageCodec is missing);
    raised by ``Pipeline.build()`` before any process starts, with one line saying what to do."""


def gpu_missing(nvimgcodec: bool = False) -> str | None:
    """What stops GPU ops from running here, in words (None when nothing does): cupy not
    installed or not importing, no visible GPU, or (with ``nvimgcodec``) nvImageCodec missing."""
    import importlib.util

    try:
        if importlib.util.find_spec("cupy") is None:
            return "cupy is not installed"
    except (ImportError, ValueError):
        return "cupy is not installed"
    try:
        import cupy

        n = cupy.cuda.runtime.getDeviceCount()
    except Exception as e:
        return f"cupy finds no usable GPU ({type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''})"
    if n <= 0:
        return "cupy finds no GPU"
    if nvimgcodec:
        try:
            ok = importlib.util.find_spec("nvidia.nvimgcodec") is not None
        except (ImportError, ValueError):
            ok = False
        if not ok:
            return "nvImageCodec (nvidia-nvimgcodec) is not installed"
    return None


def install_command(extra: str, package_dir: str | None = None) -> str:
    """The pip command that adds ``extra`` (e.g. 'gpu') to this install: ``pip install '.[gpu]'``
    where detaug runs from its source checkout (the folder above the package, ``package_dir``,
    default this one, holds the project's pyproject.toml), else ``pip install 'detaug[gpu]'``
    (a wheel from an index)."""
    import os

    top = package_dir or os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    project = os.path.join(os.path.dirname(top), "pyproject.toml")
    try:
        with open(project, encoding="utf-8") as f:
            checkout = 'name = "detaug"' in f.read()
    except OSError:
        checkout = False
    return f"pip install '{'.' if checkout else 'detaug'}[{extra}]'"


def resolve_auto_device(gpu_device: str) -> str:
    """``device='auto'``: ``gpu_device`` ('mixed' or 'gpu') where a GPU and cupy (and, for
    'mixed', nvImageCodec) are present, else 'cpu'."""
    return gpu_device if gpu_missing(nvimgcodec=gpu_device == "mixed") is None else "cpu"


class _PinnedRing:
    """Reusable page-locked staging buffers for host-to-device copies.

    A copy from pageable memory may make the driver wait for the stream; from pinned memory it is
    a true cudaMemcpyAsync. A buffer goes back to the free lists once the event recorded after its
    copy has completed, so the number of buffers grows with the copies in flight, never with the
    number of batches. Capacities are powers of two (free lists per capacity).
    """

    def __init__(self):
        self.free = {}                         # capacity -> [pinned memory]
        self.inflight = collections.deque()    # (capacity, memory, event), oldest first
        self.count = 0                         # buffers ever allocated
        self.lock = threading.Lock()

    def take(self, nbytes):
        import cupy as cp

        cap = 1 << max(12, int(nbytes - 1).bit_length())
        with self.lock:
            if self.inflight:  # copies complete out of order across streams: look at all
                pending = collections.deque()
                for c, mem, ev in self.inflight:
                    if ev.done:
                        self.free.setdefault(c, []).append(mem)
                    else:
                        pending.append((c, mem, ev))
                self.inflight = pending
            stack = self.free.get(cap)
            if stack:
                return cap, stack.pop()
            self.count += 1
        return cap, cp.cuda.alloc_pinned_memory(cap)

    def give_back(self, cap, mem, event):
        with self.lock:
            self.inflight.append((cap, mem, event))


_RING = _PinnedRing()


def upload(a, stream=None):
    """Host array -> device array through a pinned staging buffer, asynchronously on ``stream``
    (default: cupy's current stream). Never waits for the device."""
    return upload_many([a], stream)[0]


def upload_many(arrays, stream=None):
    """Several host arrays -> device arrays with ONE staging buffer, ONE device allocation, ONE
    copy and ONE event (per-call overhead, not bytes, dominates the small per-batch metadata).
    Returns views into the device buffer, each 16-byte aligned, in order."""
    import cupy as cp

    arrays = [np.ascontiguousarray(a) for a in arrays]
    starts, total = [], 0
    for a in arrays:
        starts.append(total)
        total += -(-a.nbytes // 16) * 16
    stream = stream if stream is not None else cp.cuda.get_current_stream()
    with stream:  # cupy's pools reuse a block in the order of the stream current at allocation
        dev = cp.empty(max(total, 16), cp.uint8)
    if total:
        cap, mem = _RING.take(total)
        staged = np.frombuffer(mem, np.uint8, total)
        for a, s in zip(arrays, starts):
            staged[s:s + a.nbytes] = a.reshape(-1).view(np.uint8)
        dev[:total].set(staged, stream=stream)
        ev = cp.cuda.Event(block=False, disable_timing=True)
        ev.record(stream)
        _RING.give_back(cap, mem, ev)
    return [dev[s:s + a.nbytes].view(a.dtype).reshape(a.shape) for a, s in zip(arrays, starts)]


def pick_device(device: str, *, torch_cuda: bool = False) -> str:
    """'cpu' or 'gpu' for a command-line ``--device cpu|gpu|auto``: 'auto' takes the GPU where one
    is present and cupy imports (and, with ``torch_cuda``, where torch sees CUDA too); asking for
    'gpu' without one exits with a message."""
    if device == "cpu":
        return "cpu"
    ok = gpu_available()
    if ok and torch_cuda:
        import torch

        ok = torch.cuda.is_available()
    if ok:
        return "gpu"
    if device == "gpu":
        raise SystemExit("--device gpu: no GPU, or cupy" + (" / a CUDA build of torch" if torch_cuda else "")
                         + " does not import")
    return "cpu"
