"""Every op's signature and docstring come from its registry entry, for ``fn.*`` and
``ops.*``; docs/api.md is generated from the same source; ``detaug --version``.

The checks iterate the registry (names and aliases), so a new op is covered without a new entry."""
import inspect
import os
import pydoc

import pytest

import detaug
from detaug import fn, ops
from detaug.graph.trace import DataNode
from detaug.ops import registry as R
from detaug.ops.registry import ALIASES, COMMON_ARGS, OPTIONAL, REGISTRY
from helpers import REPO

P = inspect.Parameter
PUBLIC = sorted([n for n in REGISTRY if not n.startswith("_")] + list(ALIASES))


def _lookup(root, name, camel=False):
    *path, last = name.split(".")
    for p in path:
        root = getattr(root, p)
    return getattr(root, R._camel(last) if camel else last)


def _split(sig):
    params = list(sig.parameters.values())
    return ([p for p in params if p.kind is P.POSITIONAL_ONLY],
            [p for p in params if p.kind is P.KEYWORD_ONLY], params)


@pytest.mark.parametrize("name", PUBLIC)
def test_signature_is_the_declared_inputs_arguments_and_common_keywords(name):
    schema = R.schema_of(name)
    f = _lookup(fn, name)
    inputs, keywords, params = _split(inspect.signature(f))
    assert len(inputs) + len(keywords) == len(params)  # nothing but inputs and keywords
    lo, hi = schema.inputs
    assert len(inputs) == hi
    assert [p.default is P.empty for p in inputs] == [i < lo for i in range(hi)]
    assert all(p.default is OPTIONAL for p in inputs[lo:])
    declared = [(p.name, p.default) for p in keywords if p.name in schema.args]
    assert declared == list(schema.args.items())
    assert {p.name: p.default for p in keywords if p.name not in schema.args} == COMMON_ARGS
    assert f.__name__ == name.split(".")[-1]


@pytest.mark.parametrize("name", PUBLIC)
def test_docstring_names_inputs_arguments_per_sample_devices_and_outputs(name):
    schema = R.schema_of(name)
    doc = _lookup(fn, name).__doc__
    lines = doc.splitlines()
    assert schema.doc[1:] in lines[0]
    for k, v in schema.args.items():
        line = next(ln for ln in lines if ln.strip().startswith(f"{k}: {R.arg_type(schema, k)} = {v!r}"))
        assert ("[per-sample]" in line) == (k in schema.per_sample), line
    for k in COMMON_ARGS:
        assert any(ln.strip().startswith(f"{k}: {R.COMMON_TYPES[k]} = None:") for ln in lines), k
    assert f"Devices: {', '.join(schema.devices)}" in lines
    for d in schema.devices:
        assert repr(d) in next(ln for ln in lines if ln.strip().startswith("device: str | None = None:"))
    for n in R.input_names(schema):
        assert any(ln.strip().startswith(f"{n}") and ":" in ln for ln in lines), n
    if not R.input_names(schema):
        assert "Inputs: none" in doc
    returns = next(ln for ln in lines if ln.startswith("Returns: "))
    assert schema.output_spec in returns
    assert f"fn.{name}" in doc and R.class_path(name) in doc


@pytest.mark.parametrize("name", PUBLIC)
def test_every_argument_has_a_type_and_a_meaning(name):
    """help(fn.<op>) and an IDE's call tip show each argument's type (the signature's annotation)
    and meaning (its docstring line), none left blank."""
    schema = R.schema_of(name)
    params = inspect.signature(_lookup(fn, name)).parameters
    lines = _lookup(fn, name).__doc__.splitlines()
    for k, v in schema.args.items():
        kind = R.arg_type(schema, k)
        assert kind and repr(params[k].annotation) == kind, (name, k)
        prefix = f"{k}: {kind} = {v!r}"
        line = next(ln.strip() for ln in lines if ln.strip().startswith(prefix))
        meaning = line[len(prefix):].removeprefix(" [per-sample]")
        assert meaning.startswith(": ") and len(meaning) > 8, (name, k, line)
    for k in COMMON_ARGS:
        assert repr(params[k].annotation) == R.COMMON_TYPES[k]


