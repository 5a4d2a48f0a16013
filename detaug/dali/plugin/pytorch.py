"""DALI's PyTorch plugin (``nvidia.dali.plugin.pytorch``): ``DALIGenericIterator``,
``DALIClassificationIterator`` and ``LastBatchPolicy``, with DALI's signatures and output format,
over detaug's iterator (:class:`detaug.adapters.torch.DetaugIterator`).

Output: every step is a list with one dict per pipeline, ``{name: torch tensor}`` in the order
of ``output_map`` (``data[0]["data"]``). As in DALI, every output must have one shape per batch:
a ragged output (images of different sizes, per-sample boxes) raises and names the output (pad it
with ``fn.pad``, resize the images); a detaug BoxBatch output is handed over padded as
``name`` / ``name_labels`` / ``name_counts`` (see DetaugIterator). A file reader's labels come as
DALI gives them, ``(B, 1) int32``.

Lifetime: tensors share memory with the pipeline's outputs and stay valid as long as they are
held (see DetaugIterator).
"""
from __future__ import annotations

import contextlib
import enum
import warnings

import numpy as np

from ...adapters.torch import DetaugIterator, consumer_share, shard_from_torch_distributed  # noqa: F401  (re-export)
from ..outputs import dali_sample_form


class LastBatchPolicy(str, enum.Enum):
    """What happens to the last batch of an epoch when the shard does not divide into batches:
    FILL pads it with samples from the start of the shard's order, DROP drops it, PARTIAL returns
    it smaller."""

    FILL = "fill"
    DROP = "drop"
    PARTIAL = "partial"

    __hash__ = str.__hash__




def _policy(last_batch_policy, fill_last_batch) -> str:
    if fill_last_batch is not None:
        warnings.warn("fill_last_batch is deprecated (as in DALI): use last_batch_policy",
                      DeprecationWarning, stacklevel=3)
        return "fill" if fill_last_batch else "partial"
    value = getattr(last_batch_policy, "value", last_batch_policy)
    if value not in ("fill", "drop", "partial"):
        raise ValueError(f"last_batch_policy must be a LastBatchPolicy, got {last_batch_policy!r}")
    return value


def _auto_reset(value) -> bool:
    if value in (True, False, "yes", "no"):
        return value in (True, "yes")
    raise ValueError(f"auto_reset must be True, False, 'yes' or 'no', got {value!r}")


