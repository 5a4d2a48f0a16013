"""Multi-sample ops (mosaic, mixup): which records a launch reads, and which samples each op sees.

A multi-sample op (an ``OpSchema`` with ``partners``) makes each output sample from a group: the
sample itself, then partners drawn over the epoch's records (the whole dataset, as Ultralytics'
``get_indexes``) from the op's keyed stream ``(seed, op id, epoch, output sample index)``. The
graph above it runs on the groups' members: a launch's *levels*. Level ``()`` holds the
schedule's samples; the inputs of a multi-sample op ``m`` that runs at level ``L`` are at level
``L + (m,)``, whose samples are the members of ``m``'s groups drawn for the samples of ``L``.
Every op runs at one level, fixed at build (:func:`plan_levels`); while it runs, the batch
context's ``sample_index`` (its keyed draws, the reader's records) is its level's
(:meth:`LaunchLevels.get`, :meth:`BatchContext.use_level`).

So a YOLO recipe ``reader -> decode -> mosaic -> affine -> mixup -> ...`` reads and decodes, per
output sample, its own record and 3 mosaic partners, and (where mixup applies) the partner's
record and ITS 3 mosaic partners: the partner of a mixup is exactly the mosaic that record makes
as a sample of its own (the same keyed draws), as in Ultralytics, where the mixup partner goes
through the same pre-transform. Nothing depends on the batch or the order: batch ``i`` made on
its own, a resumed run, any number of workers and either device read and draw the same. The
cost is in reads and decodes: up to 4 (mosaic) or 8 (mosaic, then mixup) per output sample
(benchmarks/bench_yolo.py prints the decoded images per second beside the output rate).

A bad file met at a level (``on_error='skip'``) is charged to the schedule's sample that owns
it (:attr:`LaunchLevels.owner`): that sample is replaced, as a bad sample of its own would be,
and its groups are drawn anew from its replacement's keys.
"""
from __future__ import annotations

import numpy as np

from ..core.rng import SampleRNG


def plan_levels(ops, outputs) -> dict:
    """``{op id: level}`` for the ops below a multi-sample op (level: the tuple of multi-sample
    op ids on the way to the outputs, outermost first); ops at level ``()`` are left out.

    ``ops``: the needed ops in topological order (inputs first); ``outputs``: the output
    DataNodes. An op whose outputs feed two levels (an output of the pipeline that is also a
    mosaic's input, say) is refused by name: its samples would be two different lists."""
    level, users = {}, {}
    for op in ops:
        for i in op.inputs:
            users.setdefault(i.op.id, []).append((op, True))
        for a in op.arg_inputs.values():
            users.setdefault(a.op.id, []).append((op, False))
    out_ids = {o.op.id for o in outputs}
    for op in reversed(ops):
        need = {()} if op.id in out_ids else set()
        for user, positional in users.get(op.id, []):
            if user.id not in level:
                continue
            extra = (user.id,) if positional and user.schema.partners is not None else ()
            need.add(level[user.id] + extra)
        if len(need) > 1:
            raise ValueError(f"{op.name}: its outputs are used both by a multi-sample op (mosaic, "
                             "mixup) and after it; a value has one list of samples: trace the op "
                             "twice (one call on each side)")
        level[op.id] = need.pop() if need else ()
    return {k: v for k, v in level.items() if v}


def setup(pipe):
    """At build: ``pipe._levels`` (:func:`plan_levels`), ``pipe._fan_out`` (:func:`fan_out`) and
    ``pipe._decode_level`` (the level of its GPU decoders, whose planned decode maps a bad file
    to its owner: plan_ahead.py); a multi-sample op needs a source with random access."""
    needed = pipe._needed_ops()
    pipe._levels = plan_levels(needed, pipe._outputs)
    pipe._fan_out = fan_out(needed, pipe._levels)
    decoders = {pipe._levels.get(op.id, ()) for op in needed if op.schema.name.startswith("decoders.")}
    pipe._decode_level = decoders.pop() if len(decoders) == 1 else None
    if pipe._levels and pipe._driver.size is None:
        multi = next(op for op in needed if op.schema.partners is not None)
        raise ValueError(f"{multi.name}: its partners are drawn from the epoch's records, so the "
                         "source needs random access: a reader, or external_source with a "
                         "per-sample callable and size=")


def fan_out(ops, levels) -> int:
    """The most source samples one output sample may need (the product of the group sizes
    along the deepest level): what a launch's reads and decodes are sized for."""
    by_id = {op.id: op for op in ops}
    most = 1
    for path in set(levels.values()):
        n = 1
        for op_id in path:
            n *= int(getattr(by_id[op_id].schema.partners, "group_size", 1))
        most = max(most, n)
    return most


class _Level:
    __slots__ = ("sample_index", "positions", "owner")

    def __init__(self, sample_index, positions, owner):
        self.sample_index, self.positions, self.owner = sample_index, positions, owner


class LaunchLevels:
    """The samples of every level of one launch (computed on first use, then kept)."""

    def __init__(self, pipeline, epoch, sample_index, positions):
        self.pipeline, self.epoch = pipeline, epoch
        idx = np.asarray(sample_index, np.int64)
        self._levels = {(): _Level(idx, positions, np.arange(len(idx), dtype=np.int64))}
        self.groups = {}  # level of an op's inputs -> its groups (B + 1,)

    def get(self, path) -> _Level:
        lv = self._levels.get(path)
        if lv is None:
            parent = self.get(path[:-1])
            op = self.pipeline.graph.ops[path[-1]]
            seed = op.args.get("seed")
            rng = SampleRNG(self.pipeline.seed if seed is None else seed, op.rng_id, self.epoch,
                            parent.sample_index)
            groups, members = op.schema.partners(op, rng, int(self.pipeline._driver.size))
            groups, members = np.asarray(groups, np.int64), np.asarray(members, np.int64)
            first = groups[:-1]
            if len(groups) != len(parent.sample_index) + 1 or not np.array_equal(
                    members[first], parent.sample_index):
                raise RuntimeError(f"{op.name}: its partners() must give one group per sample, "
                                   "the sample itself first")
            owner = parent.owner[np.repeat(np.arange(len(first)), np.diff(groups))]
            pos = None
            if parent.positions is not None:  # a partner's place: its record index
                pos = members.copy()
                pos[first] = np.asarray(parent.positions, np.int64)
            lv = self._levels[path] = _Level(members, pos, owner)
            self.groups[path] = groups
        return lv
