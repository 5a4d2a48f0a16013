"""What ``pipe.run()`` hands a DALI program: DALI's TensorLists, in DALI's shapes and dtypes.

Image batches always carry DALI's TensorList methods (core/tensor_list.py). Other outputs (plain
arrays, lists of per-sample arrays) are NumPy values in detaug's API; ``run()`` turns them into
:class:`~detaug.core.tensor_list.TensorList` in *DALI mode* only:

- ``pipe.dali_outputs = True`` / ``False`` says so outright;
- left at None (the default), a pipeline is in DALI mode when it is written in one of DALI's
  idioms (:func:`dali_mode`): DALI's file reader (whose labels are per-sample ``(1,)`` int32),
  an external source given DALI's own arguments (``dtype=``, ``layout=``, ...), or a Pipeline
  subclass with its own ``define_graph``.

detaug's own API is untouched: ``run_batch``, ``for batch in pipe``, and the adapters read the
detaug value (``TensorList.value``).
"""
from __future__ import annotations

import numpy as np

from ..core.batch import BoxBatch, EncodedBatch, ImageBatch
from ..core.tensor_list import TensorList

# (op, output index) -> (shape of a sample, dtype) where DALI's sample differs from detaug's.
DALI_SAMPLE_FORM = {("readers.file", 1): ((1,), np.int32)}
# ops whose presence puts a pipeline in DALI mode (by their registered name)
DALI_ONLY_OPS = frozenset({"readers.file"})


# external_source arguments that only DALI programs pass (detaug's own: source, num_outputs,
# batch, size and the sharding ones)
DALI_ONLY_SOURCE_ARGS = ("dtype", "layout", "ndim", "cycle", "no_copy", "blocking", "cuda_stream",
                         "use_copy_kernel")


def dali_mode(pipe) -> bool:
    """Whether ``pipe.run()`` hands out DALI TensorLists for its plain outputs: ``dali_outputs``
    when set, else whether the pipeline was written in one of DALI's idioms: a ``define_graph``
    of its own (DALI's older Pipeline subclass), an op of :data:`DALI_ONLY_OPS`, or an external
    source given one of DALI's own arguments (:data:`DALI_ONLY_SOURCE_ARGS`)."""
    forced = getattr(pipe, "dali_outputs", None)
    if forced is not None:
        return bool(forced)
    if getattr(type(pipe).define_graph, "__qualname__", "") != "Pipeline.define_graph":
        return True
    for op in pipe.graph.ops:
        if op.schema.name in DALI_ONLY_OPS:
            return True
        if op.schema.name == "external_source" and any(
                op.args.get(k) is not None for k in DALI_ONLY_SOURCE_ARGS):
            return True
    return False


def dali_sample_form(node, v):
    """``v`` (one output of ``node``, or of an upload of it) as DALI gives it: a (B, ...) array
    (NumPy or cupy) reshaped and cast per :data:`DALI_SAMPLE_FORM`; else unchanged."""
    while node is not None and node.op.schema.name == "_upload":  # labels.gpu(): the reader's
        node = node.op.inputs[0]
    form = DALI_SAMPLE_FORM.get((node.op.schema.name, node.index)) if node is not None else None
    if form is not None and hasattr(v, "astype") and hasattr(v, "reshape"):  # NumPy or cupy
        return v.astype(form[1]).reshape((len(v),) + form[0])
    return v


def as_tensor_list(node, v):
    """One output for a DALI program: image and box batches as they are; arrays and lists of
    arrays as a TensorList of DALI's samples."""
    if isinstance(v, (ImageBatch, BoxBatch, EncodedBatch, dict, TensorList)) or v is None:
        return v
    form = dali_sample_form(node, v)
    if isinstance(form, (list, tuple)):
        samples = list(form)
    elif hasattr(form, "shape") and getattr(form, "ndim", 0) >= 1:
        samples = [form[k] for k in range(len(form))]
    else:
        return v
    return TensorList(samples, value=v)


def run_outputs(pipe, outs) -> tuple:
    """``outs`` of ``pipe.run()`` in DALI mode as TensorLists (see the module's docstring)."""
    if not dali_mode(pipe):
        return outs
    nodes = list(getattr(pipe, "_outputs", None) or [None] * len(outs))
    return tuple(as_tensor_list(n, v) for n, v in zip(nodes, outs))