def _reader_shard_size(pipe, reader_name, policy) -> int:
    """Samples of ``reader_name``'s shard in ``pipe`` per epoch (its epoch size split as the
    schedule splits it; with the reader's ``pad_last_batch`` under FILL, the largest shard's, as
    DALI's iterator counts the padded samples); raises when the pipeline has no reader of that
    name."""
    from ...core import schedule

    pipe.build()
    for op_id, src in pipe._sources.items():
        if pipe.graph.ops[op_id].name == reader_name:
            if src.size is None:
                raise ValueError(f"reader_name={reader_name!r} names a source without a size")
            if src.pad_last_batch and policy == "fill":
                return -(-src.size // src.shard[1]), src
            return schedule.shard_size(src.size, *src.shard, pipe.schedule.policy_of(src)), src
    names = [pipe.graph.ops[i].name for i in pipe._sources]
    raise ValueError(f"reader_name={reader_name!r}: the pipeline has no reader of that name "
                     f"(its sources: {names}); give the reader name=")


class DALIGenericIterator(DetaugIterator):
    """DALI's general iterator.

    Args:
        pipelines: a Pipeline or a list of them (one per GPU).
        output_map: a name per pipeline output, in order.
        size: samples per epoch of the shard (-1: the pipeline's own epoch, or until an external
            source ends). Only one of ``size`` and ``reader_name``.
        reader_name: the ``name=`` of the reader whose shard sets the epoch.
        auto_reset: True / 'yes': start the next epoch by itself after StopIteration.
        fill_last_batch: deprecated; True is FILL, False is PARTIAL.
        dynamic_shape: accepted (shapes may change between batches here anyway).
        last_batch_padded: accepted; see pad_last_batch below.
        last_batch_policy: LastBatchPolicy.FILL (default), DROP or PARTIAL.
        prepare_first_batch: accepted (the pipeline prefetches as it is built to).

    A reader built with ``pad_last_batch=True`` fills the shard's last batch with copies of its
    last sample, and every shard has the largest shard's number of samples, as DALI's; FILL hands
    them over, PARTIAL and DROP leave them out.
    """

    def __init__(self, pipelines, output_map, size=-1, reader_name=None, auto_reset=False,
                 fill_last_batch=None, dynamic_shape=False, last_batch_padded=False,
                 last_batch_policy=LastBatchPolicy.FILL, prepare_first_batch=True):
        pipes = list(pipelines) if isinstance(pipelines, (list, tuple)) else [pipelines]
        for p in pipes:  # as DALI: a pipeline already driven by run() is refused
            p.dali.api.check("ITERATOR")
        for p in pipes:  # built declaring what the iterator takes (before a reader's size is read)
            p.build(consumer=consumer_share("padded"))
        policy = _policy(last_batch_policy, fill_last_batch)
        if reader_name is not None and size not in (-1, None):
            raise ValueError("give size or reader_name, not both (as in DALI)")
        shard, padded = None, False
        if reader_name is not None:
            sizes = [_reader_shard_size(p, reader_name, policy) for p in pipes]
            shard = min(n for n, _ in sizes)
            padded = policy == "fill" and any(src.pad_last_batch for _, src in sizes)
        elif size not in (-1, None):
            shard = int(size) // len(pipes) if len(pipes) > 1 else int(size)
        self.output_names = list(output_map)
        super().__init__(pipes, self.output_names, boxes_format="padded", last_batch_policy=policy,
                         auto_reset=_auto_reset(auto_reset), size=None if padded else shard,
                         check_ranks=False)
        if padded:  # a shorter shard's padding counts: every shard has as many batches (DALI)
            self.size = shard
        self._check_ranks_agree()  # on the steps counted with the padding, as they will run

    def _check_shards(self):
        """DALI's iterator reads the pipelines as they are sharded: unlike DetaugIterator, it
        does not shard unsharded pipelines by the torch.distributed rank (a DALI program that
        gives no shard_id reads the whole dataset on every rank)."""

    def __next__(self):
        with contextlib.ExitStack() as scope:
            for p in self.pipes:
                scope.enter_context(p.dali.api.scope("ITERATOR"))
            out = super().__next__()
        return [out] if isinstance(out, dict) else out

    def _convert(self, pipe, raw) -> dict:
        if len(raw) != len(self.output_names):
            raise ValueError(f"the pipeline has {len(raw)} outputs but output_map names "
                             f"{len(self.output_names)}: {self.output_names}")
        raw = tuple(self._dali_form(pipe, k, v) for k, v in enumerate(raw))
        out = super()._convert(pipe, raw)
        for name, v in out.items():
            if isinstance(v, list):
                raise ValueError(f"output {name!r}: its samples have different shapes, and DALI's "
                                 "iterator hands over one tensor per output: pad them (fn.pad, "
                                 "fn.pad_boxes) or resize the images to one size")
        return out

    def _dali_form(self, pipe, k, v):
        node = pipe._outputs[k] if getattr(pipe, "_outputs", None) else None
        v = dali_sample_form(node, v)
        if isinstance(v, list):
            arrays = [np.asarray(a) for a in v]
            if arrays and all(a.shape == arrays[0].shape and a.dtype == arrays[0].dtype for a in arrays):
                return np.stack(arrays)
            raise ValueError(f"output {self.output_names[k]!r}: its samples have different shapes "
                             f"({sorted({a.shape for a in arrays})[:4]}...), and DALI's iterator "
                             "hands over one tensor per output: pad them with fn.pad")
        return v


class DALIClassificationIterator(DALIGenericIterator):
    """DALI's classification iterator: a DALIGenericIterator with ``output_map=["data", "label"]``."""

    def __init__(self, pipelines, size=-1, reader_name=None, auto_reset=False, fill_last_batch=None,
                 dynamic_shape=False, last_batch_padded=False,
                 last_batch_policy=LastBatchPolicy.FILL, prepare_first_batch=True):
        super().__init__(pipelines, ["data", "label"], size=size, reader_name=reader_name,
                         auto_reset=auto_reset, fill_last_batch=fill_last_batch,
                         dynamic_shape=dynamic_shape, last_batch_padded=last_batch_padded,
                         last_batch_policy=last_batch_policy,
                         prepare_first_batch=prepare_first_batch)


def feed_ndarray(tensor_or_tl, arr, cuda_stream=None):
    """DALI's helper: copy a batch (a NumPy array, or what the pipeline returned) into the torch
    tensor ``arr``; returns ``arr``."""
    import torch

    src = tensor_or_tl
    if not isinstance(src, torch.Tensor):
        from ...adapters.torch import _tensor

        src = _tensor(src)
    arr.copy_(src.reshape(arr.shape))
    return arr


__all__ = ["DALIGenericIterator", "DALIClassificationIterator", "LastBatchPolicy", "feed_ndarray"]
