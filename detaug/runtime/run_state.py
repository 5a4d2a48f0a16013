"""What identifies a run of a pipeline, and the one-caller-at-a-time rule of its cursor.

- :func:`serialised`: the methods that move or read the iteration cursor (``run``, ``next``,
  ``reset``, ``end_epoch``, ``state_dict``, ``load_state_dict``, ``set_shard``) take the
  pipeline's cursor lock, so that concurrent callers are served one at a time: every batch is
  handed out exactly once, in order (the order in which the callers' calls take the lock).
- :func:`check_epoch_has_batches`: an epoch that would have no batch is refused at ``build()``
  (or ``set_shard``), naming the dataset size, the shard, the batch size and the policies.
- :func:`state_of` / :func:`check_state`: a state carries the dataset's fingerprint (record count
  and a hash of the record keys), the shard and shard count, the shard policy and the batches per
  epoch beside the position, seed and batch size; loading a state of another run is refused with
  a message naming both values.
"""
from __future__ import annotations

import functools
import hashlib
import os
import warnings

from ..core import schedule as _schedule

STATE_FORMAT = 2  # states before it ("format" absent) held epoch, batch, seed, batch_size, shard


class StateDictError(ValueError):
    """A state given to ``load_state_dict`` that is not a state: a field missing, or of another
    type or range than ``state_dict`` writes (a checkpoint edited or damaged). The message names
    the field and its value."""


_INT, _OPT_INT = "an int", "an int or None"
# every field state_of writes, and what it holds; a state is checked against this once, where it
# enters (check_state), so that no later int() or .get() meets a value of another kind
_FIELDS = {"format": _OPT_INT, "epoch": _INT, "batch": _INT, "seed": _INT, "batch_size": _INT,
           "shard": "a list [shard_id, num_shards] of ints", "shard_policy": "a string",
           "last_batch_policy": "a string", "batches_per_epoch": _OPT_INT,
           "dataset": "a dict {'records': int or None, 'keys': str or None}"}


def _is_int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) or (
        type(v).__module__ == "numpy" and getattr(v, "dtype", None) is not None and v.dtype.kind in "iu")


def _field_ok(key, v) -> bool:
    kind = _FIELDS[key]
    if kind in (_INT, _OPT_INT):
        return _is_int(v) or (v is None and kind == _OPT_INT)
    if key == "shard":
        return isinstance(v, (list, tuple)) and len(v) == 2 and all(_is_int(x) for x in v)
    if key == "dataset":
        # (None: an unsized source, fed whole batches: dataset_fingerprint)
        return (isinstance(v, dict) and (_is_int(v.get("records")) or v.get("records") is None)
                and isinstance(v.get("keys"), (str, type(None))))
    return isinstance(v, str)


def check_fields(state) -> tuple:
    """(epoch, batch) of ``state`` once every field it holds is of the kind ``state_of`` writes
    (epoch and batch present and not negative); StateDictError naming the first that is not."""
    if not isinstance(state, dict) or "epoch" not in state or "batch" not in state:
        raise StateDictError("load_state_dict: not a pipeline state (a dict from "
                             "Pipeline.state_dict(), with 'epoch' and 'batch')")
    for key, v in state.items():
        if key in _FIELDS and not _field_ok(key, v):
            raise StateDictError(f"load_state_dict: state field {key!r} is {v!r:.80} (a "
                                 f"{type(v).__name__}): Pipeline.state_dict() writes {_FIELDS[key]}")
    epoch, batch = int(state["epoch"]), int(state["batch"])
    if epoch < 0 or batch < 0:
        raise StateDictError(f"load_state_dict: epoch {epoch} and batch {batch} must not be negative")
    return epoch, batch


