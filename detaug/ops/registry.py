"""One registry makes the functional API (``fn.flip``), the class API (``ops.Flip``), the op table
in the README and the list of ops that the tests must cover, from one declaration per op."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

from .. import graph as _graph

REGISTRY: dict = {}
ALIASES: dict = {}


@dataclass
class OpSchema:
    """What an op declares.

    Attributes:
        name: dotted functional name ('flip', 'readers.coco', 'random.uniform').
        impl: ``impl(ctx, op, inputs, args) -> tuple of outputs`` (host planning + kernels).
        devices: devices it runs on ('cpu', 'mixed', 'gpu').
        inputs: (min, max) number of positional inputs.
        outputs: number of outputs, or ``f(num_inputs, args) -> int``.
        args: allowed keyword arguments and their defaults.
        per_sample: arguments that may be per-sample DataNodes (e.g. ``fn.random.uniform(...)``).
        output_spec: the shape/dtype rule of the outputs, in words (validated at build).
        kind: 'source' (reader / external source), 'random', 'geometric', 'box', 'color', 'other'.
        doc: one line for the op table.
    """

    name: str
    impl: Callable
    devices: tuple = ("cpu",)
    inputs: tuple = (1, 1)
    outputs: object = 1
    args: dict = field(default_factory=dict)
    per_sample: tuple = ()
    output_spec: str = ""
    kind: str = "other"
    doc: str = ""
    aliases: tuple = ()
    class_name: str = ""

    def num_outputs(self, n_inputs: int, args: dict) -> int:
        return self.outputs(n_inputs, args) if callable(self.outputs) else self.outputs


COMMON_ARGS = {"device": None, "name": None, "seed": None}


def register(name, **decl):
    """Decorator: ``@register("flip", devices=("cpu", "gpu"), inputs=(1, 2), ...)``."""

    def deco(impl):
        schema = OpSchema(name=name, impl=impl, **decl)
        REGISTRY[name] = schema
        for alias in schema.aliases:
            ALIASES[alias] = name
        return impl

    return deco


def schema_of(name: str) -> OpSchema:
    name = ALIASES.get(name, name)
    try:
        return REGISTRY[name]
    except KeyError:
        raise KeyError(f"unknown op {name!r}") from None


def _infer_device(schema: OpSchema, inputs, device):
    if device is not None:
        if device not in schema.devices:
            raise ValueError(f"{schema.name}: device {device!r} not supported "
                             f"(supported: {', '.join(schema.devices)})")
        return device
    if any(getattr(i, "device", "cpu") in ("gpu", "mixed") for i in inputs) and "gpu" in schema.devices:
        return "gpu"
    return "cpu" if "cpu" in schema.devices else schema.devices[0]


def call_op(name: str, inputs, kwargs: dict):
    """Trace one call of op ``name``; returns a DataNode or a tuple of them."""
    schema = schema_of(name)
    kwargs = dict(kwargs)
    device, node_name = kwargs.pop("device", None), kwargs.pop("name", None)
    unknown = set(kwargs) - set(schema.args) - {"seed"}
    if unknown:
        raise TypeError(f"{schema.name}: unknown argument(s) {sorted(unknown)}; "
                        f"accepted: {sorted(schema.args)}")
    lo, hi = schema.inputs
    if not lo <= len(inputs) <= hi:
        raise TypeError(f"{schema.name}: takes {lo}..{hi} inputs, got {len(inputs)}")
    for i in inputs:
        if not isinstance(i, _graph.DataNode):
            raise TypeError(f"{schema.name}: inputs must be outputs of other ops, got {type(i).__name__}")
    for k, v in kwargs.items():
        if isinstance(v, _graph.DataNode) and k not in schema.per_sample:
            raise TypeError(f"{schema.name}: argument {k!r} cannot be a per-sample input")
    args = {**schema.args, **kwargs}
    device = _infer_device(schema, inputs, device)
    g = _graph.current()
    op = g.add(schema, inputs, args, device, node_name)
    out_device = "gpu" if device in ("gpu", "mixed") else "cpu"
    n = schema.num_outputs(len(inputs), args)
    op.outputs = [_graph.DataNode(op, i, out_device) for i in range(n)]
    return op.outputs[0] if n == 1 else tuple(op.outputs)


class _Namespace:
    def __init__(self, path=""):
        self._path = path

    def __repr__(self):
        return f"<detaug namespace {self._path or 'fn'}>"


def _camel(last: str) -> str:
    special = {"coco": "COCO", "voc": "VOC", "hsv": "Hsv", "file": "File"}
    return special.get(last, "".join(p.capitalize() for p in last.split("_")))


def make_functional():
    """Build ``fn``: one function per registered name and alias, nested by dots."""
    fn = _Namespace()
    for name in list(REGISTRY) + list(ALIASES):
        if name.startswith("_"):
            continue
        parts = name.split(".")
        ns = fn
        for p in parts[:-1]:
            if not hasattr(ns, p):
                setattr(ns, p, _Namespace(p))
            ns = getattr(ns, p)

        def f(*inputs, _name=name, **kwargs):
            return call_op(_name, inputs, kwargs)

        f.__name__ = parts[-1]
        f.__doc__ = schema_of(name).doc
        setattr(ns, parts[-1], f)
    return fn


class _OpClass:
    """Base of the generated ``ops.X`` classes: arguments at construction, inputs at call."""

    _op_name = ""

    def __init__(self, **kwargs):
        self._kwargs = kwargs

    def __call__(self, *inputs, **kwargs):
        return call_op(self._op_name, inputs, {**self._kwargs, **kwargs})


def make_classes():
    """Build ``ops``: ``ops.Flip``, ``ops.readers.COCO``, ``ops.random.Uniform``, ..."""
    ops = _Namespace("ops")
    for name in list(REGISTRY) + list(ALIASES):
        if name.startswith("_"):
            continue
        parts = name.split(".")
        ns = ops
        for p in parts[:-1]:
            if not hasattr(ns, p):
                setattr(ns, p, _Namespace(p))
            ns = getattr(ns, p)
        cls = type(_camel(parts[-1]), (_OpClass,), {"_op_name": name, "__doc__": schema_of(name).doc})
        setattr(ns, cls.__name__, cls)
    return ops


def op_table() -> list:
    """(name, devices, aliases, doc) for every public op, for the README and the tests."""
    return [(s.name, s.devices, s.aliases, s.doc) for s in REGISTRY.values() if not s.name.startswith("_")]


def op_table_markdown() -> str:
    """The README's op table, generated from the registry (tests check the README holds it)."""
    rows = ["| op | devices | DALI-style aliases | what it does |", "|---|---|---|---|"]
    for name, devices, aliases, doc in sorted(op_table()):
        al = ", ".join(f"`fn.{a}`" for a in aliases) or ""
        rows.append(f"| `fn.{name}` | {', '.join(devices)} | {al} | {doc} |")
    return "\n".join(rows)


if __name__ == "__main__":
    from detaug.ops import registry as _r  # the registered module, not this __main__ copy

    print(_r.op_table_markdown())
