"""The registry (kept in detaug/graph/trace.py, the tracing layer, re-exported here) makes the functional API (``fn.flip``), the class API (``ops.Flip``), the op table
in the README and the list of ops that the tests must cover, from one declaration per op."""
from __future__ import annotations

import inspect

from ..graph.trace import (ALIASES, COMMON_ARGS, REGISTRY, Draw, OpSchema, _takes_auto, call_op, register,
    schema_of)
from . import arg_docs as _arg_docs

# ---- signatures and docstrings, generated from the schema ----------------------------------------
class _Optional:
    """The default shown for an optional positional input: leave the input out (None is refused)."""

    def __repr__(self):
        return "<optional>"


OPTIONAL = _Optional()


class _Type:
    """An argument's type in words, as a signature annotation (shown bare: ``angle: float = 0.0``)."""

    def __init__(self, text: str):
        self.text = text

    def __repr__(self):
        return self.text

    def __eq__(self, other):
        return isinstance(other, _Type) and other.text == self.text

    def __hash__(self):
        return hash(self.text)


COMMON_TYPES = {"device": "str | None", "name": "str | None", "seed": "int | None"}


def arg_type(schema: OpSchema, k: str) -> str:
    """The type of ``schema``'s argument ``k`` in words (ops/arg_docs.py, else its default's);
    a hint's is 'any'."""
    return _arg_docs.arg_type(schema.name, k, schema.args[k]) or ("any" if k in schema.hints else "")


def arg_meaning(schema: OpSchema, k: str) -> str:
    """The meaning of ``schema``'s argument ``k``: its declaration's arg_docs, else ops/arg_docs.py."""
    return schema.arg_docs.get(k) or _arg_docs.arg_meaning(schema.name, k)

# What a positional input is, by its name.
INPUT_DOCS = {
    "images": "ImageBatch: uint8 HWC images (ragged), from fn.decoders.image or an image op",
    "boxes": "BoxBatch: xyxy boxes with labels and fields, from a reader or a box op; "
             "transformed with the images",
    "encoded": "encoded image bytes: the first output of a reader (or external_source)",
}
# Input names of ops whose kind does not say them (until their declarations carry input_names).
_INPUT_NAMES = {"decoders.image": ("encoded", "boxes")}
_KIND_INPUTS = {"geometric": ("images", "boxes"), "color": ("images", "boxes"),
                "box": ("boxes",), "other": ("images", "boxes")}


def input_names(schema: OpSchema) -> tuple:
    """Names of ``schema``'s positional inputs: declared, or by kind (geometric and colour ops take
    images and optionally boxes, box ops take boxes, sources and random ops take none)."""
    hi = schema.inputs[1]
    names = tuple(schema.input_names) or _INPUT_NAMES.get(schema.name) or _KIND_INPUTS.get(schema.kind, ())
    names = tuple(names)[:hi]
    names += tuple(f"input{i}" for i in range(len(names), hi))
    clash = set(names) & (set(schema.args) | set(COMMON_ARGS))  # e.g. an argument named 'boxes'
    return tuple(n + "_" if n in clash else n for n in names)


def signature_of(name: str) -> inspect.Signature:
    """``fn.<name>``'s signature: the inputs positional-only (optional ones default to
    ``<optional>``), then every declared argument with its default and the common keywords
    (device, name, seed), keyword-only."""
    schema = schema_of(name)
    P = inspect.Parameter
    lo = schema.inputs[0]
    params = [P(n, P.POSITIONAL_ONLY, default=P.empty if i < lo else OPTIONAL)
              for i, n in enumerate(input_names(schema))]
    params += [P(k, P.KEYWORD_ONLY, default=v,
                 annotation=_Type(arg_type(schema, k)) if arg_type(schema, k) else P.empty)
               for k, v in schema.args.items()]
    params += [P(k, P.KEYWORD_ONLY, default=v, annotation=_Type(COMMON_TYPES[k]))
               for k, v in COMMON_ARGS.items() if k not in schema.args]
    return inspect.Signature(params)


def _device_rule(schema: OpSchema) -> str:
    fallback = "cpu" if "cpu" in schema.devices else schema.devices[0]
    if "gpu" in schema.devices and schema.inputs[1] > 0:
        return f"None runs on 'gpu' when an input is on the GPU, else on {fallback!r}"
    return f"None runs on {fallback!r}"


