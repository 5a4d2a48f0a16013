"""The device stage of a pipeline with a GPU stage (a mixin of :class:`detaug.pipeline.Pipeline`):
the check that a GPU is there, the decode processes and their memory plan, the two phases of a
launch's device work (decode, admitted in launch order; then the outputs, on the one output
stream), the collection of a launch's outputs with its event, and the release of decode-ring
leases. docs/design.md ("GPU pipeline") describes it; detaug/runtime/gpu/memory_plan.py sizes it."""
from __future__ import annotations

import os

from ...core.batch import BoxBatch, DeviceImages, ImageBatch
from .decode_proc import _Lease
from ...core.errors import SampleError
from .handout import device_arrays
from .launch_profile import stamp
from .plan_ahead import LaunchPlan, NotPlanned
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


def _env(name):  # an override from the environment, or None
    return int(os.environ[name]) if os.environ.get(name) else None


class DeviceStage:
    """The device-stage methods of Pipeline (which holds the state they use)."""

    def _check_gpu(self):
        """Before anything starts: GPU ops where cupy (or nvImageCodec, for a GPU decoder) is
        missing or no GPU is visible raise one line saying what is missing and what to do."""
        from ...core.backend import DeviceUnavailableError, gpu_missing, install_command

        missing = gpu_missing(nvimgcodec=self._mixed_decode)
        if missing is None:
            return
        if self._mixed_decode:
            what, drop = "decodes on the GPU (device='mixed')", "device='mixed' (or use device='auto')"
        else:
            names = ", ".join(op.name for op in self._device_ops if not op.schema.internal)
            what, drop = f"runs ops on the GPU ({names or '.gpu() uploads'})", "device='gpu' and .gpu()"
        raise DeviceUnavailableError(f"this pipeline {what} but {missing}: {install_command('gpu')}, "
                                     f"or drop {drop} to run on the CPU")

    def _summarize_devices(self) -> str:
        """Where the pipeline runs, in one line (``pipe.device_summary``)."""
        user = lambda ops: [op for op in ops if not op.schema.internal]
        n_host, n_dev = len(user(self._host_ops)), len(user(self._device_ops))
        if not self.has_device_stage:
            return f"cpu: all {n_host} ops on the CPU (no GPU stage)"
        procs = len(self._decode_service.workers) if self._decode_service is not None else 0
        dec = (f"decode on the GPU (nvImageCodec, {procs} decode processes)" if self._mixed_decode
               else "decode on the CPU")
        return (f"gpu {self.device_id or 0}: {dec}, {n_dev} ops on the GPU, {n_host} on the CPU; "
                f"device memory budget {self.device_memory_budget / 1e9:.2f} GB")

    def _batch_bytes(self):
        """One batch's device bytes (outputs, working memory) as the graph fixes them at build,
        or None where they are only known once a launch is made (output_sizes.py)."""
        if not hasattr(self, "_static_bytes"):
            from . import output_sizes

            self._static_bytes = output_sizes.batch_bytes(
                self._needed_ops(), self._outputs, self._decoded_sizes(any_decoder=True),
                self.batch_size, self._levels)
        return self._static_bytes

    def _launch_bytes(self):
        """(outputs, working) of one launch (``batches_per_launch`` batches); outputs None
        where not known at build."""
        b = self._batch_bytes()
        if b is None:
            return None, 0
        return b.outputs * self.batches_per_launch, b.working * self.batches_per_launch

    def _refuse_over_budget(self, decode_bytes, decode_what, fixed_decode):
        """BudgetError at build where the least this pipeline runs with exceeds its budget."""
        from . import memory_plan

        out, work = self._launch_bytes()
        if out is None:
            return  # known after the first launch (_after_launch_out)
        parts = [(n, b * self.batches_per_launch) for n, b in self._batch_bytes().parts]
        memory_plan.check_budget(self.device_memory_budget, decode_bytes, decode_what, out, work,
                                 parts, self.batches_per_launch, fixed_decode)
        self.output_slots = memory_plan.output_slots(self.device_memory_budget, decode_bytes, out,
                                                     self.prefetch_queue_depth, work)

    def _check_memory_budget(self):
        """At build, for a GPU pipeline without decode processes (a pipeline with them was
        checked before they started): its decode side is the decoders of the device-stage
        threads (decode_processes=0) or nothing (CPU decode)."""
        from . import memory_plan

        if not self.has_device_stage:
            return
        if self._decode_service is not None:  # (checked already) the slots at the final depth
            out, work = self._launch_bytes()
            if out is not None:
                self.output_slots = memory_plan.output_slots(
                    self.device_memory_budget, self._decode_bytes, out, self.prefetch_queue_depth, work)
            return

        decode, what = 0, "decode on the CPU"
        if self._mixed_decode:
            images = self.batch_size * self.batches_per_launch * self._fan_out
            launch = memory_plan.launch_image_bytes(self._decoded_sizes(), 3, images)
            decode = memory_plan.in_thread_decode_bytes(self.device_workers, launch)
            what = (f"decode in {self.device_workers} device-stage threads (device_workers), "
                    f"~{decode / 1e6:,.0f} MB")
        self._decode_bytes = decode
        self._refuse_over_budget(decode, what, False)

    def _decode_side_plan(self, sizes, images, cap=None, budget=None):
        """The memory plan's decode processes, threads and ring for launches of ``images``
        images of ``sizes`` (None: unknown), the decode side within ``cap`` bytes (None: the
        plan's share of the budget) of ``budget`` (None: the pipeline's); None where decode
        processes are off."""
        from . import memory_plan

        n = self.decode_processes if self.decode_processes is not None else _env("DETAUG_DECODE_PROCESSES")
        if n is not None and int(n) <= 0:
            return None
        launch = memory_plan.launch_image_bytes(sizes, 3, images)
        return memory_plan.plan_decode(
            self.device_memory_budget if budget is None else budget, launch,
            processes=None if n is None else int(n),
            threads=_env("DETAUG_DECODE_THREADS"),
            ring_bytes=None if self.decode_buffer_mb is None else self.decode_buffer_mb << 20,
            cap=cap, early=getattr(self._decode_service, "early", None) is not None)

    def _spawn_decode_service(self):
        """At build, before the readers index: start the decode processes the plan will most
        likely want (sizes unknown yet), so that their start (interpreter, imports, CUDA
        context: seconds) overlaps the index, the plan and this process's CUDA;
        :meth:`_start_decode_service` gives them their rings (and corrects their number)."""
        from . import decode_proc

        # the guess: images of 640 x 480 (COCO's typical size; the benchmark's): a plan for
        # other sizes stops the processes too many or starts those missing (configure)
        guess = self._decode_side_plan(((480, 640),), self.batch_size)
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

    def _start_decode_service(self):
        from . import decode_proc, memory_plan

        images = self.batch_size * self.batches_per_launch * self._fan_out  # partners too
        out, work = self._launch_bytes()
        plan = self._decode_side_plan(self._decoded_sizes(), images,
                                 cap=memory_plan.decode_cap(self.device_memory_budget, out, work))
        if plan is None:
            return
        fixed = (self.decode_processes is not None or _env("DETAUG_DECODE_PROCESSES") is not None
                 or self.decode_buffer_mb is not None)
        # refuse what cannot fit (processes started early are closed by build: nothing is kept)
        try:
            self._refuse_over_budget(plan.bytes, plan.describe(), fixed)
        except memory_plan.BudgetError as e:
            if fixed:
                raise
            # the figure to give is the one the plan at that budget needs (its ring may be
            # larger there: memory_plan.ring_launches): planned again at e.need, checked again
            again = self._decode_side_plan(self._decoded_sizes(), images,
                                           cap=memory_plan.decode_cap(e.need, out, work),
                                           budget=e.need)
            self._refuse_over_budget(max(again.bytes, plan.bytes), again.describe(), fixed)
            raise
        self._decode_bytes = plan.bytes
        self.memory_plan = plan
        if self._decode_service is not None:  # started early: their rings, the right number
            early = getattr(self._decode_service, "early", None)  # (its handshakes: once warm)
            self._decode_service.configure(plan.processes, plan.ring_bytes, plan.threads, plan.slots,
                                           warm_first=early is not None)
        else:
            self._decode_service = decode_proc.DecodeService(plan.processes, self.device_id or 0,
                                                             plan.ring_bytes, plan.threads, plan.slots)
        # launches whose decode may be under way or held at once: what the rings hold (in
        # launch order, so the launch due next always finds a slot: Executor)
        self.decode_slots = plan.processes * plan.launches
        # readers whose encoded output only feeds GPU decoders hand over paths: the decode
        # processes read the files themselves
        outputs = {(o.op.id, o.index) for o in self._outputs}
        needed = self._needed_ops()
        for op in needed:
            if op.schema.kind != "source" or (op.id, 0) in outputs:
                continue
            users = [u for u in needed for i in u.inputs if (i.op.id, i.index) == (op.id, 0)]
            users += [u for u in needed for a in u.arg_inputs.values() if (a.op.id, a.index) == (op.id, 0)]
            if users and all(u.gpu_decode for u in users):
                self._paths_only.add(op.id)

    def _decoded_sizes(self, any_decoder=False):
        """(N, 2) annotated heights and widths of the images a GPU decoder decodes (any
        decoder's with ``any_decoder``), where the reader feeding it knows them (None
        otherwise): the decode rings and the memory plan are sized from them."""
        for op in self._needed_ops():
            if op.schema.has("decode_service") and (any_decoder or op.gpu_decode) and op.inputs:
                src = self._sources.get(op.inputs[0].op.id)
                sizes = getattr(src, "sizes", None)
                if sizes is not None and len(sizes):
                    return sizes
        return None

    def _after_launch_out(self):
        """A launch was handed out: once the first launch's outputs have been measured, set the
        output slots from the budget (what remains after the decode side, less one launch for
        the batch the caller holds, in launches of outputs and working memory). A pipeline
        whose outputs were not known at build is refused here if they cannot fit."""
        ex = self._executor
        if self._launch_out_bytes is None or ex is None or getattr(ex, "slots", None) is None:
            return
        self.output_slots_peak = max(self.output_slots_peak, ex.slots.peak)
        from . import memory_plan

        decode = getattr(self, "_decode_bytes", 0)
        static, work = self._launch_bytes()
        if static is None and not getattr(self, "_budget_checked", False):
            self._budget_checked = True
            what = self.memory_plan.describe() if self.memory_plan is not None else "decode side"
            memory_plan.check_budget(self.device_memory_budget, decode, what,
                                     self._launch_out_bytes, work, (), self.batches_per_launch)
        n = memory_plan.output_slots(self.device_memory_budget, decode, self._launch_out_bytes,
                                     self.prefetch_queue_depth, work)
        if n != self.output_slots:
            self.output_slots = n
            ex.slots.resize(n)

    def _run_device(self, host_result, pool, stream=None, admit=None):
        import cupy as cp

        with cp.cuda.Device(self.device_id or 0):  # the current device is per thread
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
            self._run_ops(ctx, self._device_ops_a)  # decode: runs ahead
            stamp(admit, "decoded")
            admit()  # an output slot, in launch order
            self._to_output_stream(ctx, admit)
            self._run_ops(ctx, self._device_ops_b)
        except SampleError as e:
            self._retire_leases(ctx)  # the retry decodes again: give the ring slots back first
            admit()
            ctx = self._with_retries(key, prepared, pool, self._run_whole,
                                     self._replacement(key, ctx, e, ctx.walks),
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
        self._handed.poll()
        if getattr(admit, "seq", None) is None or self._out_stream is None or (
                self._mixed_decode and self._decode_service is None):
            return
        out = self._out_stream
        if out is ctx.stream:
            return
        import cupy as cp

        if self._device_ops_a:
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
            nbytes = _device_bytes(outs)
            if self._launch_out_bytes is None or nbytes > self._launch_out_bytes:
                self._launch_out_bytes = nbytes
            # the streams its outputs were allocated on: cupy's pool reuses a freed block only
            # for allocations on the stream it was made on (detaug/runtime/gpu/handout.py)
            made_on = tuple(dict.fromkeys(s.ptr for s in [*ctx.earlier_streams, ctx.stream]))
            return tuple(outs), ev, ctx.skips, ctx.sizes, made_on
        return tuple(outs), None, ctx.skips, ctx.sizes, None

    def _release_device_buffers(self, sync):
        """Free what decoders own (kept a few batches) while this pipeline's streams still exist."""
        keep = getattr(self, "_decoded_keep", None)
        if keep:
            if sync:
                for s in [*getattr(self, "_streams", []), getattr(self, "_out_stream", None)]:
                    if s is not None:
                        s.synchronize()
            keep.clear()
