"""Tracing: the op registry, DataNode / OpNode and the graph a pipeline definition builds.

The engine layer below the ops (docs/design.md, "Layers"): op modules register their schema
here (:func:`register`), and a call of ``fn.<op>`` traces one node (:func:`call_op`). The
generated APIs and docs (``fn``, ``ops``, the op table) are made in detaug/ops/registry.py.
"""
from __future__ import annotations

import threading
import warnings
from dataclasses import dataclass, field
from typing import Callable

from .arg_check import check_args, derive_kinds

_state = threading.local()


class DataNode:
    """A symbolic output of an op inside a pipeline definition."""

    def __init__(self, op: "OpNode", index: int, device: str):
        self.op, self.index, self.device = op, index, device

    @property
    def name(self) -> str:
        return f"{self.op.name}[{self.index}]" if len(self.op.outputs) > 1 else self.op.name

    def __repr__(self) -> str:
        return f"DataNode({self.name}, device={self.device})"

    # DALI's arithmetic on DataNodes (detaug/dali/arithmetic.py runs it): numbers become
    # constants. == and != are left to identity (nodes are kept in dicts and lists).
    def _arith(self, name, *others):
        return call_op("_arith", (self,) + others, {"op": name})

    def _rarith(self, name, other):
        return call_op("_arith", (other, self), {"op": name})

    def __add__(self, o): return self._arith("add", o)  # noqa: E704
    def __radd__(self, o): return self._rarith("add", o)  # noqa: E704
    def __sub__(self, o): return self._arith("sub", o)  # noqa: E704
    def __rsub__(self, o): return self._rarith("sub", o)  # noqa: E704
    def __mul__(self, o): return self._arith("mul", o)  # noqa: E704
    def __rmul__(self, o): return self._rarith("mul", o)  # noqa: E704
    def __truediv__(self, o): return self._arith("div", o)  # noqa: E704
    def __rtruediv__(self, o): return self._rarith("div", o)  # noqa: E704
    def __floordiv__(self, o): return self._arith("fdiv", o)  # noqa: E704
    def __rfloordiv__(self, o): return self._rarith("fdiv", o)  # noqa: E704
    def __mod__(self, o): return self._arith("mod", o)  # noqa: E704
    def __pow__(self, o): return self._arith("pow", o)  # noqa: E704
    def __rpow__(self, o): return self._rarith("pow", o)  # noqa: E704
    def __lt__(self, o): return self._arith("lt", o)  # noqa: E704
    def __le__(self, o): return self._arith("leq", o)  # noqa: E704
    def __gt__(self, o): return self._arith("gt", o)  # noqa: E704
    def __ge__(self, o): return self._arith("geq", o)  # noqa: E704
    def __and__(self, o): return self._arith("bitand", o)  # noqa: E704
    def __or__(self, o): return self._arith("bitor", o)  # noqa: E704
    def __xor__(self, o): return self._arith("bitxor", o)  # noqa: E704
    def __neg__(self): return self._arith("neg")  # noqa: E704
    def __pos__(self): return self._arith("pos")  # noqa: E704

    __hash__ = object.__hash__

    def gpu(self) -> "DataNode":
        """This output on the device (DALI's ``.gpu()``): an explicit upload op; an output
        already on the device is itself (as DALI's)."""
        if self.device == "gpu":
            return self
        return call_op("_upload", (self,), {"device": "mixed"})


