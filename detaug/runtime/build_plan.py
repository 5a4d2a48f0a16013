"""What a pipeline decides at build, decided once, as one record.

:func:`decide` takes the traced graph (the ops the outputs need, inputs first, and the outputs),
the sources made at build (their sizes and the annotated image sizes), the seed, the device
memory budget, the user's settings (:class:`Settings`) and what the outputs' consumer declared it
takes of the budget (memory_plan.ConsumerShare: set aside before anything is planned), and
returns a :class:`BuildPlan`: the
host/device op split, which device ops are planned ahead on the host and what a plan carries
(detaug/runtime/gpu/plan_ahead.py: :func:`~detaug.runtime.gpu.plan_ahead.choose`), the launch size
(``batches_per_launch``), a launch's device bytes (detaug/runtime/gpu/output_sizes.py), the memory
plan of the decode side (detaug/runtime/gpu/memory_plan.py), the queue's depth, the device workers,
the host worker processes, the CPU decoders' caches of decoded images in host memory
(detaug/runtime/decode_cache.py: ``decode_cache``, ``host_cache_bytes``) and the output slots at
build. The record is frozen: the parts of the pipeline receive it and read what they need;
nothing is set on the pipeline step by step, so no step depends on another having run first. A pipeline that cannot run within its budget is
refused here (``BudgetError``, with the figure it needs), before any decode process is given its
plan. Pure arithmetic on the graph, the sizes and the environment's overrides: nothing starts.
"""
from __future__ import annotations

import collections
import dataclasses
import os
import types

import numpy as np

from . import decode_cache
from .gpu import memory_plan, output_sizes
from .gpu import plan_ahead as _plan_ahead

# default prefetch depth of pipelines that decode in decode processes, in launches of any size (a
# launch's device bytes are bounded apart, by its ring and output slots: 'pool' at 4 batches a
# launch ran 7,529 img/s with 12 in flight, 6,716 with 3, at 4.9 GB both; H200): each launch
# holds a device worker while its files are decoded, so the decoders idle with few launches in flight (6 ran faster than 4 with 3
# processes). 12: training
# RetinaNet (bench_train, batch 16, 2 GB) fed with 12 in flight ran at 0.989 and 0.998 of a batch
# kept on the GPU, with 6 at 0.962 and 0.981 (same call; 0.918-0.960 in two calls before). The
# outputs in flight stay within the memory budget (output slots); the device workers stay 6
DECODE_PROCESS_PREFETCH = 12
MAX_DEVICE_WORKERS = 6  # default device_workers: min(prefetch depth, this)


def _env(name):  # an override from the environment, or None
    return int(os.environ[name]) if os.environ.get(name) else None


@dataclasses.dataclass(frozen=True)
class Settings:
    """The pipeline's arguments that build reads, as the user gave them (None: decided here)."""
    batch_size: int = 1
    num_threads: int = 1
    prefetch_queue_depth: int | None = None
    device_workers: int | None = None
    batches_per_launch: int | None = None
    decode_processes: int | None = None
    decode_buffer_mb: int | None = None
    host_processes: int | None = None
    decode_cache_mb: int | None = None

    @property
    def depth(self) -> int:
        """The queue's depth where build does not choose it."""
        return 2 if self.prefetch_queue_depth is None else max(1, int(self.prefetch_queue_depth))