def common_arg_docs(schema: OpSchema) -> dict:
    """The meaning of the keywords every op accepts, for ``schema``."""
    devices = (f"one of {', '.join(map(repr, schema.devices))}" if len(schema.devices) > 1
               else f"{schema.devices[0]!r} only")
    auto = ("; 'auto' runs on 'mixed' where a GPU, cupy and nvImageCodec are present, else on 'cpu' "
            "(pipe.device_summary says where it ran)" if _takes_auto(schema) else "")
    return {"device": f"{devices}; {_device_rule(schema)}{auto}",
            "name": f"this op's name in the graph and in error messages (default "
                    f"'{schema.name}_<index>')",
            "seed": "this op's random seed (used by ops that draw random values); None derives "
                    "it from the pipeline's seed"}


def outputs_doc(schema: OpSchema) -> str:
    """How many outputs the op returns, in words (a tuple when more than one)."""
    lo, hi = schema.inputs
    if not callable(schema.outputs):
        n = schema.outputs
        return "one output" if n == 1 else f"{n} outputs (a tuple)"
    if hi > 0 and all(schema.num_outputs(n, dict(schema.args)) == n for n in range(max(lo, 1), hi + 1)):
        return "one output per input (a tuple when there are two)"
    return "a number of outputs set by the arguments (a tuple when more than one)"


def class_path(name: str) -> str:
    """``ops.readers.VOC`` for 'readers.voc'."""
    parts = name.split(".")
    return ".".join(["ops", *parts[:-1], _camel(parts[-1])])


def op_docstring(name: str, for_class: bool = False) -> str:
    """The docstring of ``fn.<name>`` (or of its ``ops`` class), generated from the schema."""
    schema = schema_of(name)
    target = schema.name
    lo, hi = schema.inputs
    lines = [schema.doc[:1].upper() + schema.doc[1:] + ("" if schema.doc.endswith(".") else "."), ""]
    if name != target:
        lines += [f"Alias of fn.{target} (same arguments and behaviour).", ""]
    if for_class:
        lines += [f"Construct with the keyword arguments, call with the inputs: "
                  f"``{class_path(name)}(**arguments)(*inputs)``; keywords given at the call "
                  f"override those given at construction. fn.{name} is the functional form.", ""]
    names = input_names(schema)
    if not names:
        lines += ["Inputs: none (called with keyword arguments only).", ""]
    else:
        count = str(lo) if lo == hi else f"{lo} to {hi}"
        lines.append(f"Inputs (positional only, {count}):")
        for i, n in enumerate(names):
            what = INPUT_DOCS.get(n.rstrip("_"), "the output of another op")
            lines.append(f"    {n}{'' if i < lo else ' (optional)'}: {what}")
        lines.append("")
    if schema.args:
        lines.append("Arguments (keyword only" + ("; [per-sample] ones also take a DataNode such as "
                     "fn.random.uniform(...), one value per sample):" if schema.per_sample else "):"))
        for k, v in schema.args.items():
            tag = " [per-sample]" if k in schema.per_sample else ""
            meaning = arg_meaning(schema, k)
            lines.append(f"    {k}: {arg_type(schema, k)} = {v!r}{tag}" + (f": {meaning}" if meaning else ""))
    else:
        lines.append("Arguments: none of its own.")
    lines.append("")
    lines.append("Common keywords (every op):")
    for k, meaning in common_arg_docs(schema).items():
        if k not in schema.args:
            lines.append(f"    {k}: {COMMON_TYPES[k]} = {COMMON_ARGS[k]!r}: {meaning}")
    lines += ["", f"Devices: {', '.join(schema.devices)}", ""]
    ret = outputs_doc(schema)
    lines.append(f"Returns: {ret}" + (f"; {schema.output_spec}" if schema.output_spec else ""))
    if schema.aliases and name == target:
        lines += ["", f"Aliases: {', '.join('fn.' + a for a in schema.aliases)}"]
    lines += ["", f"Functional form: fn.{name}; class form: {class_path(name)}"]
    return "\n".join(lines)


class NotInDetaug(AttributeError):
    """``fn.<name>`` / ``ops.<Name>`` that detaug has no op for: one line naming it (an
    AttributeError, so that ``hasattr`` still answers False)."""


