"""The one place detaug launches CUDA kernels: memoised module loading and counted launches.

Every GPU kernel of detaug is started through :func:`launch`, so that tests can show the
contract "one launch per op per batch" by reading :func:`launch_counts` for batch sizes 1 and
64. cupy is imported lazily: importing this module never needs a GPU.
"""
from __future__ import annotations

import collections
import functools
import os
import threading

_KERNEL_DIR = os.path.dirname(os.path.abspath(__file__))
_counts = collections.Counter()
_lock = threading.Lock()


@functools.lru_cache(maxsize=None)
def _module(source_name: str, device_id: int, options: tuple):
    import cupy as cp

    with open(os.path.join(_KERNEL_DIR, source_name)) as f:
        code = f.read()
    with cp.cuda.Device(device_id):
        return cp.RawModule(code=code, options=options)


def get_kernel(source_name: str, kernel_name: str, options: tuple = ("-std=c++17",)):
    """Return ``kernel_name`` from ``detaug/kernels/<source_name>``, compiled once per device
    and option set (cupy caches the binary on disk as well)."""
    import cupy as cp

    return _module(source_name, cp.cuda.Device().id, tuple(options)).get_function(kernel_name)


def launch(kernel, grid, block, args, *, shared_mem: int = 0, stream=None, name: str | None = None):
    """Launch ``kernel`` on ``stream`` (default: cupy's current stream) and count it."""
    import cupy as cp

    key = name or getattr(kernel, "name", None) or repr(kernel)
    with _lock:
        _counts[key] += 1
    stream = stream if stream is not None else cp.cuda.get_current_stream()
    with stream:
        kernel(tuple(grid), tuple(block), tuple(args), shared_mem=shared_mem)


def launch_counts() -> dict:
    """Launches per kernel name since the last :func:`reset_launch_counts`."""
    with _lock:
        return dict(_counts)


def total_launches() -> int:
    with _lock:
        return sum(_counts.values())


def reset_launch_counts() -> None:
    with _lock:
        _counts.clear()