@dataclasses.dataclass(frozen=True)
class BuildPlan:
    """What build decided (see the module). The figures of a pipeline without a GPU stage are
    the defaults."""
    seed: int
    budget: int                           # device memory budget, bytes
    # what the outputs' consumer declared it takes beside the pipeline (None: nothing declared),
    # and its bytes in this graph, set aside from the budget (``room``: what is planned)
    consumer: memory_plan.ConsumerShare | None = None
    reserved: int = 0
    host_ops: tuple = ()
    device_ops: tuple = ()
    device_ops_a: tuple = ()              # the device stage's decode phase (runs ahead)
    device_ops_b: tuple = ()              # what makes the outputs (waits for an output slot)
    mixed_decode: bool = False            # a GPU decoder (decoders.image device='mixed')
    # multi-sample ops (detaug/runtime/partners.py): the level of each op (op id -> path) and
    # the level of the decoders (None: several)
    levels: types.MappingProxyType = dataclasses.field(
        default_factory=lambda: types.MappingProxyType({}))
    decode_level: tuple | None = ()
    ahead: _plan_ahead.Ahead = _plan_ahead.NOT_AHEAD
    batches_per_launch: int = 1
    batch_bytes: output_sizes.LaunchBytes | None = None  # one batch's, where the graph fixes them
    decode: memory_plan.DecodePlan | None = None  # the decode processes' plan (None: none)
    decode_bytes: int = 0                 # what the decode side takes
    decode_slots: int = 1 << 30           # launches decoding or holding decoded images at once
    prefetch_queue_depth: int = 2
    device_workers: int = MAX_DEVICE_WORKERS
    host_processes: int = 0
    output_slots: int = 1                 # launches whose outputs may exist at once, at build
    paths_only: frozenset = frozenset()   # readers that hand over paths (decode processes read)
    # CPU decoders' caches of decoded images (detaug/runtime/decode_cache.py): op id -> bytes a
    # process
    decode_cache: types.MappingProxyType = dataclasses.field(
        default_factory=lambda: types.MappingProxyType({}))

    @property
    def has_device_stage(self) -> bool:
        return bool(self.device_ops)

    @property
    def fan_out(self) -> int:
        """The most source samples an output sample needs (partners.fan_out of the ops and
        their levels)."""
        from . import partners

        return partners.fan_out((*self.host_ops, *self.device_ops), self.levels)

    @property
    def room(self) -> int:
        """The budget less what the outputs' consumer takes (``reserved``): what the pipeline's
        decode side and outputs are planned within."""
        return self.budget - self.reserved

    @property
    def reserved_what(self) -> str:
        """Who the reserved bytes are for (messages)."""
        return self.consumer.what if self.consumer is not None else ""

    @property
    def plan_ahead(self) -> bool:
        return self.ahead.on

    @property
    def host_cache_bytes(self) -> int:
        """The most bytes the decode caches hold, over every process making launches (each
        host worker, or this process where there are none)."""
        return sum(self.decode_cache.values()) * max(1, self.host_processes)

    @property
    def worker_run(self) -> int:
        """The launches in a row each host worker makes (:func:`decode_cache.worker_run`)."""
        return decode_cache.worker_run(self.decode_cache, self.host_processes,
                                       self.prefetch_queue_depth)

    def launch_bytes(self):
        """(outputs, working) of one launch (``batches_per_launch`` batches:
        output_sizes.LaunchBytes.launch); outputs None where not known at build."""
        b = self.batch_bytes
        if b is None:
            return None, 0
        return b.launch(self.batches_per_launch)


class Decided:
    """A pipeline's figure read off its record (``pipe.build_plan``): the pipeline keeps no copy
    of what build decided."""

    def __init__(self, field: str, doc: str):
        self.field, self.__doc__ = field, doc

    def __get__(self, pipe, owner=None):
        return self if pipe is None else getattr(pipe.build_plan, self.field)

    def __set__(self, pipe, value):
        raise AttributeError(f"{self.field} is decided at build (pipe.build_plan, "
                             "detaug/runtime/build_plan.py): give it to the Pipeline's constructor")


def check_consumer(plan: BuildPlan, consumer) -> None:
    """A consumer declared to a pipeline built already (``plan``): a warning where its
    device stage set aside less than ``consumer`` (a memory_plan.ConsumerShare) takes, which
    then comes on top of the budget (the plan is kept: its decode processes run)."""
    if consumer is None or not plan.has_device_stage:
        return
    need = consumer.bytes(plan.batch_bytes)
    if need > plan.reserved:
        import warnings

        warnings.warn(f"the pipeline was built before {consumer.what} declared the device "
                      f"memory it takes (~{need / 1e6:,.0f} MB; {plan.reserved / 1e6:,.0f} MB set "
                      "aside): it plans within its whole device_memory_budget and this comes on "
                      "top; make the iterator before building the pipeline (or build it with "
                      "build(consumer=...))", stacklevel=3)


def unbuilt(seed: int, budget: int, settings: Settings) -> BuildPlan:
    """The record of a pipeline not built yet: no ops, the figures its arguments fix."""
    depth = settings.depth
    return BuildPlan(
        seed=int(seed), budget=int(budget), prefetch_queue_depth=depth,
        device_workers=_device_workers(settings, depth, None),
        batches_per_launch=_launch_batches(settings, budget, False, None, False))


