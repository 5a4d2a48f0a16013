"""``on_error='skip'`` of a pipeline (a mixin of :class:`detaug.pipeline.Pipeline`): a launch's
stage is run again with a failing sample replaced by the next record of the same epoch order,
for as long as the order has records left to try, and the bad files are warned about and counted
once per epoch when their batch is handed out (``pipe.stats``)."""
from __future__ import annotations

import warnings

import numpy as np

from .context import BatchContext
from ..core.errors import SampleError


class Retries:
    """Replacing bad samples and counting the skips, for :class:`~detaug.pipeline.Pipeline`."""

    def _with_retries(self, key, prepared, pool, stage, indices=None, stream=None, skips=None,
                      walks=None, ctx_type=BatchContext):
        """Run ``stage(ctx)``; under on_error='skip' replace a failing sample by the next record
        of the same epoch order and run the batch again, for as long as the order has records
        left to try: a replacement that walks the whole order back to where it began means every
        record failed, and raises. The skips travel with the batch and are counted when the
        batch is handed out (a prefetched batch never used counts nothing)."""
        skips = [] if skips is None else skips
        walks = {} if walks is None else walks  # batch position -> the record its walk began at
        while True:
            ctx = self._make_ctx(key, prepared, pool, indices, ctx_type)
            ctx.stream, ctx.skips, ctx.walks = stream or ctx.stream, skips, walks
            try:
                stage(ctx)
                return ctx
            except SampleError as e:
                self._retire_leases(ctx)
                indices = self._replacement(key, ctx, e, walks)

    def _replacement(self, key, ctx, e, walks):
        """Note the skip on the batch and return its indices with the bad one replaced by the
        next record of the epoch order (each position walks the order at most once)."""
        if self.on_error != "skip" or e.position is None or ctx.positions is None:
            raise e
        ctx.skips.append((e.path, str(e)))
        order = self._shard_order(key[0])
        indices = ctx.sample_index.copy()
        start = walks.setdefault(e.position, int(indices[e.position]))
        cur = int(np.nonzero(order == indices[e.position])[0][0])
        nxt = int(order[(cur + 1) % len(order)])
        if nxt == start:
            raise RuntimeError(f"batch {key[1]} of epoch {key[0]}: every record of the epoch order "
                               f"failed to load, nothing is left to replace {e.path} with "
                               f"(last error: {e})") from e
        indices[e.position] = nxt
        return indices

    def _replaced_positions(self, epoch, idx, pos, indices):
        """The positions of a retry's ``indices``: a sample that replaces a skipped one takes its
        record's own place in the epoch order (the others keep theirs); None stays None."""
        if pos is None:
            return None
        order = self._shard_order(epoch)
        pos = np.array(pos, np.int64)
        for k in np.nonzero(np.asarray(indices) != np.asarray(idx))[0]:
            pos[k] = np.nonzero(order == indices[k])[0][0]
        return pos

    def _count_skips(self, skips, epoch):
        """Warn about and count each bad file once per epoch: a retry's replacement, or the
        last batch's wrap-around under 'fill', can meet the same file again in one epoch.
        ``stats``: 'skipped' (files skipped, once per epoch each), 'skipped_files' ((path,
        why) in that order), 'batches' (batches handed out), and 'reader_skipped' where a
        reader dropped annotations at build."""
        new = []
        with self._lock:
            for path, why in skips:
                if (epoch, path) not in self._skips_seen:
                    self._skips_seen.add((epoch, path))
                    new.append((path, why))
                    self.stats["skipped"] += 1
                    self.stats["skipped_files"].append((path, why))
        for path, why in new:
            warnings.warn(f"skipping {path}: {why}")