class _Namespace:
    def __init__(self, path="", missing=None, api="fn"):
        self._path, self._missing, self._api = path, missing, api

    def __repr__(self):
        return f"<detaug namespace {self._path or self._api}>"

    def __getattr__(self, name):
        if name.startswith("_"):
            raise AttributeError(name)
        path = f"{self._path}.{name}" if self._path else name
        msg = self._missing(path, self._api) if self._missing else \
            f"{self._api}.{path}: no such op in detaug; the ops: docs/api.md"
        if msg is None:  # a namespace of DALI's (fn.math): its ops say what they are
            return _Namespace(path, self._missing, self._api)
        raise NotInDetaug(msg)

    def _child(self, name):
        """The sub-namespace ``name`` (made on first use)."""
        if name not in vars(self):
            setattr(self, name, _Namespace(f"{self._path}.{name}" if self._path else name,
                                           self._missing, self._api))
        return vars(self)[name]


def _camel(last: str) -> str:
    special = {"coco": "COCO", "voc": "VOC", "hsv": "Hsv", "file": "File",
               # DALI's class names that are not the plain camel case of their functional name
               "coco_reader": "COCOReader", "nv_jpeg_decoder": "nvJPEGDecoder",
               "random_bbox_crop": "RandomBBoxCrop", "bbox_paste": "BBoxPaste",
               "ssd_random_crop": "SSDRandomCrop"}
    return special.get(last, "".join(p.capitalize() for p in last.split("_")))


def make_functional(missing=None):
    """Build ``fn``: one function per registered name and alias, nested by dots.
    ``missing(path, 'fn')``: the message of a name it lacks (detaug/dali/fn_names.py)."""
    fn = _Namespace(missing=missing)
    for name in list(REGISTRY) + list(ALIASES):
        if name.startswith("_"):
            continue
        parts = name.split(".")
        ns = fn
        for p in parts[:-1]:
            ns = ns._child(p)

        def f(*inputs, _name=name, **kwargs):
            return call_op(_name, inputs, kwargs)

        f.__name__ = parts[-1]
        f.__qualname__ = name
        f.__doc__ = op_docstring(name)
        f.__signature__ = signature_of(name)  # what help() and inspect show; the call is f's
        held = getattr(ns, parts[-1], None)
        if isinstance(held, _Namespace):  # an op that is a namespace too (fn.noise, fn.noise.shot)
            f.__dict__.update({k: v for k, v in vars(held).items() if not k.startswith("_")})
        setattr(ns, parts[-1], f)
    return fn


class _OpClass:
    """Base of the generated ``ops.X`` classes: arguments at construction, inputs at call."""

    _op_name = ""

    def __init__(self, **kwargs):
        self._kwargs = kwargs

    def __call__(self, *inputs, **kwargs):
        return call_op(self._op_name, inputs, {**self._kwargs, **kwargs})


def _make_class(name: str) -> type:
    """``ops.<Name>`` for op ``name``: ``__init__`` shows the arguments, ``__call__`` the inputs."""
    P = inspect.Parameter
    sig = signature_of(name)
    self_p = P("self", P.POSITIONAL_ONLY)
    args = [p for p in sig.parameters.values() if p.kind is P.KEYWORD_ONLY]
    inputs = [p for p in sig.parameters.values() if p.kind is P.POSITIONAL_ONLY]

    def __init__(self, **kwargs):
        _OpClass.__init__(self, **kwargs)

    def __call__(self, *inputs, **kwargs):
        return _OpClass.__call__(self, *inputs, **kwargs)

    __init__.__signature__ = inspect.Signature([self_p, *args])
    __init__.__doc__ = f"Keep the arguments of {class_path(name)} for every call."
    __call__.__signature__ = inspect.Signature([self_p, *inputs, P("overrides", P.VAR_KEYWORD)])
    __call__.__doc__ = f"Trace one call of fn.{name} on the inputs; returns its output(s)."
    cls_name = _camel(name.split(".")[-1])
    for m in (__init__, __call__):
        m.__qualname__ = f"{cls_name}.{m.__name__}"
    return type(cls_name, (_OpClass,), {"_op_name": name, "__doc__": op_docstring(name, for_class=True),
                                        "__init__": __init__, "__call__": __call__})


