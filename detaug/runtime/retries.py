"""``on_error='skip'`` of a pipeline, as two parts it holds: :class:`RetryPolicy` runs a launch's
stage again with a failing sample replaced by the next record of the same epoch order, for as
long as the order has records left to try; :class:`SkipCount` warns about and counts the bad
files once per epoch when their batch is handed out (``pipe.stats``). Each is constructed with
what it keeps (the policy, the stats); the epoch order and the way a batch context is made are
passed to each call."""
from __future__ import annotations

import threading
import warnings

import numpy as np

from ..core.errors import SampleError


class RetryPolicy:
    """Replacing bad samples under ``on_error`` ('raise': never; 'skip')."""

    def __init__(self, on_error: str):
        self.on_error = on_error

    def run(self, key, make_ctx, stage, retire, schedule, indices=None, stream=None, skips=None,
            walks=None):
        """Run ``stage(ctx)`` on ``make_ctx(indices)`` (the batch context of the launch ``key``,
        its samples ``indices`` where a retry replaced some); under on_error='skip' replace a
        failing sample by the next record of ``schedule``'s epoch order and run the batch
        again (``retire(ctx)`` first gives back what the failed attempt held), for as long as the
        order has records left to try: a replacement that walks the whole order back to where it
        began means every record failed, and raises. The skips travel with the batch and are
        counted when the batch is handed out (a prefetched batch never used counts nothing)."""
        skips = [] if skips is None else skips
        walks = {} if walks is None else walks  # batch position -> the record its walk began at
        while True:
            ctx = make_ctx(indices)
            ctx.stream, ctx.skips, ctx.walks = stream or ctx.stream, skips, walks
            try:
                stage(ctx)
                return ctx
            except SampleError as e:
                retire(ctx)
                indices = self.replacement(schedule, key, ctx, e, walks)

    def replacement(self, schedule, key, ctx, e, walks):
        """Note the skip on the batch and return its indices with the bad one replaced by the
        next record of ``schedule``'s epoch order (each position walks the order at most once)."""
        if self.on_error != "skip" or e.position is None or ctx.positions is None:
            raise e
        ctx.skips.append((e.path, str(e)))
        order = schedule.shard_order(key[0])
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

    @staticmethod
    def replaced_positions(schedule, epoch, idx, pos, indices):
        """The positions of a retry's ``indices``: a sample that replaces a skipped one takes its
        record's own place in ``schedule``'s epoch order (the others keep theirs); None stays
        None."""
        if pos is None:
            return None
        order = schedule.shard_order(epoch)
        pos = np.array(pos, np.int64)
        for k in np.nonzero(np.asarray(indices) != np.asarray(idx))[0]:
            pos[k] = np.nonzero(order == indices[k])[0][0]
        return pos


class SkipCount:
    """The bad files of handed-out batches, in ``stats`` (a pipeline's ``pipe.stats``)."""

    def __init__(self, stats: dict):
        self.stats = stats
        self._lock = threading.Lock()
        self._seen = set()  # (epoch, path) of the files counted

    def after_fork(self) -> None:
        """In a forked child: a lock of its own (the parent's may have been held at the fork)."""
        self._lock = threading.Lock()

    def count(self, skips, epoch):
        """Warn about and count each bad file once per epoch: a retry's replacement, or the
        last batch's wrap-around under 'fill', can meet the same file again in one epoch.
        ``stats``: 'skipped' (files skipped, once per epoch each), 'skipped_files' ((path,
        why) in that order), 'batches' (batches handed out), and 'reader_skipped' where a
        reader dropped annotations at build."""
        new = []
        with self._lock:
            for path, why in skips:
                if (epoch, path) not in self._seen:
                    self._seen.add((epoch, path))
                    new.append((path, why))
                    self.stats["skipped"] += 1
                    self.stats["skipped_files"].append((path, why))
        for path, why in new:
            warnings.warn(f"skipping {path}: {why}")
