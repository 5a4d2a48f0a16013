"""DALI's tensor lists as DALI's ops on plain tensors take and give them: a batch is a (B, ...)
array (a dense batch: NumPy on the host, cupy on the device) or a list of per-sample arrays (a
ragged one). ``samples_of`` / ``batch_of`` serve the host-only ops; ``tensors_of`` keeps a
batch's form and device for the ops that run on both (dali/tensor_ops.py)."""
from __future__ import annotations

import numpy as np

from ..core.backend import is_device_array
from ..core.batch import BoxBatch, ImageBatch


def samples_of(op, v, what="input") -> list:
    """A batch of plain tensors as a list of per-sample host arrays."""
    if isinstance(v, (ImageBatch, BoxBatch)):
        raise TypeError(f"{op.name}: {what} must be a plain tensor batch (DALI's layout: e.g. boxes "
                        f"from fn.readers.coco(ratio=True, ...)), got a {type(v).__name__}")
    if isinstance(v, np.ndarray):
        return list(v)
    if isinstance(v, (list, tuple)):
        return [np.asarray(s) for s in v]
    raise TypeError(f"{op.name}: {what} must be a batch of arrays, got {type(v).__name__}")


def batch_of(arrays: list):
    """Stack per-sample arrays when they share a shape (a dense batch), else keep the list."""
    if arrays and all(a.shape == arrays[0].shape and a.dtype == arrays[0].dtype for a in arrays):
        return np.stack(arrays)
    return list(arrays)


def arg_rows(v, b, width, name, op, what=""):
    """A scalar / vector argument, or one per sample, as (B, width) float64; ``what`` qualifies
    the count in the error (e.g. " (2-D transforms)")."""
    a = np.asarray(v, np.float64)
    if a.size == width:
        return np.broadcast_to(a.reshape(1, width), (b, width))
    if a.size == b * width:
        return a.reshape(b, width)
    raise ValueError(f"{op.name}: {name} needs {width} value(s){what} or {width} per sample, got "
                     f"shape {a.shape}")


def tensors_of(op, v, what="input"):
    """A batch of plain tensors in its own form, on its own device: a dense (B, ...) array
    (NumPy or cupy) as it is, a list of per-sample arrays as a list (host ones as NumPy)."""
    if isinstance(v, (ImageBatch, BoxBatch)):
        samples_of(op, v, what)  # (raises: a plain tensor batch is needed)
    if isinstance(v, (list, tuple)):
        return [a if is_device_array(a) else np.asarray(a) for a in v]
    if isinstance(v, np.ndarray) or (is_device_array(v) and getattr(v, "ndim", 0) >= 1):
        return v
    raise TypeError(f"{op.name}: {what} must be a batch of arrays, got {type(v).__name__}")
