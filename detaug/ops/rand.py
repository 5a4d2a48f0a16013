"""Random draws, per sample, from the counter-based streams (made on the host for both backends).

Names, arguments and defaults are DALI's (``fn.random.uniform`` on [-1, 1), ``coin_flip`` with
probability 0.5 as int32, ``normal`` with mean 0 and stddev 1, ``dtype=`` converting with rounding
and clamping), so that a ported program draws from the same distributions; the individual values
come from detaug's keyed streams, not DALI's generator.
"""
from __future__ import annotations

import numpy as np

from ..core import types as _types
from .geometry import round_half_away
from .registry import register
from ..graph.arg_check import declare_ranges, finite, nonneg, prob, shape

RAND = dict(devices=("cpu",), inputs=(0, 0), kind="random")
_DTYPE_DOC = ("DALI's output type (types.INT32, 'uint8', ...): the draws converted to it, rounded "
              "to the nearest integer (halves away from zero) and clamped to its range")


def _shape(args):
    s = args.get("shape")
    return () if s is None else ((s,) if np.ndim(s) == 0 else tuple(int(x) for x in s))


def _draw(ctx, op, k):
    return ctx.rng(op), int(np.prod(k)) if k else 1


def _per_sample(value, b, width=1):
    """A scalar (or a pair, width=2) or a per-sample argument as a (B, width) float64 array."""
    a = np.asarray(value, np.float64)
    if a.ndim and a.shape[0] == b and a.size == b * width:
        return a.reshape(b, width)
    if a.size != width:
        raise ValueError(f"expected {width} value(s) or one per sample, got shape {a.shape}")
    return np.broadcast_to(a.reshape(1, width), (b, width))


def convert(op, values, dtype, default):
    """``values`` as DALI's ``dtype`` (None: ``default``): integer types round to nearest, halves
    away from zero, and clamp to the type's range; bool is ``value != 0``."""
    dt = np.dtype(default) if dtype is None else _types.to_numpy_type(dtype)
    if dt == np.bool_:
        return values != 0
    if np.issubdtype(dt, np.integer):
        info = np.iinfo(dt)
        return np.clip(round_half_away(values), info.min, info.max).astype(dt)
    if np.issubdtype(dt, np.floating):
        return np.asarray(values).astype(dt)
    raise ValueError(f"{op.name}: dtype {dtype!r} is not a numeric type")


declare_ranges("random.uniform", range=finite(form='range'), values=finite(form='seq'),
               shape=shape())
@register("random.uniform", **RAND,
          args={"range": (-1.0, 1.0), "values": None, "shape": None, "dtype": None},
          per_sample=("range",), aliases=("uniform",), output_spec="float32 (B, *shape), or dtype",
          arg_docs={"range": "[lo, hi) of a continuous draw (DALI's default [-1, 1)); a "
                             "per-sample input gives each sample its own pair",
                    "values": "a uniform pick among these values instead (not with range=)",
                    "dtype": _DTYPE_DOC},
          doc="uniform on range=[lo, hi) (default [-1, 1), as DALI), or a uniform pick among values=")
def uniform(ctx, op, inputs, args):
    shape = _shape(args)
    rng, k = _draw(ctx, op, shape)
    b = ctx.batch_size
    if args["values"] is not None:
        if not isinstance(args["range"], np.ndarray) and tuple(args["range"]) != (-1.0, 1.0):
            raise ValueError(f"{op.name}: range and values are mutually exclusive (as in DALI)")
        vals = np.asarray(args["values"], np.float32).reshape(-1)
        if not len(vals):
            raise ValueError(f"{op.name}: values is empty")
        out = vals[rng.integers(k, len(vals))]
    else:
        lohi = _per_sample(args["range"], b, 2)
        if (lohi[:, 1] < lohi[:, 0]).any():
            raise ValueError(f"{op.name}: range [lo, hi) needs lo <= hi")
        out = rng.uniform(k, lohi[:, :1], lohi[:, 1:]).astype(np.float32)
    return convert(op, out, args["dtype"], np.float32).reshape((b,) + shape)


declare_ranges("random.coin_flip", probability=prob(), shape=shape())
@register("random.coin_flip", **RAND, args={"probability": 0.5, "shape": None, "dtype": None},
          per_sample=("probability",), aliases=("coin_flip",),
          output_spec="int32 (B, *shape) of 0/1, or dtype",
          arg_docs={"probability": "the probability of 1 (per sample as an input)",
                    "dtype": "DALI's output type: int32 (default), uint8 or bool"},
          doc="1 with the given probability, else 0")
def coin_flip(ctx, op, inputs, args):
    shape = _shape(args)
    rng, k = _draw(ctx, op, shape)
    p = _per_sample(args["probability"], ctx.batch_size)
    if ((p < 0) | (p > 1)).any():
        raise ValueError(f"{op.name}: probability must be in [0, 1]")
    if args["dtype"] is not None and _types.to_numpy_type(args["dtype"]) not in (
            np.dtype(np.int32), np.dtype(np.uint8), np.dtype(np.bool_)):
        raise ValueError(f"{op.name}: dtype {args['dtype']!r}: coin_flip gives int32, uint8 or "
                         "bool (as DALI)")
    out = (rng.uniform(k) < p).astype(np.int32)
    return convert(op, out, args["dtype"], np.int32).reshape((ctx.batch_size,) + shape)


declare_ranges("random.normal", mean=finite(), stddev=nonneg(), shape=shape())
@register("random.normal", **RAND, args={"mean": 0.0, "stddev": 1.0, "shape": None, "dtype": None},
          per_sample=("mean", "stddev"), aliases=("normal", "normal_distribution"),
          output_spec="float32 (B, *shape), or dtype",
          arg_docs={"dtype": _DTYPE_DOC}, doc="normal(mean, stddev)")
def normal(ctx, op, inputs, args):
    shape = _shape(args)
    rng, k = _draw(ctx, op, shape)
    b = ctx.batch_size
    mean, std = _per_sample(args["mean"], b), _per_sample(args["stddev"], b)
    out = rng.normal(k, mean, std).astype(np.float32)
    return convert(op, out, args["dtype"], np.float32).reshape((b,) + shape)


declare_ranges("random.choice", values=finite(form='seq'), p=prob(form='seq'), shape=shape())
@register("random.choice", **RAND, args={"values": 2, "p": None, "shape": None},
          aliases=("choice",), output_spec="(B, *shape) values' dtype",
          doc="pick among values (or range(n) for an int) with probabilities p")
def choice(ctx, op, inputs, args):
    shape = _shape(args)
    rng, k = _draw(ctx, op, shape)
    vals = np.arange(args["values"]) if np.ndim(args["values"]) == 0 else np.asarray(args["values"])
    p = np.full(len(vals), 1.0 / len(vals)) if args["p"] is None else np.asarray(args["p"], np.float64)
    if len(p) != len(vals) or np.any(p < 0) or not np.isclose(p.sum(), 1.0):
        raise ValueError(f"{op.name}: p must be {len(vals)} non-negative probabilities summing to 1")
    idx = np.searchsorted(np.cumsum(p)[:-1], rng.uniform(k), side="right")
    return vals[idx].reshape((ctx.batch_size,) + shape)
