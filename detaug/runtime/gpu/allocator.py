"""Where a GPU pipeline's device threads take their memory: CUDA's stream-ordered allocator
(``cudaMallocAsync`` on the device's memory pool, through cupy's ``MemoryAsyncPool``), not
cupy's default pool.

Why: cupy's default pool keeps the blocks it frees, by stream and by size, and never gives them
back by itself. A pipeline whose launches differ in size from one launch to the next (a YOLO
recipe whose launches decode a varying number of partner images) made cupy's pool grow over a
run while the memory in use stayed flat: 'pool' partners at a 2.5 GB budget took 2.0 GB of the
device after 12 batches and 5.2 GB after 860, cupy's pool holding 4.2 GB for 158 MB in use
(H200, benchmarks/RESULTS.md). A limit on cupy's pool held the budget but freed blocks with
``cudaFree``, which waits for the whole device (a third of the rate). The stream-ordered pool
reuses freed memory across sizes and streams and gives unused memory back to the device at
synchronisations: the same row held 2.2 GB, flat from batch 60 to 780, at a higher rate.

Ordering is kept as with cupy's pool: an allocation is freed on the stream it was made on, in
that stream's order (cupy's ``MemoryAsync``), so the hand-out's device-side waits before a
batch's memory goes back (detaug/runtime/gpu/handout.py) still come before any reuse.

``DETAUG_DEVICE_ALLOCATOR=pool`` goes back to cupy's default pool (for comparisons); a device
without stream-ordered allocation uses it too. The allocator is set per thread
(``cupy.cuda.using_allocator``) while a device thread runs a launch: the caller's own cupy
allocations are left as they are."""
from __future__ import annotations

import contextlib
import os
import threading

ENV = "DETAUG_DEVICE_ALLOCATOR"
MODES = ("async", "pool")

_lock = threading.Lock()
_async_pool = None
_supported: dict[int, bool] = {}


def mode() -> str:
    """The allocator asked for: 'async' (the default) or 'pool' (``DETAUG_DEVICE_ALLOCATOR``)."""
    m = (os.environ.get(ENV) or "async").strip().lower()
    if m not in MODES:
        raise ValueError(f"{ENV}={m!r}: expected one of {', '.join(MODES)}")
    return m


def _async_supported(device_id: int) -> bool:
    import cupy as cp

    if device_id not in _supported:
        rt = cp.cuda.runtime
        attr = getattr(rt, "cudaDevAttrMemoryPoolsSupported", 115)
        try:
            _supported[device_id] = bool(rt.deviceGetAttribute(attr, device_id))
        except Exception:  # (a runtime without the attribute: no stream-ordered allocator)
            _supported[device_id] = False
    return _supported[device_id]


def device_pool(device_id: int):
    """The pool a pipeline's device threads allocate from on ``device_id``: cupy's
    ``MemoryAsyncPool`` over the device's stream-ordered pool, or cupy's default pool (see the
    module's docstring). Both have ``used_bytes()``, ``total_bytes()`` and
    ``free_all_blocks()``."""
    import cupy as cp

    global _async_pool
    if mode() == "pool" or not _async_supported(device_id):
        return cp.get_default_memory_pool()
    with _lock:
        if _async_pool is None:
            _async_pool = cp.cuda.MemoryAsyncPool()
        return _async_pool


def device_allocator(device_id: int):
    """The allocator for a device thread (``malloc`` of :func:`device_pool`), or None where it is
    cupy's default pool (nothing to set)."""
    if mode() == "pool":
        return None
    import cupy as cp

    pool = device_pool(device_id)
    return None if pool is cp.get_default_memory_pool() else pool.malloc


@contextlib.contextmanager
def allocating(alloc):
    """Run the block with ``alloc`` (from :func:`device_allocator`) as this thread's cupy
    allocator; None: as it is."""
    if alloc is None:
        yield
        return
    import cupy as cp

    with cp.cuda.using_allocator(alloc):
        yield


def free_cached(device_id: int = 0) -> None:
    """Give the memory both pools hold unused back to the device (a measurement's baseline):
    cupy's default pool and, where used, the stream-ordered pool."""
    import cupy as cp

    cp.get_default_memory_pool().free_all_blocks()
    pool = device_pool(device_id)
    if pool is not cp.get_default_memory_pool():
        pool.free_all_blocks()
