"""DALI's side of a pipeline, kept apart from the engine: the tuning arguments DALI programs pass
that change nothing here (:data:`DALI_PIPELINE_HINTS`, accepted with a warning;
``enable_checkpointing=True`` refused), and :class:`DaliFacade`, which holds the engine (a
:class:`detaug.pipeline.Pipeline`) and gives it DALI's semantics: ``run()``'s outputs as DALI's
TensorLists, DALI's check against mixing ``run()`` with an iterator (:class:`ApiTypeCheck`), the
batches given by ``feed_input``, and the traced graph's export: ``serialize`` / ``deserialize``
(detaug/runtime/persist.py's format) and ``save_graph_to_dot_file`` (Graphviz). The engine's own
next batch (``Pipeline._run``) carries none of these; the pipeline's public methods of the same
names hand over to its facade."""
from __future__ import annotations

import contextlib
import inspect
import warnings
import weakref

from ..runtime import persist as _persist
from . import outputs as _outputs

# DALI's Pipeline arguments that tune its executor or memory and change no value here
DALI_PIPELINE_HINTS = ("bytes_per_sample", "set_affinity", "max_streams",
                       "default_cuda_stream_priority", "enable_memory_stats", "py_num_workers",
                       "py_start_method", "py_callback_pickler", "exec_dynamic",
                       "experimental_exec_dynamic")

# what each pipeline parameter of a serialized document may hold (persist.check_param): a
# document edited by hand is refused by name before Pipeline.__init__ converts with int()
_COUNT, _OPT_COUNT = (int,), (int, None)
_PARAM_KINDS = {"batch_size": _COUNT, "num_threads": _COUNT, "shard_id": _COUNT, "num_shards": _COUNT,
                "seed": ((int, None), 2**64 - 1), "device_id": _OPT_COUNT, "device_workers": _OPT_COUNT,
                "prefetch_queue_depth": (int, dict, None), "batches_per_launch": _OPT_COUNT,
                "decode_processes": _OPT_COUNT, "decode_buffer_mb": _OPT_COUNT,
                "host_processes": _OPT_COUNT, "decode_cache_mb": _OPT_COUNT,
                "device_memory_budget": (int, float, str, None),
                "last_batch_policy": (str,), "on_error": (str,), "shard_policy": (str,),
                "exec_pipelined": (bool,), "exec_async": (bool,)}


def _check_dali_tuning(kwargs):
    unknown = sorted(set(kwargs) - set(DALI_PIPELINE_HINTS) - {"enable_checkpointing"})
    if unknown:
        raise TypeError(f"Pipeline: unknown argument(s) {unknown}")
    if kwargs.get("enable_checkpointing"):
        raise NotImplementedError("Pipeline: enable_checkpointing=True (DALI's checkpoints) is "
                                  "not implemented; detaug resumes exactly with "
                                  "pipe.state_dict() / load_state_dict()")
    for k in kwargs:
        warnings.warn(f"Pipeline: {k}={kwargs[k]!r} is accepted for DALI programs and changes no "
                      "value here", stacklevel=3)


def prefetch_depth(value):
    """``prefetch_queue_depth`` as given, or of DALI's separated queues (a dict of 'cpu_size'
    and 'gpu_size') the deeper one."""
    if not isinstance(value, dict):
        return value
    unknown = set(value) - {"cpu_size", "gpu_size"}
    if unknown:
        raise ValueError(f"prefetch_queue_depth: unknown keys {sorted(unknown)} (DALI's "
                         "are 'cpu_size' and 'gpu_size')")
    return max(int(v) for v in value.values())


class ApiTypeCheck:
    """DALI's check against mixing ``run()`` ('BASIC') with a DALI iterator ('ITERATOR') on one
    pipeline: the first to use it fixes its API type; the other then raises RuntimeError."""

    def __init__(self):
        self.api_type = None    # DALI's PipelineAPIType in use: 'BASIC' (run()) or 'ITERATOR'
        self.skip = False       # enable_api_check(False)
        self.in_scope = False   # inside an iterator's step (its run() calls are let through)

    def enable(self, enable: bool) -> None:
        """DALI's switch: False lets ``run()`` and a DALI iterator share the pipeline (the
        iterator then starts where ``run()`` left the epoch: docs/dali.md)."""
        self.skip = not enable

    def check(self, kind: str) -> None:
        """As DALI: the first of ``run()`` ('BASIC') and a DALI iterator ('ITERATOR') to use the
        pipeline fixes its API type; the other then raises RuntimeError."""
        if self.skip or self.in_scope:
            return
        if self.api_type is None:
            self.api_type = kind
        elif self.api_type != kind:
            raise RuntimeError(f"Mixing pipeline API type. Currently used: PipelineAPIType."
                               f"{self.api_type}, but trying to use PipelineAPIType.{kind} (as "
                               "DALI: use a fresh pipeline for the iterator, or call "
                               "pipe.enable_api_check(False))")

    @contextlib.contextmanager
    def scope(self, kind: str):
        """Checks ``kind`` once, then lets the calls inside through (an iterator's run())."""
        self.check(kind)
        self.in_scope = True
        try:
            yield
        finally:
            self.in_scope = False


