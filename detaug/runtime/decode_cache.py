"""A bounded cache of decoded images in each process that makes launches: reuse across launches.

A pool of partners (``partners='pool'``, detaug/runtime/partners.py) draws a batch's partners
from the batches before it, which the launches of those batches decoded already. Within one
launch a drawn position is decoded once; this cache carries decoded images from one launch to
the next made in the same process, so that a process making consecutive launches decodes each
image about once (the host workers give a process runs of consecutive launches: their length
is :func:`worker_run`, the routing ``HostWorkers.submit(group=)`` in
detaug/runtime/host_workers.py).

It can only save work, never change a value: an entry is keyed by the SHA-256 of the encoded
bytes with the decode's arguments (``output_type``, ``reduce``), so the same key is the same
input to a deterministic decoder, whichever record, epoch, launch, worker or source it came
from; the annotated-size check runs on every hit as on a decode (a record whose annotation
disagrees still fails, naming its file); a failed decode is never kept. Entries are read-only
arrays (``writeable=False``): an op that wrote into its input would raise rather than change a
later batch.

Bound: at most ``capacity`` bytes of images per process and decoder, least recently used out
first (an image larger than that is not kept). Images a batch in flight still holds live on
until it is done with them, as without the cache. Each forked process starts empty (the entries
and the lock of its parent are dropped at the first use after the fork).

Which decoders: those on the CPU that declare the role ``decode_cache`` (their output a pure
function of the bytes and scalar arguments). Size (:func:`plan`, recorded in the build plan:
``BuildPlan.decode_cache``, per process and op, and ``host_cache_bytes``): the pipeline's
``decode_cache_mb`` (MiB a process, 0 off), else by default, for a decoder whose images feed a
pool: the images of one launch's pool, ``samples_in_launch(level, batches_per_launch) x
batch_size`` (partners.py: ``batches_per_launch`` + the pools' k batches at most) of the reader's
largest annotated image (:data:`UNKNOWN_IMAGE_BYTES` where sizes are unknown),
at most :data:`AUTO_CAP` bytes; 0 (off) elsewhere, where launches share no decoded image.
"""
from __future__ import annotations

import collections
import hashlib
import os
import threading
import weakref

import numpy as np

from . import partners as _partners

RUN_DEPTH = 3  # default prefetch_queue_depth (per process) of a CPU pipeline with a cache and workers
AUTO_CAP = 512 << 20  # bytes per process and decoder, the most the default takes
UNKNOWN_IMAGE_BYTES = 3 << 20  # an image's bytes where the reader does not know its size


class DecodeCache:
    """Decoded images keyed by (SHA-256 of the encoded bytes, decode arguments), least
    recently used out first, at most ``capacity`` bytes; safe to share between threads."""

    def __init__(self, capacity: int):
        self.capacity = int(capacity)
        self._reset()

    def _reset(self):
        self._pid, self._lock = os.getpid(), threading.Lock()
        self._entries = collections.OrderedDict()
        self.bytes = self.hits = self.misses = 0

    @staticmethod
    def key(buf, *args) -> tuple:
        """The key of the encoded bytes ``buf`` decoded with ``args``."""
        return (hashlib.sha256(memoryview(buf)).digest(), len(buf), *args)

    def get(self, key):
        """The image kept under ``key`` (read-only), or None."""
        if self._pid != os.getpid():  # a forked child: not its parent's entries or lock
            self._reset()
        with self._lock:
            arr = self._entries.get(key)
            if arr is None:
                self.misses += 1
                return None
            self._entries.move_to_end(key)
            self.hits += 1
            return arr

    def put(self, key, arr: np.ndarray) -> np.ndarray:
        """Keep ``arr`` (made read-only; not kept if larger than the capacity); returns it."""
        arr.flags.writeable = False
        n = int(arr.nbytes)
        if n > self.capacity:
            return arr
        with self._lock:
            old = self._entries.pop(key, None)
            if old is not None:
                self.bytes -= int(old.nbytes)
            while self._entries and self.bytes + n > self.capacity:
                self.bytes -= int(self._entries.popitem(last=False)[1].nbytes)
            self._entries[key] = arr
            self.bytes += n
        return arr

    def __len__(self):
        return len(self._entries)


