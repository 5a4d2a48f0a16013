"""The import graph of detaug and readers: no cycles, and each layer imports only those below it.

Every module of both packages is parsed with ``ast``; every import statement counts, at module
level or inside a function (an import placed in a function to dodge a cycle is still a cycle),
with relative imports resolved against the importing module's package. ``from pkg import name``
is an edge to ``pkg.name`` where that is a module, else to ``pkg``. A package's ``__init__`` that
Python runs on the way to a submodule is not an edge of the importer (that would make every
submodule depend on its package's whole public surface).

The layers (docs/design.md, "Layers"), lowest first; a module may import its own layer and the
layers listed for it. A new module must be placed here: an unplaced one fails.
"""
from __future__ import annotations

import ast
import pathlib

import pytest
from helpers import REPO

ROOT = pathlib.Path(REPO)
PACKAGES = ("detaug", "readers")

# The layers are folders. A module's layer is the layer of the deepest folder below that holds it
# (docs/design.md, "Layers"); a new module is placed by where it is saved, and a new folder must be
# added here (an unplaced one fails).
FOLDER_LAYER = {
    "readers": "readers",
    "detaug/core": "core",
    "detaug/kernels": "kernels",
    "detaug/targets": "targets",
    "detaug/graph": "graph",
    "detaug/ops": "ops",
    "detaug/runtime": "runtime", "detaug/runtime/gpu": "runtime",
    "detaug/dali": "dali",
    "detaug/dali/plugin": "frontends",  # DALI's PyTorch plugin: a frontend, kept with the DALI code
    "detaug/adapters": "frontends", "detaug/cli": "frontends", "detaug/plugin": "frontends",
    "detaug": "facade",  # the package's own files: __init__, pipeline, thin public paths
}
FILE_LAYER = {"detaug/__main__.py": "frontends"}  # `python -m detaug`: the CLI's entry point
ORDER = ["readers", "core", "kernels", "targets", "graph", "ops", "runtime", "dali", "facade",
         "frontends"]
ALLOWED = {  # layer -> the layers (besides itself) it may import
    "readers": set(),
    "core": set(),
    "kernels": {"core"},
    "targets": {"core", "kernels"},
    "graph": {"core", "kernels"},
    "ops": {"core", "kernels", "targets", "graph", "readers"},
    "runtime": {"core", "kernels", "targets", "graph", "ops", "readers"},
    "dali": {"core", "kernels", "targets", "graph", "ops", "runtime", "readers"},
    "facade": {"core", "kernels", "targets", "graph", "ops", "runtime", "dali", "readers"},
    "frontends": {"core", "kernels", "targets", "graph", "ops", "runtime", "dali", "facade",
                  "readers"},
}