def decoded_sizes(ops, sources, any_decoder=False):
    """(N, 2) annotated heights and widths of the images a GPU decoder decodes (any
    decoder's with ``any_decoder``), where the reader feeding it knows them (None
    otherwise): the decode rings and the memory plan are sized from them."""
    for op in ops:
        if op.schema.has("decode_service") and (any_decoder or op.gpu_decode) and op.inputs:
            src = sources.get(op.inputs[0].op.id)
            sizes = getattr(src, "sizes", None)
            if sizes is not None and len(sizes):
                return sizes
    return None


def boxes_per_sample(sources):
    """The mean boxes a sample of the first source that packs boxes (``offsets`` (N + 1,):
    a detection reader's), or None."""
    for src in sources.values():
        off = getattr(src, "offsets", None)
        if isinstance(off, np.ndarray) and off.ndim == 1 and len(off) > 1:
            return float(off[-1] - off[0]) / (len(off) - 1)
    return None


def _decode_processes(settings):
    """The decode processes asked for (the setting, else DETAUG_DECODE_PROCESSES; None: from
    the budget; 0 or fewer: none, decode in the device-stage threads)."""
    n = settings.decode_processes if settings.decode_processes is not None else _env("DETAUG_DECODE_PROCESSES")
    return None if n is None else int(n)


def decode_side_plan(budget, settings, sizes, images, cap=None, early=False, batches=1):
    """The memory plan's decode processes, threads and ring for launches of ``images``
    images of ``sizes`` (None: unknown) in ``batches`` batches, the decode side within ``cap``
    bytes (None: the plan's share of the budget) of ``budget``; ``early``: this process decodes
    the first launches while the processes come up (memory_plan.plan_decode); None where decode
    processes are off."""
    n = _decode_processes(settings)
    if n is not None and n <= 0:
        return None
    launch = memory_plan.launch_image_bytes(sizes, 3, images)
    return memory_plan.plan_decode(
        budget, launch,
        processes=n,
        threads=_env("DETAUG_DECODE_THREADS"),
        ring_bytes=None if settings.decode_buffer_mb is None else settings.decode_buffer_mb << 20,
        cap=cap, early=early, batches=batches)


def _reserved(consumer, batch_bytes) -> int:
    """The bytes ``consumer`` (a memory_plan.ConsumerShare; None: none) takes beside launches of
    ``batch_bytes`` (output_sizes.LaunchBytes; None: not known at build)."""
    return consumer.bytes(batch_bytes) if consumer is not None else 0


def _refuse_over_budget(budget, batch_bytes, batches, decode_bytes, decode_what, fixed_decode,
                        consumer=None):
    """BudgetError where the least this pipeline runs with and what ``consumer`` (a
    memory_plan.ConsumerShare) takes exceed its budget."""
    reserved, what = _reserved(consumer, batch_bytes), consumer.what if consumer is not None else ""
    if batch_bytes is None:
        if reserved:  # the outputs are known after the first launch, the consumer's share now
            memory_plan.check_budget(budget, decode_bytes, decode_what, 0, 0, (), batches,
                                     fixed_decode, reserved, what)
        return  # (runtime/gpu/output_budget.py: the rest once the first launch is made)
    parts = [(n, b * batches) for n, b in batch_bytes.parts]
    out, work = batch_bytes.launch(batches)
    memory_plan.check_budget(budget, decode_bytes, decode_what, out, work, parts, batches,
                             fixed_decode, reserved, what)


