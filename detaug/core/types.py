"""DALI's ``nvidia.dali.types`` names, so that ``import nvidia.dali.types as types`` ports as
``import detaug.types as types``.

Every constant is a ``str`` enum member whose value is the string detaug's ops take
(``types.RGB == "RGB"``, ``types.FLOAT == "float32"``, ``types.NCHW == "CHW"``), so the constants
can be passed wherever detaug takes the string, and compare and hash as that string. Layouts of a
whole batch (``NCHW``, ``NHWC``) name the per-sample layout (``CHW``, ``HWC``), as DALI's image
ops read them.
"""
from __future__ import annotations

import enum

import numpy as np


class _StrEnum(str, enum.Enum):
    """A str-valued enum that hashes as its value (so dict lookups by the plain string work)."""

    __hash__ = str.__hash__

    def __str__(self):
        return str(self.value)

    def __repr__(self):
        return f"{type(self).__name__}.{self.name}"


class DALIImageType(_StrEnum):
    """Colour spaces of decoded images."""

    RGB = "RGB"
    BGR = "BGR"
    GRAY = "GRAY"
    YCbCr = "YCbCr"
    ANY_DATA = "ANY_DATA"


class DALIDataType(_StrEnum):
    """Element types (the NumPy name as value)."""

    UINT8 = "uint8"
    UINT16 = "uint16"
    UINT32 = "uint32"
    UINT64 = "uint64"
    INT8 = "int8"
    INT16 = "int16"
    INT32 = "int32"
    INT64 = "int64"
    FLOAT16 = "float16"
    FLOAT = "float32"
    FLOAT64 = "float64"
    BOOL = "bool"


class DALIInterpType(_StrEnum):
    """Interpolation filters: ops map INTERP_LINEAR and INTERP_TRIANGULAR to bilinear with
    antialiasing where the chain shrinks the image (DALI's triangle filter in DALI's resize,
    kernels/resample.py; detaug's warp elsewhere) and raise for the others."""

    INTERP_NN = "nn"
    INTERP_LINEAR = "linear"
    INTERP_CUBIC = "cubic"
    INTERP_LANCZOS3 = "lanczos3"
    INTERP_TRIANGULAR = "triangular"
    INTERP_GAUSSIAN = "gaussian"


class TensorLayout(_StrEnum):
    """Layouts: a batch layout names its per-sample layout (NCHW -> 'CHW')."""

    NCHW = "CHW"
    NHWC = "HWC"
    NFHWC = "FHWC"
    NFCHW = "FCHW"
    SAME = "SAME"


class PipelineAPIType(_StrEnum):
    BASIC = "basic"
    ITERATOR = "iterator"
    SCHEDULED = "scheduled"


globals().update(DALIImageType.__members__)
globals().update(DALIDataType.__members__)
globals().update(DALIInterpType.__members__)
globals().update(TensorLayout.__members__)
DALITensorLayout = TensorLayout

_NUMPY = {m: np.dtype(m.value) for m in DALIDataType}


def to_numpy_type(dtype) -> np.dtype:
    """The NumPy dtype of a DALIDataType, a dtype string or a NumPy type."""
    if isinstance(dtype, DALIDataType):
        return _NUMPY[dtype]
    return np.dtype(dtype)


def image_type(value) -> str:
    """'RGB' / 'BGR' / 'GRAY' from a DALIImageType or a string; other colour spaces raise."""
    v = str(value.value if isinstance(value, DALIImageType) else value)
    if v not in ("RGB", "BGR", "GRAY"):
        raise ValueError(f"output_type {value!r}: detaug decodes to RGB, BGR or GRAY only")
    return v


def interp_type(value, op_name="resize", arg="interp_type") -> str:
    """Map DALI's interp_type to detaug's filter: 'linear' (bilinear) or 'triangular' (bilinear
    with antialiasing where the image shrinks: DALI's triangle in its resize, detaug's warp
    elsewhere). Others raise, naming what detaug has."""
    v = str(value.value if isinstance(value, DALIInterpType) else value).lower()
    v = {"interp_linear": "linear", "interp_triangular": "triangular", "interp_nn": "nn",
         "interp_cubic": "cubic", "interp_lanczos3": "lanczos3"}.get(v, v)
    if v not in ("linear", "triangular"):
        raise ValueError(f"{op_name}: {arg} {value!r} is not available in detaug: its warp "
                         "samples bilinearly (INTERP_LINEAR) and antialiases where the image "
                         "shrinks (INTERP_TRIANGULAR); nearest, cubic, Lanczos and Gaussian are not "
                         "implemented")
    return v


def layout(value) -> str:
    """'HWC' / 'CHW' from a TensorLayout or a string ('NCHW' and 'NHWC' name the sample layout)."""
    v = str(value.value if isinstance(value, TensorLayout) else value)
    return {"NCHW": "CHW", "NHWC": "HWC"}.get(v, v)


class Constant:
    """DALI's ``types.Constant(value, dtype=None)``: a number or an array that becomes a
    ``constant`` op where it is used as an input (an operand of DataNode arithmetic, an op's
    input), so it may be made outside a pipeline, as DALI's. Python ints are int32 and floats
    float32 (DALI's rule), a NumPy array keeps its type but int64 and float64, made int32 and
    float32; ``dtype`` (a DALIDataType) or the
    conversions (``.uint8()``, ``.float32()``, ...) set the type."""

    def __init__(self, value, dtype=None, shape=None, layout=None, device=None, **kwargs):
        a = np.asarray(value)
        if shape is not None:
            a = np.broadcast_to(a, tuple(int(x) for x in np.atleast_1d(shape)))
        if dtype is None and not isinstance(value, np.ndarray):
            dtype = {"b": DALIDataType.BOOL, "i": DALIDataType.INT32, "u": DALIDataType.INT32,
                     "f": DALIDataType.FLOAT}.get(a.dtype.kind)
        elif dtype is None:  # DALI's: 64-bit arrays made 32-bit
            dtype = {"int64": DALIDataType.INT32, "float64": DALIDataType.FLOAT}.get(a.dtype.name)
        self.value = a.astype(to_numpy_type(dtype)) if dtype is not None else a
        self.dtype, self.layout, self.device = dtype, layout, device

    def __repr__(self) -> str:
        return f"Constant({self.value.tolist()!r}, dtype={self.value.dtype})"


def _conversion(dtype):
    return lambda self: Constant(self.value, dtype, layout=self.layout, device=self.device)


for _name, _dt in (("bool", "BOOL"), ("int8", "INT8"), ("int16", "INT16"), ("int32", "INT32"),
                   ("int64", "INT64"), ("uint8", "UINT8"), ("uint16", "UINT16"),
                   ("uint32", "UINT32"), ("uint64", "UINT64"), ("float16", "FLOAT16"),
                   ("float32", "FLOAT"), ("float64", "FLOAT64")):
    setattr(Constant, _name, _conversion(getattr(DALIDataType, _dt)))

ScalarConstant = Constant

__all__ = ["Constant", "ScalarConstant",
           "DALIImageType", "DALIDataType", "DALIInterpType", "TensorLayout", "DALITensorLayout",
           "PipelineAPIType", "to_numpy_type", "image_type", "interp_type", "layout",
           *DALIImageType.__members__, *DALIDataType.__members__, *DALIInterpType.__members__,
           *TensorLayout.__members__]
