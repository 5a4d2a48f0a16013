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
SCANNED = ("detaug", "readers", "docs", "README.md", "examples", "benchmarks", "tests")
TEXT = (".py", ".pyi", ".md", ".cu", ".sh", ".txt", ".toml")

# The flat modules of before the folders (detaug/<name>.py) and where each went: a path built
# from the left column is stale (it no longer exists; the test below checks that). The map keeps
# the bare names so that this file, too, names no stale path. (detaug/backend.py, once the flat
# home of core/backend.py, is DALI's ``nvidia.dali.backend`` facade now: not in this map.)
_WENT = {
    "errors": "core/errors.py", "geometry": "core/geometry.py", "rng": "core/rng.py",
    "batch": "core/batch.py", "schedule": "core/schedule.py", "sharding": "core/sharding.py",
    "dali_api": "dali/pipeline_api.py", "ops/compat": "dali/ops.py",
    "graph": "graph/trace.py", "materialize": "graph/materialize.py",
    "persist": "runtime/persist.py", "context": "runtime/context.py",
    "executor": "runtime/executor.py", "host_workers": "runtime/host_workers.py",
    "retries": "runtime/retries.py", "device_stage": "runtime/gpu/device_stage.py",
    "decode_proc": "runtime/gpu/decode_proc.py", "plan_ahead": "runtime/gpu/plan_ahead.py",
    "handout": "runtime/gpu/handout.py", "memory_plan": "runtime/gpu/memory_plan.py",
    "launch_profile": "runtime/gpu/launch_profile.py", "retinanet": "targets/retinanet.py",
}
MOVED = {f"detaug/{old}.py": f"detaug/{new}" for old, new in _WENT.items()}
# a path as docs and comments write it: from the package (detaug/..., readers/...), or from
# inside it (runtime/gpu/plan_ahead.py, ops/color.py)
NAMED = re.compile(r"(?<![\w./$-])((?:detaug|readers|tests)/[\w/]*\w\.(?:py|pyi|cu))\b")
# a test file by its name alone: it is one of the files under tests/
TEST_BARE = re.compile(r"(?<![\w./$-])(test_\w+\.py)\b")
INSIDE = re.compile(r"(?<![\w./$-])((?:core|ops|graph|runtime|kernels|dali|targets|adapters|cli|"
                    r"plugin)/[\w/]*\w\.(?:py|cu))\b")
OLD_BARE = re.compile(r"(?<![\w./$-])(" + "|".join(
    os.path.basename(p)[:-3] for p in MOVED if p.count("/") == 1) + r")\.py\b")
# "issue N", "session N", "round N" or a numbered stretch of work: what happened when is the
# diary's; the code says the reason itself. An issue may be named as where a requirement is
# tracked ("tracked in issue N"), and another project's issue by its address.
DIARY = re.compile(r"(?<![-\w])(?:issues?|sessions?|rounds?|periods?) \d+|\bin git history\b|"
                   r"\bwork periods?\b", re.I)
REFERENCE = re.compile(r"\btracked in issue \d+", re.I)
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
    tests = {f for _, _, names in os.walk(os.path.join(REPO, "tests")) for f in names}
    missing += [(rel, p, line) for rel, p, line in _hits(TEST_BARE, files) if p not in tests]
    assert not missing, "\n".join(f"{rel}:{line}: {p} does not exist" for rel, p, line in missing)


def _diary(files):
    """(path, line, text) of each line that cites the diary, a named reference left out."""
    return [(rel, line, text.splitlines()[line - 1].strip()) for rel, text in files
            for line in sorted({text.count("\n", 0, m.start()) + 1 for m in DIARY.finditer(text)
                                if not REFERENCE.match(text, max(0, m.start() - 11))})]


def test_no_comment_cites_a_development_diary():
    """A reader of the code cannot open a work session, or a probe that only the history holds:
    the finding itself is written instead."""
    hits = _diary(scanned_files())
    assert not hits, "\n".join(f"{rel}:{line}: {t}" for rel, line, t in hits)


def test_the_checks_find_what_they_look_for():
    """The patterns catch a stale path, a missing one, a bare old name and a diary reference."""
    # the samples are built from parts, so that this file names no stale path itself
    stale, nowhere, old_test = ("detaug/plan_" + "ahead.py", "runtime/gpu/" + "nowhere.py",
                                "tests/test_warp_" + "gpu.py")
    files = [("x.py", f"see {stale} and {nowhere}\n"
                      f"# ({'executor'}.py) measured in session {12}, a probe in git {'history'}\n"
                      f"# as test_{'nowhere'}.py, Issue {30} asked; {old_test}\n")]
    assert [p for _, p, _ in _hits(NAMED, files)] == [stale, old_test]
    assert [p for _, p, _ in _hits(INSIDE, files)] == [nowhere]
    assert [p for _, p, _ in _hits(OLD_BARE, files)] == ["executor"]
    assert [p for _, p, _ in _hits(TEST_BARE, files)] == ["test_" + "nowhere.py"]
    assert [line for _, line, _ in _diary(files)] == [2, 3]
    kept = [("z.md", "the 300 s budget is tracked in issue 37; pass 2 of the loop\n")]
    assert not _diary(kept) and _diary([("z.md", f"since issue {37}, round {2}\n")])
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
