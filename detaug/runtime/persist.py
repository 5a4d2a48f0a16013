"""A traced graph written out: Graphviz dot, and the bytes of ``Pipeline.serialize`` (rebuilt
by ``Pipeline.deserialize`` in another process).

The serialized form is data only: UTF-8 JSON of the pipeline's parameters and its traced ops
(schema name, node name, device, inputs, arguments). Argument values are JSON's own (None, bools,
numbers, strings, lists) or tagged objects: ``{"$tuple": [...]}``, ``{"$dict": [[key, value],
...]}``, ``{"$float": "nan"|"inf"|"-inf"}``, ``{"$enum": [class, member]}`` (a constant of
``detaug.types``), ``{"$array": {"dtype", "shape", "data" (base64 of the C-ordered bytes),
"scalar"}}`` (a NumPy array or scalar of booleans, numbers or fixed-width strings),
``{"$bytes": base64}`` and ``{"$path": str}``. :func:`loads` builds nothing but those values and
the registry's ops: no pickle, no import by name, so a file from anyone cannot run code; an op,
argument, parameter, tag or dtype it does not know is refused by name (:class:`GraphFormatError`).
A value that is not data (an external source's callable or generator, any other object) is refused
by :func:`dumps`, naming the op and the argument.
"""
from __future__ import annotations

import base64
import enum
import json
import math
import pathlib

import numpy as np

from ..core import types as _types
from ..graph import trace as _graph
from ..graph.arg_check import check_args

_FORMAT = "detaug-pipeline-2"
_COLORS = {"cpu": "lightblue", "mixed": "plum", "gpu": "palegreen"}
_ENUMS = {c.__name__: c for c in vars(_types).values()
          if isinstance(c, type) and issubclass(c, enum.Enum) and c.__module__ == _types.__name__}
_DTYPE_KINDS = "biufcSU"  # booleans, integers, floats, complex, fixed-width bytes and text


_TOO_DEEP = ("not a serialized detaug pipeline: its JSON is nested deeper than Python can read "
             "(dumps never writes such a document)")


class GraphFormatError(ValueError):
    """Bytes that are not a pipeline serialized by :func:`dumps`, or that name what this version
    of detaug does not have."""


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
    return [node.op.id, node.index]


def encode(v, where: str):
    """``v`` as JSON data (tagged where JSON has no such value); ``where`` names it in the error
    for a value that is not data."""
    if v is None or isinstance(v, (bool, str)) and not isinstance(v, enum.Enum):
        return v
    if isinstance(v, enum.Enum):
        if _ENUMS.get(type(v).__name__) is not type(v):
            raise TypeError(f"{where}: {v!r} is an enum detaug cannot serialize")
        return {"$enum": [type(v).__name__, v.name]}
    if isinstance(v, int):
        return int(v)
    if isinstance(v, float):
        return v if math.isfinite(v) else {"$float": repr(v)}
    if isinstance(v, (np.ndarray, np.generic)):
        a = np.asarray(v)
        if a.dtype.kind not in _DTYPE_KINDS:
            raise TypeError(f"{where}: an array of dtype {a.dtype} is not data (only booleans, "
                            "numbers and fixed-width strings are serialized)")
        return {"$array": {"dtype": a.dtype.str, "shape": list(a.shape), "scalar": isinstance(v, np.generic),
                           "data": base64.b64encode(np.ascontiguousarray(a).tobytes()).decode()}}
    if isinstance(v, (bytes, bytearray)):
        return {"$bytes": base64.b64encode(bytes(v)).decode()}
    if isinstance(v, pathlib.PurePath):
        return {"$path": str(v)}
    if isinstance(v, list):
        return [encode(x, where) for x in v]
    if isinstance(v, tuple):
        return {"$tuple": [encode(x, where) for x in v]}
    if isinstance(v, dict):
        return {"$dict": [[encode(k, where), encode(x, where)] for k, x in v.items()]}
    what = "a callable" if callable(v) else f"a {type(v).__name__}"
    raise TypeError(f"{where} is {what} ({v!r:.80}), which cannot be serialized as data: "
                    "serialize() writes a pipeline as data only (JSON), so that loading it can run "
                    "no code; give the value as data (numbers, strings, lists, arrays), or rebuild "
                    "the pipeline from its definition in the other process")


def decode(v, where: str):
    """The value :func:`encode` wrote; GraphFormatError for anything else."""
    if v is None or isinstance(v, (bool, int, float, str)):
        return v
    if isinstance(v, list):
        return [decode(x, where) for x in v]
    if not isinstance(v, dict) or len(v) != 1:
        raise GraphFormatError(f"{where}: {v!r:.80} is not a serialized value")
    (tag, x), = v.items()
    try:
        if tag == "$tuple":
            return tuple(decode(y, where) for y in _list(x))
        if tag == "$dict":
            return {_hashable(decode(k, where), where): decode(y, where) for k, y in _list(x)}
        if tag == "$float" and x in ("nan", "inf", "-inf"):
            return float(x)
        if tag == "$enum":
            cls, name = _list(x)
            return _ENUMS[cls][name]
        if tag == "$bytes":
            return base64.b64decode(x, validate=True)
        if tag == "$path" and isinstance(x, str):
            return pathlib.Path(x)
        if tag == "$array":
            return _array(x, where)
    except (KeyError, TypeError, ValueError) as e:
        if isinstance(e, GraphFormatError):
            raise
        raise GraphFormatError(f"{where}: a malformed {tag} value ({type(e).__name__}: {e})") from None
    raise GraphFormatError(f"{where}: unknown value tag {tag!r}")


