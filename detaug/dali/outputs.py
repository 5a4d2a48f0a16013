"""What ``pipe.run()`` hands out: DALI's TensorLists, which are also detaug's values.

The rule (docs/dali.md, "Outputs of pipe.run()"), with no guess about who wrote the program:

- image batches (ImageBatch) carry DALI's TensorList methods themselves (core/tensor_list.py);
  box batches, encoded batches and dicts are detaug's own types and come as they are;
- a dense host array ``(B, ...)`` comes as an :class:`~detaug.core.tensor_list.ArrayList`: an
  ndarray subclass (every NumPy use works as before) with DALI's TensorListCPU methods;
- a host list of per-sample arrays (a ragged batch) comes as a
  :class:`~detaug.core.tensor_list.SampleList`: a list subclass with the same methods;
- a device array comes as a :class:`~detaug.core.tensor_list.TensorList` (DALI's
  TensorListGPU: ``as_cpu()``, ``as_tensor()``, ``np.asarray``, ``get()``).

An op of DALI's whose sample differs from detaug's (:data:`DALI_SAMPLE_FORM`: the file reader's
label is a ``(1,)`` int32 sample) is given in DALI's form; ``value`` keeps the detaug value, which
``run_batch``, ``for batch in pipe`` and the adapters give. ``pipe.dali_outputs = False`` turns
the wrapping off (detaug's plain values from ``run()`` too).
"""
from __future__ import annotations

import numpy as np

from ..core.batch import BoxBatch, EncodedBatch, ImageBatch
from ..core.tensor_list import ArrayList, SampleList, TensorList

# (op, output index) -> (shape of a sample, dtype) where DALI's sample differs from detaug's.
DALI_SAMPLE_FORM = {("readers.file", 1): ((1,), np.int32)}


def dali_sample_form(node, v):
    """``v`` (one output of ``node``, or of an upload of it) as DALI gives it: a (B, ...) array
    (NumPy or cupy) reshaped and cast per :data:`DALI_SAMPLE_FORM`; else unchanged."""
    while node is not None and node.op.schema.name == "_upload":  # labels.gpu(): the reader's
        node = node.op.inputs[0]
    form = DALI_SAMPLE_FORM.get((node.op.schema.name, node.index)) if node is not None else None
    if form is not None and hasattr(v, "astype") and hasattr(v, "reshape"):  # NumPy or cupy
        return v.astype(form[1]).reshape((len(v),) + form[0])
    return v


def _on_device(a) -> bool:
    return type(a).__module__.startswith("cupy")


def as_tensor_list(node, v):
    """One output of ``run()`` by the rule of the module's docstring."""
    if isinstance(v, (ImageBatch, BoxBatch, EncodedBatch, dict, TensorList, ArrayList,
                      SampleList)) or v is None:
        return v
    form = dali_sample_form(node, v)
    if isinstance(form, np.ndarray) and form.ndim >= 1:
        return ArrayList(form, value=v)
    if isinstance(form, (list, tuple)):
        samples = list(form)
        if samples and any(_on_device(s) for s in samples):
            return TensorList(samples, value=v)
        return SampleList([np.asarray(s) for s in samples], value=v)
    if _on_device(form) and getattr(form, "ndim", 0) >= 1:
        return TensorList([form[k] for k in range(len(form))], value=v)
    return v


def run_outputs(pipe, outs) -> tuple:
    """``outs`` of ``pipe.run()`` by the module's rule (unchanged with ``dali_outputs = False``)."""
    if getattr(pipe, "dali_outputs", True) is False:
        return outs
    nodes = list(getattr(pipe, "_outputs", None) or [None] * len(outs))
    return tuple(as_tensor_list(n, v) for n, v in zip(nodes, outs))
