"""Prefetching executor: a host stage in worker processes or threads, a device stage in order.

Batch k+1's host work (reading, CPU decode, CPU ops) runs in the host workers while batch k's
device work is queued on the pipeline's stream (or batch k is consumed). A GPU pipeline's device
stage has two phases: its decode runs ahead for every launch in flight (it holds only ring space
in a decode process), while the rest, which makes the output batches, waits for an output slot
(:class:`OutputSlots`): outputs in device memory are bounded by the memory budget, not by the
queue's depth. A CPU pipeline's host
stage runs in ``host_processes`` forked processes (detaug/runtime/host_workers.py), one launch each at a time,
with results in shared memory; otherwise in threads of this process. Exceptions in a worker
reach the caller through the batch's future (never a hang), with the sample's file named.
"""
from __future__ import annotations

import collections
import concurrent.futures as cf
import threading

from . import decode_cache, startup
from .gpu import launch_profile
from ..core import recycle
from ..core.errors import NotFed


class Cancelled(Exception):
    """A launch waiting for an output slot was cancelled (the queue was cleared)."""


class OutputSlots:
    """Admission of launches to the output-making phase, in launch order, at most ``n`` at once.
    A launch holds its slot from admission until it is handed out (``release``) or dropped.
    In order, so that the launch the caller waits for is never kept out by later ones."""

    def __init__(self, n: int):
        self.n = max(1, int(n))
        self.cond = threading.Condition()
        self.next = 0          # the sequence number admitted next
        self.held = set()      # admitted, not yet released
        self.peak = 0          # the most held at once (tests, benchmarks)
        self.epoch = 0         # bumped by reset(): waiters of an older epoch give up

    def acquire(self, seq: int, epoch: int):
        with self.cond:
            while True:
                if epoch != self.epoch:
                    raise Cancelled()
                if seq == self.next and len(self.held) < self.n:
                    self.held.add(seq)
                    self.peak = max(self.peak, len(self.held))
                    self.next += 1
                    self.cond.notify_all()
                    return
                self.cond.wait()

    def release(self, seq: int):
        with self.cond:
            if seq in self.held:
                self.held.discard(seq)
                self.cond.notify_all()

    def resize(self, n: int):
        with self.cond:
            self.n = max(1, int(n))
            self.cond.notify_all()

    def reset(self, next_seq: int):
        """After the queue was cleared: nothing held, admission starts at ``next_seq``."""
        with self.cond:
            self.epoch += 1
            self.held.clear()
            self.next = next_seq
            self.cond.notify_all()


class _Admit:
    """A launch's admission tickets, each granted once and in launch order: ``decode()`` a
    place in the decode rings (given back by ``decoded()`` once the launch's decoded images are
    retired), ``__call__`` an output slot (given back when the launch is handed out). Each grant
    is stamped for the launch profile (``ring``, ``output``: detaug/runtime/gpu/launch_profile.py)."""

    def __init__(self, slots, decode_slots, seq, epoch):
        self.slots, self.decode_slots, self.seq, self.epoch = slots, decode_slots, seq, epoch
        self.done = self.decoding = False
        self.on_output = None  # called as the output slot is asked for (the first launch's timeline)

    def __call__(self):
        if self.on_output is not None:
            self.on_output()
            self.on_output = None
        if not self.done:
            self.slots.acquire(self.seq, self.epoch)
            self.done = True
            launch_profile.mark(self.slots, self.seq, "output")

    def decode(self):
        if not self.decoding:
            self.decode_slots.acquire(self.seq, self.epoch)
            self.decoding = True
            launch_profile.mark(self.slots, self.seq, "ring")

    def decoded(self):
        self.decode_slots.release(self.seq)


