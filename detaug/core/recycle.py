"""Large host arrays whose memory is used again: pages faulted in once, not once a batch.

A CPU pipeline makes a few large arrays a batch (a mosaic's canvases, the warped batch, a blend,
the output), each used once and dropped. NumPy takes an array of more than 32 MiB (glibc's
largest ``mmap`` threshold) from fresh pages every time, and smaller ones often (the C allocator
gives the top of its heap back when they are freed), so every batch pays the kernel to fault
them in and zero them again: a third of a mosaic's cost on its canvases, and a cost that many worker
processes pay together against one memory bus. :func:`empty` hands out arrays on anonymous
private mappings that it keeps: when the last view of such an array is gone, its mapping goes to
a free list of this process and the next :func:`empty` of that size takes it, pages already in.

Ownership: the array :func:`empty` makes over a mapping is the base of every view of it (NumPy
stops the chain of bases at an array whose own base is not an array: here the mapping's
``memoryview``), so that array is collected only when no view, slice, transpose or
``np.asarray`` of it is left, and only then is the mapping free. Nothing is reused while any
array can still read or write it; the values of a new array are undefined, as ``np.empty``'s.

An array takes the smallest free mapping of its size to twice it. The free list holds at most
:data:`FREE_BYTES` (oldest unmapped first), and a mapping that none of the next :data:`MAX_AGE`
arrays took is unmapped (a size the pipeline no longer makes); arrays under :data:`MIN_BYTES`
come from ``np.empty`` (the C allocator keeps those). A forked child
drops the parent's free list (the mappings are private: a child writing into them would copy
them). :func:`release` unmaps the free list (a pipeline's host workers take over from this
process, or it closes).
"""
from __future__ import annotations

import collections
import mmap
import os
import threading
import weakref

import numpy as np

MIN_BYTES = 256 << 10  # smaller arrays: np.empty
FREE_BYTES = 2 << 30  # free mappings kept by a process, at most
MAX_AGE = 512  # a free mapping not taken by the next MAX_AGE arrays made here is unmapped
_GRANULE = 2 << 20  # mapping sizes rounded up to whole 2 MiB,
_SMALL_GRANULE = 64 << 10  # or below 2 MiB to whole 64 KiB
_PRIVATE = getattr(mmap, "MAP_PRIVATE", None)
_ANON = getattr(mmap, "MAP_ANONYMOUS", None)

_lock = threading.RLock()  # re-entrant: a finaliser may run inside a section that holds it
# id -> (mapping, the count of arrays made when it came back), in the order they came back
_free: "collections.OrderedDict[int, tuple]" = collections.OrderedDict()
_free_bytes = 0
_made = 0  # arrays made on mappings in this process


def empty(shape, dtype=np.uint8) -> np.ndarray:
    """``np.empty(shape, dtype)`` (C order), on a kept mapping when it is at least
    :data:`MIN_BYTES` (module docstring)."""
    dtype = np.dtype(dtype)
    shape = tuple(int(s) for s in (shape if np.iterable(shape) else (shape,)))
    n = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
    if n < MIN_BYTES or _PRIVATE is None or _ANON is None:
        return np.empty(shape, dtype)
    g = _GRANULE if n >= _GRANULE else _SMALL_GRANULE
    size = -(-n // g) * g
    mm = _take(size)
    if mm is None:
        # (no MADV_HUGEPAGE: where THP is 'madvise', its faults compact memory, and the system
        # time of a worker process making 'epoch' partners rose 7x with it)
        mm = mmap.mmap(-1, size, flags=_PRIVATE | _ANON)
    base = np.frombuffer(mm, dtype, n // dtype.itemsize)
    fin = weakref.finalize(base, _give_back, mm)
    fin.atexit = False
    return base.reshape(shape)


def _take(size):
    """The smallest free mapping of ``size`` to ``2 size`` bytes (taken off the list), or
    None; the mappings no array took for :data:`MAX_AGE` arrays are unmapped."""
    global _free_bytes, _made
    with _lock:
        _made += 1
        while _free:
            key, (old, at) = next(iter(_free.items()))
            if _made - at <= MAX_AGE:
                break
            del _free[key]
            _free_bytes -= len(old)
        best = None
        for key, (mm, _) in _free.items():
            if size <= len(mm) <= 2 * size and (best is None or len(mm) < len(_free[best][0])):
                best = key
        if best is None:
            return None
        mm = _free.pop(best)[0]
        _free_bytes -= len(mm)
        return mm


def _give_back(mm):
    """The last view of ``mm``'s array is gone: ``mm`` joins the free list (the oldest leave it
    beyond :data:`FREE_BYTES`; a mapping is unmapped when its last reference goes)."""
    global _free_bytes
    with _lock:
        _free[id(mm)] = (mm, _made)
        _free_bytes += len(mm)
        while _free_bytes > FREE_BYTES and _free:
            _, (old, _) = _free.popitem(last=False)
            _free_bytes -= len(old)


def release() -> None:
    """Unmap this process's free mappings (arrays still in use are not touched: theirs come
    back to the free list when they are dropped)."""
    global _free_bytes
    with _lock:
        _free.clear()
        _free_bytes = 0


def free_bytes() -> int:
    """Bytes of the free mappings this process keeps."""
    return _free_bytes


def _after_fork():
    global _lock, _free_bytes
    _lock = threading.RLock()  # (a thread of the parent may have held it at the fork)
    _free.clear()
    _free_bytes = 0


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork)
