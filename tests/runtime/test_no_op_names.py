"""The runtime knows ops by their declarations only: no registered op name (or alias) appears as
a string literal in detaug/runtime/ (parsed with ast), and the check finds one where it is."""
from __future__ import annotations

import ast
import pathlib

import detaug  # noqa: F401 (registers every op)
from detaug.graph.trace import ALIASES, REGISTRY

RUNTIME = pathlib.Path(__file__).resolve().parents[2] / "detaug" / "runtime"


def op_names_in(source: str, names) -> list:
    """(line, literal) of every string constant of ``source`` that is one of ``names``."""
    return [(n.lineno, n.value) for n in ast.walk(ast.parse(source))
            if isinstance(n, ast.Constant) and isinstance(n.value, str) and n.value in names]


def test_no_op_name_in_the_runtime():
    names = set(REGISTRY) | set(ALIASES)
    files = sorted(RUNTIME.rglob("*.py"))
    assert len(files) > 10
    found = {str(p.relative_to(RUNTIME)): op_names_in(p.read_text(), names) for p in files}
    found = {k: v for k, v in found.items() if v}
    assert not found, f"op names in detaug/runtime (read the op's declaration instead): {found}"


def test_the_check_finds_a_name():
    names = set(REGISTRY)
    src = 'KEEP = {"flip", "size"}\ndef f(op):\n    return op.schema.name == "decoders.image"\n'
    assert op_names_in(src, names) == [(1, "flip"), (3, "decoders.image")]
