"""The epoch schedule and the sharding of a pipeline: :class:`Schedule`, a part the pipeline holds,
constructed with the seed and what else it reads: which records each batch of an epoch takes on
this shard (the keyed shuffle, the shard's part under its shard policy, DALI's ``pad_last_batch``
and ``stick_to_shard=False``), the epoch's size and batch count, the fitting of a launch's
schedule to the batches fed to an external source; and :class:`Sharding`, the pipeline's public methods over it (``set_shard`` / ``shard_info``,
``epoch_size``, ``len``); and the default device of a process of a distributed run
(:func:`_local_rank`). The arithmetic is detaug/core/schedule.py's; the schedule applies it to the
pipeline's driving reader."""
from __future__ import annotations

import os
import sys

import numpy as np

from . import schedule as _schedule
from .rng import epoch_permutation


class Schedule:
    """The epoch schedule of a pipeline's driving source (a part the pipeline holds, made at
    build and again by ``set_shard``): which records each batch of an epoch takes on this shard,
    from what it is given: the source (its size, shuffle, shard and DALI's sharding arguments),
    the ``seed`` of the keyed shuffle, the batch size and the two policies."""

    def __init__(self, driver, seed: int, batch_size: int, last_batch_policy: str,
                 shard_policy: str):
        self.driver, self.seed = driver, int(seed)
        self.batch_size, self.last_batch_policy = int(batch_size), last_batch_policy
        self.shard_policy = shard_policy

    # ---- epochs and batches ------------------------------------------------------------------
    def shard_order(self, epoch):
        src = self.driver
        n = src.size
        order = epoch_permutation(self.seed, epoch, n) if src.shuffle else np.arange(n, dtype=np.int64)
        sid, ns = src.shard
        sid = (sid + epoch) % ns if getattr(src, "moves_shards", False) else sid  # DALI's stick_to_shard=False
        return order[_schedule.shard_positions(n, sid, ns, self.policy_of(src))]

    def epoch_samples(self) -> int:
        """Samples of the shard's epoch: its size, or with a reader's ``pad_last_batch`` (DALI's)
        the largest shard's, every shard then having as many batches."""
        if getattr(self.driver, "pad_last_batch", False):
            return _schedule.shard_size(self.driver.size, *self.driver.shard, "pad")
        return self.shard_size()

    def policy_of(self, src) -> str:
        """A reader given DALI's sharding arguments (``pad_last_batch``, ``stick_to_shard``)
        shards as DALI does ('uneven': its padding is its own); others by the pipeline's policy."""
        if getattr(src, "dali_sharding", False):
            return "uneven"
        return self.shard_policy

    def shard_size(self) -> int:
        return _schedule.shard_size(self.driver.size, *self.driver.shard,
                                    self.policy_of(self.driver))

    def batches_per_epoch(self) -> int:
        """Batches per epoch on this shard (a sized source)."""
        return _schedule.batches_per_epoch(self.epoch_samples(), self.batch_size, self.last_batch_policy)

    def indices(self, epoch, batch_index, count=1):
        """(record indices, positions in the shard order, batch sizes) of batches
        ``batch_index .. batch_index + count - 1`` of ``epoch``, concatenated."""
        order = self.shard_order(epoch)
        n = self.epoch_samples()
        pos, sizes = _schedule.batch_positions(n, batch_index, count, self.batch_size,
                                               self.last_batch_policy)
        if getattr(self.driver, "pad_last_batch", False) and len(order):
            # DALI's pad_last_batch: what follows the shard's last sample repeats it (the
            # launch's batches are consecutive: only the epoch's last may be short)
            pos = np.minimum(batch_index * self.batch_size + np.arange(len(pos)), len(order) - 1)
        return order[pos], pos, sizes

    def batches(self, epoch, batch_index, count):
        """(record indices, positions, batch sizes) that the schedule gives batches
        ``batch_index .. batch_index + count - 1``: :meth:`indices` for a sized source, else
        :func:`schedule.unsized_indices` (no positions)."""
        if self.driver.size is not None:
            return self.indices(epoch, batch_index, count)
        idx, sizes = _schedule.unsized_indices(batch_index, count, self.batch_size)
        return idx, None, sizes

    def fit_to_fed(self, key, idx, pos, sizes, fed):
        """:func:`schedule.fit_to_fed` for the launch ``key``, its error naming the source."""
        name, fed_sizes = fed
        epoch, b = key[0], key[1]
        sized = (f", size={self.driver.size}, last_batch_policy={self.last_batch_policy!r}"
                 if self.driver.size is not None else "")

        def where(j, n, room):
            return (f"{name}: batch {b + j} of epoch {epoch} was fed {n} samples, more than the "
                    f"{room} the schedule has room for (batch_size={self.batch_size}{sized}): "
                    "feed at most that many per batch")

        return _schedule.fit_to_fed(idx, pos, sizes, fed_sizes, where)


