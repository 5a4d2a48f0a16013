"""DALI's Pipeline API about a pipeline's definition rather than its running (a mixin of
:class:`detaug.pipeline.Pipeline`): the tuning arguments DALI programs pass that change nothing
here (:data:`DALI_PIPELINE_HINTS`, accepted with a warning; ``enable_checkpointing=True``
refused), and the traced graph's export: ``serialize`` / ``deserialize`` (detaug/runtime/persist.py's
format) and ``save_graph_to_dot_file`` (Graphviz)."""
from __future__ import annotations

import contextlib
import inspect
import warnings

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
                "host_processes": _OPT_COUNT, "device_memory_budget": (int, float, str, None),
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


class DaliApi:
    """The graph export of :class:`~detaug.pipeline.Pipeline` (DALI's names), DALI's check
    against mixing ``run()`` with an iterator, and the DALI form of ``run()``'s outputs."""

    # True: run() gives DALI's TensorLists, which are detaug's values too (dali/outputs.py);
    # False: detaug's plain values
    dali_outputs = True
    _api_type = None        # DALI's PipelineAPIType in use: 'BASIC' (run()) or 'ITERATOR'
    _skip_api_check = False
    _in_api_scope = False

    # ---- DALI's API-type check ----------------------------------------------------------------
    def enable_api_check(self, enable: bool) -> None:
        """DALI's switch: False lets ``run()`` and a DALI iterator share this pipeline (the
        iterator then starts where ``run()`` left the epoch: docs/dali.md)."""
        self._skip_api_check = not enable

    def _check_api_type(self, kind: str) -> None:
        """As DALI: the first of ``run()`` ('BASIC') and a DALI iterator ('ITERATOR') to use the
        pipeline fixes its API type; the other then raises RuntimeError."""
        if self._skip_api_check or self._in_api_scope:
            return
        if self._api_type is None:
            self._api_type = kind
        elif self._api_type != kind:
            raise RuntimeError(f"Mixing pipeline API type. Currently used: PipelineAPIType."
                               f"{self._api_type}, but trying to use PipelineAPIType.{kind} (as "
                               "DALI: use a fresh pipeline for the iterator, or call "
                               "pipe.enable_api_check(False))")

    @contextlib.contextmanager
    def _api_scope(self, kind: str):
        """Checks ``kind`` once, then lets the calls inside through (an iterator's run())."""
        self._check_api_type(kind)
        self._in_api_scope = True
        try:
            yield
        finally:
            self._in_api_scope = False

    def _dali_run_outputs(self, outs) -> tuple:
        """``run()``'s outputs as DALI's TensorLists (dali/outputs.py)."""
        self.build()
        return _outputs.run_outputs(self, outs)

    # ---- graph export -----------------------------------------------------------------------
    def save_graph_to_dot_file(self, path: str) -> None:
        """Write the graph in Graphviz dot: one box per op (name, device), one edge per input."""
        self.build()
        _persist.save_dot(path, self._needed_ops(), self._outputs)

    def serialize(self) -> bytes:
        """The pipeline's parameters and traced graph as data only: UTF-8 JSON, arrays as arrays
        (detaug/runtime/persist.py), so that ``deserialize`` runs no code. A value that is not
        data, such as an external source's callable or generator, raises TypeError naming its op
        and argument."""
        self.build()
        params = dict(batch_size=self.batch_size, num_threads=self.num_threads,
                      device_id=self._device_id_arg, seed=self.seed,
                      prefetch_queue_depth=self._prefetch_arg,
                      last_batch_policy=self.last_batch_policy, shard_id=self.shard_id,
                      num_shards=self.num_shards, on_error=self.on_error,
                      device_workers=self._device_workers_arg,
                      batches_per_launch=self._batches_per_launch_arg,
                      decode_processes=self.decode_processes, decode_buffer_mb=self.decode_buffer_mb,
                      host_processes=self._host_processes_arg,
                      device_memory_budget=self._budget_arg,
                      shard_policy=self.shard_policy)  # exec_*: no effect, not kept
        return _persist.dumps(params, self.graph.ops, self._outputs)

    @classmethod
    def deserialize(cls, data: bytes, **overrides) -> DaliApi:  # a Pipeline (cls)
        """A pipeline rebuilt from :meth:`serialize`'s bytes (``overrides`` replace parameters).
        Anything else is refused with ``persist.GraphFormatError`` (a ValueError): a pickle (it
        could run code), bytes that are not the format, an op, argument or parameter that this
        version does not have, an op missing an argument, no outputs, or a parameter of another
        kind than this version writes (``batch_size: 2.7``, NaN, a string), named."""
        known = {name for c in cls.__mro__ if "__init__" in vars(c) and c is not object
                 for name, p in inspect.signature(c.__init__).parameters.items()
                 if p.kind not in (p.VAR_KEYWORD, p.VAR_POSITIONAL)} - {"self"}
        params, rebuild = _persist.loads(data, known, _PARAM_KINDS)
        pipe = cls(**{**params, **overrides})
        pipe.set_outputs(*rebuild(pipe.graph))
        return pipe