def _decode_processes_plan(budget, settings, sizes, images, batch_bytes, batches, consumer=None):
    """The decode processes' plan within ``budget`` less what ``consumer`` takes, refused where
    it cannot fit (the figure given being the one the plan at that budget needs); None where
    decode processes are off."""
    out, work = (None, 0) if batch_bytes is None else batch_bytes.launch(batches)
    reserved = _reserved(consumer, batch_bytes)
    room = budget - reserved
    from . import startup
    from .gpu import early_decode

    # the processes started early come with this process's decoder for the first launches
    # (DeviceStage.spawn_decode_service): its buffers count beside theirs
    early = startup.early() and early_decode.enabled()
    plan = decode_side_plan(room, settings, sizes, images,
                            cap=memory_plan.decode_cap(room, out, work), early=early,
                            batches=batches)
    if plan is None:
        return None
    fixed = _decode_processes(settings) is not None or settings.decode_buffer_mb is not None
    # refuse what cannot fit (processes started early are closed by build: nothing is kept)
    try:
        _refuse_over_budget(budget, batch_bytes, batches, plan.bytes, plan.describe(), fixed,
                            consumer)
    except memory_plan.BudgetError as e:
        if fixed:
            raise
        # the figure to give is the one the plan at that budget needs (its ring may be
        # larger there: memory_plan.ring_launches): planned again at e.need, checked again
        again_room = e.need - reserved
        again = decode_side_plan(again_room, settings, sizes, images,
                                 cap=memory_plan.decode_cap(again_room, out, work), early=early,
                                 batches=batches)
        _refuse_over_budget(budget, batch_bytes, batches,
                            max(again.bytes, plan.bytes), again.describe(), fixed, consumer)
        raise
    return plan


GUESS_SIZES = ((480, 640),)  # (H, W) of the images a guess made before the readers index assumes


def early_guess(ops, outputs, budget, settings, consumer=None):
    """Before the readers index (image sizes unknown: :data:`GUESS_SIZES`, COCO's typical size):
    the decode processes' plan that :func:`decide` will most likely give, worked out as it works
    it out (the launch's images with the multi-sample ops' fan-out, the decode side capped by
    the launch's outputs and working memory), so that the processes started early are the
    plan's (a process started early takes its CUDA context and decoders at once, and one that
    the plan then stops holds them until it has exited, memory no plan counts); None where
    decode processes are off; one process of one decoder thread (the least any plan has) where
    the guess would refuse the budget (or the graph fails here: build raises it in its
    order). ``ops``: the needed ops, inputs first; ``consumer``: as :func:`decide`'s."""
    from . import partners

    n = _decode_processes(settings)
    if n is not None and n <= 0:
        return None  # decode processes off
    ops = list(ops)
    try:
        levels, _ = partners.setup(ops, outputs, True)
        return _launch(ops, outputs, budget, settings, levels, True,
                       GUESS_SIZES, GUESS_SIZES, None, consumer).decode
    except Exception:  # noqa: BLE001 - refused here (or a graph error, which decide raises in
        return memory_plan.DecodePlan(1, 1, 0, 0)  # its order): the least any plan has


def _launch(ops, outputs, budget, settings, levels, sized, sizes, gpu_sizes, boxes,
            consumer=None):
    """The launch part of the plan, worked out the same for :func:`decide` and
    :func:`early_guess`: (host ops, device ops, whether a GPU decoder decodes, planning ahead,
    a batch's device bytes (None: no device op), batches per launch, images a launch decodes,
    the decode processes' plan (None: none), the bytes set aside for ``consumer`` (0 without a
    device op)). ``sizes``: the images' (H, W) a batch's bytes are sized from (any decoder's);
    ``gpu_sizes``: a GPU decoder's (the decode side); ``boxes``: mean boxes a sample (None:
    unknown); ``consumer``: the memory_plan.ConsumerShare declared to build (None: none)."""
    from . import partners

    host_ops = tuple(op for op in ops if op.device == "cpu")
    device_ops = tuple(op for op in ops if op.device != "cpu")
    mixed_decode = any(op.gpu_decode for op in device_ops)
    ahead = _plan_ahead.choose(host_ops, device_ops, outputs, mixed_decode)
    batch_bytes, reserved = None, 0
    if device_ops:  # a launch's outputs, where the graph fixes them
        batch_bytes = output_sizes.batch_bytes(ops, outputs, sizes, settings.batch_size, levels,
                                               boxes)
        reserved = _reserved(consumer, batch_bytes)
    room = budget - reserved

    def side(k):
        """(images a launch of k batches decodes (partners too; a pool's shared once), the
        decode processes' plan); BudgetError where launches of k batches cannot fit."""
        images = settings.batch_size * partners.fan_out(ops, levels, k)
        if not mixed_decode:
            return images, None
        return images, _decode_processes_plan(budget, settings, gpu_sizes, images, batch_bytes, k,
                                              consumer)

    fits = None
    if device_ops and sized and batch_bytes is not None and \
            partners.shares_across_batches(ops, levels):
        def fits(k):  # the plan with launches of k batches fits the budget (and its rings)
            try:
                images, decode = side(k)
                if decode is None:  # no decode processes: decode_side_bytes refuses it
                    decode_side_bytes(settings, mixed_decode, gpu_sizes, images, batch_bytes, k,
                                      budget, consumer)
            except memory_plan.BudgetError:
                return False
            # a ring of decode_buffer_mb: its slots hold a launch of k batches' images
            return decode is None or decode.ring_bytes // decode.slots >= \
                memory_plan.launch_image_bytes(gpu_sizes, 3, images)
    bpl = _launch_batches(settings, room, ahead.on, batch_bytes, bool(device_ops) and sized, fits)
    images, decode = side(bpl)
    return _Launch(host_ops, device_ops, mixed_decode, ahead, batch_bytes, bpl, images, decode,
                   reserved)


