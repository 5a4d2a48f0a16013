"""Pipeline: trace -> graph -> build -> run / iterate, state.

The parts it holds, each constructed with what it reads: what build decided, one frozen record
(``build_plan``: detaug/runtime/build_plan.py, from the graph, the seed and the budget); the
cursor and the run's identity (``_run_state``: detaug/runtime/run_state.py); the default shard,
the shard policy and the epoch schedule made from them with the seed (``_sharding``,
``schedule``: detaug/core/sharding.py); on_error='skip' (``_retries``, ``_skips``:
detaug/runtime/retries.py); the launches in flight (``_queue``: detaug/runtime/launch_queue.py);
the hand-out hold (``_handout``: detaug/runtime/gpu/handout.py); the device stage (``_device``:
decode processes, streams, a launch's device work; detaug/runtime/gpu/device_stage.py); made at
build with the record, making a launch's batches (``_batches``: detaug/runtime/batch_making.py)
and planning launches ahead (``_planner``: detaug/runtime/gpu/plan_ahead.py); DALI's semantics
(``dali``: detaug/dali/pipeline_api.py), a facade that wraps the engine."""
from __future__ import annotations

import logging
import os
import threading
from typing import Any

from .graph import trace as _graph
from .dali import pipeline_api as _dali
from .dali.pipeline_api import _check_dali_tuning
from .runtime.gpu.device_stage import DeviceStage, OnDevice, check_gpu
from .runtime.gpu.plan_ahead import PlanAhead
from .runtime.executor import Executor
from .runtime.launch_queue import LaunchQueue
from .runtime.gpu.handout import HandOut
from .runtime.gpu.output_budget import OutputBudget
from .runtime.retries import RetryPolicy, SkipCount
from .runtime.batch_making import BatchMaking
from .runtime import build_plan as _build_plan
from .runtime import run_state as _run_state
from .runtime import startup as _startup
from .runtime import fork as _fork
from .core.sharding import Sharding, _local_rank, own_shard

_POLICIES = ("fill", "drop", "partial")


