"""Random draws, per sample, from the counter-based streams (made on the host for both backends)."""
from __future__ import annotations

import numpy as np

from .registry import register

RAND = dict(devices=("cpu",), inputs=(0, 0), kind="random")


def _shape(args):
    s = args.get("shape")
    return () if s is None else ((s,) if np.ndim(s) == 0 else tuple(s))


def _draw(ctx, op, k):
    return ctx.rng(op), int(np.prod(k)) if k else 1


@register("random.uniform", **RAND, args={"range": (0.0, 1.0), "values": None, "shape": None},
          aliases=("uniform",), output_spec="float32 (B, *shape)",
          doc="uniform on range=[lo, hi), or a uniform pick among values=")
def uniform(ctx, op, inputs, args):
    shape = _shape(args)
    rng, k = _draw(ctx, op, shape)
    if args["values"] is not None:
        vals = np.asarray(args["values"], np.float32)
        out = vals[rng.integers(k, len(vals))]
    else:
        lo, hi = args["range"]
        out = rng.uniform(k, lo, hi).astype(np.float32)
    return out.reshape((ctx.batch_size,) + shape)


@register("random.coin_flip", **RAND, args={"probability": 0.5, "shape": None},
          aliases=("coin_flip",), output_spec="int32 (B, *shape) of 0/1",
          doc="1 with the given probability, else 0")
def coin_flip(ctx, op, inputs, args):
    shape = _shape(args)
    rng, k = _draw(ctx, op, shape)
    return (rng.uniform(k) < float(args["probability"])).astype(np.int32).reshape((ctx.batch_size,) + shape)


@register("random.normal", **RAND, args={"mean": 0.0, "stddev": 1.0, "shape": None},
          aliases=("normal",), output_spec="float32 (B, *shape)", doc="normal(mean, stddev)")
def normal(ctx, op, inputs, args):
    shape = _shape(args)
    rng, k = _draw(ctx, op, shape)
    return rng.normal(k, args["mean"], args["stddev"]).astype(np.float32).reshape((ctx.batch_size,) + shape)


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