class RunState:
    """The cursor's state methods of :class:`~detaug.pipeline.Pipeline` (before its ``Sharding``
    in the bases: ``set_shard`` and ``end_epoch`` here take the cursor lock, the pipeline's
    ``_cursor_lock``, around Sharding's)."""

    def set_shard(self, shard_id: int, num_shards: int, shard_policy: str | None = None) -> None:
        """Sharding's ``set_shard`` under the cursor lock; a shard whose epoch would hold no
        batch is refused as at build, before anything changes."""
        with self._cursor_lock:
            if self._built and 0 <= int(shard_id) < int(num_shards):
                self._check_shard(int(shard_id), int(num_shards), shard_policy)
            super().set_shard(shard_id, num_shards, shard_policy)

    def _check_shard(self, shard_id, num_shards, shard_policy):
        """:func:`check_epoch_has_batches` for the shard ``set_shard`` would set (the driving
        reader's, unless it has a shard of its own), everything put back after."""
        src = self._driver
        args = self.graph.ops[src.op.id].args
        saved = src.shard
        try:
            if args.get("shard_id") is None and args.get("num_shards") is None:
                src.shard = (shard_id, num_shards)
            if shard_policy is not None:
                shard_policy = _schedule.check_shard_policy(shard_policy, "shard_policy")
            check_epoch_has_batches(self, self._make_schedule(shard_policy))
        finally:
            src.shard = saved

    def end_epoch(self) -> None:
        """Sharding's ``end_epoch`` under the cursor lock."""
        with self._cursor_lock:
            super().end_epoch()

    def state_dict(self) -> dict:
        """Where the iteration stands (resuming from it gives exactly the next batch), and what
        identifies the run: the dataset's fingerprint (record count, a hash of the records' ids
        and file names), the shard and shard count, the shard policy, the last-batch policy and
        the batches per epoch. Plain ints, strings and lists (for a JSON or torch checkpoint)."""
        with self._cursor_lock:
            self.build()
            return state_of(self)

    def load_state_dict(self, state: dict, *, any_shard: bool = False) -> None:
        """Resume at ``state``'s batch. A state of another run is refused (ValueError naming both
        values): another seed, batch size, dataset (record count or keys), shard, shard count,
        shard policy, last-batch policy or number of batches per epoch. ``any_shard=True`` takes
        another rank's state of a data-parallel run (every rank is at the same step; the torch
        iterator passes it): the shard id may differ, and at an epoch's start also the shard
        count and policy (the shards are cut anew). A state saved before fingerprints (no
        ``format``) is checked for what it holds, with a warning. A source fed whole batches (an
        iterable, ``feed_input``) cannot be rewound: resuming it mid-epoch raises (at an epoch's
        start the iterable is iterated again from its beginning). A state whose fields are not
        of the kinds ``state_dict`` writes (``epoch=1.9``, a string, a shard of ``3``) is a
        :class:`StateDictError` (a ValueError) naming the field."""
        with self._cursor_lock:
            self.build()
            epoch, batch = check_state(self, state, any_shard)
            fed = [self.graph.ops[i].name for i, s in self._sources.items()
                   if getattr(s, "fed", False)]
            if fed and batch > 0:
                raise ValueError(f"cannot resume at batch {batch} of epoch {epoch}: external "
                                 f"source {fed[0]!r} is fed whole batches (an iterable or "
                                 "feed_input), which cannot be rewound to a batch; resume at an "
                                 "epoch's start, or use a reader or a per-sample callable "
                                 "(batch=False)")
            self._start(epoch, batch)


def serialised(method):
    """``method`` runs under the pipeline's cursor lock (an RLock: ``run`` calls ``reset``)."""

    @functools.wraps(method)
    def under_lock(self, *args, **kwargs):
        with self._cursor_lock:
            return method(self, *args, **kwargs)

    return under_lock


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


def check_epoch_has_batches(pipe, schedule) -> None:
    """ValueError if an epoch of ``schedule``'s shard would hold no batch (a run would give a
    bare StopIteration, a training loop would silently run on nothing); ``pipe`` names the
    reader and what it skipped."""
    if schedule.driver.size is None or batches_per_epoch(schedule):
        return
    size, sid, ns, policy, n = _shard_records(schedule)
    bs, last = schedule.batch_size, schedule.last_batch_policy
    name = pipe.graph.ops[schedule.driver.op.id].name
    if size == 0:
        dropped = len(pipe.stats.get("reader_skipped") or ())
        why = ("the dataset has no records" + (f" ({dropped} entries were skipped when it was read: "
                                               "pipe.stats['reader_skipped'])" if dropped else ""))
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


# ---- the state -----------------------------------------------------------------------------------
def record_keys(src) -> list | None:
    """What names each record of a source, in the dataset's order: the record's own id (a reader's
    image id, a file reader's label) and its file name without the folder (so that a dataset moved
    to another root or machine keeps its keys); None for a source without records."""
    paths = getattr(src, "paths", None)
    if paths is None:
        return None
    records = getattr(getattr(src, "dataset", None), "records", None)
    labels = getattr(src, "labels", None)
    if records is not None and len(records) == len(paths):
        tags = [r.image_id for r in records]
    elif labels is not None and len(labels) == len(paths):
        tags = [int(v) for v in labels]
    else:
        tags = [""] * len(paths)
    return [f"{t}\x1f{os.path.basename(str(p))}" for t, p in zip(tags, paths)]


def fingerprint(pipe) -> dict:
    """``{"records": the dataset's size (None: unsized), "keys": a hash of its record keys (None
    where the source has no records, e.g. a per-sample callable)}``, computed once."""
    cached = pipe._fingerprint
    if cached is None:
        keys = record_keys(pipe._driver)
        digest = None
        if keys is not None:
            digest = hashlib.sha256("\n".join(keys).encode("utf-8", "surrogatepass")).hexdigest()[:16]
        cached = pipe._fingerprint = {"records": pipe._driver.size, "keys": digest}
    return dict(cached)