class Pipeline:
    """A graph of ops producing batches.

    Args:
        batch_size: samples per batch.
        num_threads: host worker threads (decode, CPU warps) per pipeline.
        device_id: CUDA device for 'mixed'/'gpu' ops. Default (None): the process's local rank
            where torchrun's ``LOCAL_RANK`` is set or torch.distributed is initialised (one
            pipeline per process and GPU), else device 0 for a GPU stage.
        seed: pipeline seed; every random draw is keyed by (seed, op id, epoch, sample index).
        prefetch_queue_depth: launches in flight (host stage of k+1.. while k is consumed; a
            launch is ``batches_per_launch`` batches). Default (None): 12 launches for a pipeline
            that decodes in decode processes (their decode runs that far ahead; the launches whose
            outputs exist at once are bounded by ``device_memory_budget``), 3 for a CPU
            pipeline whose host workers keep a decode cache (``decode_cache_mb``), else 2.
        last_batch_policy: 'fill' (pad the last batch by wrapping around the shard's order),
            'drop' (drop an incomplete last batch) or 'partial' (a smaller last batch).
        shard_id, num_shards: default sharding for readers that do not set their own.
        shard_policy: how shards whose parts of the epoch differ in size are evened out
            (``detaug.core.schedule.shard_positions``): 'pad' (default: the short shards repeat a
            record, so every shard, and every rank of a data-parallel run, takes the same steps),
            'drop' (every shard drops to the shortest) or 'uneven' (DALI's shards, sizes may
            differ by one). A reader given DALI's ``pad_last_batch=True`` or ``stick_to_shard``
            shards as DALI's ('uneven') whatever this is.
        on_error: 'raise' (default) or 'skip': a bad sample is replaced by the next one of the
            same epoch order, with a warning and a count in ``pipe.stats``: 'skipped' (bad files,
            each counted once per epoch), 'skipped_files' ((path, why) in order), 'batches'
            (batches handed out), 'reader_skipped' (what a reader dropped at build).
        device_workers: threads (each with its own CUDA stream) that run the mixed/gpu stage of
            consecutive batches; outputs still come in order. Default min(prefetch depth, 6), or
            one per launch the decode rings hold where that is more (12 at an 8 GB budget).
        batches_per_launch: run this many consecutive batches through the graph together (one
            pass of every op, one launch per kernel) and hand them out one by one: the per-batch
            Python cost is paid once per group. Results are identical (every draw is keyed by
            the sample); needs a sized source. Default (None): for pipelines with a GPU stage and
            a sized source, from ``device_memory_budget``: with a partner pool
            (``partners='pool'``) the largest of 4, 2, 1 that fits (a sample its batches share
            is made once), else 4 from 6 GB on where launches are not planned ahead; else 1.
        device_memory_budget: device memory (bytes, or a string such as '2GB') that a pipeline
            with a GPU stage may take besides what this process already holds: its decode
            processes (context, decoders, ring buffers) and its output batches in flight.
            Default 2.3 GB (DETAUG_DEVICE_MEMORY_BUDGET). The decode processes and their decoder
            threads, the rings, ``batches_per_launch`` and the number of launches whose outputs
            exist at once follow from it (detaug/runtime/gpu/memory_plan.py; ``pipe.memory_plan`` says what
            was chosen), sized by what a launch's outputs take (read off the graph where it fixes
            them: RetinaNet targets are 31 MB an image at 640 x 640). Where one decode process,
            one launch being made and the two the caller holds exceed it, build raises
            ``BudgetError`` (a ValueError) with the figure needed. Larger budgets buy
            throughput: '8GB' is the high-throughput setting.
        decode_processes: for a GPU decoder: processes that read and decode the files into a
            device buffer shared with this one, away from its GIL (runtime/gpu/decode_proc.py).
            Default: from the budget (2 or 3 at 2.3 GB, as the outputs leave room; 3 at 8 GB),
            or DETAUG_DECODE_PROCESSES; 0 decodes in the device-stage threads.
        decode_buffer_mb: device buffer of each decode process, in MiB. Default: room for the
            launches of decoded images it holds (2, or 4 from 6 GB on) plus one, sized from the
            annotated image sizes where the reader knows them (else 3 MB an image).
        exec_pipelined, exec_async: DALI's executor switches, accepted for ported programs; the
            executor is always pipelined and asynchronous (the values do not change results).
        **dali_tuning: DALI's other tuning arguments (``DALI_PIPELINE_HINTS``: set_affinity,
            max_streams, py_num_workers, exec_dynamic, ...), accepted with a warning: they
            change no value. ``enable_checkpointing=True`` raises (see ``state_dict``).
        host_processes: worker processes for the host stage (reading, CPU decode, planning, box
            math, CPU warps), each making whole launches, results in shared memory
            (detaug/runtime/host_workers.py): the host stage then scales with cores instead of sharing
            this process's GIL. A GPU pipeline's workers plan its launches ahead (everything
            but the decode and the warp's launch: detaug/runtime/gpu/plan_ahead.py). Default (None): for a
            GPU pipeline that can be planned ahead, one per four cores, 1 to 3; otherwise
            ``num_threads`` where ``num_threads > 1``; 0 (threads of this process) where the
            process cannot fork workers (not Linux, or itself a daemonic worker);
            the DETAUG_HOST_PROCESSES environment variable overrides the default. Results are
            the same for any value. With host processes ``prefetch_queue_depth`` counts per
            process, as a DataLoader's ``prefetch_factor``: N processes keep N x depth launches
            in flight (batches come out in order: a worker must not wait for the one due).
        decode_cache_mb: MiB of decoded images a launch-making process keeps for later launches
            (CPU decoders; detaug/runtime/decode_cache.py; keyed by the files' bytes, so results
            are the same for any value). Default: one launch's pool of the largest annotated image
            (at most 512 MiB) for decoders feeding ``partners='pool'``, else 0 (none).
    """

    device_summary = None  # after build(): where the pipeline runs, in one line

    def __init__(self, batch_size: int = 1, num_threads: int = 1, device_id: int | None = None,
                 seed: int | None = -1, prefetch_queue_depth: int | dict | None = None,
                 last_batch_policy: str = "fill", shard_id: int = 0, num_shards: int = 1,
                 on_error: str = "raise", device_workers: int | None = None,
                 batches_per_launch: int | None = None, decode_processes: int | None = None,
                 decode_buffer_mb: int | None = None, host_processes: int | None = None,
                 exec_pipelined: bool = True, exec_async: bool = True,
                 device_memory_budget: int | float | str | None = None, shard_policy: str = "pad",
                 decode_cache_mb: int | None = None, **dali_tuning: Any) -> None:
        _check_dali_tuning(dali_tuning)
        if last_batch_policy not in _POLICIES:
            raise ValueError(f"last_batch_policy must be one of {_POLICIES}")
        if on_error not in ("raise", "skip"):
            raise ValueError("on_error must be 'raise' or 'skip'")
        self._device_id_arg = device_id
        device_id = _local_rank() if device_id is None else device_id
        self.batch_size, self.num_threads, self.device_id = int(batch_size), int(num_threads), device_id
        if self.batch_size < 1 or self.num_threads < 1:
            raise ValueError(f"batch_size and num_threads must be at least 1, got batch_size="
                             f"{batch_size}, num_threads={num_threads}")
        self.seed = int.from_bytes(os.urandom(4), "little") if seed in (None, -1) else int(seed)
        prefetch_queue_depth = _dali.prefetch_depth(prefetch_queue_depth)  # (DALI's dict: one)
        self._prefetch_arg, self._device_workers_arg = prefetch_queue_depth, device_workers
        self.last_batch_policy, self.on_error = last_batch_policy, on_error
        # the default shard, the shard policy and the epoch schedule made from them at build
        # (core/sharding.py)
        self._sharding = Sharding(self.seed, self.batch_size, last_batch_policy, shard_id,
                                  num_shards, shard_policy)
        self._batches_per_launch_arg = batches_per_launch
        self.decode_processes = decode_processes
        self.decode_buffer_mb = None if decode_buffer_mb is None else int(decode_buffer_mb)
        from .runtime.gpu import memory_plan

        self.device_memory_budget = memory_plan.budget_from(device_memory_budget)
        self._budget_arg = device_memory_budget
        self._host_processes_arg = host_processes
        self.decode_cache_mb = None if decode_cache_mb is None else int(decode_cache_mb)
        # what build decides, as one record (detaug/runtime/build_plan.py); before build, the
        # figures the arguments fix (the properties below read it)
        self.build_plan = _build_plan.unbuilt(self.seed, self.device_memory_budget, self._settings())
        # the output slots as launches are made (runtime/gpu/output_budget.py), from the record
        self._output_budget = OutputBudget(self.build_plan)
        self.graph = _graph.Graph()
        self._outputs = None
        self._built = False
        self._run_state = _run_state.RunState()  # the cursor and the run's identity
        self.dali = _dali.DaliFacade(self)  # DALI's semantics around this engine
        # see SkipCount.count; "startup": the start-up timeline (detaug/runtime/startup.py), set
        # at build and completed by the first batch
        self.stats = {"skipped": 0, "skipped_files": [], "batches": 0, "startup": []}
        self._startup = _startup.Timeline()
        self._retries = RetryPolicy(on_error)  # on_error='skip' (runtime/retries.py)
        self._skips = SkipCount(self.stats)  # bad files, once per epoch, in stats
        # the launches in flight and the batches split off them (runtime/launch_queue.py)
        self._queue = LaunchQueue(self._run_state, self._skips)
        # batches handed out, kept until the caller's work on them ran (runtime/gpu/handout.py)
        self._handout = HandOut(device_id)
        # the decode processes, the streams, a launch's device work (runtime/gpu/device_stage.py)
        self._device = DeviceStage(device_id, self._startup, self._handout)
        self._batches = self._planner = None  # made at build, with the record
        self._cursor_lock, self._build_lock = threading.RLock(), threading.RLock()  # one caller each
        _fork.track(self)  # reset in a forked child (runtime/fork.py)

    # ---- definition -------------------------------------------------------------------------
    def __enter__(self):
        _graph.push(self.graph)
        return self

    def __exit__(self, *exc):
        _graph.pop()

    def set_outputs(self, *outputs) -> None:
        for o in outputs:
            if not isinstance(o, _graph.DataNode):
                raise TypeError(f"pipeline outputs must be DataNodes, got {type(o).__name__}")
        self._outputs = list(outputs)

    def define_graph(self) -> Any:
        """Override in a subclass (DALI's older style): create ``ops.X`` objects in ``__init__``,
        wire them here and return the outputs."""
        raise NotImplementedError("define the graph with @pipeline_def, `with pipe:` + "
                                  "set_outputs, or a define_graph() override")

    def iter_setup(self) -> None:
        """Called before each batch is scheduled; override to ``feed_input`` external sources."""

    def feed_input(self, node: Any, data: Any, layout: str | None = None) -> None:
        """Give an external source (without ``source=``) its next batch: a list of samples (or
        an array, samples along axis 0; a tuple of them for num_outputs > 1). Its length, at most
        ``batch_size``, is the batch's number of samples (one random draw each). ``layout``
        (DALI's, e.g. "HWC") is checked against what the source's consumers take."""
        name = node.op.name if isinstance(node, _graph.DataNode) else str(node)
        self.dali.feed_input(name, data, layout)

    # ---- build ------------------------------------------------------------------------------
    def build(self, consumer=None) -> "Pipeline":
        """Trace the graph, index the readers, plan, start a GPU decoder's decode processes
        (phases in ``pipe.stats['startup']``); concurrent callers wait for the one building.
        ``consumer``: what the outputs' consumer takes of the budget (memory_plan.ConsumerShare)."""
        with self._build_lock:
            if self._built:
                _build_plan.check_consumer(self.build_plan, consumer)
                return self
            tl = self._startup
            tl.begin("build")
            try:
                self._build(tl, consumer)
            except BaseException:
                self._device.close_decode_service()  # (started early: they exit, memory freed)
                raise
            finally:
                tl.end("build")
                self.stats["startup"] = tl.as_list()
        return self

    def _build(self, tl, consumer=None):
        with tl.phase("build.graph"):
            if self._outputs is None:
                with self:
                    out = self.define_graph()
                self.set_outputs(*(out if isinstance(out, (tuple, list)) else (out,)))
            _graph.validate(self.graph)  # data moves cpu -> mixed -> gpu only
            sources = [op for op in self.graph.ops if op.schema.kind == "source"]
            if not sources and self._outputs:  # constants alone, as DALI runs them
                sources = [_dali.implicit_source(self)]
            if not sources:
                raise ValueError("the pipeline has no reader or external source")
        settings, needed = self._settings(), self._needed_ops()
        if any(op.gpu_decode for op in needed):
            # a GPU decoder: its decode processes start now, while the readers index
            with tl.phase("build.gpu_check"):  # (imports cupy)
                self._check_gpu()
            self._device.start_early(_build_plan.early_guess(  # (the plan they most likely get)
                needed, self._outputs, self.device_memory_budget, settings, consumer), tl)
        with tl.phase("build.readers"):
            self._sources = {op.id: op.schema.impl(op, self) for op in sources}
            self._driver = self._sources[sources[0].id]
            sizes = {s.size for s in self._sources.values() if s.size is not None}
            if len(sizes) > 1:
                raise ValueError(f"the pipeline's readers have different sizes {sorted(sizes)}")
            # the epoch schedule (the seed's first part); a ValueError that says why where an
            # epoch would hold no batch
            self._sharding.bind(((self.graph.ops[i].name, s, own_shard(self.graph.ops[i].args))
                                 for i, s in self._sources.items()),
                                skipped=len(self.stats.get("reader_skipped") or ()))
        tl.begin("build.plan")
        from .runtime import partners

        sized = self._driver.size is not None
        # multi-sample ops: the level of each op, the decoders' level
        levels, decode_level = partners.setup(needed, self._outputs, sized)
        if any(op.device != "cpu" for op in needed) and not tl.has("build.gpu_check"):
            with tl.phase("build.gpu_check"):  # (imports cupy)
                self._check_gpu()
        # everything build decides, at once; BudgetError where the least it runs with exceeds
        # the budget (before any decode process is given a plan)
        plan = _build_plan.decide(needed, self._outputs, self._sources, seed=self.seed,
                                  budget=self.device_memory_budget, settings=settings,
                                  levels=levels, decode_level=decode_level,
                                  sized=sized, consumer=consumer)
        tl.end("build.plan")
        self.build_plan, self._output_budget = plan, OutputBudget(plan)
        self._device.start(plan, tl)  # its decode processes, CUDA streams, their handshakes
        self._batches = BatchMaking(self, self.graph, self._sources, plan, self._sharding,
                                    self._retries, self.dali.fed, self.iter_setup, self._device.stream)
        self._planner = PlanAhead(plan, self._outputs, self._batches)
        self._device.bind(self._batches, self._planner, self._outputs, self._output_budget)
        self._built = True
        self.device_summary = self._device.summary()
        logging.getLogger("detaug").info("pipeline built: %s", self.device_summary)

    def _check_gpu(self):
        """GPU ops where no GPU can run them: one line saying what is missing (``check_gpu``)."""
        check_gpu(self._needed_ops())

    def _needed_ops(self):
        """The ops the outputs need, inputs first (graph/trace.py ``needed_ops``)."""
        return _graph.needed_ops(self._outputs)

    # ---- running ------------------------------------------------------------------------------
    def _executor_ready(self):
        _fork.check_usable(self)
        self.build()
        return self._queue.executor_ready(lambda: Executor(self))

    _executor = property(lambda self: self._queue.executor, doc="The executor (None: not run yet).")

    def _fill_queue(self, need=False):
        """Keep the launches in flight (``LaunchQueue.fill``; ``need``: run() waits)."""
        self._executor_ready()
        limit = len(self) if self._driver.size is not None else None
        # host processes of a CPU pipeline keep ``depth`` launches each (a GPU pipeline's device
        # stage, in this process, is what the depth bounds)
        per = 1 if self.has_device_stage else max(1, self.host_processes)
        self._queue.fill(need, limit, self.prefetch_queue_depth * per, self.batches_per_launch)

    @_run_state.serialised
    def run(self) -> tuple:
        """The next batch: a tuple with one value per output. As DALI's readers do, a pipeline
        driven by a reader goes on into the next epoch at the end of one (the batches of
        ``reset()`` + ``run()``: the epoch's keyed order, as ``run_batch`` and ``state_dict``
        give it); an external source raises StopIteration at its end (then call ``reset()``).
        Iterating the pipeline (``for batch in pipe``, ``next(pipe)``) ends with each epoch.

        Threads: ``run``, ``next``, ``reset``, ``end_epoch``, ``set_shard``, ``state_dict`` and
        ``load_state_dict`` take one lock, so concurrent callers (from any threads) are served
        one at a time: each batch is handed out exactly once, in order (the order in which their
        calls take the lock; a caller waits while another waits for its batch). ``run_batch``
        moves no cursor and may run beside them (see there).

        Outputs that are not image or box batches come as DALI's TensorLists that are also
        detaug's values (an ndarray or list subclass; docs/dali.md, "Outputs of pipe.run()");
        DALI's API-type check applies (its facade: detaug/dali/pipeline_api.py)."""
        return self.dali.run()

    def _run(self) -> tuple:
        """The engine's next batch, going on into the next epoch where the driving source wraps
        around (a reader): no DALI semantics (``run()`` adds them)."""
        try:
            return self._next_of_epoch()
        except StopIteration:
            if not getattr(self._driver, "wraps_around", False):
                raise
        self.reset()
        return self._next_of_epoch()

    def _next_of_epoch(self):
        """The next batch of the current epoch; StopIteration at its end."""
        b, outs, event, made_on = self._queue.take(lambda: self._fill_queue(need=True))
        self._run_state.handed_out(b)
        self._handout.hand_out(outs, event, made_on)
        self.stats["batches"] += 1
        if not self._startup.has("first_batch"):
            self.stats["startup"] = self._startup.first_batch()
        self._fill_queue()
        return outs

    def __iter__(self):
        return self

    @_run_state.serialised
    def __next__(self):
        return self._next_of_epoch()

    @_run_state.serialised
    def reset(self) -> None:
        """Move on to the next epoch (new shuffle). Batches of it already prefetched are kept."""
        nxt = self._run_state.epoch + 1
        if self._queue.holds_next_epoch():
            self._run_state.move_to(nxt, 0)
            return
        self._start(nxt, 0)

    def _start(self, epoch, batch):
        self._queue.restart(epoch, batch)  # nothing in flight, the cursor at (epoch, batch)
        if self._built:
            for s in self._sources.values():
                getattr(s, "restart", lambda epoch: None)(epoch)

    def run_batch(self, batch_index: int, epoch: int | None = None) -> tuple:
        """Batch ``batch_index`` of ``epoch`` (default: the current one), computed on its own:
        random access for Keras' Sequence. Does not move the iteration cursor. Thread-safe: on a
        CPU pipeline only its sources' preparation takes the cursor lock (``run``), and batches
        are computed concurrently; on a pipeline with a GPU stage (one ``last_event``, one
        decoder) the whole call does."""
        self.build()
        if self._driver.size is None:
            raise TypeError("random access needs a reader or a sized external source")
        if not 0 <= batch_index < len(self):
            raise IndexError(f"batch {batch_index} out of range (0..{len(self) - 1})")
        if self.has_device_stage:
            with self._cursor_lock:
                return self._run_batch(batch_index, epoch)
        return self._run_batch(batch_index, epoch)

    def _run_batch(self, batch_index, epoch):
        ex = self._executor_ready()
        with self._cursor_lock:
            key = (self._run_state.epoch if epoch is None else epoch, batch_index, 1)
            prepared = self._batches.prepare(key)
        result = ex.run_now(key, prepared)
        if self.has_device_stage:
            result = self._device.run_device(result, ex.pool)
        self._handout.hand_out(result[0], result[1], result[4])
        self._skips.count(result[2], key[0])
        if not self._startup.has("first_batch"):
            self.stats["startup"] = self._startup.first_batch()
        return result[0]

    # ---- the cursor and the shards, handed to their parts (runtime/run_state.py, core/sharding.py)
    @_run_state.serialised
    def end_epoch(self) -> None:
        """End the current epoch where it stands and move on to the next, keeping what is in
        flight of the next: the next ``run()`` (or ``next()``) gives the next epoch's first batch.

        Dropped: this epoch's batches split off a launch and not handed out, and its queued
        launches, each taken off the queue's head as ``run()`` takes it (waited for, its output
        slots released, so that the launches after it are admitted in order; its failure is
        nobody's) and thrown away. Then ``reset()`` finds the next epoch's first launch at the
        head of the queue and keeps the queue, where on its own it would clear it and make those
        launches again. At an epoch's end it is ``reset()``."""
        self._queue.drop_epoch()
        self.reset()

    @_run_state.serialised
    def set_shard(self, shard_id: int, num_shards: int, shard_policy: str | None = None) -> None:
        """Shard the readers that have no shard_id / num_shards of their own (the PyTorch
        iterator does this from torch.distributed); restarts the current epoch's iteration.
        ``shard_policy``: None keeps the pipeline's (see the class). A shard whose epoch would
        hold no batch is refused as at build, before anything changes."""
        if self._sharding.set_shard(shard_id, num_shards, shard_policy):
            self._start(self._run_state.epoch, 0)

    @_run_state.serialised
    def state_dict(self) -> dict:
        """Where the iteration stands (resuming from it gives exactly the next batch), and what
        identifies the run: the dataset's fingerprint (record count, a hash of the records' ids
        and file names), the shard and shard count, the shard policy, the last-batch policy and
        the batches per epoch. Plain ints, strings and lists (for a JSON or torch checkpoint)."""
        self.build()
        return self._run_state.state(self.schedule)

    @_run_state.serialised
    def load_state_dict(self, state: dict, *, any_shard: bool = False) -> None:
        """Resume at ``state``'s batch. A state of another run is refused (ValueError naming both
        values): another seed, batch size, dataset (record count or keys), shard, shard count,
        shard policy, last-batch policy or number of batches per epoch. ``any_shard=True`` takes
        another rank's state of a data-parallel run (every rank is at the same step; the torch
        iterator passes it): the shard id may differ, and at an epoch's start also the shard
        count and policy (the shards are cut anew). A state saved before fingerprints (no
        ``format``) is checked for what it holds, with a warning. A source fed whole batches (an
        iterable, ``feed_input``) cannot be rewound: resuming it mid-epoch raises (at an epoch's
        start the iterable is iterated again from its beginning). A state whose fields are not
        of the kinds ``state_dict`` writes (``epoch=1.9``, a string, a shard of ``3``) is a
        :class:`StateDictError` (a ValueError) naming the field."""
        self.build()
        fed = [self.graph.ops[i].name for i, s in self._sources.items() if getattr(s, "fed", False)]
        self._start(*self._run_state.resume_point(state, self.schedule,
                                                  (self.shard_id, self.num_shards), any_shard, fed))

    def epoch_size(self, name: str | None = None) -> int | dict | None:
        """Number of records the reader holds (all shards), as DALI's ``epoch_size``."""
        return self.build()._sharding.epoch_size(name)

    def shard_size(self) -> int:
        return self.build().schedule.shard_size()

    def __len__(self) -> int:
        """Batches per epoch on this shard."""
        return self.build()._sharding.batches_per_epoch()

    @property
    def shard_info(self) -> dict:
        """The driving reader's sharding: shard_id, num_shards, random_shuffle."""
        return self.build()._sharding.shard_info

    @property
    def schedule(self):
        """The epoch schedule (core/sharding.py ``Schedule``; None before build)."""
        return self._sharding.schedule

    shard_id = property(lambda self: self._sharding.shard_id,
                        doc="The default shard of the readers without one of their own.")
    num_shards = property(lambda self: self._sharding.num_shards,
                          doc="The default shard count of the readers without one of their own.")
    shard_policy = property(lambda self: self._sharding.shard_policy,
                            doc="How shards of different sizes are evened out (see the class).")

    @property
    def class_names(self) -> list | None:
        """The reader's class names (label -> name), or None for sources without classes."""
        self.build()
        ds = getattr(self._driver, "dataset", None)
        return list(ds.class_names) if ds is not None else getattr(self._driver, "class_names", None)

    @property
    def epoch(self) -> int:
        return self._run_state.epoch

    @property
    def max_batch_size(self) -> int:
        """DALI's name for ``batch_size`` (programs written for DALI read it)."""
        return self.batch_size

    @property
    def last_event(self):
        """The cupy Event recorded after the last batch's device work (None: no GPU stage)."""
        return self._handout.last_event

    @property
    def output_slots(self) -> int:
        """Launches whose outputs may exist at once (set at build, then from the first launch)."""
        return self._output_budget.slots

    @property
    def output_slots_peak(self) -> int:
        """The most launches whose outputs existed at once (as seen when batches are handed out)."""
        return self._output_budget.peak

    def consume_on(self, name: str, stream_of) -> None:
        """Register a stream the caller queues work on handed-out batches on, besides cupy's
        current one (``HandOut.consume_on``: the torch adapter registers torch's as "torch")."""
        self._handout.consume_on(name, stream_of)

    # ---- what build decided, read off its record (build_plan: detaug/runtime/build_plan.py) ---
    has_device_stage = _build_plan.Decided("has_device_stage", "After build: some op runs on the GPU.")
    plan_ahead = _build_plan.Decided(
        "plan_ahead", "After build: launches are planned ahead (detaug/runtime/gpu/plan_ahead.py).")
    batches_per_launch = _build_plan.Decided("batches_per_launch", "Batches run through the graph together.")
    prefetch_queue_depth = _build_plan.Decided("prefetch_queue_depth", "Launches in flight.")
    device_workers = _build_plan.Decided("device_workers", "Threads that run the device stage.")
    host_processes = _build_plan.Decided("host_processes", "Host worker processes (0: threads).")
    memory_plan = _build_plan.Decided(
        "decode", "After build, for a pipeline with decode processes: the DecodePlan chosen.")
    decode_slots = _build_plan.Decided(
        "decode_slots", "Launches decoding or holding decoded images at once.")

    # what the device stage holds (runtime/gpu/device_stage.py), read and set there: the ops
    # (decoders.image, the readers) and the fork check read them off the pipeline
    _decode_service, _paths_only = OnDevice("decode_service"), OnDevice("paths_only")
    _decoded_keep, _stream = OnDevice("decoded_keep"), OnDevice("stream")
    _streams, _out_stream = OnDevice("streams"), OnDevice("out_stream")

    def _settings(self) -> _build_plan.Settings:
        """The arguments build reads, as given."""
        return _build_plan.Settings(
            batch_size=self.batch_size, num_threads=self.num_threads,
            prefetch_queue_depth=self._prefetch_arg, device_workers=self._device_workers_arg,
            batches_per_launch=self._batches_per_launch_arg, decode_processes=self.decode_processes,
            decode_buffer_mb=self.decode_buffer_mb, host_processes=self._host_processes_arg,
            decode_cache_mb=self.decode_cache_mb)

    # ---- DALI's names, handed to the facade (detaug/dali/pipeline_api.py) --------------------
    @property
    def dali_outputs(self) -> bool:
        """True (default): ``run()`` gives DALI's TensorLists, which are detaug's values too
        (detaug/dali/outputs.py); False: detaug's plain values."""
        return self.dali.outputs

    @dali_outputs.setter
    def dali_outputs(self, value: bool) -> None:
        self.dali.outputs = value

    def enable_api_check(self, enable: bool) -> None:
        """DALI's switch: False lets ``run()`` and a DALI iterator share this pipeline."""
        self.dali.api.enable(enable)

    def save_graph_to_dot_file(self, path: str) -> None:
        """The graph in Graphviz dot (``DaliFacade.save_graph_to_dot_file``)."""
        self.dali.save_graph_to_dot_file(path)

    def serialize(self) -> bytes:
        """The parameters and traced graph as data only (``DaliFacade.serialize``)."""
        return self.dali.serialize()

    @classmethod
    def deserialize(cls, data: bytes, **overrides) -> "Pipeline":
        """A pipeline rebuilt from :meth:`serialize`'s bytes, ``overrides`` replacing parameters;
        anything else refused by name (detaug/dali/pipeline_api.py ``deserialize``)."""
        return _dali.deserialize(cls, data, **overrides)

    def close(self) -> None:
        """Stop the worker threads and decode processes. Under the cursor lock, as ``run``: a
        close from another thread lets the batch in flight be handed out first, and the next
        ``run()`` starts the workers again at the next batch."""
        if not _fork.owned_here(self):  # a fork's copy: the parent's threads and processes
            return
        with self._cursor_lock:
            self._queue.shutdown()
            self._handout.let_go()
            self._device.close()  # (a later run reads and decodes in this process)

    def __del__(self):
        # never join threads from a finaliser: the garbage collector may run it inside thread
        # start-up or shutdown, holding the locks a join needs (seen: a deadlock); nor in a fork
        if not _fork.owned_here(self):  # that did not adopt it (runtime/fork.py)
            return
        # (owned here: its __init__ ran to the end, where _fork.track is, so every attribute is set)
        self._queue.shutdown(wait=False)
        self._device.stop()
