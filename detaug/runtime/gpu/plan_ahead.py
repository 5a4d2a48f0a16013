"""Planning ahead: a GPU pipeline's host work as a pure function of the launch, run in host
worker processes; this process keeps only the device work (:class:`PlanAhead`, a part the
pipeline holds, made at build with the build's record, the outputs and the batch making part).

The device ops of a detection pipeline mostly plan on the host: geometric ops compose matrices
from image sizes, random draws and boxes (detaug/core/batch.py), box ops are small array math, and the
one warp that ends a chain is a kernel launch whose metadata is all host arrays. Only the
decode and that launch need the GPU. The decoded sizes are the annotated sizes (the decode
checks them), so the whole plan can be made before the decode, from the reader's data alone:

* **plan** (:meth:`PlanAhead.plan_launch`, in a host worker process, or a thread): the host
  ops, then the device ops that plan on the host (each declares it: ``OpSchema.plans``, read
  by :func:`_static_plannable`) with the images a
  :class:`~detaug.core.batch.PlannedImages` (shapes, no pixels), the boxes on the host (the NumPy
  twins of the box kernels) and the warp a :class:`~detaug.core.batch.DeferredWarp` (the launch's
  metadata, :func:`~detaug.kernels.warp.plan_warp`). What the rest of the graph and the outputs
  need travels as a :class:`LaunchPlan`, arrays in shared memory (detaug/runtime/host_workers.py).
* **run** (:meth:`PlanAhead.run_planned`, a device thread of this process): the decode request
  (admitted in launch order), then, in an output slot: one warp launch per planned warp, one
  upload of every box array and marked plain tensor (a ``.gpu()`` of labels, say: a
  :class:`~detaug.core.deferred.HostUpload`), the device ops that
  could not be planned (a RetinaNet encoder, a colour op whose input is made on the device),
  and the batch's event.

The results are the same whether a launch is planned in a worker, in a thread, or re-planned
here after a bad file is replaced: the same functions on the same keyed draws. A launch that
cannot be planned (an image size the reader does not know, an op reading pixels before the
warp: :class:`~detaug.core.errors.NotPlannable`) runs the whole graph here instead, as before; which
launches do depends only on the data, never on the settings.
"""
from __future__ import annotations

import dataclasses
import os

from ...core.batch import BoxBatch, ImageBatch, PaddedBoxes
from ...core.deferred import HostUpload, is_planned, planned_sources, realize
from ...graph.trace import PARAMS
from ..batch_making import retire_leases
from ..context import BatchContext
from ...core.errors import NotPlannable, SampleError
from .launch_profile import stamp


