"""Every import path the README and the pages under docs/ show works, and every file they name exists.

Collected from the text of README.md and docs/*.md, so a new page or example is covered without a
new entry:

* import statements (``import detaug...``, ``from detaug... import ...``, and the same for
  ``readers``) in fenced Python blocks, shown-only ones (``python no-run``) included, and in inline
  code spans (the DALI table's ``from detaug.plugin.pytorch import ...``): each is executed in a
  fresh namespace, with ``...`` meaning the module alone;
* dotted names in inline code (``detaug.adapters.torch.DetaugIterator``,
  ``detaug.ops.decode.MAX_PIXELS``): the longest importable module, then attributes;
* file paths in the repository (``detaug/runtime/gpu/plan_ahead.py``, ``benchmarks/device.sh``):
  the file exists.

An import that fails because an optional package of a third party is missing (TensorFlow, say)
is not a wrong path: it skips, naming the package. A path of ours that is gone fails.
"""
import importlib
import os
import re

import pytest

from helpers import REPO

FENCE = re.compile(r"^```([^\n]*)\n(.*?)^```", re.S | re.M)
INLINE = re.compile(r"`([^`\n]+)`")
OURS = ("detaug", "readers")
IMPORT = re.compile(r"^\s*(?:from\s+((?:detaug|readers)(?:\.\w+)*)\s+import\s+(.+?)|"
                    r"import\s+((?:detaug|readers)(?:\.\w+)*)(?:\s+as\s+\w+)?)\s*(?:#.*)?$")
DOTTED = re.compile(r"(?<![\w./-])((?:detaug|readers)(?:\.[A-Za-z_]\w*)+)")
FILE = re.compile(r"(?<![\w./-])((?:detaug|readers|benchmarks|examples|tests|docs|\.ci)/[\w./-]*\w"
                  r"\.(?:py|pyi|md|cu|sh|json|txt|toml))\b")


def pages():
    docs = sorted(f"docs/{f}" for f in os.listdir(os.path.join(REPO, "docs")) if f.endswith(".md"))
    return ["README.md"] + docs


def _text(page):
    with open(os.path.join(REPO, page), encoding="utf-8") as f:
        return f.read()


def _inline_spans(text):
    """Inline code spans outside fenced blocks."""
    return INLINE.findall(FENCE.sub("", text))


def import_statements():
    """{(page, statement)} for every import of ours the pages show."""
    found = set()
    for page in pages():
        text = _text(page)
        lines = [ln for info, code in FENCE.findall(text) if info.strip().startswith("python")
                 for ln in code.splitlines()]
        lines += [span for span in _inline_spans(text)]
        for line in lines:
            for stmt in line.split(";"):
                m = IMPORT.match(stmt.strip())
                if m:
                    found.add((page, stmt.strip()))
    return sorted(found)


def dotted_names():
    found = set()
    for page in pages():
        for span in _inline_spans(_text(page)):
            if IMPORT.match(span.strip()):
                continue  # an import statement: checked as one
            for name in DOTTED.findall(span):
                found.add((page, name))
    return sorted(found)


def file_paths():
    found = set()
    for page in pages():
        found.update((page, p) for p in FILE.findall(_text(page)))
    return sorted(found)


def _import_or_skip(module):
    try:
        return importlib.import_module(module)
    except ModuleNotFoundError as e:
        if e.name and e.name.split(".")[0] not in OURS:
            pytest.skip(f"{module} needs {e.name}, not installed here")
        raise


def test_the_pages_show_imports_names_and_files():
    """The collection finds what the pages are known to hold (a broken pattern would pass all)."""
    stmts = {s for _, s in import_statements()}
    assert "from detaug import fn, pipeline_def" in stmts
    assert "from detaug.adapters.torch import DetaugIterator" in stmts
    assert "from detaug.plugin.pytorch import ..." in stmts
    assert any(s.startswith("import detaug.fn as fn") for s in stmts), stmts
    names = {n for _, n in dotted_names()}
    assert {"detaug.adapters.keras.DetaugSequence", "detaug.ops.decode.MAX_PIXELS"} <= names
    assert ("README.md", "benchmarks/RESULTS.md") in file_paths()


@pytest.mark.parametrize("page,stmt", import_statements())
def test_import_statement_works(page, stmt):
    m = IMPORT.match(stmt)
    module = m.group(1) or m.group(3)
    mod = _import_or_skip(module)
    if m.group(1):  # from X import names
        names = m.group(2).strip().strip("()")
        if names.strip() == "...":
            return
        for part in names.split(","):
            name = part.split(" as ")[0].strip()
            if not name:
                continue
            if not hasattr(mod, name):  # a submodule not yet imported
                _import_or_skip(f"{module}.{name}")
            assert hasattr(mod, name), f"{page}: {stmt!r}: {module} has no {name!r}"


@pytest.mark.parametrize("page,name", dotted_names())
def test_dotted_name_resolves(page, name):
    parts = name.split(".")
    obj, i = None, len(parts)
    while i > 0:
        module = ".".join(parts[:i])
        try:
            obj = importlib.import_module(module)
            break
        except ModuleNotFoundError as e:
            if e.name and e.name.split(".")[0] not in OURS:
                pytest.skip(f"{module} needs {e.name}, not installed here")
            if e.name != module:
                raise
            i -= 1
    assert obj is not None, f"{page}: {name}: no module of it exists"
    for attr in parts[i:]:
        assert hasattr(obj, attr), f"{page}: {name}: {'.'.join(parts[:i])} has no {attr!r}"
        obj = getattr(obj, attr)
        i += 1


@pytest.mark.parametrize("page,path", file_paths())
def test_named_file_exists(page, path):
    assert os.path.exists(os.path.join(REPO, path)), f"{page} names {path}, which does not exist"