def _list(x):
    if not isinstance(x, list):
        raise TypeError(f"expected a list, got {type(x).__name__}")
    return x


def _hashable(k, where):
    if isinstance(k, list):
        raise GraphFormatError(f"{where}: a list cannot be a dict key")
    return k


def _array(x, where):
    if not isinstance(x["dtype"], str):
        raise TypeError("the dtype must be a string")
    dtype = np.dtype(x["dtype"])  # a dtype string names a type; it runs nothing
    if dtype.kind not in _DTYPE_KINDS:
        raise GraphFormatError(f"{where}: arrays of dtype {dtype} are not read")
    shape = tuple(int(n) for n in _list(x["shape"]))
    data = base64.b64decode(x["data"], validate=True)
    if len(data) != dtype.itemsize * math.prod(shape):
        raise GraphFormatError(f"{where}: an array of shape {shape} and dtype {dtype} needs "
                               f"{dtype.itemsize * math.prod(shape)} bytes, got {len(data)}")
    a = np.frombuffer(data, dtype).reshape(shape).copy()
    return a[()] if x.get("scalar") else a


def dumps(params: dict, ops, outputs) -> bytes:
    """The pipeline parameters and the traced ops (schema, name, device, inputs, arguments: a
    per-sample argument as a reference to its node) as UTF-8 JSON; TypeError naming the op and
    argument whose value is not data."""
    described = []
    for op in ops:
        args = {}
        for k, v in op.args.items():
            where = f"{op.name} ({op.schema.name}): argument {k!r}"
            args[k] = (["node", _ref(v)] if isinstance(v, _graph.DataNode)
                       else ["value", encode(v, where)])
        described.append({"schema": op.schema.name, "name": op.name, "device": op.device,
                          "inputs": [_ref(i) for i in op.inputs], "args": args})
    doc = {"format": _FORMAT, "params": {k: encode(v, f"parameter {k!r}") for k, v in params.items()},
           "ops": described, "outputs": [_ref(o) for o in outputs]}
    return json.dumps(doc, allow_nan=False, separators=(",", ":")).encode("utf-8")


def _parse(data) -> dict:
    if isinstance(data, str):
        data = data.encode("utf-8")
    if not isinstance(data, (bytes, bytearray, memoryview)):
        raise GraphFormatError(f"a serialized pipeline is bytes or str, not {type(data).__name__}")
    data = bytes(data)
    if data[:1] == b"\x80":
        raise GraphFormatError("this is a pickle (detaug's serialized form before detaug-pipeline-2, "
                               "or something else), which could run code when loaded: it is "
                               "refused. Serialize the pipeline again with this version (JSON)")
    try:
        d = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as e:
        raise GraphFormatError(f"not a serialized detaug pipeline (not UTF-8 JSON: {e})") from None
    except RecursionError:
        raise GraphFormatError(_TOO_DEEP) from None
    if not isinstance(d, dict) or d.get("format") != _FORMAT:
        got = d.get("format") if isinstance(d, dict) else type(d).__name__
        raise GraphFormatError(f"not a serialized detaug pipeline of format {_FORMAT!r} (got {got!r})")
    for key, kind in (("params", dict), ("ops", list), ("outputs", list)):
        if not isinstance(d.get(key), kind):
            raise GraphFormatError(f"serialized pipeline: {key!r} must be a {kind.__name__}")
    return d


def check_param(name: str, value, kinds: tuple, limit: int = 2**31 - 1) -> None:
    """GraphFormatError naming parameter ``name`` unless ``value`` is of one of ``kinds`` (int,
    float, str, bool, dict, None): an int (never a bool) within ``[-limit, limit]``, a float
    finite and not negative, a dict of str to such ints. Run on a document's parameters before
    the pipeline converts them with ``int()``, so that a hand-edited ``1.9`` is not read as 1
    and NaN or 1e400 is not left to an OverflowError that names nothing."""
    where = f"serialized pipeline: parameter {name}={value!r:.60}"
    said = " or ".join("None" if k is None else k.__name__ for k in kinds)
    if value is None:
        if None in kinds:
            return
    elif isinstance(value, bool):
        if bool in kinds:
            return
    elif isinstance(value, int):
        if int in kinds:
            if not -limit <= value <= limit:
                raise GraphFormatError(f"{where} is out of range: it takes at most {limit} in size")
            return
    elif isinstance(value, float):
        if float in kinds:
            if not (math.isfinite(value) and value >= 0):
                raise GraphFormatError(f"{where}: it takes a finite number >= 0")
            return
    elif isinstance(value, str):
        if str in kinds:
            return
    elif isinstance(value, dict) and dict in kinds:
        for k, v in value.items():
            if not isinstance(k, str):
                raise GraphFormatError(f"{where}: its keys must be strings")
            check_param(f"{name}[{k!r}]", v, (int,), limit)
        return
    raise GraphFormatError(f"{where} is a {type(value).__name__}: it takes {said}")


