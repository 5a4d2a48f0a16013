"""The context of one batch's run: what an op's apply step may look at, and who runs the work.

Runtime layer (docs/design.md, "Layers"): above the ops and the batch types, so that it can
materialise a batch (:meth:`BatchContext.materialize`, the one warp / box transform of
detaug/graph/materialize.py) without the batch types importing any kernel.
"""
from __future__ import annotations

import contextlib

import numpy as np

from ..graph import materialize as _materialize
from ..graph.trace import DataNode
from ..core.rng import SampleRNG
from .decode_cache import cache_for
from .partners import LaunchLevels, expands


class BatchContext:
    """Everything an op's apply step may look at for one batch. ``schedule``: the pipeline's
    epoch schedule (detaug/core/sharding.py), whose seed keys every draw."""

    def __init__(self, pipeline, epoch, batch_index, sample_index, positions, stream, pool,
                 schedule):
        self.pipeline, self.epoch, self.batch_index = pipeline, epoch, batch_index
        self.schedule, self.seed = schedule, schedule.seed
        self.sample_index = np.asarray(sample_index, np.int64)
        self.positions = positions
        self.stream, self.pool = stream, pool
        self.earlier_streams = []  # streams its work ran on before ``stream`` (outputs may hold their blocks)
        self.values = {}
        self.batch_size = len(self.sample_index)
        # decode-process leases of this batch's images: given the batch's final event in
        # DeviceStage.collect, so that releasing them needs no CUDA call (see decode_proc._Lease)
        self.leases = []
        self._levels = None  # the samples of each level (multi-sample ops: partners.py)
        self.level = ()

    def levels(self):
        """This launch's :class:`~detaug.runtime.partners.LaunchLevels` (made on first use, at
        level ``()``, from the schedule's samples and batches)."""
        if self._levels is None:
            self._levels = LaunchLevels(self.pipeline.graph, self.schedule, self.epoch, self.sample_index,
                                        self.positions, getattr(self, "sizes", None))
        return self._levels

    def use_level(self, path):
        """Make the samples of level ``path`` (``()``: the schedule's) the ones that ops see:
        ``sample_index`` (keyed draws, the reader's records), ``positions``, ``batch_size``."""
        if path == self.level:
            return
        lv = self.levels().get(path)
        self.sample_index, self.positions = lv.sample_index, lv.positions
        self.batch_size, self.level = len(lv.sample_index), path

    def owner(self, position, path=None):
        """The schedule's sample (its place in the launch) that owns sample ``position`` of level
        ``path`` (default: the current one)."""
        path = self.level if path is None else path
        return position if not path else int(self.levels().get(path).owner[position])

    def partner_groups(self, op):
        """(groups (B + 1,), gather) of the multi-sample op ``op``, which runs at the current
        level: output sample b is made from inputs ``groups[b]:groups[b + 1]`` (partners drawn
        over the epoch: gather is None), or from the inputs at positions
        ``gather[groups[b]:groups[b + 1]]`` (partners drawn from the batch, or from a pool)."""
        if not expands(op):
            return self.levels().gather(op, self.level)
        path = self.level + (op.id,)
        self.levels().get(path)
        # a pool's level holds each position once: its groups name members by place
        return self._levels.groups[path], self._levels.pool_gather.get(path)

    def decode_cache(self, op):
        """The cache of decoded images that the decoder ``op`` keeps in this process across
        launches (detaug/runtime/decode_cache.py), or None."""
        return cache_for(self.pipeline, op)

    def on_stream(self):
        """The batch's stream as cupy's current one (nothing without one). Device work of the
        batch runs under it: a block is freed in the order of the stream current at its
        allocation (the stream-ordered pool frees it there; cupy's default pool keys it by that
        stream: detaug/runtime/gpu/allocator.py), and a handed-out batch's blocks are reused only
        behind waits of the streams it was made on (detaug/runtime/gpu/handout.py)."""
        return contextlib.nullcontext() if self.stream is None else self.stream

    def args_of(self, op) -> dict:
        """``op``'s arguments in this batch: a per-sample argument is its value here."""
        return {k: (self.values[(v.op.id, v.index)] if isinstance(v, DataNode) else v)
                for k, v in op.args.items()}

    def rng(self, op) -> SampleRNG:
        seed = op.args.get("seed")
        return SampleRNG(self.seed if seed is None else seed, op.rng_id, self.epoch,
                         self.sample_index)

    def materialize(self, value, **epilogue):
        """``value`` made concrete in this batch's run: an ImageBatch's pending chain as one warp
        (with ``epilogue``: mean, std, dtype, layout), a BoxBatch's as one box transform; other
        values as they are (detaug/graph/materialize.py)."""
        return _materialize.value(value, self, **epilogue)

    def map_samples(self, fn, n):
        """Run ``fn(i)`` for i < n on the host threads; results in order. The samples go out in
        one contiguous chunk per thread, not one task each: a task costs tens of microseconds of
        queueing and lock hand-over, as much as reading a cached file."""
        chunks = self.map_chunks(lambda lo, hi: [fn(i) for i in range(lo, hi)], n)
        return [r for chunk in chunks for r in chunk]

    def map_chunks(self, fn, n):
        """Run ``fn(lo, hi)`` over one contiguous slice of ``range(n)`` per host thread; the list
        of results, in order."""
        if n == 0:
            return []
        # (a pool may say how many threads it has: the first launch's, see detaug/runtime/executor.py)
        k = 1 if self.pool is None else min(n, max(1, getattr(self.pool, "detaug_threads", None)
                                                   or self.pipeline.num_threads))
        bounds = [n * j // k for j in range(k + 1)]
        if k == 1:
            return [fn(0, n)]
        return list(self.pool.map(lambda j: fn(bounds[j], bounds[j + 1]), range(k)))