class OpNode:
    """One op instance: schema, inputs, arguments (scalars or per-sample DataNodes), device."""

    def __init__(self, graph, schema, inputs, args, device, name=None):
        self.graph, self.schema, self.inputs, self.args, self.device = graph, schema, list(inputs), dict(args), device
        self.id = len(graph.ops)
        # The random streams are keyed by the op's position among the user's ops, so that the
        # uploads a GPU graph adds (`.gpu()`, build's implicit copies) never shift them: the CPU
        # and GPU versions of a pipeline draw the same parameters.
        self.rng_id = sum(1 for o in graph.ops if not o.schema.internal)
        self.name = name or f"{schema.name}_{self.id}"
        self.outputs = []

    @property
    def gpu_decode(self) -> bool:
        """Whether this op decodes on the GPU in the decode processes (a 'decode_service'
        decoder on device='mixed')."""
        return self.schema.has("decode_service") and self.device == "mixed"

    @property
    def arg_inputs(self) -> dict:
        return {k: v for k, v in self.args.items() if isinstance(v, DataNode)}

    def __repr__(self) -> str:
        return f"OpNode({self.name}, {self.device})"


class Graph:
    def __init__(self):
        self.ops: list[OpNode] = []

    def add(self, schema, inputs, args, device, name=None) -> OpNode:
        op = OpNode(self, schema, inputs, args, device, name)
        self.ops.append(op)
        return op


def push(graph: Graph) -> None:
    _state.__dict__.setdefault("stack", []).append(graph)


def pop() -> None:
    _state.stack.pop()


def current() -> Graph:
    stack = getattr(_state, "stack", [])
    if not stack:
        raise RuntimeError("detaug ops must be called while a pipeline is being defined: inside a "
                           "@pipeline_def function, a `with pipe:` block, or define_graph()")
    return stack[-1]


# ---- the registry: one declaration per op ---------------------------------------------------
REGISTRY: dict = {}
ALIASES: dict = {}


