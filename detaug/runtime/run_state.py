"""Where a run of a pipeline stands, what identifies it, and the one-caller-at-a-time rule of its
cursor.

- :class:`RunState`: the part the pipeline holds for its cursor (epoch, batch) and the dataset's
  fingerprint; ``state_dict`` and ``load_state_dict`` hand over to it with the schedule.
- :func:`serialised`: the methods that move or read the iteration cursor (``run``, ``next``,
  ``reset``, ``end_epoch``, ``state_dict``, ``load_state_dict``, ``set_shard``) take the
  pipeline's cursor lock, so that concurrent callers are served one at a time: every batch is
  handed out exactly once, in order (the order in which the callers' calls take the lock).
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

from ..core.sharding import batches_per_epoch

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
    """Where the iteration stands and what identifies the run, a part the pipeline holds: the
    cursor (``epoch``, ``batch``: the next batch handed out) and the dataset's fingerprint
    (computed once, when a state is first asked). What it reads is given: the schedule (seed,
    batch size, shard, policies, the driving source) to :meth:`state` and :meth:`resume_point`."""

    def __init__(self):
        self.epoch, self.batch = 0, 0
        self._fingerprint = None

    def move_to(self, epoch: int, batch: int) -> None:
        """The cursor at ``batch`` of ``epoch``."""
        self.epoch, self.batch = int(epoch), int(batch)

    def handed_out(self, batch_index: int) -> None:
        """Batch ``batch_index`` of the current epoch was handed out: the next is the one after."""
        self.batch = batch_index + 1

    def fingerprint(self, driver) -> dict:
        """``{"records": the dataset's size (None: unsized), "keys": a hash of its record keys
        (None where the source has no records, e.g. a per-sample callable)}``, computed once."""
        if self._fingerprint is None:
            self._fingerprint = fingerprint(driver)
        return dict(self._fingerprint)

    def state(self, schedule) -> dict:
        """The state ``Pipeline.state_dict`` gives (:func:`state_of`)."""
        return state_of(schedule, self.epoch, self.batch, self.fingerprint(schedule.driver))

    def resume_point(self, state: dict, schedule, default_shard, any_shard: bool = False,
                     fed=()) -> tuple:
        """(epoch, batch) to resume ``state`` at, once it is known to come from this run
        (:func:`check_state`; ``default_shard``: the pipeline's (shard_id, num_shards), which a
        state of the format before fingerprints gave). ``fed``: the names of the sources fed
        whole batches, which cannot be rewound: a ValueError where ``state`` is mid-epoch."""
        epoch, batch = check_state(state, self.state(schedule), schedule, default_shard, any_shard)
        fed = list(fed)
        if fed and batch > 0:
            raise ValueError(f"cannot resume at batch {batch} of epoch {epoch}: external "
                             f"source {fed[0]!r} is fed whole batches (an iterable or "
                             "feed_input), which cannot be rewound to a batch; resume at an "
                             "epoch's start, or use a reader or a per-sample callable "
                             "(batch=False)")
        return epoch, batch


def serialised(method):
    """``method`` runs under the pipeline's cursor lock (an RLock: ``run`` calls ``reset``)."""

    @functools.wraps(method)
    def under_lock(self, *args, **kwargs):
        with self._cursor_lock:
            return method(self, *args, **kwargs)

    return under_lock


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


def fingerprint(driver) -> dict:
    """``{"records": the dataset's size (None: unsized), "keys": a hash of its record keys (None
    where the source has no records, e.g. a per-sample callable)}`` of the driving source."""
    keys = record_keys(driver)
    digest = None
    if keys is not None:
        digest = hashlib.sha256("\n".join(keys).encode("utf-8", "surrogatepass")).hexdigest()[:16]
    return {"records": driver.size, "keys": digest}


def state_of(schedule, epoch: int, batch: int, dataset: dict) -> dict:
    """The pipeline's state at ``batch`` of ``epoch`` on ``schedule``, ``dataset`` its
    fingerprint: where the iteration stands and what identifies the run (plain ints, strings and
    lists: it goes into a JSON or torch checkpoint as it is)."""
    src = schedule.driver
    return {"format": STATE_FORMAT, "epoch": epoch, "batch": batch,
            "seed": schedule.seed, "batch_size": schedule.batch_size, "shard": list(src.shard),
            "shard_policy": schedule.policy_of(src), "last_batch_policy": schedule.last_batch_policy,
            "batches_per_epoch": batches_per_epoch(schedule), "dataset": dict(dataset)}


def _refuse(what, saved, now, hint=""):
    raise ValueError(f"load_state_dict: the state was saved with {what} {saved!r}, this pipeline "
                     f"has {now!r}{hint}")


def check_state(state: dict, now: dict, schedule, default_shard, any_shard: bool = False) -> tuple:
    """(epoch, batch) of ``state`` once it is known to come from this run, whose state is
    ``now`` on ``schedule`` (see ``Pipeline.load_state_dict``; ``default_shard``: the pipeline's
    (shard_id, num_shards)); a ValueError names the first value that differs, with both."""
    epoch, batch = check_fields(state)
    for key, value in (("seed", schedule.seed), ("batch_size", schedule.batch_size)):
        if state.get(key) != value:
            _refuse(key, state.get(key), value)
    fmt = state.get("format")
    if fmt is None:
        _check_old(state, list(default_shard), any_shard)
    elif fmt != STATE_FORMAT:
        raise ValueError(f"load_state_dict: state format {fmt!r} is not one this version reads "
                         f"({STATE_FORMAT})")
    else:
        _check_run(state, now, any_shard, batch)
    bpe = batches_per_epoch(schedule)
    if bpe is not None and batch > bpe:
        raise ValueError(f"load_state_dict: the state is at batch {batch} of epoch {epoch}, past "
                         f"the {bpe} batches of this pipeline's epoch")
    return epoch, batch


def _check_run(state, now, any_shard, batch):
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


def _check_old(state, now, any_shard):
    """A state of the format before fingerprints: what it holds is checked (the shard it gave as
    the pipeline's ``(shard_id, num_shards)``, ``now``), and a warning says what cannot be."""
    saved = list(state.get("shard") or ())
    if saved and not any_shard and saved != now:
        _refuse("[shard_id, num_shards]", saved, now)
    if saved and any_shard and int(state["batch"]) > 0 and saved[1:] != now[1:]:
        _refuse("a shard count of", saved[1:], now[1:])
    warnings.warn("load_state_dict: this state was saved by an older detaug (no dataset "
                  "fingerprint): its seed, batch size and shard were checked, not its dataset, "
                  "shard policy or batches per epoch; save a new state to have them checked",
                  stacklevel=3)
