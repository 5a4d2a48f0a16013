"""DALI's TensorList methods on what ``pipe.run()`` returns (``is_dense_tensor``, ``as_tensor``,
``at``, ``as_array``, ``as_cpu``, ``__len__``, ``layout()``, ``shape()``), so that a DALI program
that reads its outputs ports by changing its imports.

The carriers: :class:`TensorListMethods`, mixed into :class:`~detaug.core.batch.ImageBatch` (its
own attributes stay as they were; ``layout`` is a :class:`Layout`, a str that may also be
called, as DALI's ``layout()``); :class:`ArrayList` (an ndarray subclass: a dense host batch)
and :class:`SampleList` (a list subclass: a ragged host batch), which are detaug's values and
DALI's TensorListCPU at once; and :class:`TensorList`, a device batch (DALI's TensorListGPU). The
DALI layer hands these out from every ``run()`` (docs/dali.md, "Outputs of pipe.run()"); the
detaug value each was made from stays in ``.value`` (what detaug's own adapters read).
"""
from __future__ import annotations

import numpy as np


def _host(a):
    """A sample as a host NumPy array (cupy arrays are copied)."""
    return a.get() if type(a).__module__.startswith("cupy") else np.asarray(a)


def _on_device(a) -> bool:
    return type(a).__module__.startswith("cupy")


class Layout(str):
    """A layout string ('HWC') that may also be called: DALI's ``batch.layout()``."""

    def __call__(self) -> str:
        return str(self)


class CallableShape(tuple):
    """An array's shape (a tuple) that may also be called: DALI's ``TensorList.shape()``, the
    list of per-sample shapes."""

    def __new__(cls, shape, samples):
        t = super().__new__(cls, shape)
        t._samples = samples
        return t

    def __call__(self) -> list:
        return list(self._samples)


class Tensor:
    """DALI's TensorCPU / TensorGPU: one dense array (``as_tensor()``, ``tl[i]``): ``shape()``
    (a method, as DALI's), ``layout()``, ``dtype``, ``as_cpu()``, ``np.array(t)`` and, on the
    device, ``__cuda_array_interface__``."""

    def __init__(self, array, layout: str = ""):
        self._a, self._layout = array, layout

    def shape(self) -> list:
        return list(self._a.shape)

    def layout(self) -> str:
        return self._layout

    @property
    def dtype(self):
        return self._a.dtype

    def as_cpu(self) -> "Tensor":
        return Tensor(_host(self._a), self._layout)

    def squeeze(self, dim=None) -> "Tensor":
        return Tensor(self._a.squeeze() if dim is None else self._a.squeeze(dim), self._layout)

    def __array__(self, dtype=None, copy=None):
        a = _host(self._a)
        return a if dtype is None else a.astype(dtype)

    @property
    def __cuda_array_interface__(self):
        if not _on_device(self._a):
            raise AttributeError("a host tensor has no __cuda_array_interface__ (DALI's TensorCPU)")
        return self._a.__cuda_array_interface__

    def __dlpack__(self, *args, **kwargs):
        return self._a.__dlpack__(*args, **kwargs)

    def __dlpack_device__(self):
        return self._a.__dlpack_device__()

    def __repr__(self) -> str:
        return f"Tensor{'GPU' if _on_device(self._a) else 'CPU'}(shape={self.shape()}, dtype={self.dtype})"


class TensorListMethods:
    """DALI's TensorList methods over ``self._samples()`` (a list of per-sample arrays) and
    ``self._dense()`` (the (B, ...) array, or None where the samples differ in shape)."""

    def _samples(self) -> list:
        raise NotImplementedError

    def _dense(self):
        samples = self._samples()
        if samples and all(s.shape == samples[0].shape and s.dtype == samples[0].dtype
                           for s in samples):
            xp = __import__("cupy") if _on_device(samples[0]) else np
            return xp.stack(samples)
        return None

    def _layout_str(self) -> str:
        return ""

    def is_dense_tensor(self) -> bool:
        """True when every sample has one shape (DALI: the list is one tensor)."""
        samples = self._samples()
        return all(s.shape == samples[0].shape for s in samples)

    def as_tensor(self) -> Tensor:
        """The batch as one (B, ...) tensor; ValueError, as DALI's, where the shapes differ."""
        d = self._dense()
        if d is None:
            raise ValueError(f"as_tensor(): the samples have different shapes "
                             f"({sorted({tuple(s.shape) for s in self._samples()})[:4]}); "
                             "is_dense_tensor() says so (DALI raises too)")
        return Tensor(d, ("N" + self._layout_str()) if self._layout_str() else "")

    def as_array(self) -> np.ndarray:
        """DALI's TensorListCPU.as_array: the dense batch as one host NumPy array."""
        return np.asarray(self.as_tensor())

    def at(self, i: int) -> np.ndarray:
        """Sample ``i`` as a host NumPy array (DALI's TensorListCPU.at)."""
        return _host(self._samples()[i])

    def shape(self) -> list:
        """Per-sample shapes, a list of tuples (DALI's TensorList.shape() is a method)."""
        return [tuple(int(n) for n in s.shape) for s in self._samples()]