_Launch = collections.namedtuple(
    "_Launch", "host_ops device_ops mixed_decode ahead batch_bytes bpl images decode reserved")


def _launch_batches(settings, budget, planned, batch_bytes, sized, fits=None) -> int:
    """Batches per launch: the setting, else :func:`memory_plan.batches_per_launch` (``fits``:
    for a pipeline whose launches share a partner pool's samples across batches)."""
    if settings.batches_per_launch is not None:
        return max(1, int(settings.batches_per_launch))
    if not sized:
        return 1
    b = batch_bytes
    return memory_plan.batches_per_launch(budget, planned, b and b.outputs, b.working if b else 0,
                                          fits=fits)


def _device_workers(settings, depth, decode) -> int:
    """The device workers: the setting, else one per launch in flight (a device worker holds
    its launch through the decode), at most MAX_DEVICE_WORKERS or the decode slots."""
    if settings.device_workers:
        return int(settings.device_workers)
    slots = decode.processes * decode.launches if decode is not None else 0
    return min(depth, max(MAX_DEVICE_WORKERS, slots))


def decode_side_bytes(settings, mixed_decode, sizes, images, batch_bytes, batches, budget,
                      consumer=None):
    """The bytes of the decode side of a GPU pipeline without decode processes: the
    decoders of the device-stage threads (decode_processes=0), or nothing (CPU decode);
    BudgetError where the pipeline cannot fit ``budget`` with it and what ``consumer`` takes."""
    what, nbytes = "decode on the CPU", 0
    if mixed_decode:
        workers = _device_workers(settings, settings.depth, None)
        launch = memory_plan.launch_image_bytes(sizes, 3, images)
        nbytes = memory_plan.in_thread_decode_bytes(workers, launch)
        what = (f"decode in {workers} device-stage threads (device_workers), "
                f"~{nbytes / 1e6:,.0f} MB")
    _refuse_over_budget(budget, batch_bytes, batches, nbytes, what, False, consumer)
    return nbytes


def _paths_only(ops, outputs) -> frozenset:
    """Readers whose encoded output only feeds GPU decoders hand over paths: the decode
    processes read the files themselves."""
    found = set()
    outs = {(o.op.id, o.index) for o in outputs}
    for op in ops:
        if op.schema.kind != "source" or (op.id, 0) in outs:
            continue
        users = [u for u in ops for i in u.inputs if (i.op.id, i.index) == (op.id, 0)]
        users += [u for u in ops for a in u.arg_inputs.values() if (a.op.id, a.index) == (op.id, 0)]
        if users and all(u.gpu_decode for u in users):
            found.add(op.id)
    return frozenset(found)


def host_processes(settings, has_device_stage, plan_ahead) -> int:
    """The number of host worker processes (see ``host_processes``); 0 runs the host stage in
    threads. A pipeline with a GPU stage keeps threads (its decode has processes of its own)."""
    from . import host_workers

    n = settings.host_processes
    if n is None:
        env = os.environ.get("DETAUG_HOST_PROCESSES")
        default = (_plan_ahead.default_processes() if has_device_stage
                   else settings.num_threads if settings.num_threads > 1 else 0)
        n = int(env) if env not in (None, "") else default
    n = max(0, int(n))
    if n and has_device_stage and not plan_ahead:
        if settings.host_processes:
            raise ValueError("host_processes: this GPU pipeline cannot be planned ahead on the "
                             "host (its images are not decoded from files by decode processes, "
                             "or an op before the warp reads pixels: detaug/runtime/gpu/plan_ahead.py); "
                             "leave it unset")
        return 0
    why = host_workers.unavailable() if n else None
    if why:
        if settings.host_processes:
            raise ValueError(f"host_processes={n}: {why}; leave it unset to run the host "
                             "stage in threads")
        return 0
    return n