@dataclass
class OpSchema:
    """What an op declares.

    Attributes:
        name: dotted functional name ('flip', 'readers.coco', 'random.uniform').
        impl: ``impl(ctx, op, inputs, args) -> tuple of outputs`` (host planning + kernels);
            an op declaring ``draws`` or ``host_plan`` is handed those as a fifth argument.
        devices: devices it runs on ('cpu', 'mixed', 'gpu').
        inputs: (min, max) number of positional inputs.
        outputs: number of outputs, or ``f(num_inputs, args) -> int``.
        args: allowed keyword arguments and their defaults.
        per_sample: arguments that may be per-sample DataNodes (e.g. ``fn.random.uniform(...)``).
        output_spec: the shape/dtype rule of the outputs, in words (validated at build).
        kind: 'source' (reader / external source), 'random', 'geometric', 'box', 'color', 'other'.
        doc: one line for the op table.
        input_names: names of the positional inputs, for signatures and docs (default: by kind,
            see ``input_names``).
        arg_docs: optional one-line meaning of each argument, for docstrings and docs/api.md.
        unavailable: devices the op does not run on that a user may ask for (DALI has it
            there): device -> why, and what to do instead; asking for one raises with it.
        hints: arguments accepted for compatibility (DALI's tuning knobs) that change no value
            here: name -> why. Their arg_docs say 'hint', and setting one to anything but its
            default warns once per process (:func:`call_op`). Every other argument changes the
            output or is refused (tests/ops/test_op_args.py).
        output_names: ``output_names(args) -> list of names or None``: the op's outputs as a
            dict by name instead of a tuple (DALI's ``readers.tfrecord(features=...)``).
        rewrite: DALI's positional forms that are arguments here: ``rewrite(inputs, kwargs) ->
            (inputs, kwargs)`` at trace time (warp_affine's ``mtx`` input becomes ``matrix=``).
        partners: a multi-sample op (mosaic, mixup) makes each output sample from a group of
            input samples: ``partners(op, rng, pool_sizes) -> (groups (B + 1,), picks (M,))``
            draws, from the op's keyed streams of its B output samples (``rng``, a SampleRNG),
            sample b's group ``picks[groups[b]:groups[b + 1]]``: -1 for the sample itself (first),
            else a partner's index in its pool of ``pool_sizes[b]`` (the epoch's records, or the
            samples of its own batch: the op's ``partners`` argument). detaug/runtime/partners.py
            runs the ops upstream on the members.
        rule: its outputs' sizes from its inputs' (detaug/core/shapes.py): ``rule(ins, args) ->
            shapes.Out``, executable; the memory plan reads it (runtime/gpu/output_sizes.py).
            Every op that runs on the device declares one (tests/ops/test_declarations.py).
        plans: whether its device variant plans on the host ahead of the launch (planning ahead:
            runtime/gpu/plan_ahead.py): True, False, or ``plans(args, device) -> bool`` where it
            depends on the arguments. Every op that runs on the device declares it. An op whose
            body computes its kernel's arguments and calls graph/dispatch.py's ``launch`` plans
            where its output keeps its input's shapes and uint8 pixels (the launch is deferred).
        roles: what the engine treats it as (:data:`ROLES`), instead of knowing it by name.
        draws: its random draws per sample, in the order they are drawn from its keyed stream
            (:class:`Draw`): drawn before its body runs and handed to it as ``impl(ctx, op,
            inputs, args, draws)`` (a dict name -> (B, count) array), replayable apart
            (:meth:`draw`).
        host_plan: the launch's parameters from its arguments and draws alone (no pixel), for a
            device op that reads pixels: ``host_plan(op, args, draws, batch_size, images) ->
            params`` (picklable); ``images`` is its image input as far as it is known without
            pixels (sizes and channels), for an op with the role 'plan_reads_images', else None. The engine makes them (:meth:`plan_params`: in a host worker ahead of
            the launch where it plans ahead, else just before the body) and hands them to the
            body as ``impl(ctx, op, inputs, args, params)`` in place of the draws.
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
    input_names: tuple = ()
    arg_docs: dict = field(default_factory=dict)
    hints: dict = field(default_factory=dict)
    unavailable: dict = field(default_factory=dict)
    partners: Callable | None = None
    rule: Callable | None = None
    plans: object = None
    roles: frozenset = frozenset()
    draws: tuple = ()
    host_plan: Callable | None = None
    rewrite: Callable | None = None
    output_names: Callable | None = None

    def num_outputs(self, n_inputs: int, args: dict) -> int:
        return self.outputs(n_inputs, args) if callable(self.outputs) else self.outputs

    @property
    def internal(self) -> bool:
        """An op the engine adds (an upload), not one the user calls."""
        return self.name.startswith("_")

    def has(self, role: str) -> bool:
        """Whether the op declares ``role`` (:data:`ROLES`)."""
        if role not in ROLES:
            raise KeyError(f"unknown role {role!r}; the roles: {sorted(ROLES)}")
        return role in self.roles

    def plans_on_host(self, args: dict, device: str) -> bool:
        """Whether this op, with ``args`` on ``device``, plans on the host whatever its data."""
        return bool(self.plans(args, device) if callable(self.plans) else self.plans)

    def draw(self, rng, args: dict) -> dict:
        """Its declared draws from ``rng`` (a SampleRNG of its keyed streams), in order: name ->
        (B, count) array."""
        return {d.name: d.take(rng, args) for d in self.draws}

    def plan_params(self, op, rng, args: dict, batch_size: int, images=None):
        """``host_plan``'s parameters of a launch of ``batch_size`` samples: its draws from
        ``rng`` (the op's keyed streams of those samples), then the plan (``images``: its image
        input, where it declares 'plan_reads_images')."""
        return self.host_plan(op, args, self.draw(rng, args), batch_size,
                              images if "plan_reads_images" in self.roles else None)


COMMON_ARGS = {"device": None, "name": None, "seed": None}
PARAMS = -1  # the output index under which a batch context holds an op's planned parameters

ROLES = {
    "decoder": "decodes encoded images: its images are the decode side's (the decode rings), "
               "not a launch's",
    "decode_service": "a decoder that, on device='mixed', runs in the decode processes and "
                      "makes the pipeline a GPU-decode one",
    "warp_epilogue": "fused into the warp that ends a geometric chain (it never holds an image "
                     "of its own after one)",
    "decode_cache": "a decoder whose CPU output is a pure function of the encoded bytes and its "
                    "scalar arguments (no draw, no per-sample argument): it keeps decoded images "
                    "in the cache that detaug/runtime/decode_cache.py plans",
    "upload": "moves a value from the host to the device",
    "plan_reads_images": "its host plan reads its image input's sizes and channels (no pixel): "
                         "planned ahead only where that input is known ahead",
}


@dataclass(frozen=True)
class Draw:
    """One named random draw of an op, per sample: ``count`` values (an int, or ``count(args)``)
    of ``kind`` ('uniform' on [0, 1), 'normal', 'bits': uint64 words) from its keyed stream."""

    name: str
    count: object = 1
    kind: str = "uniform"

    def take(self, rng, args):
        k = int(self.count(args) if callable(self.count) else self.count)
        return getattr(rng, self.kind)(k)


def register(name, **decl):
    """Decorator: ``@register("flip", devices=("cpu", "gpu"), inputs=(1, 2), ...)``."""

    def deco(impl):
        schema = OpSchema(name=name, impl=impl, **decl)
        unknown = set(schema.hints) - set(schema.args)
        if unknown:
            raise ValueError(f"{name}: hints {sorted(unknown)} are not arguments")
        if set(schema.roles) - set(ROLES):
            raise ValueError(f"{name}: unknown roles {sorted(set(schema.roles) - set(ROLES))}")
        schema.roles = frozenset(schema.roles)
        schema.arg_docs = {**schema.arg_docs,
                           **{k: f"hint, changes no value here: {why}" for k, why in schema.hints.items()}}
        REGISTRY[name] = schema
        derive_kinds(name, schema.args, schema.hints)
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


def _takes_auto(schema: OpSchema) -> bool:
    """Ops that run on the host or as the mixed stage (the image decoder) take device='auto'."""
    return "cpu" in schema.devices and "mixed" in schema.devices


def _infer_device(schema: OpSchema, inputs, device):
    if device == "auto" and _takes_auto(schema):
        from ..core.backend import resolve_auto_device

        return resolve_auto_device("mixed")
    on_gpu = any(getattr(i, "device", "cpu") in ("gpu", "mixed") for i in inputs)
    asked = device if device is not None else ("gpu" if on_gpu else None)
    if asked in schema.unavailable:
        raise NotImplementedError(f"{schema.name}: device {asked!r}"
                                  f"{'' if device else ' (its input is on the GPU)'}: "
                                  f"{schema.name} {schema.unavailable[asked]}")
    if device is not None:
        if device not in schema.devices:
            raise ValueError(f"{schema.name}: device {device!r} not supported "
                             f"(supported: {', '.join(schema.devices)})")
        return device
    if any(getattr(i, "device", "cpu") in ("gpu", "mixed") for i in inputs) and "gpu" in schema.devices:
        return "gpu"
    return "cpu" if "cpu" in schema.devices else schema.devices[0]


_HINTS_SAID: set = set()


def _say_hints(schema: OpSchema, kwargs: dict) -> None:
    """Warn, once per (op, argument) and process, that a hint argument was set: it is accepted
    for compatibility and changes nothing."""
    for k in schema.hints:
        if k in kwargs and kwargs[k] != schema.args[k] and (schema.name, k) not in _HINTS_SAID:
            _HINTS_SAID.add((schema.name, k))
            warnings.warn(f"{schema.name}: {k}={kwargs[k]!r} is accepted as a hint and changes no "
                          f"value here ({schema.hints[k]})", stacklevel=4)


def _constant_node(schema, v):
    """An input as a DataNode: a number, a list / tuple of numbers or a NumPy array becomes a
    ``constant`` op (as DALI does: ints int32, floats float32), a ``types.Constant`` one of its
    type; anything else raises."""
    if isinstance(v, DataNode):
        return v
    import numpy as np

    from ..core.types import Constant

    if isinstance(v, Constant):  # DALI's types.Constant: its own type
        a = v.value
        key = "fdata" if a.dtype.kind == "f" else "idata"
        return call_op("constant", (), {key: a.reshape(-1).tolist(), "shape": list(a.shape),
                                        "dtype": a.dtype.name})
    if isinstance(v, (int, float, list, tuple, np.ndarray, np.number)) and not isinstance(v, bool):
        a = np.asarray(v)
        if a.dtype.kind in "iu":
            return call_op("constant", (), {"idata": a.reshape(-1).tolist(), "shape": list(a.shape)})
        if a.dtype.kind == "f":
            return call_op("constant", (), {"fdata": a.reshape(-1).tolist(), "shape": list(a.shape)})
    raise TypeError(f"{schema.name}: inputs must be outputs of other ops (or numbers / arrays, "
                    f"made constants), got {type(v).__name__}")


def call_op(name: str, inputs, kwargs: dict):
    """Trace one call of op ``name``; returns a DataNode or a tuple of them."""
    schema = schema_of(name)
    kwargs = dict(kwargs)
    if schema.rewrite is not None:
        inputs, kwargs = schema.rewrite(tuple(inputs), kwargs)
    device, node_name = kwargs.pop("device", None), kwargs.pop("name", None)
    unknown = set(kwargs) - set(schema.args) - {"seed"}
    if unknown:
        raise TypeError(f"{schema.name}: unknown argument(s) {sorted(unknown)}; "
                        f"accepted: {sorted(schema.args)}")
    lo, hi = schema.inputs
    if not lo <= len(inputs) <= hi:
        raise TypeError(f"{schema.name}: takes {lo}..{hi} inputs, got {len(inputs)}")
    inputs = tuple(_constant_node(schema, i) for i in inputs)
    for k, v in kwargs.items():
        if isinstance(v, DataNode) and k not in schema.per_sample:
            raise TypeError(f"{schema.name}: argument {k!r} cannot be a per-sample input")
    check_args(schema.name, kwargs)  # NaN, inf, out of range: refused by op and argument name
    args = {**schema.args, **kwargs}
    _say_hints(schema, kwargs)
    device = _infer_device(schema, inputs, device)
    g = current()
    op = g.add(schema, inputs, args, device, node_name)
    out_device = "gpu" if device in ("gpu", "mixed") else "cpu"
    n = schema.num_outputs(len(inputs), args)
    op.outputs = [DataNode(op, i, out_device) for i in range(n)]
    names = schema.output_names(args) if schema.output_names is not None else None
    if names:
        return dict(zip(names, op.outputs))
    return op.outputs[0] if n == 1 else tuple(op.outputs)


def needed_ops(outputs) -> list:
    """The ops the ``outputs`` (DataNodes) need, in a topological order (inputs first; build's
    implicit uploads are appended to the graph after the ops that consume them)."""
    order, seen = [], set()

    def visit(op):
        if op.id in seen:
            return
        seen.add(op.id)
        for i in op.inputs:
            visit(i.op)
        for a in op.arg_inputs.values():
            visit(a.op)
        order.append(op)

    for o in outputs:
        visit(o.op)
    return order


def validate(graph) -> None:
    """Data moves cpu -> mixed -> gpu only; a gpu op's cpu inputs are uploaded once (an
    implicit mixed '_upload' op, made in ``graph``), and its per-sample arguments stay on the
    host."""
    push(graph)
    try:
        for op in list(graph.ops):
            for k, inp in enumerate(op.inputs):
                if op.device == "cpu" and inp.device == "gpu":
                    raise ValueError(f"{op.name} runs on the cpu but its input {inp.name} is on "
                                     "the gpu: data moves cpu -> mixed -> gpu only")
                if op.device == "gpu" and inp.device == "cpu" and not op.schema.has("upload"):
                    op.inputs[k] = inp.gpu()
            for k, a in op.arg_inputs.items():
                if a.device != "cpu":
                    raise ValueError(f"{op.name}: per-sample argument {k!r} must come from a "
                                     "cpu op (random draws are made on the host)")
    finally:
        pop()
