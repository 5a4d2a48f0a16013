"""The house stays readable: every source path that a docstring, comment, error message or doc
names can be opened today, no module path from before the folders (docs/design.md, "Layers and
folders") survives, no comment cites a development diary, and the repository root holds only
the project's own entries (no scratch folders of a test's run)."""
from __future__ import annotations

import os
import re
import subprocess

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCANNED = ("detaug", "readers", "docs", "README.md", "examples", "benchmarks")
TEXT = (".py", ".pyi", ".md", ".cu", ".sh", ".txt", ".toml")

# The flat modules of before the folders and where each went: a path from the left column is
# stale (it no longer exists; the test below checks that). (detaug/backend.py, once the flat home
# of core/backend.py, is DALI's ``nvidia.dali.backend`` facade now: not in this map.)
MOVED = {
    "detaug/errors.py": "detaug/core/errors.py",
    "detaug/geometry.py": "detaug/core/geometry.py", "detaug/rng.py": "detaug/core/rng.py",
    "detaug/batch.py": "detaug/core/batch.py", "detaug/schedule.py": "detaug/core/schedule.py",
    "detaug/sharding.py": "detaug/core/sharding.py",
    "detaug/dali_api.py": "detaug/dali/pipeline_api.py", "detaug/ops/compat.py": "detaug/dali/ops.py",
    "detaug/graph.py": "detaug/graph/trace.py", "detaug/materialize.py": "detaug/graph/materialize.py",
    "detaug/persist.py": "detaug/runtime/persist.py", "detaug/context.py": "detaug/runtime/context.py",
    "detaug/executor.py": "detaug/runtime/executor.py",
    "detaug/host_workers.py": "detaug/runtime/host_workers.py",
    "detaug/retries.py": "detaug/runtime/retries.py",
    "detaug/device_stage.py": "detaug/runtime/gpu/device_stage.py",
    "detaug/decode_proc.py": "detaug/runtime/gpu/decode_proc.py",
    "detaug/plan_ahead.py": "detaug/runtime/gpu/plan_ahead.py",
    "detaug/handout.py": "detaug/runtime/gpu/handout.py",
    "detaug/memory_plan.py": "detaug/runtime/gpu/memory_plan.py",
    "detaug/launch_profile.py": "detaug/runtime/gpu/launch_profile.py",
    "detaug/retinanet.py": "detaug/targets/retinanet.py",
}
# a path as docs and comments write it: from the package (detaug/..., readers/...), or from
# inside it (runtime/gpu/plan_ahead.py, ops/color.py)
NAMED = re.compile(r"(?<![\w./$-])((?:detaug|readers)/[\w/]*\w\.(?:py|pyi|cu))\b")
INSIDE = re.compile(r"(?<![\w./$-])((?:core|ops|graph|runtime|kernels|dali|targets|adapters|cli|"
                    r"plugin)/[\w/]*\w\.(?:py|cu))\b")
OLD_BARE = re.compile(r"(?<![\w./$-])(" + "|".join(
    os.path.basename(p)[:-3] for p in MOVED if p.count("/") == 1) + r")\.py\b")
DIARY = re.compile(r"\bsessions? \d+\b|\bin git history\b|\bround \d+\b|\(issue \d+[:)]|"
                   r"\bwork period\b", re.I)
ROOT = {".ci", ".gitattributes", ".gitignore", "LICENSE", "MANIFEST.in", "README.md", "benchmarks",
        "detaug", "docs", "examples", "pyproject.toml", "readers", "tests"}


def scanned_files(tops=SCANNED):
    """(path relative to the repository, text) of every text file under ``tops``."""
    out = []
    for top in tops:
        full = os.path.join(REPO, top)
        walk = [(REPO, [], [top])] if os.path.isfile(full) else os.walk(full)
        for folder, dirs, files in walk:
            dirs[:] = [d for d in dirs if d not in ("__pycache__", "data", "fuzz_corpus")]
            for f in files:
                if f.endswith(TEXT):
                    path = os.path.join(folder, f)
                    with open(path, encoding="utf-8", errors="replace") as fh:
                        out.append((os.path.relpath(path, REPO), fh.read()))
    return out


