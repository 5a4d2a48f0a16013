"""The device stage of a pipeline with a GPU stage (:class:`DeviceStage`, a part the pipeline
holds): the check that a GPU is there (:func:`check_gpu`), the decode processes and their memory
plan, the CUDA streams, the two phases of a launch's device work (decode, admitted in launch
order; then the outputs, on the one output stream), the collection of a launch's outputs with its
event, and the decoded images a GPU decoder keeps. docs/design.md ("GPU pipeline") describes it;
detaug/runtime/gpu/memory_plan.py sizes it, and what build decided (the op phases, the decode
plan, the budget) is the build's record (detaug/runtime/build_plan.py), given to it at build."""
from __future__ import annotations

from ...core.batch import BoxBatch, DeviceImages, ImageBatch
from .decode_proc import _Lease
from ...core.errors import SampleError
from .allocator import allocating, device_allocator
from .handout import device_arrays
from .launch_profile import stamp
from .plan_ahead import LaunchPlan, NotPlanned
from .. import startup
from ..batch_making import retire_leases


class _NoAdmit:
    """Admission of a launch run outside the queue (random access): nothing to wait for."""

    def __call__(self):
        pass

    def decode(self):
        pass

    def decoded(self):
        pass


_NO_ADMIT = _NoAdmit()


def _device_bytes(outs) -> int:
    """Device bytes held by a launch's outputs (images, boxes, padded boxes, arrays)."""
    return sum(int(a.nbytes) for a in device_arrays(outs))


def check_gpu(needed_ops):
    """Before anything starts: GPU ops among ``needed_ops`` where cupy (or nvImageCodec, for a GPU
    decoder) is missing or no GPU is visible raise one line saying what is missing and what to
    do."""
    from ...core.backend import DeviceUnavailableError, gpu_missing, install_command

    device_ops = [op for op in needed_ops if op.device != "cpu"]
    mixed_decode = any(op.gpu_decode for op in device_ops)
    missing = gpu_missing(nvimgcodec=mixed_decode)
    if missing is None:
        return
    if mixed_decode:
        what, drop = "decodes on the GPU (device='mixed')", "device='mixed' (or use device='auto')"
    else:
        names = ", ".join(op.name for op in device_ops if not op.schema.internal)
        what, drop = f"runs ops on the GPU ({names or '.gpu() uploads'})", "device='gpu' and .gpu()"
    raise DeviceUnavailableError(f"this pipeline {what} but {missing}: {install_command('gpu')}, "
                                 f"or drop {drop} to run on the CPU")


class OnDevice:
    """An attribute of a pipeline that its device stage (``pipe._device``) holds: read and set
    there (the pipeline keeps no copy)."""

    def __init__(self, name: str):
        self.name = name

    def __get__(self, pipe, owner=None):
        return self if pipe is None else getattr(pipe._device, self.name)

    def __set__(self, pipe, value):
        setattr(pipe._device, self.name, value)