def test_arg_docs_table_names_only_declared_arguments():
    """ops/arg_docs.py may not describe an argument an op does not take (a renamed argument
    would otherwise keep a stale text while the new name shows none)."""
    from detaug.ops import arg_docs

    for op, entries in arg_docs.ARG_DOCS.items():
        assert op in REGISTRY, op
        for k, (kind, _) in entries.items():
            assert k in REGISTRY[op].args, (op, k)
            assert kind, (op, k)


@pytest.mark.parametrize("alias", sorted(ALIASES))
def test_aliases_share_the_targets_signature_and_say_whose_alias(alias):
    target = ALIASES[alias]
    assert inspect.signature(_lookup(fn, alias)) == inspect.signature(_lookup(fn, target))
    assert f"Alias of fn.{target}" in _lookup(fn, alias).__doc__
    assert f"fn.{alias}" in _lookup(fn, target).__doc__  # the target lists its aliases
    assert inspect.signature(_lookup(ops, alias, True)) == inspect.signature(_lookup(ops, target, True))


@pytest.mark.parametrize("name", PUBLIC)
def test_class_init_shows_the_arguments_and_call_the_inputs(name):
    cls = _lookup(ops, name, camel=True)
    f_inputs, f_keywords, _ = _split(inspect.signature(_lookup(fn, name)))
    assert list(inspect.signature(cls).parameters.values()) == f_keywords
    call = list(inspect.signature(cls.__call__).parameters.values())
    assert call[0].name == "self" and call[1:-1] == f_inputs and call[-1].kind is P.VAR_KEYWORD
    assert cls.__doc__ == R.op_docstring(name, for_class=True)
    assert "Construct with the keyword arguments" in cls.__doc__


@pytest.mark.parametrize("name", PUBLIC)
def test_undeclared_keyword_and_keyword_input_still_raise(name):
    schema = R.schema_of(name)
    with pytest.raises(TypeError) as direct:
        R.call_op(name, (), {"not_an_argument": 1})
    with pytest.raises(TypeError) as through_fn:
        _lookup(fn, name)(not_an_argument=1)
    assert str(through_fn.value) == str(direct.value)
    assert "unknown argument(s) ['not_an_argument']" in str(direct.value)
    with pytest.raises(TypeError, match="unknown argument"):
        _lookup(ops, name, camel=True)(not_an_argument=1)()
    for n in R.input_names(schema):  # inputs are positional only, as before
        with pytest.raises(TypeError, match="unknown argument"):
            _lookup(fn, name)(**{n: None})


def test_per_sample_rule_unchanged():
    """A DataNode for an argument the docstring does not mark per-sample is refused, as before."""
    pipe = detaug.Pipeline(batch_size=1, num_threads=1, seed=0)
    with pipe:
        img = fn.external_source(source=lambda info: None, batch=False)
        fn.rotate(img, angle=fn.random.uniform(range=(-5, 5)))  # per-sample: accepted
        with pytest.raises(TypeError, match="'fill' cannot be a per-sample input"):
            fn.rotate(img, fill=fn.random.uniform(range=(0, 9)))
        assert isinstance(ops.Rotate(angle=3.0)(img), DataNode)


