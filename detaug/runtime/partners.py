"""Multi-sample ops (mosaic, mixup): which records a launch reads, and which samples each op sees.

A multi-sample op (an ``OpSchema`` with ``partners``) makes each output sample from a group: the
sample itself, then partners drawn from the op's keyed stream ``(seed, op id, epoch, output sample
index)``. Its ``partners`` argument says from where:

* ``'epoch'`` (the default): any record of the dataset, uniformly (Ultralytics' ``get_indexes``
  without its buffer). The graph above the op then runs on the groups' members: a launch's
  *levels*. Level ``()`` holds the schedule's samples; the inputs of such an op ``m`` running at
  level ``L`` are at level ``L + (m,)``, whose samples are the members of ``m``'s groups drawn for
  the samples of ``L``. Every op runs at one level, fixed at build (:func:`plan_levels`); while it
  runs, the batch context's ``sample_index`` (its keyed draws, the reader's records) is its
  level's (:meth:`LaunchLevels.get`, ``BatchContext.use_level``). So a YOLO recipe ``reader ->
  decode -> mosaic -> affine -> mixup`` reads and decodes, per output sample, its record and 3
  mosaic partners, and where mixup applies the partner's record and ITS 3 mosaic partners: the
  mixup partner is exactly the mosaic that record makes as a sample of its own (the same keyed
  draws), as in Ultralytics, whose mixup partner goes through the same pre-transform. Cost: up
  to 4 decodes an output for a mosaic, 8 for a mosaic then a mixup (6 on average at mixup 0.5).
* ``'batch'``: a sample of the output's own batch (the schedule's batch, whatever the launch:
  :meth:`LaunchLevels.gather`). Nothing more is read or decoded: each decoded image serves as a
  sample and as partner of others, as Ultralytics' mosaic takes its partners from the buffer of
  images its worker decoded last (``dataset.buffer``, up to 8 batches; its partners depend on
  the worker's history, here on the batch alone). The batch is a random draw of the shuffled
  epoch, so partners still come from the whole epoch over its batches.

* ``'pool'``: a sample of a bounded pool of recent samples, Ultralytics' buffer made keyed: the
  samples of the output's own batch and of the ``pool_batches`` (k) batches before it in the
  epoch order (the shard's: positions ``[(j - k) B, (j + 1) B)`` for a sample at position p of
  batch ``j = p // B``; shorter at the epoch's start). The op's inputs form a level as with
  'epoch', but each position is read, decoded and run once however many groups draw it (the
  level holds the distinct positions; the op takes its groups' members by index). A partner is
  the sample that its position holds as an output of its own batch (a mixup partner's mosaic
  draws from ITS batch's pool), so the pool of batch j is a pure function of (seed, epoch, j).
  Trade-off: more decodes than 'batch' (the earlier batches' samples drawn, and a mixup
  partner's own mosaic partners), far fewer than 'epoch' (a pool of (k + 1) B samples: a partner
  drawn twice is decoded once), and a narrower spread: the partners of a batch come from k + 1
  consecutive batches of the shuffled order (random records still; over the epoch every record
  is drawn from, as with 'batch'), where 'epoch' draws any record. Its samples per output in the
  memory plan: at most 1 + (the k of each pool op on the way), the windows' union; in a launch
  of n consecutive batches, whose windows overlap, n + (those k) batches of them
  (:func:`samples_in_launch`, n = 1 for a batch's), so larger launches decode and run
  fewer samples an output (:func:`shares_across_batches`). Across launches, the earlier
  batches' samples were decoded by the launches of those batches: a CPU decoder feeding a pool
  keeps its decoded images for the next launch made in the same process
  (detaug/runtime/decode_cache.py, which also gives each host worker runs of consecutive
  launches), so that what a launch decodes approaches its own batch; the draws, hence the
  batches, are the same with or without it.

Nothing depends on the launch or the order: batch ``i`` made on its own, a resumed run, any
number of workers and either device read and draw the same (a pool is the batch, never the
launch). benchmarks/bench_yolo.py prints the decoded images per second beside the output rate.

A bad file met at a level (``on_error='skip'``) is charged to the schedule's sample that owns
it (:attr:`_Level.owner`): that sample is replaced, as a bad sample of its own would be, and
its groups are drawn anew from its replacement's keys.
"""
from __future__ import annotations