class DeviceStage:
    """The device stage, a part the pipeline holds. Constructed with the CUDA ``device_id`` (None:
    device 0), the pipeline's start-up ``timeline`` (detaug/runtime/startup.py) and its hand-out
    hold (``handout``: detaug/runtime/gpu/handout.py); it owns the decode processes
    (``decode_service``), the context made in the background (``cuda_warm``), the CUDA streams
    (``streams``: one per device worker; ``stream``: the first; ``out_stream``: the outputs'),
    the ids of the readers whose files the decode processes read (``paths_only``) and the
    decoded images a GPU decoder keeps (``decoded_keep``: ops/gpu_decode.py keep_queue). At build
    it is given the guessed decode plan (:meth:`spawn_decode_service`), the build's record
    (:meth:`start`) and then the parts it runs launches with (:meth:`bind`)."""

    def __init__(self, device_id, timeline, handout):
        self.device_id, self._startup, self._handout = device_id, timeline, handout
        self.decode_service = None
        self.cuda_warm = None  # the CUDA context made in the background at build (startup.py)
        self.decoded_keep = None  # decoded images a GPU decoder keeps (ops/gpu_decode.py keep_queue)
        self.streams, self.stream, self.out_stream = [], None, None
        self.alloc = None  # the device threads' allocator (runtime/gpu/allocator.py), at start
        self.plan = None  # the build's record (start)
        self._batches = self._planner = self._outputs = self._output_budget = None  # (bind)

    @property
    def paths_only(self) -> frozenset:
        """The ids of the readers whose files the decode processes read (the plan's, while its
        decode processes are there; none once closed: a later run reads and decodes here)."""
        if self.plan is None or self.decode_service is None:
            return frozenset()
        return self.plan.paths_only

    def summary(self) -> str:
        """Where the pipeline runs, in one line (``pipe.device_summary``), once started."""
        bp = self.plan
        user = lambda ops: [op for op in ops if not op.schema.internal]
        n_host, n_dev = len(user(bp.host_ops)), len(user(bp.device_ops))
        if not bp.has_device_stage:
            return f"cpu: all {n_host} ops on the CPU (no GPU stage)"
        procs = len(self.decode_service.workers) if self.decode_service is not None else 0
        dec = (f"decode on the GPU (nvImageCodec, {procs} decode processes)" if bp.mixed_decode
               else "decode on the CPU")
        share = (f" ({bp.reserved / 1e9:.2f} GB of it set aside for {bp.reserved_what})"
                 if bp.reserved else "")
        return (f"gpu {self.device_id or 0}: {dec}, {n_dev} ops on the GPU, {n_host} on the CPU; "
                f"device memory budget {bp.budget / 1e9:.2f} GB{share}")

    def start_early(self, guess, tl):
        """At build, for a GPU decoder, before the readers index: the decode processes of
        ``guess`` (:meth:`spawn_decode_service`, where the start is not deferred: startup.early)
        and this process's CUDA context (:meth:`warm_cuda`), timed on ``tl``."""
        if startup.early():
            with tl.phase("build.decode_processes.spawn"):
                self.spawn_decode_service(guess)
        self.warm_cuda(tl)

    def spawn_decode_service(self, guess):
        """At build, before the readers index: start the decode processes of ``guess`` (the
        plan build will most likely make, its image sizes guessed: build_plan.early_guess; None:
        none start early), so that their start (interpreter, imports, CUDA context: seconds)
        overlaps the index, the plan and this process's CUDA; :meth:`start` gives them their
        rings (and corrects their number: a process stopped then, before its CUDA context where
        the plan comes first, exits: decode_worker.py)."""
        from . import decode_proc

        if guess is not None and startup.early():
            self.decode_service = decode_proc.DecodeService(guess.processes, self.device_id or 0, None,
                                                            guess.threads)
            from . import early_decode

            if early_decode.enabled():  # this process decodes the first launches meanwhile
                self.decode_service.early = early_decode.EarlyDecoder(self.device_id or 0,
                                                                      self._startup)

    def warm_cuda(self, tl):
        """At build: this process's CUDA context, then the kernels used before, in a background
        thread (detaug/runtime/startup.py), timed on ``tl``."""
        self.cuda_warm = startup.warm_gpu(self.device_id or 0, tl) if startup.early() else None

    def start(self, plan, tl):
        """At build, once ``plan`` (the build's record) is decided: its decode processes
        (:meth:`_start_decode_service`), one CUDA stream per device worker, the output stream and
        the device threads' allocator where it has a GPU stage, then the decode processes'
        handshakes; phases timed on ``tl``."""
        self.plan = plan
        if plan.decode is not None:
            with tl.phase("build.decode_processes"):
                self._start_decode_service(plan.decode)
        if plan.has_device_stage:
            tl.begin("build.cuda")
            import cupy as cp

            if self.cuda_warm is not None:
                self.cuda_warm.wait()  # (the context made meanwhile, or failed: made here)
            cp.cuda.Device(self.device_id or 0).use()
            # one stream per device worker: batches' host-side launch work overlaps, and each
            # batch's kernels stay in order on its own stream
            self.streams = [cp.cuda.Stream(non_blocking=True) for _ in range(plan.device_workers)]
            self.stream = self.streams[0]
            # the one stream every launch's outputs are made on: to_output_stream
            self.out_stream = cp.cuda.Stream(non_blocking=True)
            self.alloc = device_allocator(self.device_id or 0)
            tl.end("build.cuda")
        if self.decode_service is not None and not self.decode_service.connected:
            self._connect_decode_service(tl)  # (their handshakes)

    def bind(self, batches, planner, outputs, output_budget):
        """At build, after :meth:`start`: the parts a launch runs with, ``batches`` (its ops,
        contexts and retries: detaug/runtime/batch_making.py) and ``planner`` (planned launches:
        detaug/runtime/gpu/plan_ahead.py), the pipeline's ``outputs`` and its ``output_budget``
        (detaug/runtime/gpu/output_budget.py, told what a launch's outputs took)."""
        self._batches, self._planner = batches, planner
        self._outputs, self._output_budget = outputs, output_budget

    def _connect_decode_service(self, tl):
        """The end of build: wait for the decode processes' handshakes, or (with the pipeline's
        own decoder for the first launches: early_decode.py) let them come in the background."""
        early = getattr(self.decode_service, "early", None)
        if early is None:
            with tl.phase("build.decode_processes.ready"):
                self.decode_service.connect()
        else:
            self.decode_service.connect_in_background(tl, early.wake)

    def _start_decode_service(self, plan):
        """At build: the decode processes of the memory plan ``plan`` (a DecodePlan that
        build_plan.decide checked against the budget): those started early are given their
        rings (and their number corrected), else they start now."""
        from . import decode_proc

        if self.decode_service is not None:  # started early: their rings, the right number
            early = getattr(self.decode_service, "early", None)  # (its handshakes: once warm)
            self.decode_service.configure(plan.processes, plan.ring_bytes, plan.threads, plan.slots,
                                          warm_first=early is not None)
        else:
            self.decode_service = decode_proc.DecodeService(plan.processes, self.device_id or 0,
                                                            plan.ring_bytes, plan.threads, plan.slots)

    def close_decode_service(self):
        """Close the decode processes (they exit, their memory freed); a later run decodes here."""
        if self.decode_service is not None:
            self.decode_service.close()
            self.decode_service = None

    def close(self):
        """Free what decoders keep (after this pipeline's streams' work) and close the decode
        processes: a later run reads and decodes in this process."""
        self.release_device_buffers(sync=True)
        self.close_decode_service()  # (paths_only: none then, a later run reads here)

    def stop(self):
        """From a finaliser: free what decoders keep and stop the decode processes, joining no
        thread and waiting for no stream."""
        self.release_device_buffers(sync=False)
        svc = self.decode_service
        if svc is not None:
            svc.stop()

    def run_device(self, host_result, pool, stream=None, admit=None):
        """The device stage of a launch whose host result (key, prepared, its batch context, or
        its LaunchPlan, or NotPlanned) is ``host_result``, on ``stream`` (default: the first
        device worker's), admitted by ``admit`` (the executor's slots; none: random access)."""
        import cupy as cp

        # the current device and the allocator (runtime/gpu/allocator.py) are per thread
        with cp.cuda.Device(self.device_id or 0), allocating(self.alloc):
            return self._run_device_on(host_result, pool, stream, admit or _NO_ADMIT)

    def _run_device_on(self, host_result, pool, stream, admit):
        key, prepared, ctx = host_result
        bm = self._batches
        if isinstance(ctx, LaunchPlan):  # planned ahead (detaug/runtime/gpu/plan_ahead.py)
            return self._planner.run_planned(key, prepared, ctx, pool, stream or self.stream,
                                             admit, self)
        if isinstance(ctx, NotPlanned):  # the whole launch here, as without planning
            ctx = bm.host_stage(key, prepared, pool)
        ctx.stream = stream or self.stream
        try:
            admit.decode()  # a ring slot, in launch order
            bm.run_ops(ctx, self.plan.device_ops_a)  # decode: runs ahead
            stamp(admit, "decoded")
            admit()  # an output slot, in launch order
            self.to_output_stream(ctx, admit)
            bm.run_ops(ctx, self.plan.device_ops_b)
        except SampleError as e:
            retire_leases(ctx)  # the retry decodes again: give the ring slots back first
            admit()
            ctx = bm.with_retries(key, prepared, pool, bm.run_whole, bm.replacement(key, ctx, e),
                                  stream=ctx.stream, skips=ctx.skips, walks=ctx.walks)
        out = self.collect(ctx)
        stamp(admit, "made")
        admit.decoded()  # its decoded images are retired: the next launch may decode
        return out

    def to_output_stream(self, ctx, admit):
        """Move an admitted launch onto the output stream (after its decode, by an event).
        Why one stream: a launch's outputs are allocated before the batch its slot held is
        dropped by the caller, and cupy's default pool (which the device threads allocated from
        before the stream-ordered pool, runtime/gpu/allocator.py, and still do with
        ``DETAUG_DEVICE_ALLOCATOR=pool``) keeps freed blocks per stream: made on each device
        worker's stream, the outputs left up to one cached block per worker (2 GB over the budget
        on the benchmark), and on one stream per output slot, one per slot (the pool held twice
        the outputs in use: 7.6 GB for 3.8 GB at 8 GB with launches of 4 batches). On one stream
        it holds no more blocks than were in use at once (the output slots' and the batches the
        caller still holds); the stream-ordered pool shares freed memory across streams, and
        frees each block in the order of the stream it was allocated on. What one stream costs: stage b kernels of different
        launches no longer overlap on the GPU, and a launch's event (with its leases' release)
        comes after the kernels that launches before it queued there (they are handed out in
        that order anyway). In-thread GPU decode keeps its thread's stream (its decoder frees on
        it). Before a launch's outputs are made, the batches the caller has dropped go back to the
        pool behind a device-side wait of the streams they were made on for the work the caller
        had queued on them, so that their blocks serve this launch (detaug/runtime/gpu/handout.py); no host
        thread waits."""
        self._handout.held.poll()
        if getattr(admit, "seq", None) is None or self.out_stream is None or (
                self.plan.mixed_decode and self.decode_service is None):
            return
        out = self.out_stream
        if out is ctx.stream:
            return
        import cupy as cp

        if self.plan.device_ops_a:
            ev = cp.cuda.Event(block=False, disable_timing=True)
            ev.record(ctx.stream)
            out.wait_event(ev)
        ctx.earlier_streams.append(ctx.stream)
        ctx.stream = out

    def collect(self, ctx):
        """A launch's outputs from its batch context ``ctx``: (outputs, the event after its device
        work, its skips, its batch sizes, the streams its outputs were made on); a CPU
        pipeline's have no event and no streams."""
        outs = []
        with ctx.on_stream():
            for node in self._outputs:
                v = ctx.values[(node.op.id, node.index)]
                if isinstance(v, ImageBatch):
                    v = v.materialize(ctx)
                    if isinstance(v.raw, DeviceImages) and isinstance(v.raw.owners, _Lease):
                        # decoded images still in a decode process's buffer: the user gets
                        # copies (the buffer is reused once the batch is done), made on the
                        # batch's stream, which waits for the decode and orders the lease's
                        # release after them
                        v = ImageBatch([a.copy() for a in v.data], v.device, v.layout)
                elif isinstance(v, BoxBatch):
                    v = v.materialize(ctx)
                outs.append(v)
        if ctx.stream is not None:
            import cupy as cp

            # blocking sync: whoever waits on the host for it (the lease releaser, a host copy)
            # sleeps instead of spinning a core
            ev = cp.cuda.Event(block=True, disable_timing=True)
            ev.record(ctx.stream)
            for s in ctx.earlier_streams:  # scratch made there (a BGR copy) and read on ctx.stream
                s.wait_event(ev)  # freed in that stream's order: reused after the reads
            for lease in ctx.leases:  # the images' last use: their regions go back after it
                lease.retire(ev)
            self._output_budget.measured(_device_bytes(outs))
            # the streams its outputs were allocated on: a freed block goes back to the pool in
            # the order of the stream it was made on (detaug/runtime/gpu/handout.py)
            made_on = tuple(dict.fromkeys(s.ptr for s in [*ctx.earlier_streams, ctx.stream]))
            return tuple(outs), ev, ctx.skips, ctx.sizes, made_on
        return tuple(outs), None, ctx.skips, ctx.sizes, None

    def release_device_buffers(self, sync):
        """Free what decoders own (kept a few batches) while this pipeline's streams still exist."""
        keep = self.decoded_keep
        if keep:
            if sync:
                for s in [*self.streams, self.out_stream]:
                    if s is not None:
                        s.synchronize()
            keep.clear()