def make_classes(missing=None):
    """Build ``ops``: ``ops.Flip``, ``ops.readers.COCO``, ``ops.random.Uniform``, ..."""
    ops = _Namespace(missing=missing, api="ops")
    for name in list(REGISTRY) + list(ALIASES):
        if name.startswith("_"):
            continue
        parts = name.split(".")
        ns = ops
        for p in parts[:-1]:
            ns = ns._child(p)
        cls = _make_class(name)
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


def _md(text) -> str:
    return str(text).replace("|", "\\|")


def api_reference_markdown() -> str:
    """docs/api.md: one section per public op (signature, inputs, argument table, devices,
    outputs), generated from the registry (a test checks docs/api.md holds it)."""
    public = sorted(n for n in REGISTRY if not n.startswith("_"))
    out = ["# detaug API reference", "",
           "<!-- Generated by `python -m detaug.ops.registry --api > docs/api.md` from the op "
           "registry (detaug/ops/registry.py); tests/ops/test_op_docs.py fails when it is stale. -->", "",
           "Every op is a function `fn.<name>` (inputs positional, arguments keyword) and a class "
           "`ops.<Name>` (arguments at construction, inputs at the call); both trace the op inside a "
           "pipeline definition. Arguments marked *per-sample* also take a DataNode, such as "
           "`fn.random.uniform(range=(-10, 10))`, that gives one value per sample; the others take "
           "one value for the whole pipeline. `help(fn.<name>)` shows the same text.", "",
           "Every op also takes these keywords:", "",
           "| keyword | default | meaning |", "|---|---|---|",
           "| `device` | `None` | where the op runs, one of its devices below; `None` runs it on "
           "'gpu' when an input is on the GPU and the op runs there, else on 'cpu' |",
           "| `name` | `None` | the op's name in the graph and in error messages "
           "(default `<op>_<index>`) |",
           "| `seed` | `None` | the op's random seed (for ops that draw random values); `None` "
           "derives it from the pipeline's seed |", "",
           "## Ops", ""]
    out += [f"- [`fn.{n}`](#fn{n.replace('.', '')}): {_md(REGISTRY[n].doc)}"
            for n in public]
    for n in public:
        schema = REGISTRY[n]
        sig = signature_of(n)
        out += ["", f"## fn.{n}", "", _md(schema.doc[:1].upper() + schema.doc[1:]), "",
                "```python", f"fn.{n}{sig}", f"{class_path(n)}{inspect.signature(_make_class(n))}",
                "```", ""]
        facts = [f"Devices: {', '.join(schema.devices)}"]
        if schema.aliases:
            facts.append("aliases: " + ", ".join(f"`fn.{a}`" for a in schema.aliases))
        out += ["; ".join(facts) + ".", ""]
        names = input_names(schema)
        if names:
            lo = schema.inputs[0]
            out += ["| input | | what |", "|---|---|---|"]
            out += [f"| `{a}` | {'required' if i < lo else 'optional'} | "
                    f"{_md(INPUT_DOCS.get(a.rstrip('_'), 'the output of another op'))} |"
                    for i, a in enumerate(names)]
        else:
            out.append("No inputs: called with keyword arguments only.")
        out.append("")
        if schema.args:
            out += ["| argument | type | default | per-sample | meaning |", "|---|---|---|---|---|"]
            for k, v in schema.args.items():
                out.append(f"| `{k}` | {_md(arg_type(schema, k))} | `{_md(repr(v))}` | "
                           f"{'yes' if k in schema.per_sample else ''} | {_md(arg_meaning(schema, k))} |")
        else:
            out.append("No arguments of its own.")
        out += ["", f"Returns {outputs_doc(schema)}"
                + (f": {_md(schema.output_spec)}." if schema.output_spec else ".")]
    return "\n".join(out) + "\n"


if __name__ == "__main__":
    import sys

    from detaug.ops import registry as _r  # the registered module, not this __main__ copy

    if sys.argv[1:] == ["--api"]:
        sys.stdout.write(_r.api_reference_markdown())
    elif sys.argv[1:]:
        sys.exit("usage: python -m detaug.ops.registry [--api]  (the README's op table, or "
                 "docs/api.md with --api)")
    else:
        print(_r.op_table_markdown())