def test_hand_checked_rotate_pad_boxes_and_voc():
    common = "device: str | None = None, name: str | None = None, seed: int | None = None"
    assert str(inspect.signature(fn.rotate)) == (
        "(images, boxes=<optional>, /, *, angle: float = 0.0, expand: bool | None = None, "
        "fill: float | sequence = 0.0, box_mode: str = 'corners', keep_size: bool | None = None, "
        "fill_value: float | None = None, size: (int, int) | None = None, "
        f"interp_type: types.DALIInterpType | None = None, {common})")
    assert str(inspect.signature(fn.pad_boxes)) == (
        f"(boxes, /, *, max_boxes: int | None = None, fill: float = 0.0, {common})")
    assert str(inspect.signature(fn.readers.voc)) == (
        "(*, root: str = None, split: str = 'trainval', classes: sequence | str | None = None, "
        "skip_difficult: bool = False, on_error: str = 'raise', bitmasks: bool = False, "
        "tight_boxes: bool = False, random_shuffle: bool = False, "
        f"shard_id: int | None = None, num_shards: int | None = None, {common})")
    assert str(inspect.signature(ops.readers.VOC)) == str(inspect.signature(fn.readers.voc))
    text = pydoc.render_doc(fn.rotate, renderer=pydoc.plaintext)
    assert "rotate(images, boxes=<optional>, /, *, angle: float = 0.0, expand: bool | None = None, " in text
    assert "angle: float = 0.0 [per-sample]: degrees, counter-clockwise, about the image centre" in text
    assert "expand: bool | None = None: enlarge the canvas" in text
    assert "Devices: cpu, gpu" in text
    pad = fn.pad_boxes.__doc__
    assert "boxes: BoxBatch" in pad and "[per-sample]" not in pad
    assert "max_boxes: int | None = None: M, the padded length; None: the batch's largest" in pad
    assert "PaddedBoxes: boxes (B, M, 4)" in pad and "Devices: cpu, gpu" in pad
    voc = fn.readers.voc.__doc__
    assert "Inputs: none" in voc and "Returns: 2 outputs (a tuple)" in voc
    assert "skip_difficult: bool = False: leave out objects marked difficult=1" in voc
    assert "device: str | None = None: 'cpu' only" in voc and "Devices: cpu\n" in voc
    assert "class form: ops.readers.VOC" in voc
    image = str(inspect.signature(fn.decoders.image))
    assert image.startswith("(encoded, boxes=<optional>, /, *, output_type: str = 'RGB', reduce: int = 1, "
                            "hw_decoder_load: any = None")
    assert "'cpu', 'mixed'" in fn.decoders.image.__doc__


def test_a_new_op_is_documented_from_its_declaration(monkeypatch):
    """A registered op gets its signature and docstring with no other change; an input name that
    clashes with an argument is renamed, not dropped."""
    schema = R.OpSchema(name="zz_probe", impl=lambda *a: None, devices=("cpu", "gpu"), inputs=(1, 1),
                        kind="box", args={"boxes": 3, "k": (1, 2)}, per_sample=("k",),
                        arg_docs={"k": "a pair"}, doc="probe")
    monkeypatch.setitem(REGISTRY, "zz_probe", schema)
    f = R.make_functional().zz_probe
    assert str(inspect.signature(f)) == ("(boxes_, /, *, boxes: int = 3, k: sequence of int = (1, 2), "
                                         "device: str | None = None, name: str | None = None, "
                                         "seed: int | None = None)")
    assert "k: sequence of int = (1, 2) [per-sample]: a pair" in f.__doc__
    assert "## fn.zz_probe" in R.api_reference_markdown()


def test_docs_api_md_is_generated_from_the_registry():
    path = os.path.join(REPO, "docs", "api.md")
    text = open(path).read()
    assert text == R.api_reference_markdown(), \
        "docs/api.md is stale: python -m detaug.ops.registry --api > docs/api.md"
    public = [n for n in REGISTRY if not n.startswith("_")]
    assert sorted(ln[6:] for ln in text.splitlines() if ln.startswith("## fn.")) == sorted(public)
    for n in public:
        assert f"fn.{n}{inspect.signature(_lookup(fn, n))}" in text
        for k in REGISTRY[n].args:
            assert f"| `{k}` |" in text


# ---- the detaug command -------------------------------------------------------------------------
def test_detaug_version(capsys):
    from importlib.metadata import version

    from detaug.cli.main import main

    with pytest.raises(SystemExit) as e:
        main(["--version"])
    assert e.value.code == 0
    assert capsys.readouterr().out.strip() == f"detaug {version('detaug')}"


def test_detaug_version_falls_back_to_the_package(monkeypatch):
    import importlib.metadata as md

    from detaug.cli.main import package_version

    def missing(_):
        raise md.PackageNotFoundError("detaug")

    monkeypatch.setattr(md, "version", missing)
    assert package_version() == detaug.__version__


def test_every_detaug_option_has_help():
    import argparse

    from detaug.cli.main import _parser

    parsers, seen = [_parser()], []
    while parsers:
        p = parsers.pop()
        for a in p._actions:
            if isinstance(a, argparse._SubParsersAction):
                parsers.extend(a.choices.values())
            elif a.option_strings:
                seen.append(a.option_strings[-1])
                assert a.help and a.help != argparse.SUPPRESS, f"{p.prog} {a.option_strings}: no help"
    assert {"--version", "--data", "--device", "--seed", "--batch-size"} <= set(seen)