def _hits(pattern, files, keep=lambda path: True):
    return sorted({(rel, m.group(1) if m.groups() else m.group(0),
                    text.count("\n", 0, m.start()) + 1)
                   for rel, text in files for m in pattern.finditer(text) if keep(m.group(1) if m.groups() else "")})


def test_the_moved_modules_are_where_the_map_says():
    """The map itself: each new home exists and no old flat path does (so the checks below
    look for paths that cannot be opened)."""
    assert all(os.path.isfile(os.path.join(REPO, new)) for new in MOVED.values())
    assert not [old for old in MOVED if os.path.exists(os.path.join(REPO, old))]


def test_no_module_path_from_before_the_folders():
    files = scanned_files()
    old = [(rel, p, line) for rel, p, line in _hits(NAMED, files) if p in MOVED]
    assert not old, "\n".join(f"{rel}:{line}: {p} is now {MOVED[p]}" for rel, p, line in old)
    bare = _hits(OLD_BARE, files)
    assert not bare, "\n".join(f"{rel}:{line}: {p}.py: name its folder (detaug/...)"
                               for rel, p, line in bare)


def test_every_named_source_path_exists():
    files = scanned_files()
    missing = [(rel, p, line) for rel, p, line in _hits(NAMED, files)
               if not os.path.exists(os.path.join(REPO, p))]
    missing += [(rel, p, line) for rel, p, line in _hits(INSIDE, files)
                if not os.path.exists(os.path.join(REPO, "detaug", p))
                and not os.path.exists(os.path.join(REPO, p))]
    assert not missing, "\n".join(f"{rel}:{line}: {p} does not exist" for rel, p, line in missing)


def test_no_comment_cites_a_development_diary():
    """A reader of the code cannot open a work session or 'a probe in git history': the finding
    itself is written instead."""
    hits = [(rel, line, text.splitlines()[line - 1].strip()) for rel, text in
            scanned_files(("detaug", "readers", "docs", "README.md", "examples"))
            for line in sorted({text.count("\n", 0, m.start()) + 1 for m in DIARY.finditer(text)})]
    assert not hits, "\n".join(f"{rel}:{line}: {t}" for rel, line, t in hits)


def test_the_checks_find_what_they_look_for():
    """The patterns catch a stale path, a missing one, a bare old name and a diary reference."""
    files = [("x.py", "see detaug/plan_ahead.py and runtime/gpu/nowhere.py\n"
                      "# (executor.py) measured in session 12, a probe in git history\n")]
    assert [p for _, p, _ in _hits(NAMED, files)] == ["detaug/plan_ahead.py"]
    assert [p for _, p, _ in _hits(INSIDE, files)] == ["runtime/gpu/nowhere.py"]
    assert [p for _, p, _ in _hits(OLD_BARE, files)] == ["executor"]
    assert len(DIARY.findall(files[0][1])) == 2
    named = _hits(NAMED, [("y.md", "detaug/runtime/gpu/plan_ahead.py, $repo/detaug/x.py")])
    assert [p for _, p, _ in named] == ["detaug/runtime/gpu/plan_ahead.py"]


def test_the_repository_root_holds_only_the_projects_entries():
    """A test's scratch run once left COCO folders (b0/, b2/, ...) at the root, committed with
    the rest: the root's tracked entries are the project's."""
    try:
        listed = subprocess.run(["git", "ls-files"], cwd=REPO, capture_output=True, text=True,
                                check=True).stdout.split("\n")
    except (OSError, subprocess.CalledProcessError):
        pytest.skip("not a git checkout")
    top = {p.split("/")[0] for p in listed if p}
    if not top:
        pytest.skip("not a git checkout")
    assert top <= ROOT, f"unexpected entries at the repository root: {sorted(top - ROOT)}"
