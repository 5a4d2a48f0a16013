"""A traced graph written out: Graphviz dot, and the bytes of ``Pipeline.serialize`` (rebuilt
by ``Pipeline.deserialize`` in another process)."""
from __future__ import annotations

import pickle

from ..graph import trace as _graph

_FORMAT = "detaug-pipeline-1"
_COLORS = {"cpu": "lightblue", "mixed": "plum", "gpu": "palegreen"}


def save_dot(path, ops, outputs):
    """Write ``ops`` in Graphviz dot: one box per op (name, device), one edge per input
    (dashed for per-sample arguments), one ellipse per pipeline output."""
    lines = ["digraph detaug {", "  rankdir=LR;", "  node [shape=box, style=filled];"]
    for op in ops:
        lines.append(f'  op{op.id} [label="{op.name}\\n{op.schema.name} ({op.device})", '
                     f'fillcolor={_COLORS[op.device]}];')
        for i in op.inputs:
            lines.append(f'  op{i.op.id} -> op{op.id} [label="{i.index}"];')
        for k, a in op.arg_inputs.items():
            lines.append(f'  op{a.op.id} -> op{op.id} [label="{k}", style=dashed];')
    for k, o in enumerate(outputs):
        lines.append(f'  out{k} [label="output {k}", shape=ellipse, fillcolor=white];')
        lines.append(f"  op{o.op.id} -> out{k};")
    lines.append("}")
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")


def _ref(node):
    return (node.op.id, node.index)


def dumps(params: dict, ops, outputs) -> bytes:
    """The pipeline parameters and the traced ops (schema, name, device, inputs, arguments: a
    per-sample argument as a reference to its node) as pickled bytes."""
    described = [{"schema": op.schema.name, "name": op.name, "device": op.device,
                  "inputs": [_ref(i) for i in op.inputs],
                  "args": {k: (("node", _ref(v)) if isinstance(v, _graph.DataNode) else ("value", v))
                           for k, v in op.args.items()}}
                 for op in ops]
    return pickle.dumps({"format": _FORMAT, "params": params, "ops": described,
                         "outputs": [_ref(o) for o in outputs]})


def loads(data: bytes):
    """(parameters, rebuild): ``rebuild(graph)`` adds the ops to a new pipeline's graph and
    returns its output nodes."""
    from ..ops.registry import schema_of

    d = pickle.loads(data)
    if d.get("format") != _FORMAT:
        raise ValueError("not a serialized detaug pipeline")

    def rebuild(graph):
        nodes = {}
        for desc in d["ops"]:
            schema = schema_of(desc["schema"])
            args = {k: (nodes[v] if kind == "node" else v) for k, (kind, v) in desc["args"].items()}
            op = graph.add(schema, [nodes[r] for r in desc["inputs"]], args, desc["device"], desc["name"])
            out_device = "gpu" if op.device in ("gpu", "mixed") else "cpu"
            op.outputs = [_graph.DataNode(op, i, out_device)
                          for i in range(schema.num_outputs(len(op.inputs), args))]
            for i, o in enumerate(op.outputs):
                nodes[(op.id, i)] = o
        return [nodes[r] for r in d["outputs"]]

    return d["params"], rebuild