class TensorList(TensorListMethods):
    """DALI's TensorListCPU / TensorListGPU for an output that is not an image batch: per-sample
    arrays (``samples``) in DALI's shapes and dtypes, and the detaug ``value`` they came from.

    Indexing and iteration give the samples as arrays; ``np.array(tl)`` the dense batch."""

    def __init__(self, samples: list, value=None, layout: str = ""):
        self._list, self.value, self._lay = list(samples), value, layout

    def _samples(self) -> list:
        return self._list

    def _layout_str(self) -> str:
        return self._lay

    def layout(self) -> str:
        return self._lay

    @property
    def device(self) -> str:
        return "gpu" if self._list and _on_device(self._list[0]) else "cpu"

    def as_cpu(self) -> "TensorList":
        return TensorList([_host(s) for s in self._list], self.value, self._lay)

    def __len__(self) -> int:
        return len(self._list)

    def __getitem__(self, i):
        return self._list[i]

    def __iter__(self):
        return iter(self._list)

    def __array__(self, dtype=None, copy=None):
        a = np.asarray(self.as_tensor())
        return a if dtype is None else a.astype(dtype)

    def get(self):
        """The dense batch on the host (cupy's ``get()``, for code written against detaug's
        device arrays)."""
        return np.asarray(self)

    @property
    def shape(self):
        """The value's shape (a tuple, as the device array's), which called gives DALI's list
        of per-sample shapes (``tl.shape()``)."""
        v = self.value
        dims = tuple(int(n) for n in v.shape) if hasattr(v, "shape") else (len(self._list),)
        return CallableShape(dims, [tuple(int(n) for n in a.shape) for a in self._list])

    def __getattr__(self, name):
        # the rest of the device array's attributes (dtype, ndim, data, __cuda_array_interface__,
        # sum, ...) from the detaug value, so that code written against it keeps working
        if name.startswith("__") or name in ("value", "_list", "_lay"):
            raise AttributeError(name)
        value = self.__dict__.get("value")
        if value is None or isinstance(value, list):
            raise AttributeError(f"TensorList has no attribute {name!r}")
        return getattr(value, name)

    def __repr__(self) -> str:
        kind = "GPU" if self.device == "gpu" else "CPU"
        return f"TensorList{kind}({len(self)} samples, shapes {self.shape()[:3]}...)"


class ArrayList(np.ndarray):
    """A dense batch ``(B, ...)`` on the host that is both detaug's NumPy array and DALI's
    TensorListCPU: every ndarray attribute and operation (``.shape`` a tuple, arithmetic and
    slicing give plain arrays), plus DALI's ``at``, ``as_array``, ``as_tensor``, ``as_cpu``,
    ``is_dense_tensor``, ``layout()`` and ``shape()`` (``shape`` is the tuple; called, the list
    of per-sample shapes). ``value`` is the detaug value it was made from (equal to it, but for
    an output whose DALI form differs, e.g. ``readers.file`` labels)."""

    def __new__(cls, array, value=None, layout: str = ""):
        obj = np.asarray(array).view(cls)
        obj._lay = layout
        obj.value = np.asarray(array) if value is None else value
        return obj

    def __array_finalize__(self, obj):
        self._lay = getattr(obj, "_lay", "")
        self.value = getattr(obj, "value", None)

    def __array_wrap__(self, arr, context=None, return_scalar=False):
        # results of arithmetic are plain values (DALI's TensorList has no arithmetic of its own)
        arr = np.asarray(arr)
        return arr[()] if return_scalar else arr

    @property
    def shape(self):
        dims = np.ndarray.shape.__get__(self)
        return CallableShape(dims, [tuple(dims[1:])] * (dims[0] if dims else 0))

    @shape.setter
    def shape(self, value):
        np.ndarray.shape.__set__(self, value)

    def __getitem__(self, i):
        return self.view(np.ndarray)[i]

    def __iter__(self):
        return iter(self.view(np.ndarray))

    def __reduce__(self):  # pickles as the plain array
        return self.view(np.ndarray).__reduce__()

    def at(self, i: int) -> np.ndarray:
        """Sample ``i`` (DALI's TensorListCPU.at)."""
        return self.view(np.ndarray)[i]

    def as_array(self) -> np.ndarray:
        """The batch as one plain NumPy array (DALI's TensorListCPU.as_array)."""
        return self.view(np.ndarray)

    def as_tensor(self) -> Tensor:
        return Tensor(self.view(np.ndarray), ("N" + self._lay) if self._lay else "")

    def as_cpu(self) -> "ArrayList":
        return self

    def is_dense_tensor(self) -> bool:
        return True

    def layout(self) -> str:
        return self._lay


class SampleList(list, TensorListMethods):
    """A ragged batch on the host (samples of different shapes) that is both detaug's list of
    per-sample arrays and DALI's TensorListCPU (``at``, ``as_tensor``, ``as_array``,
    ``as_cpu``, ``is_dense_tensor``, ``shape()``, ``layout()``); ``value`` the detaug value."""

    def __init__(self, samples, value=None, layout: str = ""):
        super().__init__(samples)
        self.value = list(samples) if value is None else value
        self._lay = layout

    def _samples(self) -> list:
        return list(self)

    def _layout_str(self) -> str:
        return self._lay

    def layout(self) -> str:
        return self._lay

    def as_cpu(self) -> "SampleList":
        return self


def detaug_value(v):
    """What detaug's own API returns for an output (a TensorList's ``value``; else ``v``)."""
    if isinstance(v, ArrayList):
        return v.value if v.value is not None else v.view(np.ndarray)
    return v.value if isinstance(v, (TensorList, SampleList)) else v