import numpy as np

from ..core.rng import SampleRNG

MODES = ("epoch", "batch", "pool")


def mode_of(op) -> str | None:
    """``op``'s partners mode (None: not a multi-sample op), checked."""
    if op.schema.partners is None:
        return None
    mode = op.args.get("partners", "epoch")
    if mode not in MODES:
        raise ValueError(f"{op.name}: partners must be 'epoch' or 'batch' (or 'pool'), got "
                         f"{mode!r}")
    return mode


def pool_batches(op) -> int:
    """The k of a ``partners='pool'`` op: batches before the sample's own in its pool."""
    k = op.args.get("pool_batches", 1)
    if isinstance(k, bool) or not float(k).is_integer() or int(k) < 0:
        raise ValueError(f"{op.name}: pool_batches must be an integer >= 0, got {k!r}")
    return int(k)


def expands(op) -> bool:
    """Whether ``op`` draws its partners over the epoch or a pool (its inputs then form a level
    of their own); a multi-sample op drawing from its batch runs at its inputs' level."""
    mode = mode_of(op)
    if mode is not None:
        pool_batches(op)  # checked whatever the mode
    return mode in ("epoch", "pool")


def level_shape(path, by_id) -> tuple:
    """(the product of the group sizes of the ops on level ``path``, the sum of their pools'
    k where every op on it draws from a pool, else None): what :func:`samples_in_launch` reads."""
    n = 1
    for op_id in path:
        n *= int(getattr(by_id[op_id].schema.partners, "group_size", 1))
    ops = [by_id[i] for i in path]
    if ops and all(mode_of(op) == "pool" for op in ops):
        return n, sum(pool_batches(op) for op in ops)
    return n, None


def samples_in_launch(shape, batches: int = 1) -> int:
    """The most samples a level of :func:`level_shape` ``shape`` holds in a launch of
    ``batches`` consecutive batches, per sample of a batch: ``batches`` times the product of the
    group sizes, and where every op on it draws from a pool, at most the union of the windows:
    ``batches`` + the sum of their k (the pools of consecutive batches overlap, and each
    position is held once however many groups draw it: the launch's positions at that level lie
    in ``[(j0 - sum k) B, (j0 + batches) B)`` for a launch whose first batch is ``j0``)."""
    prod, pooled = shape
    n = int(batches) * prod
    return n if pooled is None else min(n, int(batches) + pooled)