def module_files() -> dict:
    """Dotted module name -> path, for every .py file of the packages."""
    out = {}
    for pkg in PACKAGES:
        for path in sorted((ROOT / pkg).rglob("*.py")):
            parts = list(path.relative_to(ROOT).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            out[".".join(parts)] = path
    return out


def _target(name: str, modules) -> str | None:
    """The module ``name`` lands in: itself, else its longest prefix that is one of ours."""
    while name and name not in modules:
        name = name.rpartition(".")[0]
    return name or None


def imports_of(module: str, path: pathlib.Path, modules) -> dict:
    """{imported module of ours: first line} for every import statement in ``path``."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found = {}
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        names = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[:len(base) - (node.level - 1)]
                assert base, f"{path}:{node.lineno}: relative import above the top package"
                stem = ".".join(base + ([node.module] if node.module else []))
            else:
                stem = node.module
            names = [f"{stem}.{a.name}" if f"{stem}.{a.name}" in modules else stem
                     for a in node.names]
        for name in names:
            t = _target(name, modules)
            if t is not None and t != module:
                found.setdefault(t, node.lineno)
    return found


def import_graph() -> dict:
    """module -> {imported module: line}."""
    modules = module_files()
    return {m: imports_of(m, p, modules) for m, p in modules.items()}


def find_cycle(graph: dict) -> list | None:
    """One cycle of ``graph`` as [a, b, ..., a], or None (iterative depth-first search)."""
    colour = dict.fromkeys(graph, 0)  # 0 new, 1 on the current path, 2 done
    for start in sorted(graph):
        if colour[start]:
            continue
        path, stack = [start], [iter(sorted(graph[start]))]
        colour[start] = 1
        while stack:
            nxt = next(stack[-1], None)
            if nxt is None:
                colour[path.pop()] = 2
                stack.pop()
            elif colour.get(nxt, 2) == 1:
                return path[path.index(nxt):] + [nxt]
            elif colour.get(nxt) == 0:
                colour[nxt] = 1
                path.append(nxt)
                stack.append(iter(sorted(graph[nxt])))
    return None


def layer_of(module: str, modules=None) -> str | None:
    """The layer of ``module``: its file's entry in FILE_LAYER, else its folder's in FOLDER_LAYER."""
    modules = modules or module_files()
    path = modules[module].relative_to(ROOT)
    if path.as_posix() in FILE_LAYER:
        return FILE_LAYER[path.as_posix()]
    return FOLDER_LAYER.get(path.parent.as_posix())


def _show(graph, cycle):
    return " -> ".join(f"{a} (line {graph[a][b]})" for a, b in zip(cycle, cycle[1:])) + f" -> {cycle[-1]}"


# ---- the checker itself ---------------------------------------------------------------------------
def test_find_cycle_on_hand_made_graphs():
    assert find_cycle({"a": {"b": 1}, "b": {"c": 1}, "c": {}}) is None
    assert find_cycle({"a": {"b": 1}, "b": {"c": 1}, "c": {"a": 1}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {}, "b": {"c": 1}, "c": {"b": 1}}) == ["b", "c", "b"]
    # a diamond is not a cycle
    assert find_cycle({"a": {"b": 1, "c": 1}, "b": {"d": 1}, "c": {"d": 1}, "d": {}}) is None


def test_imports_resolved_at_any_depth_and_relative(tmp_path):
    pkg = tmp_path / "detaug"
    (pkg / "ops").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "base.py").write_text("def f():\n    from .ops import boxes\n    return boxes\n")
    (pkg / "ops" / "__init__.py").write_text("from . import boxes\n")
    (pkg / "ops" / "boxes.py").write_text("import numpy\nfrom ..base import f\n"
                                          "from detaug import ops as o\n")
    modules = {"detaug": pkg / "__init__.py", "detaug.base": pkg / "base.py",
               "detaug.ops": pkg / "ops" / "__init__.py", "detaug.ops.boxes": pkg / "ops" / "boxes.py"}
    g = {m: imports_of(m, p, modules) for m, p in modules.items()}
    assert g["detaug.base"] == {"detaug.ops.boxes": 2}  # inside a function, relative
    assert g["detaug.ops"] == {"detaug.ops.boxes": 1}
    assert g["detaug.ops.boxes"] == {"detaug.base": 2, "detaug.ops": 3}
    assert find_cycle(g) == ["detaug.base", "detaug.ops.boxes", "detaug.base"]


# ---- the real packages ----------------------------------------------------------------------------
@pytest.fixture(scope="module")
def graph():
    g = import_graph()
    assert {"detaug", "detaug.core.batch", "detaug.kernels.warp", "detaug.ops.registry",
            "readers.coco"} <= set(g)
    # the walk sees imports inside functions: the decode process imports these only in functions
    assert {"detaug.ops.decode", "detaug.ops.gpu_decode"} <= set(g["detaug.runtime.gpu.decode_worker"])
    return g


def test_no_import_cycles(graph):
    cycle = find_cycle(graph)
    assert cycle is None, "import cycle: " + _show(graph, cycle)


def test_every_module_is_placed_in_a_layer(graph):
    unplaced = sorted(m for m in graph if layer_of(m) is None)
    assert not unplaced, f"place these modules: add their folder to FOLDER_LAYER: {unplaced}"


def test_each_layer_imports_only_those_below_it(graph):
    bad = []
    for m, targets in sorted(graph.items()):
        lm = layer_of(m)
        for t, line in sorted(targets.items()):
            lt = layer_of(t)
            if lt != lm and lt not in ALLOWED[lm]:
                bad.append(f"{m} ({lm}) imports {t} ({lt}) at line {line}")
    assert not bad, "\n".join(bad)


def _imports_under(graph, prefixes):
    return {(m, t) for m, ts in graph.items() for t in ts
            if any(t == p or t.startswith(p + ".") for p in prefixes)}


def test_named_layer_rules(graph):
    kernels = {m: t for m, t in graph.items() if m == "detaug.kernels" or m.startswith("detaug.kernels.")}
    assert not _imports_under(kernels, ("detaug.ops", "detaug.pipeline", "detaug.adapters",
                                        "detaug.graph.trace", "detaug.runtime.executor", "detaug.graph.materialize"))
    core = {m: graph[m] for m in ("detaug.core.batch", "detaug.core.geometry", "detaug.core.rng", "detaug.core.errors",
                                  "detaug.core.backend", "detaug.types")}
    assert not _imports_under(core, ("detaug.kernels", "detaug.ops", "detaug.graph.trace",
                                     "detaug.runtime.executor", "detaug.pipeline", "detaug.graph.materialize"))
    readers = {m: t for m, t in graph.items() if m.split(".")[0] == "readers"}
    assert not _imports_under(readers, ("detaug",))
    graph_layer = {"detaug.graph.trace": graph["detaug.graph.trace"]}
    assert not _imports_under(graph_layer, ("detaug.ops", "detaug.kernels", "detaug.pipeline"))


def test_each_internal_name_has_one_home():
    """Internal modules do not re-export what lives elsewhere (SampleError's one home is
    detaug.core.errors); the public facades (detaug, ops.boxes, ops.registry) keep theirs."""
    import detaug
    from detaug.core import batch, errors
    from detaug.runtime import executor
    from detaug.graph import trace as graph
    from detaug.kernels import boxes as kb
    from detaug.ops import boxes as ob
    from detaug.ops import decode, registry, sources

    assert not hasattr(executor, "SampleError") and not hasattr(executor, "BatchContext")
    assert not hasattr(decode, "jpeg_complete")
    assert errors.SampleError.__module__ == "detaug.core.errors"
    assert ob.PaddedBoxes is batch.PaddedBoxes is detaug.PaddedBoxes
    assert sources.EncodedBatch is batch.EncodedBatch
    assert kb.sample_index_from_offsets is batch.sample_index_from_offsets
    assert registry.REGISTRY is graph.REGISTRY and registry.call_op is graph.call_op
    assert registry.ALIASES is graph.ALIASES and registry.OpSchema is graph.OpSchema
