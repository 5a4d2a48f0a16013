"""The device stage of a pipeline with a GPU stage (a mixin of :class:`detaug.pipeline.Pipeline`):
the check that a GPU is there, the decode processes and their memory plan, the two phases of a
launch's device work (decode, admitted in launch order; then the outputs, on the one output
stream), the collection of a launch's outputs with its event, and the release of decode-ring
leases. docs/design.md ("GPU pipeline") describes it; detaug/runtime/gpu/memory_plan.py sizes it,
and what build decided (the op phases, the decode plan, the budget) is the pipeline's
``build_plan`` (detaug/runtime/build_plan.py)."""
from __future__ import annotations

from ...core.batch import BoxBatch, DeviceImages, ImageBatch
from .decode_proc import _Lease
from ...core.errors import SampleError
from .allocator import allocating
from .handout import device_arrays
from .launch_profile import stamp
from .plan_ahead import LaunchPlan, NotPlanned
from .. import build_plan as _build_plan
from .. import startup


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


class DeviceStage:
    """The device-stage methods of Pipeline (which holds the state they use)."""

    def _check_gpu(self):
        """Before anything starts: GPU ops where cupy (or nvImageCodec, for a GPU decoder) is
        missing or no GPU is visible raise one line saying what is missing and what to do."""
        from ...core.backend import DeviceUnavailableError, gpu_missing, install_command

        device_ops = [op for op in self._needed_ops() if op.device != "cpu"]
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

    def _summarize_devices(self) -> str:
        """Where the pipeline runs, in one line (``pipe.device_summary``)."""
        bp = self.build_plan
        user = lambda ops: [op for op in ops if not op.schema.internal]
        n_host, n_dev = len(user(bp.host_ops)), len(user(bp.device_ops))
        if not bp.has_device_stage:
            return f"cpu: all {n_host} ops on the CPU (no GPU stage)"
        procs = len(self._decode_service.workers) if self._decode_service is not None else 0
        dec = (f"decode on the GPU (nvImageCodec, {procs} decode processes)" if bp.mixed_decode
               else "decode on the CPU")
        return (f"gpu {self.device_id or 0}: {dec}, {n_dev} ops on the GPU, {n_host} on the CPU; "
                f"device memory budget {bp.budget / 1e9:.2f} GB")

    def _spawn_decode_service(self, budget, settings):
        """At build, before the readers index: start the decode processes the plan will most
        likely want (sizes unknown yet), so that their start (interpreter, imports, CUDA
        context: seconds) overlaps the index, the plan and this process's CUDA;
        :meth:`_start_decode_service` gives them their rings (and corrects their number)."""
        from . import decode_proc

        # the guess: images of 640 x 480 (COCO's typical size; the benchmark's): a plan for
        # other sizes stops the processes too many or starts those missing (configure)
        guess = _build_plan.decode_side_plan(budget, settings, ((480, 640),), settings.batch_size)
        if guess is not None and startup.early():
            self._decode_service = decode_proc.DecodeService(guess.processes, self.device_id or 0, None,
                                                             guess.threads)
            from . import early_decode

            if early_decode.enabled():  # this process decodes the first launches meanwhile
                self._decode_service.early = early_decode.EarlyDecoder(self.device_id or 0,
                                                                       self._startup)

    def _connect_decode_service(self, tl):
        """The end of build: wait for the decode processes' handshakes, or (with the pipeline's
        own decoder for the first launches: early_decode.py) let them come in the background."""
        early = getattr(self._decode_service, "early", None)
        if early is None:
            with tl.phase("build.decode_processes.ready"):
                self._decode_service.connect()
        else:
            self._decode_service.connect_in_background(tl, early.wake)

    def _start_decode_service(self, plan):
        """At build: the decode processes of the memory plan ``plan`` (a DecodePlan that
        build_plan.decide checked against the budget): those started early are given their
        rings (and their number corrected), else they start now."""
        from . import decode_proc

        if self._decode_service is not None:  # started early: their rings, the right number
            early = getattr(self._decode_service, "early", None)  # (its handshakes: once warm)
            self._decode_service.configure(plan.processes, plan.ring_bytes, plan.threads, plan.slots,
                                           warm_first=early is not None)
        else:
            self._decode_service = decode_proc.DecodeService(plan.processes, self.device_id or 0,
                                                             plan.ring_bytes, plan.threads, plan.slots)

    def _run_device(self, host_result, pool, stream=None, admit=None):
        import cupy as cp

        # the current device and the allocator (runtime/gpu/allocator.py) are per thread
        with cp.cuda.Device(self.device_id or 0), allocating(self._device_alloc):
            return self._run_device_on(host_result, pool, stream, admit or _NO_ADMIT)

    def _run_device_on(self, host_result, pool, stream, admit):
        key, prepared, ctx = host_result
        if isinstance(ctx, LaunchPlan):  # planned ahead (detaug/runtime/gpu/plan_ahead.py)
            return self._run_planned(key, prepared, ctx, pool, stream or self._stream, admit)
        if isinstance(ctx, NotPlanned):  # the whole launch here, as without planning
            ctx = self._host_stage(key, prepared, pool)
        ctx.stream = stream or self._stream
        try:
            admit.decode()  # a ring slot, in launch order
            self._run_ops(ctx, self.build_plan.device_ops_a)  # decode: runs ahead
            stamp(admit, "decoded")
            admit()  # an output slot, in launch order
            self._to_output_stream(ctx, admit)
            self._run_ops(ctx, self.build_plan.device_ops_b)
        except SampleError as e:
            self._retire_leases(ctx)  # the retry decodes again: give the ring slots back first
            admit()
            ctx = self._with_retries(key, prepared, pool, self._run_whole,
                                     self._retries.replacement(self.schedule, key, ctx, e, ctx.walks),
                                     stream=ctx.stream, skips=ctx.skips, walks=ctx.walks)
        out = self._collect(ctx)
        stamp(admit, "made")
        admit.decoded()  # its decoded images are retired: the next launch may decode
        return out

    def _to_output_stream(self, ctx, admit):
        """Move an admitted launch onto the output stream (after its decode, by an event).
        cupy's pool keeps freed blocks per stream, and a launch's outputs are allocated before
        the batch its slot held is dropped by the caller: made on each device worker's stream,
        the outputs left up to one cached block per worker (2 GB over the budget on the
        benchmark), and on one stream per output slot, one per slot (the pool held twice the
        outputs in use: 7.6 GB for 3.8 GB at 8 GB with launches of 4 batches). On
        one stream it holds no more blocks than were in use at once (the output slots' and the
        batches the caller still holds). What one stream costs: stage b kernels of different
        launches no longer overlap on the GPU, and a launch's event (with its leases' release)
        comes after the kernels that launches before it queued there (they are handed out in
        that order anyway). In-thread GPU decode keeps its thread's stream (its decoder frees on
        it). Before a launch's outputs are made, the batches the caller has dropped go back to the
        pool behind a device-side wait of the streams they were made on for the work the caller
        had queued on them, so that their blocks serve this launch (detaug/runtime/gpu/handout.py); no host
        thread waits."""
        self._handout.held.poll()
        if getattr(admit, "seq", None) is None or self._out_stream is None or (
                self.build_plan.mixed_decode and self._decode_service is None):
            return
        out = self._out_stream
        if out is ctx.stream:
            return
        import cupy as cp

        if self.build_plan.device_ops_a:
            ev = cp.cuda.Event(block=False, disable_timing=True)
            ev.record(ctx.stream)
            out.wait_event(ev)
        ctx.earlier_streams.append(ctx.stream)
        ctx.stream = out

    @staticmethod
    def _retire_leases(ctx):
        """Give back the decode-ring regions of a failed attempt, after the work it queued."""
        if ctx.leases and ctx.stream is not None:
            import cupy as cp

            ev = cp.cuda.Event(block=True, disable_timing=True)
            ev.record(ctx.stream)
            for lease in ctx.leases:
                lease.retire(ev)

    def _collect(self, ctx):
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
                s.wait_event(ev)  # goes back to that stream's pool: reused there after the reads
            for lease in ctx.leases:  # the images' last use: their regions go back after it
                lease.retire(ev)
            self._output_budget.measured(_device_bytes(outs))
            # the streams its outputs were allocated on: cupy's pool reuses a freed block only
            # for allocations on the stream it was made on (detaug/runtime/gpu/handout.py)
            made_on = tuple(dict.fromkeys(s.ptr for s in [*ctx.earlier_streams, ctx.stream]))
            return tuple(outs), ev, ctx.skips, ctx.sizes, made_on
        return tuple(outs), None, ctx.skips, ctx.sizes, None

    def _release_device_buffers(self, sync):
        """Free what decoders own (kept a few batches) while this pipeline's streams still exist."""
        keep = self._decoded_keep
        if keep:
            if sync:
                for s in [*self._streams, self._out_stream]:
                    if s is not None:
                        s.synchronize()
            keep.clear()
