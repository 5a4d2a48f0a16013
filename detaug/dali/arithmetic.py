"""DALI's arithmetic on DataNodes (``a * 2``, ``x / y``, ``-x``, ``a < b``) and its math functions
(``fn.math.*``, ``detaug.math.*``), elementwise per sample on the host ('cpu').

Operands are plain tensor batches (a (B, ...) array or a list of per-sample arrays), image
batches (materialised; the result is an image batch of the result's dtype) or numbers (DALI's
constants: an int is int32, a float float32). Each sample's operands broadcast as NumPy's arrays
do (a per-sample scalar with a vector). Result types follow DALI's promotion: integers promote
among themselves (uint8 with int32 gives int32), any float operand makes the result the widest
float operand's type (int32 with float32 gives float32, not NumPy's float64), ``/`` of integers
and the functions that are not closed on integers (sqrt, exp, log, sin, ..., fpow, atan2) give
float32; comparisons give bool. ``//`` and ``%`` are C++'s, as DALI's: integer division truncates
toward zero and the remainder has the dividend's sign (``-7 // 2 == -3``, ``-7 % 2 == -1``); on
floats ``//`` is the plain quotient and ``%`` is fmod.
"""
from __future__ import annotations

import numpy as np

from ..core.batch import ImageBatch
from ..graph import materialize as M
from ..ops.registry import register
from .tensors import batch_of

def _fdiv(a, b):
    """DALI's ``//``: C++ division: integers truncated toward zero, floats not rounded."""
    if a.dtype.kind in "iub" and b.dtype.kind in "iub":
        q = np.abs(a) // np.abs(b)
        return np.where((a < 0) != (b < 0), -q, q)
    return np.true_divide(a, b)


BINARY = {"add": np.add, "sub": np.subtract, "mul": np.multiply, "div": np.true_divide,
          "fdiv": _fdiv, "mod": np.fmod, "pow": np.power, "min": np.minimum,
          "max": np.maximum, "lt": np.less, "leq": np.less_equal, "gt": np.greater,
          "geq": np.greater_equal, "bitand": np.bitwise_and, "bitor": np.bitwise_or,
          "bitxor": np.bitwise_xor, "fpow": np.power, "atan2": np.arctan2}
UNARY = {"neg": np.negative, "pos": np.positive, "abs": np.abs, "fabs": np.abs,
         "sqrt": np.sqrt, "rsqrt": lambda x: 1.0 / np.sqrt(x), "cbrt": np.cbrt, "exp": np.exp,
         "log": np.log, "log2": np.log2, "log10": np.log10, "sin": np.sin, "cos": np.cos,
         "tan": np.tan, "asin": np.arcsin, "acos": np.arccos, "atan": np.arctan,
         "sinh": np.sinh, "cosh": np.cosh, "tanh": np.tanh, "floor": np.floor, "ceil": np.ceil}
# ops whose result is float whatever the operands (DALI: float32 from integers)
TO_FLOAT = {"div", "fpow", "atan2", "sqrt", "rsqrt", "cbrt", "exp", "log", "log2", "log10",
            "sin", "cos", "tan", "asin", "acos", "atan", "sinh", "cosh", "tanh"}
COMPARE = {"lt", "leq", "gt", "geq"}


def result_type(op: str, dtypes) -> np.dtype:
    """DALI's result type of ``op`` on operands of ``dtypes`` (module docstring)."""
    if op in COMPARE:
        return np.dtype(bool)
    floats = [d for d in dtypes if np.issubdtype(d, np.floating)]
    if floats:
        return max(floats, key=lambda d: d.itemsize)
    if op in TO_FLOAT:
        return np.dtype(np.float32)
    if op in ("floor", "ceil"):
        return np.result_type(*dtypes)
    return np.result_type(*dtypes)


def _columns(ctx, op, inputs):
    """Each operand as (per-sample list or dense array, is an image batch, layout)."""
    cols = []
    for k, v in enumerate(inputs):
        if isinstance(v, ImageBatch):
            v = M.images(v, ctx)
            cols.append((v.data if v.is_dense else list(v.data), True, v.layout))
        elif isinstance(v, np.ndarray):
            cols.append((v, False, None))
        elif isinstance(v, (list, tuple)):
            cols.append(([np.asarray(s) for s in v], False, None))
        else:
            raise TypeError(f"{op.name}: operand {k} is a {type(v).__name__}: DALI's arithmetic "
                            "takes tensors, images and numbers")
    return cols