def decide(ops, outputs, sources, *, seed: int, budget: int, settings: Settings,
           levels=None, decode_level=(), sized: bool = True, consumer=None) -> BuildPlan:
    """The :class:`BuildPlan` of the graph whose needed ops (inputs first) are ``ops`` and whose
    outputs are ``outputs``, read by ``sources`` (op id -> the source made at build), for
    ``seed`` and the device memory ``budget`` (bytes), of which ``consumer`` (a
    memory_plan.ConsumerShare; None: nothing) is set aside for what consumes the outputs.
    ``levels`` / ``decode_level``: the multi-sample ops' levels and the decoders' level
    (detaug/runtime/partners.py: ``setup``); ``sized``: the driving
    source has a size. Raises BudgetError
    where the pipeline cannot run within the budget, ValueError for host processes it cannot
    have."""
    ops, levels = list(ops), levels or {}
    gpu_sizes = decoded_sizes(ops, sources)
    host_ops, device_ops, mixed_decode, ahead, batch_bytes, bpl, images, decode, reserved = \
        _launch(ops, outputs, budget, settings, levels, sized, decoded_sizes(ops, sources, True),
                gpu_sizes, boxes_per_sample(sources), consumer)
    room = budget - reserved
    depth = settings.depth
    decode_slots = 1 << 30
    if decode is not None:
        # launches whose decode may be under way or held at once: what the rings hold (in
        # launch order, so the launch due next always finds a slot: Executor)
        decode_slots = decode.processes * decode.launches
        if settings.prefetch_queue_depth is None:
            # enough launches in flight to hold every ring slot of the queue
            depth = max(DECODE_PROCESS_PREFETCH, decode_slots)
    # the device stage's two phases: decode (runs ahead), then what makes the outputs (waits
    # for an output slot)
    last = max((k + 1 for k, op in enumerate(device_ops) if op.gpu_decode), default=0)
    workers = _device_workers(settings, depth, decode)
    procs = host_processes(settings, bool(device_ops), ahead.on)
    caches = decode_cache.plan(ops, sources, levels, settings.batch_size, bpl,
                               settings.decode_cache_mb)
    if caches and procs > 1 and not device_ops and settings.prefetch_queue_depth is None:
        depth = max(depth, decode_cache.RUN_DEPTH)  # runs of launches: decode_cache.worker_run
    decode_bytes, slots = 0, 1
    if device_ops:
        out, work = (None, 0) if batch_bytes is None else batch_bytes.launch(bpl)
        if decode is not None:  # (checked already) the slots at the final depth
            decode_bytes = decode.bytes
        else:
            # a GPU pipeline without decode processes: its decode side is the decoders of the
            # device-stage threads (decode_processes=0) or nothing (CPU decode)
            decode_bytes = decode_side_bytes(settings, mixed_decode, gpu_sizes, images,
                                             batch_bytes, bpl, budget, consumer)
        if out is not None:
            slots = memory_plan.output_slots(room, decode_bytes, out, depth, work)
    return BuildPlan(
        seed=int(seed), budget=int(budget), consumer=consumer if device_ops else None,
        reserved=int(reserved), host_ops=host_ops, device_ops=device_ops,
        levels=types.MappingProxyType(dict(levels)), decode_level=decode_level,
        device_ops_a=device_ops[:last], device_ops_b=device_ops[last:], mixed_decode=mixed_decode,
        ahead=ahead, batches_per_launch=bpl, batch_bytes=batch_bytes, decode=decode,
        decode_bytes=decode_bytes, decode_slots=decode_slots, prefetch_queue_depth=depth,
        device_workers=workers, host_processes=procs, output_slots=slots,
        paths_only=_paths_only(ops, outputs) if decode is not None else frozenset(),
        decode_cache=types.MappingProxyType(caches))