class Sharding:
    """The public epoch and shard methods of :class:`~detaug.pipeline.Pipeline`, over its
    :class:`Schedule` (``schedule``, made at build; ``set_shard`` makes it anew). ``end_epoch``
    also moves the pipeline's cursor (``_epoch``, ``_ready``, ``_executor``'s queue)."""

    def epoch_size(self, name: str | None = None) -> int | dict | None:
        """Number of records the reader holds (all shards), as DALI's ``epoch_size``."""
        self.build()
        if name is None:
            return {op.name: s.size for op_id, s in self._sources.items()
                    for op in [self.graph.ops[op_id]]} if len(self._sources) > 1 else self._driver.size
        for op_id, s in self._sources.items():
            if self.graph.ops[op_id].name == name:
                return s.size
        raise KeyError(f"no reader named {name!r}")

    def shard_size(self) -> int:
        self.build()
        return self.schedule.shard_size()

    def __len__(self) -> int:
        """Batches per epoch on this shard."""
        self.build()
        if self._driver.size is None:
            raise TypeError("this pipeline's source has no size: give external_source a size")
        return self.schedule.batches_per_epoch()

    def end_epoch(self) -> None:
        """End the current epoch where it stands and move on to the next, keeping what is in
        flight of the next: the next ``run()`` (or ``next()``) gives the next epoch's first batch.

        Dropped: this epoch's batches split off a launch and not handed out, and its queued
        launches, each taken off the queue's head as ``run()`` takes it (waited for, its output
        slots released, so that the launches after it are admitted in order; its failure is
        nobody's) and thrown away. Then ``reset()`` finds the next epoch's first launch at the
        head of the queue and keeps the queue, where on its own it would clear it and make those
        launches again. At an epoch's end it is ``reset()``."""
        self._ready.clear()
        ex = self._executor
        while ex is not None and ex.queue and ex.queue[0][0][0] == self._epoch:
            try:
                ex.pop()
            except Exception:  # noqa: BLE001 - a failure of a batch nobody will see
                pass
        self.reset()

    def set_shard(self, shard_id: int, num_shards: int, shard_policy: str | None = None) -> None:
        """Shard the readers that have no shard_id / num_shards of their own (the PyTorch
        iterator does this from torch.distributed); restarts the current epoch's iteration.
        ``shard_policy``: None keeps the pipeline's (see the class)."""
        if not 0 <= int(shard_id) < int(num_shards):
            raise ValueError(f"shard_id {shard_id} not in [0, {num_shards})")
        if shard_policy is not None:
            self.shard_policy = _schedule.check_shard_policy(shard_policy, "shard_policy")
        self.shard_id, self.num_shards = int(shard_id), int(num_shards)
        if self._built:
            for op_id, src in self._sources.items():
                a = self.graph.ops[op_id].args
                if a.get("shard_id") is None and a.get("num_shards") is None:
                    src.shard = (self.shard_id, self.num_shards)
            self.schedule = self._make_schedule()
            self._start(self._epoch, 0)

    @property
    def shard_info(self) -> dict:
        """The driving reader's sharding: shard_id, num_shards, random_shuffle."""
        self.build()
        sid, ns = self._driver.shard
        return {"shard_id": sid, "num_shards": ns, "random_shuffle": self._driver.shuffle}


def _local_rank():
    """The process's local rank for a default device_id: torchrun's ``LOCAL_RANK``, else, where
    torch.distributed is initialised (torch.multiprocessing.spawn), the rank modulo the GPUs
    visible; None outside a distributed run. torch is not imported here."""
    env = os.environ.get("LOCAL_RANK", "")
    if env.strip():
        return int(env)
    torch = sys.modules.get("torch")
    dist = getattr(torch, "distributed", None)
    if dist is not None and dist.is_available() and dist.is_initialized():
        return dist.get_rank() % max(1, torch.cuda.device_count())
    return None