def state_of(pipe) -> dict:
    """The pipeline's state: where the iteration stands and what identifies the run (plain ints,
    strings and lists: it goes into a JSON or torch checkpoint as it is)."""
    schedule = pipe.schedule
    src = schedule.driver
    return {"format": STATE_FORMAT, "epoch": pipe._epoch, "batch": pipe._batch,
            "seed": schedule.seed, "batch_size": schedule.batch_size, "shard": list(src.shard),
            "shard_policy": schedule.policy_of(src), "last_batch_policy": schedule.last_batch_policy,
            "batches_per_epoch": batches_per_epoch(schedule), "dataset": fingerprint(pipe)}


def _refuse(what, saved, now, hint=""):
    raise ValueError(f"load_state_dict: the state was saved with {what} {saved!r}, this pipeline "
                     f"has {now!r}{hint}")


def check_state(pipe, state: dict, any_shard: bool = False) -> tuple:
    """(epoch, batch) of ``state`` once it is known to come from this run (see
    ``Pipeline.load_state_dict``); a ValueError names the first value that differs, with both."""
    epoch, batch = check_fields(state)
    for key, now in (("seed", pipe.schedule.seed), ("batch_size", pipe.schedule.batch_size)):
        if state.get(key) != now:
            _refuse(key, state.get(key), now)
    fmt = state.get("format")
    if fmt is None:
        _check_old(pipe, state, any_shard)
    elif fmt != STATE_FORMAT:
        raise ValueError(f"load_state_dict: state format {fmt!r} is not one this version reads "
                         f"({STATE_FORMAT})")
    else:
        _check_run(pipe, state, any_shard, batch)
    bpe = batches_per_epoch(pipe.schedule)
    if bpe is not None and batch > bpe:
        raise ValueError(f"load_state_dict: the state is at batch {batch} of epoch {epoch}, past "
                         f"the {bpe} batches of this pipeline's epoch")
    return epoch, batch


def _check_run(pipe, state, any_shard, batch):
    now = state_of(pipe)
    saved_ds, ds = state.get("dataset") or {}, now["dataset"]
    if saved_ds.get("records") != ds["records"]:
        _refuse("a dataset of records", saved_ds.get("records"), ds["records"],
                " (another dataset, or the same one read with other arguments)")
    if saved_ds.get("keys") != ds["keys"]:
        _refuse("dataset keys (a hash of the records' ids and file names)", saved_ds.get("keys"),
                ds["keys"], ": the records differ or are in another order")
    saved_shard = list(state.get("shard") or ())
    # another rank's state resumes this one (any_shard): at the same step of its own shard, or at
    # an epoch's start, where the shards are cut anew, also for another count or policy
    fresh_cut = any_shard and batch == 0
    checks = [("shard_policy", "shard_policy"), ("last_batch_policy", "last_batch_policy"),
              ("batches_per_epoch", "batches per epoch")]
    if not fresh_cut:
        if any_shard:
            if saved_shard[1:] != now["shard"][1:]:
                _refuse("a shard count of", saved_shard[1:], now["shard"][1:],
                        " (the shards of an epoch depend on their number: resume mid-epoch with "
                        "the same number of shards, or at an epoch's start)")
        elif saved_shard != now["shard"]:
            _refuse("[shard_id, num_shards]", saved_shard, now["shard"],
                    " (pass any_shard=True to resume a rank from another rank's state)")
        for key, what in checks[:2] + ([] if any_shard else checks[2:]):
            if state.get(key) != now[key]:
                _refuse(what, state.get(key), now[key])
    elif state.get("last_batch_policy") != now["last_batch_policy"]:
        _refuse("last_batch_policy", state.get("last_batch_policy"), now["last_batch_policy"])


def _check_old(pipe, state, any_shard):
    """A state of the format before fingerprints: what it holds is checked (the shard it gave as
    the pipeline's ``(shard_id, num_shards)``), and a warning says what cannot be."""
    saved = list(state.get("shard") or ())
    now = [pipe.shard_id, pipe.num_shards]
    if saved and not any_shard and saved != now:
        _refuse("[shard_id, num_shards]", saved, now)
    if saved and any_shard and int(state["batch"]) > 0 and saved[1:] != now[1:]:
        _refuse("a shard count of", saved[1:], now[1:])
    warnings.warn("load_state_dict: this state was saved by an older detaug (no dataset "
                  "fingerprint): its seed, batch size and shard were checked, not its dataset, "
                  "shard policy or batches per epoch; save a new state to have them checked",
                  stacklevel=3)