def loads(data, known_params=(), param_kinds=None):
    """(parameters, rebuild): ``rebuild(graph)`` adds the ops to a new pipeline's graph and
    returns its output nodes. GraphFormatError for bytes that are not :func:`dumps`'s, for a
    parameter (not in ``known_params``), op, argument, device or reference this version lacks,
    for an op missing an argument, for a document without outputs, and for a parameter whose
    value is not of its kind (``param_kinds``: name to the kinds :func:`check_param` takes, or
    to (kinds, limit); a parameter not named there takes None, a bool, an int, a finite float or
    a string)."""
    from ..ops.registry import schema_of

    d = _parse(data)
    unknown = sorted(set(d["params"]) - set(known_params))
    if unknown:
        raise GraphFormatError(f"serialized pipeline: unknown pipeline parameter(s) {unknown}")
    if not d["outputs"]:
        raise GraphFormatError("serialized pipeline: 'outputs' is empty (dumps always writes the "
                               "pipeline's outputs, at least one)")
    params = {k: _decode(v, f"parameter {k!r}") for k, v in d["params"].items()}
    for k, v in params.items():
        kinds = (param_kinds or {}).get(k, (None, bool, int, float, str))
        check_param(k, v, *(kinds if isinstance(kinds[-1], int) else (kinds,)))
    ops = []
    for n, desc in enumerate(d["ops"]):
        where = f"serialized op #{n}"
        if not isinstance(desc, dict) or not isinstance(desc.get("schema"), str):
            raise GraphFormatError(f"{where}: not an op description")
        try:
            schema = schema_of(desc["schema"])
        except KeyError:
            raise GraphFormatError(f"{where}: unknown op {desc['schema']!r}") from None
        where = f"{where} ({schema.name})"
        args = desc.get("args")
        if not isinstance(args, dict) or not isinstance(desc.get("inputs"), list):
            raise GraphFormatError(f"{where}: malformed inputs or arguments")
        bad = sorted(set(args) - set(schema.args) - {"seed"})
        if bad:
            raise GraphFormatError(f"{where}: unknown argument(s) {bad}; {schema.name} takes "
                                   f"{sorted(schema.args)}")
        missing = sorted(set(schema.args) - set(args))
        if missing:  # dumps writes every argument, defaults included
            raise GraphFormatError(f"{where}: missing argument(s) {missing} (a document written "
                                   "by serialize() names every argument of every op)")
        if desc.get("device") not in schema.devices:
            raise GraphFormatError(f"{where}: device {desc.get('device')!r} is not one of "
                                   f"{schema.devices}")
        name = desc.get("name")
        if not isinstance(name, str):
            raise GraphFormatError(f"{where}: its name must be a string")
        ops.append((schema, desc, name, where))
    return params, lambda graph: _rebuild(graph, ops, d["outputs"])


def _decode(v, where):
    """:func:`decode`, with a value nested past Python's stack refused by name."""
    try:
        return decode(v, where)
    except RecursionError:
        raise GraphFormatError(f"{where}: nested deeper than Python can read") from None


def _rebuild(graph, ops, outputs):
    nodes = {}

    def node(ref, where):
        if not (isinstance(ref, list) and len(ref) == 2 and all(type(x) is int for x in ref)) \
                or tuple(ref) not in nodes:
            raise GraphFormatError(f"{where}: {ref!r} is not an output of an earlier op")
        return nodes[tuple(ref)]

    for schema, desc, name, where in ops:
        args = {}
        for k, entry in desc["args"].items():
            if not (isinstance(entry, list) and len(entry) == 2 and entry[0] in ("node", "value")):
                raise GraphFormatError(f"{where}: argument {k!r} is malformed")
            if entry[0] == "node" and k not in schema.per_sample:
                raise GraphFormatError(f"{where}: argument {k!r} cannot be per-sample")
            args[k] = (node(entry[1], f"{where}, argument {k!r}") if entry[0] == "node"
                       else _decode(entry[1], f"{where}, argument {k!r}"))
        try:  # the ranges fn.<op> checks (a document may be edited by hand)
            check_args(schema.name, args)
        except ValueError as exc:
            raise GraphFormatError(f"{where}: {exc}") from None
        inputs = [node(r, f"{where}, input") for r in desc["inputs"]]
        lo, hi = schema.inputs
        if not lo <= len(inputs) <= hi:
            raise GraphFormatError(f"{where}: takes {lo}..{hi} inputs, got {len(inputs)}")
        op = graph.add(schema, inputs, args, desc["device"], name)
        out_device = "gpu" if op.device in ("gpu", "mixed") else "cpu"
        op.outputs = [_graph.DataNode(op, i, out_device)
                      for i in range(schema.num_outputs(len(op.inputs), args))]
        for i, o in enumerate(op.outputs):
            nodes[(op.id, i)] = o
    return [node(r, "serialized outputs") for r in outputs]