class Executor:
    """Makes a built pipeline's launches: the host stage in threads or host worker processes,
    the device stage in device threads, handed back in submission order (:meth:`pop`). A launch
    runs through the parts the pipeline holds, taken here once (its build's record, the batch
    making, planning ahead and the device stage)."""

    def __init__(self, pipeline):
        self.p = pipeline
        self._plan, self._batches = pipeline.build_plan, pipeline._batches
        self._planner, self._device = pipeline._planner, pipeline._device
        self.queue = collections.deque()
        self.workers = self.pool = self.batch_pool = self.device_pool = None
        self.first_pools = None  # (launch thread, sample threads) of the first launch, see submit
        self._first_made = False
        timeline = pipeline._startup
        from . import host_workers

        # host_processes was resolved at build; a fork's child may be a daemonic process (a
        # DataLoader or Pool worker), which may not start any: it runs the same host stage in
        # threads (the same batches: the host stage is a pure function of the launch key)
        if pipeline.host_processes and host_workers.unavailable() is None:
            from .host_workers import HostWorkers

            # forked first, before this executor starts any thread (a GPU pipeline's workers
            # plan its launches: detaug/runtime/gpu/plan_ahead.py; they make no CUDA call). Held: the first
            # launch is made here, in threads over every core, before the workers take any
            with timeline.phase("run.host_workers"):
                self.workers = HostWorkers(pipeline.host_processes, self.run_host_job,
                                           hold=startup.early()
                                           and not timeline.has("first_launch.host"))
            if self.workers.holding:
                # its samples over as many threads as there are workers (or host threads)
                n = max(1, pipeline.num_threads, pipeline.host_processes)
                self.first_pools = (cf.ThreadPoolExecutor(1, thread_name_prefix="detaug-first"),
                                    cf.ThreadPoolExecutor(n, thread_name_prefix="detaug-first-host"))
                self.first_pools[1].detaug_threads = n
        else:
            self.pool = cf.ThreadPoolExecutor(max(1, pipeline.num_threads), thread_name_prefix="detaug-host")
            self.batch_pool = cf.ThreadPoolExecutor(max(1, pipeline.prefetch_queue_depth),
                                                    thread_name_prefix="detaug-batch")
        if pipeline.has_device_stage:
            streams = list(pipeline._streams)
            self._local = threading.local()

            def bind():  # each device worker keeps one stream for its whole life
                with self._bind_lock:
                    self._local.stream = streams.pop()
                    import cupy as cp

                    cp.cuda.Device(pipeline.device_id or 0).use()

            self._bind_lock = threading.Lock()
            self.device_pool = cf.ThreadPoolExecutor(len(streams), thread_name_prefix="detaug-device",
                                                     initializer=bind)
            self.slots = OutputSlots(pipeline.output_slots)
            self.decode_slots = OutputSlots(pipeline.decode_slots)
            self._seq = 0

    def submit(self, key):
        """Queue the launch ``key = (epoch, first batch, batch count)``; source ops read in order here."""
        try:
            prepared = self._batches.prepare(key)
        except NotFed:
            raise
        except Exception as e:
            if not self.queue:
                raise  # nothing is due before it: the caller gets it now
            # a source that failed while this launch was prefetched: the launches before it are
            # still handed out, and the error comes with this one (nothing is prefetched after)
            fut = cf.Future()
            fut.set_exception(e)
            self.queue.append((key, fut, None))
            return False
        if any(isinstance(v, dict) and v.get("end") for v in prepared.values()):
            return False  # an iterable source is spent: the epoch ends here
        timeline = self.p._startup
        if self.first_pools is not None and not self._first_made:
            self._first_made = True
            # the first launch: made in this process (its sample threads on every core), while
            # the launches after it wait for it in the workers' queue (the workers take them as
            # it is done: no core is idle, and the first batch comes in a fraction of a launch's
            # single-threaded time). The same batches: the host stage is a pure function of the
            # launch key (detaug/runtime/host_workers.py)
            pools = self.first_pools
            fut = pools[0].submit(self._first_host, key, prepared, pools[1])
            fut.add_done_callback(lambda _: self._release_workers())
            if self.device_pool is None:
                self.queue.append((key, fut, None))
                return True
            host = fut.result
        elif self.workers is not None:
            fut = self.workers.submit(key, prepared, self._group(key))
            if self.device_pool is None:
                self.queue.append((key, fut, None))
                return True
            host = lambda f=fut: (key, prepared, f.result())  # noqa: E731 (a worker's plan)
        else:
            first = not self._first_made and not timeline.has("first_launch.host")
            self._first_made = True
            fut = self.batch_pool.submit(self._first_host if first else self.run_host, key,
                                         prepared, self.pool)
            host = fut.result
        seq = None
        if self.device_pool is not None:
            seq = self._seq
            self._seq += 1
            admit = _Admit(self.slots, self.decode_slots, seq, self.slots.epoch)
            launch_profile.mark(self.slots, seq, "submitted")

            def device_work():
                launch_profile.mark(self.slots, seq, "picked")
                h = host()
                launch_profile.mark(self.slots, seq, "planned")
                if seq or timeline.has("first_launch.device"):
                    return self._device.run_device(h, self.pool, self._local.stream, admit)
                # the first launch's device stage, timed to its end on the device (the caller
                # waits for that batch in any case)
                timeline.begin("first_launch.device")
                timeline.begin("first_launch.decode")  # -> its decode requests answered

                def decoded():
                    timeline.end("first_launch.decode")
                    timeline.begin("first_launch.outputs")  # the kernels (their compile or load)

                admit.on_output = decoded
                out = self._device.run_device(h, self.pool, self._local.stream, admit)
                if out[1] is not None:
                    out[1].synchronize()
                timeline.end("first_launch.outputs")
                timeline.end("first_launch.device")
                return out

            fut = self.device_pool.submit(device_work)
        self.queue.append((key, fut, seq))
        return True

    def run_host(self, key, prepared, pool):
        """The host stage of the launch ``key`` (in a thread, or through :meth:`run_host_job` in a
        host worker): a GPU pipeline's plan (planned ahead) or batch context, with the key and
        ``prepared``; a CPU pipeline's outputs."""
        bp = self._plan
        if bp.has_device_stage and bp.plan_ahead:
            return key, prepared, self._planner.plan_or_not(key, prepared, pool)
        ctx = self._batches.host_stage(key, prepared, pool)
        return (key, prepared, ctx) if bp.has_device_stage else self._device.collect(ctx)

    def run_host_job(self, key, prepared):
        """The host stage of a launch in a host worker process (single-threaded there): a CPU
        pipeline's outputs, or a GPU pipeline's plan (detaug/runtime/gpu/plan_ahead.py)."""
        out = self.run_host(key, prepared, None)
        return out[2] if self._plan.has_device_stage else out

    def _group(self, key):
        """The run of consecutive launches that one host worker makes (``worker_run`` of the
        build plan; None: any worker): ``(epoch, first batch // batches in a run)``."""
        bp = self._plan
        if bp.worker_run <= 1:
            return None
        return key[0], key[1] // (bp.worker_run * max(1, bp.batches_per_launch))

    def _first_host(self, key, prepared, pool):
        """The first launch's host stage, in this process (timed: ``first_launch.host``)."""
        timeline = self.p._startup
        timeline.begin("first_launch.host")
        try:
            return self.run_host(key, prepared, pool)
        finally:
            timeline.end("first_launch.host")

    def _release_workers(self):
        """The first launch is done (or was never made here): the workers take their queue, and
        the first launch's threads end once idle."""
        pools, self.first_pools = self.first_pools, None
        if self.workers is not None:
            self.workers.release()
            decode_cache.drop(self.p)  # the first launch's decoded images: the workers make the rest
            recycle.release()  # and its kept buffers (core/recycle.py)
        if pools is not None:
            for pool in pools:
                pool.shutdown(wait=False)

    def pop(self):
        key, fut, seq = self.queue.popleft()
        try:
            out = fut.result()
            launch_profile.mark(getattr(self, "slots", None), seq, "popped")
            return key, out
        finally:
            if seq is not None:
                self.slots.release(seq)
                self.decode_slots.release(seq)
                self.p._output_budget.after_launch_out(self.slots)

    def clear(self):
        """Drop every queued launch, once each has finished or been cancelled (their failures
        are of batches nobody will see). An interrupt (Ctrl-C) while it waits is raised after
        the queue is cleared: it was swallowed, and a loop that called reset() ran on."""
        for _, fut, _ in self.queue:
            fut.cancel()
        self._reset_gates()  # waiters for a slot give up (Cancelled)
        interrupt = None
        for _, fut, _ in self.queue:
            try:
                fut.result()
            except Exception:  # (CancelledError included)
                pass
            except BaseException as e:  # KeyboardInterrupt, SystemExit: the caller's
                interrupt = interrupt or e
        self.queue.clear()
        self._reset_gates()
        if interrupt is not None:
            raise interrupt

    def _reset_gates(self):
        """Nothing held in either admission gate, admission on at the next launch submitted."""
        if self.device_pool is not None:
            self.slots.reset(self._seq)
            self.decode_slots.reset(self._seq)

    def run_now(self, key, prepared):
        """The host result of ``key`` outside the queue (random access), on a worker."""
        if self.workers is not None:
            if self.workers.holding and not self._first_made:
                self._release_workers()  # random access first: no launch of this process to wait for
            result = self.workers.submit(key, prepared).result()
            return (key, prepared, result) if self.p.has_device_stage else result
        return self.run_host(key, prepared, self.pool)

    def shutdown(self, wait=True):
        if wait:
            self.clear()
        else:
            self._reset_gates()  # device threads waiting for a slot give up
        if self.workers is not None:
            self.workers.close(wait=wait)
        for pool in (self.batch_pool, self.device_pool, self.pool, *(self.first_pools or ())):
            if pool is not None:
                pool.shutdown(wait=wait, cancel_futures=True)
        decode_cache.drop(self.p)  # this process's decoded images go with its launches
        recycle.release()  # and the buffers its launches kept (core/recycle.py)