# the caches of each pipeline in this process (op id -> DecodeCache), made on first use
_CACHES: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()
_CACHES_LOCK = threading.Lock()


def _after_fork():
    global _CACHES_LOCK
    _CACHES_LOCK = threading.Lock()  # (a thread of the parent may have held it at the fork)


os.register_at_fork(after_in_child=_after_fork)


def cache_for(pipeline, op) -> DecodeCache | None:
    """The decode cache of ``op`` in ``pipeline`` in this process, or None where its plan
    gives it none (``BuildPlan.decode_cache``)."""
    capacity = pipeline.build_plan.decode_cache.get(op.id, 0)
    if not capacity:
        return None
    with _CACHES_LOCK:
        caches = _CACHES.setdefault(pipeline, {})
        cache = caches.get(op.id)
        if cache is None or cache.capacity != capacity:
            cache = caches[op.id] = DecodeCache(capacity)
    return cache


def drop(pipeline) -> None:
    """Forget ``pipeline``'s caches in this process: its executor is shut down (a closed
    pipeline holds no decoded image; a later run starts empty), or its host workers take over
    after the first launch was made here (they make every launch after it)."""
    with _CACHES_LOCK:
        _CACHES.pop(pipeline, None)


def caches_of(pipeline) -> dict:
    """``{op id: DecodeCache}`` made so far in this process (tests, benchmarks)."""
    return dict(_CACHES.get(pipeline, {}))


def _image_bytes(op, sources) -> int:
    """The bytes of the largest image ``op`` decodes, from its reader's annotated sizes."""
    src = sources.get(op.inputs[0].op.id) if op.inputs else None
    sizes = getattr(src, "sizes", None)
    if sizes is None or not len(sizes):
        return UNKNOWN_IMAGE_BYTES
    sizes = np.asarray(sizes, np.int64).reshape(-1, 2)
    r = int(op.args.get("reduce", 1) or 1)
    hw = -(-sizes // r)
    ch = 1 if "GRAY" in str(op.args.get("output_type", "RGB")).upper() else 3
    largest = int((hw[:, 0] * hw[:, 1]).max()) * ch
    return largest if largest > 0 else UNKNOWN_IMAGE_BYTES


def plan(ops, sources, levels, batch_size: int, batches_per_launch: int,
         setting_mb: int | None) -> dict:
    """``{op id: bytes}``: each CPU decoder's cache in a process (module
    docstring); ``setting_mb``: the pipeline's ``decode_cache_mb`` (None: the default)."""
    if setting_mb is not None and int(setting_mb) < 0:
        raise ValueError(f"decode_cache_mb must be >= 0 (0: no cache), got {setting_mb!r}")
    by_id = {op.id: op for op in ops}
    out = {}
    for op in ops:
        if not op.schema.has("decode_cache") or op.device != "cpu":
            continue
        if setting_mb is not None:
            if int(setting_mb):
                out[op.id] = int(setting_mb) << 20
            continue
        path = levels.get(op.id, ())
        if not any(_partners.mode_of(by_id[i]) == "pool" for i in path if i in by_id):
            continue
        # a launch's samples at that level (its batches' pools overlap: held once)
        images = _partners.samples_in_launch(_partners.level_shape(path, by_id),
                                             max(1, int(batches_per_launch))) * int(batch_size)
        out[op.id] = min(AUTO_CAP, images * _image_bytes(op, sources))
    return out


def worker_run(cache_plan: dict, host_processes: int, depth: int) -> int:
    """Consecutive launches a host worker makes in a row (1: any worker, the least loaded): 2
    where a decode cache is on and there are several workers (at most the queue's per-process
    depth), so that every other launch of a worker finds the pool images of its last one
    decoded. Launches come out in order, so a worker holding two consecutive ones makes the
    second only after the first while others may wait for new work: in a simulation (15
    workers, launch times +-5..30%, an in-order consumer), 2 in a row at depth 2 made 1.5-5.5%
    fewer launches than the least-loaded choice, at depth 3 (:data:`RUN_DEPTH`, the default
    depth of such a pipeline) 0.3-2%; 3 in a row at depth 2, 27-28% fewer."""
    return min(2, max(1, int(depth))) if cache_plan and host_processes > 1 else 1
