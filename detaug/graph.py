"""Tracing: DataNode / OpNode and the graph a pipeline definition builds."""
from __future__ import annotations

import threading

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

    def gpu(self) -> "DataNode":
        """This output on the device (DALI's ``.gpu()``): an explicit upload op."""
        from .ops.registry import call_op

        return call_op("_upload", (self,), {"device": "mixed"})


class OpNode:
    """One op instance: schema, inputs, arguments (scalars or per-sample DataNodes), device."""

    def __init__(self, graph, schema, inputs, args, device, name=None):
        self.graph, self.schema, self.inputs, self.args, self.device = graph, schema, list(inputs), dict(args), device
        self.id = len(graph.ops)
        # The random streams are keyed by the op's position among the user's ops, so that the
        # uploads a GPU graph adds (`.gpu()`, build's implicit copies) never shift them: the CPU
        # and GPU versions of a pipeline draw the same parameters.
        self.rng_id = sum(1 for o in graph.ops if not o.schema.name.startswith("_"))
        self.name = name or f"{schema.name}_{self.id}"
        self.outputs = []

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