def _apply(op, name, cols):
    f = BINARY.get(name) or UNARY[name]
    b = len(cols[0][0])
    if any(len(c[0]) != b for c in cols):
        raise ValueError(f"{op.name}: the operands have different batch sizes")
    dtypes = [np.asarray(c[0][0]).dtype if b else np.dtype(np.float32) for c in cols]
    out_t = result_type(name, dtypes)
    work_t = np.float64 if np.issubdtype(out_t, np.floating) or name in TO_FLOAT else None
    if all(isinstance(c[0], np.ndarray) for c in cols):  # dense: one call for the batch
        nd = max(c[0].ndim for c in cols)
        args = [c[0].reshape((b,) + (1,) * (nd - c[0].ndim) + c[0].shape[1:]) for c in cols]
        args = [a.astype(work_t) if work_t else a.astype(out_t) if name not in COMPARE else a
                for a in args]
        try:
            res = f(*args)
        except ValueError as e:
            raise ValueError(f"{op.name}: the operands' sample shapes do not broadcast ({e})") \
                from None
        return res.astype(out_t), None
    out = []
    for s in range(b):
        args = [np.asarray(c[0][s]) for c in cols]
        args = [a.astype(work_t) if work_t else a.astype(out_t) if name not in COMPARE else a
                for a in args]
        try:
            out.append(np.asarray(f(*args)).astype(out_t))
        except ValueError as e:
            raise ValueError(f"{op.name}: sample {s}: the operands' shapes do not broadcast "
                             f"({e})") from None
    return None, out


def _run(ctx, op, inputs, name):
    cols = _columns(ctx, op, inputs)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        dense, samples = _apply(op, name, cols)
    image = next((c for c in cols if c[1]), None)
    if image is not None:  # an image operand: an image batch of the result (same layout)
        data = dense if dense is not None else samples
        return ImageBatch(data, "cpu", image[2])
    return dense if dense is not None else batch_of(samples)


@register("_arith", devices=("cpu",), inputs=(1, 2), kind="other",
          input_names=("left", "right"), args={"op": "add"},
          arg_docs={"op": "the operator: " + ", ".join(sorted({*BINARY, *UNARY}))},
          output_spec="per sample, the operands' elementwise result (DALI's type promotion)",
          doc="a DataNode operator (a + b, a * 2, -a, a < b, ...): DALI's arithmetic, per sample")
def arith(ctx, op, inputs, args):
    name = args["op"]
    if name not in BINARY and name not in UNARY:
        raise ValueError(f"{op.name}: unknown operator {name!r}")
    if (name in UNARY) != (len(inputs) == 1):
        raise TypeError(f"{op.name}: {name} takes {1 if name in UNARY else 2} operand(s)")
    return _run(ctx, op, inputs, name)


def _register_math(name, arity):
    names = ("x",) if arity == 1 else ("x", "y")

    def impl(ctx, op, inputs, args):
        return _run(ctx, op, inputs, name)

    register(f"math.{name}", devices=("cpu",), inputs=(arity, arity), kind="other",
             input_names=names,
             output_spec="per sample, elementwise (DALI's type promotion: float32 from integers "
                         "where the function is not closed on them)",
             doc=f"DALI's math.{name}: elementwise per sample, on tensors, images or numbers")(impl)


for _n in ("abs", "fabs", "sqrt", "rsqrt", "cbrt", "exp", "log", "log2", "log10", "sin", "cos",
           "tan", "asin", "acos", "atan", "sinh", "cosh", "tanh", "floor", "ceil"):
    _register_math(_n, 1)
for _n in ("min", "max", "pow", "fpow", "atan2"):
    _register_math(_n, 2)


@register("math.clamp", devices=("cpu",), inputs=(3, 3), kind="other",
          input_names=("x", "lo", "hi"),
          output_spec="per sample, min(max(x, lo), hi) in the type of x and the bounds",
          doc="DALI's math.clamp: each element bounded to [lo, hi], per sample")
def clamp(ctx, op, inputs, args):
    return _run(ctx, op, [_run(ctx, op, inputs[:2], "max"), inputs[2]], "min")
