"""The epoch schedule and the sharding of a pipeline: :class:`Schedule`, a part the pipeline holds,
constructed with the seed and what else it reads: which records each batch of an epoch takes on
this shard (the keyed shuffle, the shard's part under its shard policy, DALI's ``pad_last_batch``
and ``stick_to_shard=False``), the epoch's size and batch count, the fitting of a launch's
schedule to the batches fed to an external source; :class:`Sharding`, the part that holds the
pipeline's default shard and shard policy and makes the schedule from them (what ``set_shard``,
``shard_info``, ``epoch_size`` and ``len`` hand over to), with the check that an epoch holds a
batch (:func:`check_epoch_has_batches`) and whether a reader keeps a shard of its own
(:func:`own_shard`); and the default device of a process of a distributed run
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
    """The pipeline's sharding, a part it holds: the default shard (``shard_id``, ``num_shards``)
    and ``shard_policy`` of the readers that have no shard of their own, and the epoch
    :class:`Schedule` made from them with the ``seed``, ``batch_size`` and ``last_batch_policy``
    it is constructed with. :meth:`bind` gives it the sources at build (and makes the schedule);
    :meth:`set_shard` shards them anew and makes the schedule again. It moves no cursor: the
    pipeline restarts its epoch where :meth:`set_shard` says the shards changed."""

    def __init__(self, seed: int, batch_size: int, last_batch_policy: str, shard_id: int = 0,
                 num_shards: int = 1, shard_policy: str = "pad"):
        self._seed, self._batch_size, self._last = int(seed), int(batch_size), last_batch_policy
        self.shard_id, self.num_shards = int(shard_id), int(num_shards)
        self.shard_policy = _schedule.check_shard_policy(shard_policy, "shard_policy")
        self.schedule = None  # made by bind()
        self._sources, self._free, self._skipped = [], (), 0

    def bind(self, sources, skipped: int = 0) -> Schedule:
        """At build: ``sources``, (reader name, source, whether it was given a shard of its own:
        set_shard leaves it) for each, the driving one first, and the number of entries the
        readers skipped when they were read (named where an epoch would be empty). Makes the
        schedule and refuses (:func:`check_epoch_has_batches`) an epoch that would hold no
        batch."""
        sources = list(sources)
        self._sources = [(name, src) for name, src, _ in sources]
        self._free = tuple(src for _, src, own in sources if not own)
        self._skipped = int(skipped)
        self.schedule = None
        schedule = self._make()
        self._check(schedule)
        self.schedule = schedule
        return schedule

    @property
    def driver(self):
        return self._sources[0][1]

    def _make(self, shard_policy=None) -> Schedule:
        return Schedule(self.driver, self._seed, self._batch_size, self._last,
                        self.shard_policy if shard_policy is None else shard_policy)

    def _check(self, schedule) -> None:
        check_epoch_has_batches(schedule, self._sources[0][0], self._skipped)

    def epoch_size(self, name: str | None = None) -> int | dict | None:
        """Number of records the reader holds (all shards), as DALI's ``epoch_size``."""
        if name is None:
            return ({n: s.size for n, s in self._sources} if len(self._sources) > 1
                    else self.driver.size)
        for n, s in self._sources:
            if n == name:
                return s.size
        raise KeyError(f"no reader named {name!r}")

    def batches_per_epoch(self) -> int:
        """Batches per epoch on this shard; TypeError for a source without a size."""
        if self.driver.size is None:
            raise TypeError("this pipeline's source has no size: give external_source a size")
        return self.schedule.batches_per_epoch()

    def set_shard(self, shard_id: int, num_shards: int, shard_policy: str | None = None) -> bool:
        """Shard the readers that have no shard of their own; ``shard_policy``: None keeps the
        current one. Once bound, a shard whose epoch would hold no batch is refused as at build,
        before anything changes. True where the sources were sharded anew (bound: the caller
        restarts its epoch)."""
        if not 0 <= int(shard_id) < int(num_shards):
            raise ValueError(f"shard_id {shard_id} not in [0, {num_shards})")
        sid, ns = int(shard_id), int(num_shards)
        if shard_policy is not None:
            shard_policy = _schedule.check_shard_policy(shard_policy, "shard_policy")
        if self.schedule is not None:
            self._check_shard(sid, ns, shard_policy)
        if shard_policy is not None:
            self.shard_policy = shard_policy
        self.shard_id, self.num_shards = sid, ns
        if self.schedule is None:
            return False
        for src in self._free:
            src.shard = (sid, ns)
        self.schedule = self._make()
        return True

    def _check_shard(self, shard_id, num_shards, shard_policy):
        """:func:`check_epoch_has_batches` for the shard ``set_shard`` would set (the driving
        reader's, unless it has a shard of its own), everything put back after."""
        src = self.driver
        saved = src.shard
        try:
            if any(s is src for s in self._free):
                src.shard = (shard_id, num_shards)
            self._check(self._make(shard_policy))
        finally:
            src.shard = saved

    @property
    def shard_info(self) -> dict:
        """The driving reader's sharding: shard_id, num_shards, random_shuffle."""
        sid, ns = self.driver.shard
        return {"shard_id": sid, "num_shards": ns, "random_shuffle": self.driver.shuffle}