def default_processes() -> int:
    """Host worker processes that plan a GPU pipeline's launches by default: one per four
    cores, 1 to 3 (one plans a launch of 64 images in about 6 ms)."""
    return min(3, max(1, (os.cpu_count() or 2) // 4))


def _static_plannable(op) -> bool:
    """``op`` (a device op) plans on the host whatever its data, as it declares."""
    return op.schema.plans_on_host(op.args, op.device)


def _keys_of(op):
    """(op id, output index) of every value ``op`` reads: inputs and data-node arguments."""
    return [(v.op.id, v.index) for v in [*op.inputs, *op.arg_inputs.values()]]


def plan_output_warps(ahead, outputs, ctx):
    """The warps that make the planned ``outputs`` with a pending chain (what the output stage
    would run: ``materialize`` without epilogue), planned here, so that the device thread only
    launches them; an output that an unplanned op (``ahead.rest_ops``) reads too is left as it
    is."""
    read = {k for op in ahead.rest_ops for k in _keys_of(op)}
    for node in outputs:
        k = (node.op.id, node.index)
        v = ctx.values.get(k)
        if (k not in read and isinstance(v, ImageBatch) and v.geometry is not None
                and is_planned(v.raw)):
            ctx.values[k] = v.materialize(ctx)


class NotPlanned:
    """A worker's answer for a launch it could not plan: this process runs it whole."""

    def __init__(self, why: str):
        self.why = why


class LaunchPlan:
    """A launch planned on the host: what its batch context held after planning (the values
    the device side needs, the samples, the skips of bad files), picklable."""

    def __init__(self, ctx, keys):
        self.epoch, self.batch_index = ctx.epoch, ctx.batch_index
        self.sample_index, self.positions = ctx.sample_index, ctx.positions
        self.sizes, self.skips, self.walks = ctx.sizes, ctx.skips, ctx.walks
        self.values = {k: ctx.values[k] for k in keys if k in ctx.values}


class _PlanContext(BatchContext):
    """A batch context that plans: no stream, boxes on the host, images planned."""

    planning = True

    def __init__(self, pipeline, epoch, batch_index, sample_index, positions, stream, pool,
                 schedule):
        super().__init__(pipeline, epoch, batch_index, sample_index, positions, None, pool,
                         schedule)


@dataclasses.dataclass(frozen=True)
class Ahead:
    """Which device ops of a pipeline plan on the host (``plan_ops``), which run here after the
    decode (``rest_ops``), the device ops left whose parameters are planned (``param_ops``) and
    the values a plan carries (``plan_keys``); ``on``: launches are planned ahead."""
    on: bool = False
    plan_ops: tuple = ()
    rest_ops: tuple = ()
    param_ops: tuple = ()
    plan_keys: tuple = ()
    planned_ids: frozenset = frozenset()


NOT_AHEAD = Ahead()


def choose(host_ops, device_ops, outputs, mixed_decode) -> Ahead:
    """At build (detaug/runtime/build_plan.py): the :class:`Ahead` of a pipeline whose ops are
    ``host_ops`` and ``device_ops`` (topological order) and whose outputs are ``outputs``.
    Planning ahead is on where the images are decoded on the GPU (device='mixed', by decode
    processes or here) and the decode can be planned; DETAUG_PLAN_AHEAD=0 turns it off
    (comparisons, debugging)."""
    if not mixed_decode or os.environ.get("DETAUG_PLAN_AHEAD", "1") == "0":
        return Ahead(rest_ops=tuple(device_ops))
    host_ids = {op.id for op in host_ops}
    planned = set()
    for op in device_ops:  # topological order: inputs first
        if _static_plannable(op) and all(k[0] in host_ids or k[0] in planned for k in _keys_of(op)):
            planned.add(op.id)
    decodes = [op for op in device_ops if op.id in planned and op.schema.has("decoder")]
    if not decodes:
        return Ahead(rest_ops=tuple(device_ops))
    plan_ops = [op for op in device_ops if op.id in planned]
    rest_ops = [op for op in device_ops if op.id not in planned]
    # the device ops left that declare a host plan (their parameters from their arguments
    # and draws: colour, photometric, blur, noise) are planned too: the device thread only
    # launches them
    known = host_ids | planned
    param_ops = [op for op in rest_ops if op.schema.host_plan is not None
                 and all(v.op.id in host_ids for v in op.arg_inputs.values())
                 and (not op.schema.has("plan_reads_images") or
                      (op.inputs and op.inputs[0].op.id in known))]
    keys = {k for op in rest_ops for k in _keys_of(op)}
    keys |= {(o.op.id, o.index) for o in outputs}
    plan_keys = (sorted(k for k in keys if k[0] in known)
                 + [(op.id, PARAMS) for op in param_ops])
    return Ahead(True, tuple(plan_ops), tuple(rest_ops), tuple(param_ops), tuple(plan_keys),
                 frozenset(planned))


class PlanAhead:
    """Planning a pipeline's launches ahead and running them planned, a part the pipeline holds:
    made at build with what it reads, the build's record ``plan`` (which ops plan:
    :class:`Ahead`, its ``ahead``; the ops of each stage; the multi-sample levels), the
    pipeline's ``outputs`` and the ``batches`` part (detaug/runtime/batch_making.py) that runs
    the ops, makes the batch contexts and replaces bad samples."""

    def __init__(self, plan, outputs, batches):
        self.plan, self.outputs, self.batches = plan, outputs, batches

    # ---- the host side (a worker process or a thread) ------------------------------------------
    def plan_launch(self, key, prepared, pool, indices=None, skips=None, walks=None):
        """The :class:`LaunchPlan` of ``key``: the host ops and the plannable device ops, bad
        files replaced under on_error='skip' (runtime/retries.py). NotPlannable where it
        cannot be planned."""
        bp, bm = self.plan, self.batches

        def stage(ctx):
            bm.run_ops(ctx, bp.host_ops)
            bm.run_ops(ctx, bp.ahead.plan_ops)
            self._plan_params(ctx, bp.ahead.param_ops)
            plan_output_warps(bp.ahead, self.outputs, ctx)

        ctx = bm.with_retries(key, prepared, pool, stage, indices, skips=skips, walks=walks,
                              ctx_type=_PlanContext)
        return LaunchPlan(ctx, bp.ahead.plan_keys)

    def _plan_params(self, ctx, ops):
        """The parameters of ``ops`` (each declares a host plan: OpSchema.host_plan) into
        ``ctx.values``, each at its level (runtime/partners.py), from the same draws the op
        would make when it runs (runtime/batch_making.py: ``_params_of``)."""
        levels = self.plan.levels
        try:
            for op in ops:
                if levels:
                    ctx.use_level(levels.get(op.id, ()))
                first = op.inputs[0] if op.inputs else None
                images = ctx.values.get((first.op.id, first.index)) if first is not None else None
                try:
                    ctx.values[(op.id, PARAMS)] = op.schema.plan_params(
                        op, ctx.rng(op), ctx.args_of(op), len(ctx.sample_index), images)
                except NotPlannable:  # (sizes not known without pixels): made where it runs
                    pass
        finally:
            if levels:
                ctx.use_level(())

    def plan_or_not(self, key, prepared, pool):
        """The :class:`LaunchPlan` of ``key``, or :class:`NotPlanned` saying why not."""
        try:
            return self.plan_launch(key, prepared, pool)
        except NotPlannable as e:
            return NotPlanned(str(e))

    # ---- the device side (this process) --------------------------------------------------------
    def run_planned(self, key, prepared, plan, pool, stream, admit, device):
        """Decode, warp and upload a planned launch, run the device ops that were not planned,
        collect its outputs (on ``device``, the pipeline's device stage: its output stream and
        its collection). A bad file (a decode error, a size other than annotated) is replaced
        as the host stage replaces one, and the launch re-planned here."""
        bm = self.batches
        while True:
            ctx = bm.context(BatchContext, plan.epoch, plan.batch_index, plan.sample_index,
                             plan.positions, stream, pool, bm.schedule)
            ctx.prepared, ctx.sizes, ctx.skips, ctx.walks = prepared, plan.sizes, plan.skips, plan.walks
            try:
                admit.decode()  # a ring slot, in launch order
                with ctx.on_stream():
                    decoded = self._decode_planned_of(ctx, plan)
                stamp(admit, "decoded")
                admit()  # an output slot, in launch order
                device.to_output_stream(ctx, admit)
                with ctx.on_stream():
                    self._realize(ctx, plan, decoded)
                bm.run_ops(ctx, self.plan.ahead.rest_ops)
                break
            except SampleError as e:
                retire_leases(ctx)  # the next attempt decodes again
                indices = bm.replacement(key, ctx, e)
                try:
                    plan = self.plan_launch(key, prepared, pool, indices, ctx.skips, ctx.walks)
                except NotPlannable:  # (a replacement of unknown size) the whole launch here
                    ctx = bm.with_retries(key, prepared, pool, bm.run_whole, indices,
                                          stream=ctx.stream, skips=ctx.skips, walks=ctx.walks)
                    break
        out = device.collect(ctx)
        stamp(admit, "made")
        admit.decoded()  # its decoded images are retired: the next launch may decode
        return out

    @staticmethod
    def _sources_of(plan):
        """The planned images of a plan, each once, in the order the values name them."""
        seen = {}
        for v in plan.values.values():
            planned_sources(getattr(v, "raw", None), seen)  # under chained launches too
        return list(seen.values())

    def _decode_planned_of(self, ctx, plan) -> dict:
        """:meth:`_decode_plan`; a bad file of a multi-sample op's partner is charged to the
        schedule's sample that owns it (runtime/partners.py)."""
        try:
            return self._decode_plan(ctx, plan)
        except SampleError as e:
            bp = self.plan
            if bp.levels and e.position is not None:
                if bp.decode_level is None:  # decoders at several levels: no one owner
                    e.position = None
                else:
                    e.position = ctx.owner(e.position, bp.decode_level)
            raise

    def _decode_plan(self, ctx, plan) -> dict:
        from ...ops.gpu_decode import decode_planned

        return {id(src): decode_planned(ctx, src) for src in self._sources_of(plan)}

    def _realize(self, ctx, plan, decoded):
        """The planned values on the device, into ``ctx.values``: planned images are their
        decoded images (the pending chain kept), a deferred warp or launch runs (one launch
        each, after those it reads: core/deferred.py), and every
        host array of the planned box values and of the plain tensors the planning marked for
        upload (a :class:`~detaug.core.deferred.HostUpload`) goes up in ONE copy. Values of the
        host ops, and any other planned value, stay as they are."""
        from ...core.backend import upload_many

        host, todo, made, planned_ids = [], [], {}, self.plan.ahead.planned_ids
        for k, v in plan.values.items():
            if k[0] not in planned_ids:
                ctx.values[k] = v
            elif isinstance(v, ImageBatch) and is_planned(v.raw):
                # its decode, or its launches (each once: core/deferred.py), the chain kept
                ctx.values[k] = ImageBatch(realize(v.raw, decoded, ctx.stream, made), v.device,
                                           v.layout, v.geometry)
            elif isinstance(v, HostUpload) or (isinstance(v, BoxBatch) and v.device == "cpu"):
                # a host box batch, or a plain tensor marked by the planning side: an array, or
                # a ragged batch's samples (each a view of the one copy, as the upload makes them)
                parts = v.device_arrays()
                todo.append((k, v, None, len(host), len(parts)))
                host.extend(parts)
            elif isinstance(v, PaddedBoxes):
                names = list(v)
                todo.append((k, v, names, len(host), len(names)))
                host.extend(v[n] for n in names)
            else:  # any other host value stays as the planning left it
                ctx.values[k] = v
        dev = upload_many(host, ctx.stream) if host else []
        for k, v, names, at, n in todo:
            d = dev[at:at + n]
            if isinstance(v, PaddedBoxes):
                ctx.values[k] = PaddedBoxes(zip(names, d))
                ctx.values[k].widths = v.widths  # (each batch's own width, where several)
            else:  # a BoxBatch, a HostUpload
                ctx.values[k] = v.on_device(d)
