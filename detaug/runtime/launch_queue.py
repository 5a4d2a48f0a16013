"""The launches a pipeline has in flight and the batches split off them not yet handed out
(:class:`LaunchQueue`, a part the pipeline holds): which launch is submitted next (as deep as the
prefetch depth, on into the next epoch for a sized source), the next batch of the current epoch
off the queue's head, and what a restart, a reset and the end of an epoch keep or drop. The
executor that makes the launches is detaug/runtime/executor.py; the cursor it follows is the
pipeline's RunState (detaug/runtime/run_state.py)."""
from __future__ import annotations

import collections
import threading

from ..core.batch import split_batches
from ..core.errors import NotFed


class LaunchQueue:
    """The pipeline's launches in flight, a part it holds. Constructed with what it reads: the
    cursor (``run_state``: the epoch being handed out, moved by :meth:`restart`) and the skip
    count (``skips``: a launch's bad files counted as it is taken off the queue). The executor
    is made on first use (:meth:`executor_ready`); what bounds the queue (batches per epoch,
    launches in flight, batches per launch) is given to :meth:`fill`."""

    def __init__(self, run_state, skips):
        self._run_state, self._skips = run_state, skips
        self.executor = None
        self.ready = collections.deque()  # batches split off a multi-batch launch, not yet handed out
        self.submitted = None  # (epoch, first batch) of the next launch to submit
        self.lock = threading.Lock()

    def executor_ready(self, make):
        """The executor, made by ``make()`` on first use (its first launch: the cursor's)."""
        with self.lock:
            if self.executor is None:
                self.executor = make()
                self.submitted = (self._run_state.epoch, self._run_state.batch)
        return self.executor

    def fill(self, need, limit, launches, batches_per_launch):
        """Keep ``launches`` launches in flight, each of ``batches_per_launch`` batches at most;
        ``limit``: the batches of an epoch (None: a source without a size); ``need``: run()
        waits on the queue's head, so a feed_input source with nothing fed is an error rather
        than a pause."""
        ex = self.executor
        while len(ex.queue) < launches:
            e, b = self.submitted
            epoch = self._run_state.epoch
            if limit is not None and b >= limit:
                # sized sources prefetch on into the next epoch, as deep as within an epoch (kept
                # if reset() follows): the queue never runs dry at an epoch's end
                e, b = e + 1, 0
                if limit == 0 or e > epoch + 1:
                    break
            elif e != epoch and (limit is None or e > epoch + 1):
                break
            count = 1 if limit is None else min(batches_per_launch, limit - b)
            try:
                submitted = ex.submit((e, b, count))
            except NotFed:
                if ex.queue or self.ready or not need:
                    break  # a feed_input source is fed as run() is called: prefetch no further
                raise
            if not submitted:
                self.submitted = (e + 1, 0)  # an iterable source is spent: the epoch ends
                break
            self.submitted = (e, b + count)

    def take(self, fill):
        """(batch index, outputs, event, streams made on) of the next batch of the current
        epoch; StopIteration at its end. ``fill()`` keeps the launches in flight before the
        queue's head is waited for."""
        if not self.ready:
            fill()
            ex = self.executor
            if not ex.queue or ex.queue[0][0][0] != self._run_state.epoch:
                raise StopIteration
            (epoch, b, _), (outs, event, skips, sizes, made_on) = ex.pop()
            self._skips.count(skips, epoch)
            parts = split_batches(outs, sizes) if len(sizes) > 1 else [outs]
            self.ready.extend((b + k, part, event, made_on) for k, part in enumerate(parts))
        return self.ready.popleft()

    def holds_next_epoch(self) -> bool:
        """Whether the next epoch's first launch is at the queue's head with nothing of this
        epoch left: ``reset()`` then keeps the queue."""
        ex, nxt = self.executor, self._run_state.epoch + 1
        return bool(not self.ready and ex is not None and ex.queue and ex.queue[0][0][:2] == (nxt, 0))

    def restart(self, epoch, batch):
        """Drop everything in flight and move the cursor to batch ``batch`` of ``epoch``: the
        next launch submitted starts there."""
        self.ready.clear()
        if self.executor is not None:
            self.executor.clear()
        self._run_state.move_to(epoch, batch)
        self.submitted = (epoch, batch)

    def drop_epoch(self) -> None:
        """Drop the current epoch's batches split off a launch and its queued launches, each
        taken off the queue's head as ``run()`` takes it (waited for, its output slots released,
        so that the launches after it are admitted in order; its failure is nobody's)."""
        self.ready.clear()
        ex = self.executor
        while ex is not None and ex.queue and ex.queue[0][0][0] == self._run_state.epoch:
            try:
                ex.pop()
            except Exception:  # noqa: BLE001 - a failure of a batch nobody will see
                pass

    def shutdown(self, wait=True) -> None:
        """Stop the executor (its threads and host workers); a later run makes a new one.
        ``wait=False``: from a finaliser, joining nothing."""
        ex = self.executor
        if ex is not None:
            ex.shutdown(wait=wait)
            if wait:
                self.executor = None

    def after_fork(self):
        """In a forked child: a new lock, nothing in flight; the parent's executor, abandoned
        (returned, None if there was none)."""
        self.lock = threading.Lock()
        ex, self.executor = self.executor, None
        self.ready.clear()  # made in the parent for its cursor; the child makes them again
        return ex