# ---- the epoch's size ----------------------------------------------------------------------------
def _shard_records(schedule) -> tuple:
    """(records of the dataset, shard id, shard count, shard policy, records of this shard's
    epoch) of the schedule's driving source, which has a size."""
    src = schedule.driver
    sid, ns = src.shard
    policy = schedule.policy_of(src)
    # DALI's pad_last_batch pads every shard to the largest shard's length (Schedule.epoch_samples)
    n = _schedule.shard_size(src.size, sid, ns,
                             _schedule.PAD if getattr(src, "pad_last_batch", False) else policy)
    return src.size, sid, ns, policy, n


def batches_per_epoch(schedule) -> int | None:
    """Batches of an epoch on the schedule's shard, or None for a source without a size."""
    if schedule.driver.size is None:
        return None
    n = _shard_records(schedule)[-1]
    return _schedule.batches_per_epoch(n, schedule.batch_size, schedule.last_batch_policy)


def check_epoch_has_batches(schedule, name: str, skipped: int = 0) -> None:
    """ValueError if an epoch of ``schedule``'s shard would hold no batch (a run would give a
    bare StopIteration, a training loop would silently run on nothing); ``name``: the driving
    reader's, ``skipped``: the entries the readers dropped when they were read."""
    if schedule.driver.size is None or batches_per_epoch(schedule):
        return
    size, sid, ns, policy, n = _shard_records(schedule)
    bs, last = schedule.batch_size, schedule.last_batch_policy
    if size == 0:
        why = ("the dataset has no records" + (f" ({skipped} entries were skipped when it was read: "
                                               "pipe.stats['reader_skipped'])" if skipped else ""))
    elif n == 0:
        why = (f"shard {sid} of {ns} holds none of the dataset's {size} records under "
               f"shard_policy={policy!r} (more shards than records): use shard_policy='pad' (a "
               "short shard repeats records) or fewer shards")
    else:
        why = (f"shard {sid} of {ns} holds {n} records, fewer than batch_size={bs}, and "
               f"last_batch_policy={last!r} drops an incomplete batch: use 'partial' or 'fill', "
               "or a smaller batch_size")
    raise ValueError(f"{name}: an epoch would have no batch (dataset of {size} records, shard "
                     f"{sid} of {ns} with shard_policy={policy!r} holding {n}, batch_size={bs}, "
                     f"last_batch_policy={last!r}): {why}")


def own_shard(args) -> bool:
    """Whether a reader's op ``args`` give it a shard of its own (``set_shard`` leaves it)."""
    return args.get("shard_id") is not None or args.get("num_shards") is not None


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
