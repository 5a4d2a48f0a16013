"""How a Pipeline makes one launch's batches from its traced graph: each source's data for the
launch, the batch context with the schedule's sample indices, and the ops run in order on it
(each multi-sample op on the samples of its level, detaug/runtime/partners.py), on the host or,
for device ops, on the launch's stream. :class:`BatchMaking` is a part the pipeline holds, made
at build with what it reads (the graph, the sources, the build's record, the sharding whose
schedule keys the draws, the retry policy); the device stage (detaug/runtime/gpu/device_stage.py)
and planning ahead (detaug/runtime/gpu/plan_ahead.py) run their ops through it."""
from __future__ import annotations

from ..core.errors import NotFed as _NotFed
from ..core.errors import SampleError
from ..graph import trace as _graph
from ..graph.arg_check import check_per_sample
from .context import BatchContext
from .retries import RetryPolicy


def retire_leases(ctx):
    """Give back the decode-ring regions of a failed attempt, after the work it queued."""
    if ctx.leases and ctx.stream is not None:
        import cupy as cp

        ev = cp.cuda.Event(block=True, disable_timing=True)
        ev.record(ctx.stream)
        for lease in ctx.leases:
            lease.retire(ev)


class BatchMaking:
    """The host stage and the op loop of a launch ``key = (epoch, first batch, batch count)``
    (how many host worker processes make launches: detaug/runtime/build_plan.py), a part the
    pipeline holds. Made at build with what it reads: ``engine``, the pipeline, handed to each
    batch context as its ``pipeline`` (what an op may read there; never read here); the traced
    ``graph``, the ``sources`` made at build (op id -> source), the build's record ``plan`` (the
    ops of each stage, the multi-sample levels), the ``sharding`` part (its schedule keys every
    draw; ``set_shard`` makes it anew), the ``retries`` policy (on_error), the batches ``fed`` to
    external sources (source name -> batches: DALI's facade), the pipeline's ``iter_setup`` and
    the ``stream`` a launch's context starts on (None: no GPU stage)."""

    def __init__(self, engine, graph, sources, plan, sharding, retries, fed, iter_setup,
                 stream=None):
        self._engine, self.graph, self.sources, self.plan = engine, graph, sources, plan
        self._sharding, self._retries, self._fed = sharding, retries, fed
        self._iter_setup, self.stream = iter_setup, stream

    @property
    def schedule(self):
        """The epoch schedule (detaug/core/sharding.py), as the sharding holds it now."""
        return self._sharding.schedule

    def prepare(self, key):
        """Every source's data for the launch ``key = (epoch, first batch, batch count)``, in
        submission order. ``iter_setup`` runs once per batch of the launch (before it is
        scheduled), so that ``feed_input`` gives each batch its own data."""
        for _ in range(key[2]):
            self._iter_setup()
        hungry = [self.graph.ops[i].name for i, s in self.sources.items()
                  if getattr(s, "fed", False) and getattr(s, "source", True) is None
                  and len(self._fed.get(self.graph.ops[i].name) or ()) < key[2]]
        if hungry:  # nothing taken: the launch waits for feed_input (see Pipeline._fill_queue)
            raise _NotFed(f"{hungry[0]}: no data fed; call pipe.feed_input() before run() or in "
                          "iter_setup()")
        return {op_id: s.prepare(key) for op_id, s in self.sources.items()}

    def _fed_sizes(self, prepared):
        """(source name, samples per batch) of the sources fed whole batches (an iterable or
        ``feed_input``), which must agree; None when no source is fed."""
        found = None
        for op_id, payload in prepared.items():
            sizes = payload.get("sizes") if isinstance(payload, dict) else None
            if sizes is None:
                continue
            name = self.graph.ops[op_id].name
            if found is not None and list(sizes) != found[1]:
                raise ValueError(f"external sources {found[0]!r} and {name!r} were fed batches of "
                                 f"different sizes ({found[1]} and {list(sizes)} samples)")
            found = found or (name, list(sizes))
        return found

    def context(self, ctx_type, epoch, batch_index, sample_index, positions, stream, pool,
                schedule):
        """A batch context of type ``ctx_type`` (:class:`BatchContext` or a subclass) of this
        pipeline's launch, with these samples, on ``stream``, draws keyed by ``schedule``."""
        return ctx_type(self._engine, epoch, batch_index, sample_index, positions, stream, pool,
                        schedule)

    def make_ctx(self, key, prepared, pool, indices=None, ctx_type=BatchContext):
        """The batch context of a launch: the schedule's sample indices (``Schedule.batches``),
        cut to the fed batches' lengths where a source is fed (``Schedule.fit_to_fed``); ``indices``
        (a retry's) replace the indices, and a replaced sample's position is its record's place
        in the epoch order. Every random op draws once per sample of it."""
        epoch, b, count = key
        schedule = self.schedule
        idx, pos, sizes = schedule.batches(epoch, b, count)
        fed = self._fed_sizes(prepared)
        if fed is not None:
            idx, pos, sizes = schedule.fit_to_fed(key, idx, pos, sizes, fed)
        if indices is not None:  # a retry's
            idx, pos = indices, RetryPolicy.replaced_positions(schedule, epoch, idx, pos, indices)
        ctx = self.context(ctx_type, epoch, b, idx, pos, self.stream, pool, schedule)
        ctx.prepared, ctx.sizes = prepared, sizes
        return ctx

    def with_retries(self, key, prepared, pool, stage, indices=None, stream=None, skips=None,
                     walks=None, ctx_type=BatchContext):
        """``stage`` run on the launch ``key``'s batch context under the pipeline's retry policy
        (detaug/runtime/retries.py: a bad sample replaced by the next record of the order)."""
        return self._retries.run(
            key, lambda ix: self.make_ctx(key, prepared, pool, ix, ctx_type), stage,
            retire_leases, self.schedule, indices, stream, skips, walks)

    def replacement(self, key, ctx, e):
        """The indices of the launch ``key`` with the sample of ``e`` (a SampleError in ``ctx``)
        replaced under the retry policy (``RetryPolicy.replacement``; raises ``e`` under
        on_error='raise')."""
        return self._retries.replacement(self.schedule, key, ctx, e, ctx.walks)

    def run_ops(self, ctx, ops):
        levels = self.plan.levels
        if not levels:
            return self._run_level(ctx, ops)
        try:
            for op in ops:  # each op sees the samples of its level (runtime/partners.py)
                ctx.use_level(levels.get(op.id, ()))
                self._run_level(ctx, (op,))
        except SampleError as e:  # a partner's bad file: the schedule's sample that owns it
            if e.position is not None:
                e.position = ctx.owner(e.position)
            raise
        finally:
            ctx.use_level(())

    def _run_level(self, ctx, ops):
        for op in ops:
            inputs = [ctx.values[(i.op.id, i.index)] for i in op.inputs]
            args = ctx.args_of(op)
            if op.arg_inputs:  # this batch's per-sample values meet the declared ranges too
                check_per_sample(op.schema.name, {k: args[k] for k in op.arg_inputs})
            if op.schema.kind == "source":
                outs = self.sources[op.id].read(ctx, ctx.prepared[op.id])
            else:
                # what an op declares it is handed: the parameters planned for it (ahead, by a
                # host worker, or now), else its draws, made before it runs from its keyed streams
                drawn = ((self._params_of(ctx, op, args, inputs),) if op.schema.host_plan is not None
                         else (op.schema.draw(ctx.rng(op), args),) if op.schema.draws else ())
                if op.device != "cpu":
                    with ctx.on_stream():
                        outs = op.schema.impl(ctx, op, inputs, args, *drawn)
                else:
                    outs = op.schema.impl(ctx, op, inputs, args, *drawn)
            outs = outs if isinstance(outs, tuple) else (outs,)
            for k, v in enumerate(outs):
                ctx.values[(op.id, k)] = v

    @staticmethod
    def _params_of(ctx, op, args, inputs):
        """``op``'s planned parameters in ``ctx`` (made by a host worker), else made now: the
        same function of the same draws (and sizes) either way."""
        planned = ctx.values.get((op.id, _graph.PARAMS))
        if planned is not None:
            return planned
        return op.schema.plan_params(op, ctx.rng(op), args, len(ctx.sample_index),
                                     inputs[0] if inputs else None)

    def host_stage(self, key, prepared, pool):
        """The host ops of a launch (bad samples replaced: RetryPolicy): its batch context."""
        return self.with_retries(key, prepared, pool, lambda c: self.run_ops(c, self.plan.host_ops))

    def run_whole(self, ctx):
        """A launch's every op, host and device, in this process (a retried GPU launch)."""
        self.run_ops(ctx, self.plan.host_ops)
        self.run_ops(ctx, self.plan.device_ops)