class DaliFacade:
    """DALI's semantics around an engine (a :class:`~detaug.pipeline.Pipeline`, held by a weak
    reference: the engine holds its facade, and the facade does not keep it alive). It owns the
    API-type check (``api``), the switch of ``run()``'s outputs (``outputs``: True gives DALI's
    TensorLists, which are detaug's values too, dali/outputs.py; False detaug's plain values) and
    the batches fed to external sources (``fed``: source name -> batches, taken by the engine's
    host stage in order)."""

    def __init__(self, engine):
        self._engine = weakref.ref(engine)
        self.api = ApiTypeCheck()
        self.outputs = True
        self.fed = {}

    @property
    def engine(self):
        return self._engine()

    def run(self) -> tuple:
        """DALI's ``run()``: the API-type check, the engine's next batch (going on into the next
        epoch at a reader's end), its outputs as DALI's TensorLists."""
        self.api.check("BASIC")
        engine = self.engine
        outs = engine._run()
        engine.build()
        return _outputs.run_outputs(engine, outs)  # (its rule reads the engine's dali_outputs)

    def feed_input(self, name: str, data, layout: str | None = None) -> None:
        """Queue ``data`` (one batch) for the external source ``name``; ``layout`` (DALI's, e.g.
        "HWC") is checked against what the source's consumers take."""
        if layout is not None:
            from ..ops.external_source import LaidOut

            data = LaidOut(data, layout)
        self.fed.setdefault(name, []).append(data)

    # ---- graph export -----------------------------------------------------------------------
    def save_graph_to_dot_file(self, path: str) -> None:
        """Write the graph in Graphviz dot: one box per op (name, device), one edge per input."""
        engine = self.engine
        engine.build()
        _persist.save_dot(path, engine._needed_ops(), engine._outputs)

    def serialize(self) -> bytes:
        """The engine's parameters and traced graph as data only: UTF-8 JSON, arrays as arrays
        (detaug/runtime/persist.py), so that ``deserialize`` runs no code. A value that is not
        data, such as an external source's callable or generator, raises TypeError naming its op
        and argument."""
        p = self.engine
        p.build()
        params = dict(batch_size=p.batch_size, num_threads=p.num_threads,
                      device_id=p._device_id_arg, seed=p.seed,
                      prefetch_queue_depth=p._prefetch_arg,
                      last_batch_policy=p.last_batch_policy, shard_id=p.shard_id,
                      num_shards=p.num_shards, on_error=p.on_error,
                      device_workers=p._device_workers_arg,
                      batches_per_launch=p._batches_per_launch_arg,
                      decode_processes=p.decode_processes, decode_buffer_mb=p.decode_buffer_mb,
                      host_processes=p._host_processes_arg,
                      decode_cache_mb=p.decode_cache_mb,
                      device_memory_budget=p._budget_arg,
                      shard_policy=p.shard_policy)  # exec_*: no effect, not kept
        return _persist.dumps(params, p.graph.ops, p._outputs)


def deserialize(cls, data: bytes, **overrides):
    """A pipeline of class ``cls`` rebuilt from :meth:`DaliFacade.serialize`'s bytes
    (``overrides`` replace parameters). Anything else is refused with ``persist.GraphFormatError``
    (a ValueError): a pickle (it could run code), bytes that are not the format, an op, argument
    or parameter that this version does not have, an op missing an argument, no outputs, or a
    parameter of another kind than this version writes (``batch_size: 2.7``, NaN, a string),
    named."""
    known = {name for c in cls.__mro__ if "__init__" in vars(c) and c is not object
             for name, p in inspect.signature(c.__init__).parameters.items()
             if p.kind not in (p.VAR_KEYWORD, p.VAR_POSITIONAL)} - {"self"}
    params, rebuild = _persist.loads(data, known, _PARAM_KINDS)
    pipe = cls(**{**params, **overrides})
    pipe.set_outputs(*rebuild(pipe.graph))
    return pipe


def implicit_source(pipe):
    """The source op of a pipeline that has none (DALI runs a pipeline of constants alone): an
    endless per-batch source of empty samples that drives its batches."""
    import numpy as np

    from ..graph.trace import call_op

    with pipe:
        node = call_op("external_source", (), {
            "source": lambda: [np.zeros(0, np.uint8)] * pipe.batch_size})
    return node.op