def plan_levels(ops, outputs) -> dict:
    """``{op id: level}`` for the ops below a multi-sample op drawing over the epoch (level: the
    tuple of such op ids on the way to the outputs, outermost first); ops at level ``()`` are
    left out.

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
            if user.id in level:
                need.add(level[user.id] + ((user.id,) if positional and expands(user) else ()))
        if len(need) > 1:
            raise ValueError(f"{op.name}: its outputs are used both by a multi-sample op (mosaic, "
                             "mixup) and after it; a value has one list of samples: trace the op "
                             "twice (one call on each side)")
        level[op.id] = need.pop() if need else ()
    return {k: v for k, v in level.items() if v}


def fan_out(ops, levels, batches: int = 1) -> int:
    """The most source samples one output sample may need (the product of the group sizes
    along the deepest level): what a launch's reads and decodes are sized for. ``batches`` > 1:
    the most a launch of that many batches needs, per sample of a batch (:func:`samples_in_launch`:
    fewer than ``batches`` times the fan-out where partners are drawn from a pool)."""
    by_id = {op.id: op for op in ops}
    return max([int(batches)] + [samples_in_launch(level_shape(path, by_id), batches)
                                 for path in set(levels.values())])


def shares_across_batches(ops, levels) -> bool:
    """Whether a launch of several batches needs fewer samples than those batches apart (a
    partner pool reaching into the batches before a sample's own: consecutive batches' pools
    overlap, so a launch reads, decodes and runs an overlapping position once): larger launches
    then save decodes and device work (the memory plan's launch size:
    detaug/runtime/gpu/memory_plan.py ``batches_per_launch``)."""
    return fan_out(ops, levels, 2) < 2 * fan_out(ops, levels, 1)


def setup(needed, outputs, sized) -> tuple:
    """At build, for the needed ops (inputs first) and the outputs of a pipeline whose source is
    ``sized`` or not: (levels (:func:`plan_levels`), the level of its decoders (whose planned GPU decode maps a bad file to its owner:
    detaug/runtime/gpu/plan_ahead.py; None where they are at several)), which go into the build's
    record (detaug/runtime/build_plan.py); a multi-sample op over the epoch needs random access."""
    for op in needed:
        expands(op)  # checks the mode
    levels = plan_levels(needed, outputs)
    decoders = {levels.get(op.id, ()) for op in needed if op.schema.has("decoder")}
    decode_level = decoders.pop() if len(decoders) == 1 else None
    if levels and not sized:
        multi = next(op for op in needed if expands(op))
        raise ValueError(f"{multi.name}: its partners are drawn from the epoch's records (or a "
                         "pool of its recent batches), so the source needs random access: a "
                         "reader, or external_source with a per-sample callable and size= (or "
                         "draw them from the batch: partners='batch')")
    return levels, decode_level


def decoded_per_batch(pipe, epoch, batch_index, batches=1) -> int:
    """The source images batch ``batch_index`` of ``epoch`` decodes without a decode cache (the
    samples at each decoder's level; detaug/runtime/decode_cache.py saves the repeats): what the
    benchmarks count as images drawn. ``batches`` > 1: the launch of that many batches from
    ``batch_index``, where an image drawn twice in the launch is decoded once."""
    idx, pos, sizes = pipe.schedule.batches(epoch, batch_index, batches)
    lv = LaunchLevels(pipe.graph, pipe.schedule, epoch, idx, pos, sizes)
    paths = {pipe.build_plan.levels.get(op.id, ()) for op in pipe._needed_ops()
             if op.schema.has("decoder")}
    return sum(len(lv.get(p).sample_index) for p in paths)


class _Level:
    __slots__ = ("sample_index", "positions", "owner")

    def __init__(self, sample_index, positions, owner):
        self.sample_index, self.positions, self.owner = sample_index, positions, owner


def _rng(seed, op, epoch, sample_index):
    """``op``'s keyed stream (its own ``seed`` argument, else the pipeline's ``seed``)."""
    own = op.args.get("seed")
    return SampleRNG(seed if own is None else own, op.rng_id, epoch, sample_index)


def _draw(op, rng, pool_sizes):
    groups, picks = op.schema.partners(op, rng, np.asarray(pool_sizes, np.int64))
    groups, picks = np.asarray(groups, np.int64), np.asarray(picks, np.int64)
    first = groups[:-1]
    if len(groups) != len(rng) + 1 or not (picks[first] == -1).all():
        raise RuntimeError(f"{op.name}: its partners() must give one group per sample, the "
                           "sample itself (-1) first")
    return groups, picks


class LaunchLevels:
    """The samples of every level of one launch (computed on first use, then kept), and the
    groups of the ops drawing from their batch, from the traced ``graph`` and the pipeline's
    ``schedule`` (detaug/core/sharding.py: its seed keys the partners' draws, its shard order
    holds the pools). ``batch_sizes``: the launch's batches (the schedule's), which bound those
    pools; None: one batch."""

    def __init__(self, graph, schedule, epoch, sample_index, positions, batch_sizes=None):
        self.graph, self.schedule, self.epoch = graph, schedule, epoch
        idx = np.asarray(sample_index, np.int64)
        self._levels = {(): _Level(idx, positions, np.arange(len(idx), dtype=np.int64))}
        sizes = list(batch_sizes) if batch_sizes is not None else []
        if sum(int(n) for n in sizes) != len(idx):  # unknown or not these samples': one batch
            sizes = [len(idx)]
        self._batch_of = np.repeat(np.arange(len(sizes)), sizes)  # top-level sample -> batch
        self.groups = {}  # level of an op's inputs -> its groups (B + 1,)
        self.pool_gather = {}  # level of a pool op's inputs -> its members' places in it
        self._gathers = {}

    def get(self, path) -> _Level:
        lv = self._levels.get(path)
        if lv is None:
            parent = self.get(path[:-1])
            op = self.graph.ops[path[-1]]
            if mode_of(op) == "pool":
                lv = self._levels[path] = self._pool_level(op, path, parent)
                return lv
            n = int(self.schedule.driver.size)
            groups, picks = _draw(op, _rng(self.schedule.seed, op, self.epoch, parent.sample_index),
                                  np.full(len(parent.sample_index), n))
            owner_of = np.repeat(np.arange(len(groups) - 1), np.diff(groups))
            first = picks < 0
            members = np.where(first, parent.sample_index[owner_of], picks)
            pos = None
            if parent.positions is not None:  # a partner's place: its record index
                pos = np.where(first, np.asarray(parent.positions, np.int64)[owner_of], picks)
            lv = self._levels[path] = _Level(members, pos, parent.owner[owner_of])
            self.groups[path] = groups
        return lv

    def _pool_level(self, op, path, parent) -> _Level:
        """The distinct positions that ``op``'s groups draw for the samples of ``parent`` (each
        sample first, then partners from its pool: module docstring), and each group member's
        place among them (``pool_gather``)."""
        if parent.positions is None:
            raise ValueError(f"{op.name}: partners='pool' draws from the batches before a "
                             "sample's own: it needs a source of known size")
        schedule = self.schedule
        order = np.asarray(schedule.shard_order(self.epoch), np.int64)
        bsz, k = int(schedule.batch_size), pool_batches(op)
        pos = np.asarray(parent.positions, np.int64)
        start = np.maximum(pos // bsz - k, 0) * bsz
        stop = np.minimum((pos // bsz + 1) * bsz, len(order))
        groups, picks = _draw(op, _rng(schedule.seed, op, self.epoch, parent.sample_index), stop - start)
        owner_of = np.repeat(np.arange(len(groups) - 1), np.diff(groups))
        first = picks < 0
        member_pos = np.where(first, pos[owner_of], start[owner_of] + np.maximum(picks, 0))
        member_idx = np.where(first, parent.sample_index[owner_of],
                              order[np.minimum(member_pos, len(order) - 1)])
        uniq, at, inverse = np.unique(member_pos, return_index=True, return_inverse=True)
        self.groups[path] = groups
        self.pool_gather[path] = inverse.reshape(-1).astype(np.int64)
        return _Level(member_idx[at], uniq, parent.owner[owner_of][at])

    def gather(self, op, path):
        """(groups (B + 1,), positions (M,)) of ``op`` drawing from the batch at level ``path``:
        output sample b is made of the level's samples at ``positions[groups[b]:groups[b+1]]``,
        the sample itself first, partners among the samples of its own batch (the schedule's
        batch of the sample that owns it), in their order."""
        key = (op.id, path)
        if key not in self._gathers:
            lv = self.get(path)
            batch = self._batch_of[lv.owner]
            order = np.argsort(batch, kind="stable")  # each batch's samples, in order
            counts = np.bincount(batch)
            starts = np.concatenate([[0], np.cumsum(counts)])[batch]
            groups, picks = _draw(op, _rng(self.schedule.seed, op, self.epoch, lv.sample_index),
                                  counts[batch])
            owner_of = np.repeat(np.arange(len(groups) - 1), np.diff(groups))
            own = np.arange(len(lv.sample_index))[owner_of]
            positions = np.where(picks < 0, own, order[np.maximum(picks, 0) + starts[owner_of]])
            self._gathers[key] = (groups, positions)
        return self._gathers[key]