# ---- the type stub that IDEs read -----------------------------------------------------------------
def test_fn_stub_is_generated_from_the_registry():
    from detaug.ops import stubs

    path = os.path.join(REPO, "detaug", "fn.pyi")
    assert open(path).read() == stubs.fn_stub(), \
        "detaug/fn.pyi is stale: python -m detaug.ops.stubs > detaug/fn.pyi"


def _stub_functions():
    import ast

    from detaug.ops import stubs

    tree = ast.parse(stubs.fn_stub())
    out = {f.name: f for f in tree.body if isinstance(f, ast.FunctionDef)}
    for c in (c for c in tree.body if isinstance(c, ast.ClassDef)):
        out.update({f"{c.name}.{f.name}": f for f in c.body if isinstance(f, ast.FunctionDef)})
    return out


def test_fn_stub_has_every_op_with_the_runtime_parameters():
    import ast

    funcs = _stub_functions()
    assert sorted(funcs) == PUBLIC
    for name in PUBLIC:
        f, sig = funcs[name], inspect.signature(_lookup(fn, name))
        inputs, keywords, _ = _split(sig)
        assert [a.arg for a in f.args.posonlyargs] == [p.name for p in inputs], name
        assert [a.arg for a in f.args.kwonlyargs] == [p.name for p in keywords], name
        for a, d, p in zip(f.args.kwonlyargs, f.args.kw_defaults, keywords, strict=True):
            if not isinstance(d, ast.Constant) or d.value is not Ellipsis:
                assert ast.literal_eval(d) == p.default, (name, a.arg)
            if p.name in R.schema_of(name).per_sample:
                assert "DataNode" in ast.unparse(a.annotation), (name, a.arg)
        assert ast.get_docstring(f) == inspect.cleandoc(_lookup(fn, name).__doc__), name


def test_stub_annotations_from_the_type_words():
    from detaug.ops.stubs import annotation

    assert annotation("float") == "float"
    assert annotation("float", per_sample=True) == "float | DataNode"
    assert annotation("(int, int) | None") == "tuple[int, int] | None"
    assert annotation("sequence of float") == "Sequence[float]"
    assert annotation("float | sequence") == "float | Sequence[Any]"
    assert annotation("(x0, y0, x1, y1) | None") == "tuple[float, float, float, float] | None"
    assert annotation("types.DALIInterpType | None") == "Any | None"
    assert annotation("iterable | callable | None") == "Iterable[Any] | Callable[..., Any] | None"
    assert annotation("an odd phrase") == "Any" and annotation("") == "Any"


def test_an_ide_shows_the_signature_and_docstring():
    """jedi (the static analysis of IPython's and several editors' completion) reads the stub:
    fn.rotate( and fn.readers.voc( show typed parameters, completion shows the docstring."""
    jedi = pytest.importorskip("jedi")
    repo = REPO

    def sig(code):
        lines = code.splitlines()
        s = jedi.Script(code, path=os.path.join(repo, "probe_.py"), project=jedi.Project(repo))
        return [x.to_string() for x in s.get_signatures(len(lines), len(lines[-1]))]

    (rot,) = sig("from detaug import fn\nfn.rotate(")
    assert rot.startswith("rotate(images: Any, boxes: Any=..., /, *, angle: float | DataNode=0.0, "
                          "expand: bool | None=None,")
    (voc,) = sig("import detaug\ndetaug.fn.readers.voc(")
    assert "root: str | None=None, split: str='trainval'" in voc
    (pad,) = sig("import detaug.fn as fn\nfn.pad_boxes(")
    assert "max_boxes: int | None=None" in pad
    s = jedi.Script("from detaug import fn\nfn.rota", path=os.path.join(repo, "probe_.py"),
                    project=jedi.Project(repo))
    (c,) = [c for c in s.complete(2, 7) if c.name == "rotate"]
    assert "angle: float = 0.0 [per-sample]: degrees, counter-clockwise" in c.docstring()
