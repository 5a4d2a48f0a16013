"""``--overwrite`` (and "an option that promises to write nothing"): ``--overwrite``
replaces the destination atomically where the system allows, a run killed at any point leaves
the old or the new dataset at DST (or, on the two-rename fallback, the next run puts the old
one back and says so), hidden folders of killed runs are removed by the next run, and
``--dry-run`` creates nothing at all.

A kill is ``os._exit`` at a chosen call inside a child process (no signal races, no sleeps).
"""
import hashlib
import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest
from PIL import Image

import detaug
from detaug.cli.convert import main

REPO = os.path.dirname(os.path.dirname(os.path.abspath(detaug.__file__)))


def snapshot(folder):
    """{relative path: sha1} of every file under ``folder`` (None when it does not exist)."""
    if not os.path.isdir(folder):
        return None
    out = {}
    for base, _, files in os.walk(folder):
        for name in files:
            path = os.path.join(base, name)
            with open(path, "rb") as f:
                out[os.path.relpath(path, folder)] = hashlib.sha1(f.read()).hexdigest()
    return out


def _coco(folder, n_images, seed):
    rng = np.random.default_rng(seed)
    os.makedirs(os.path.join(folder, "images"))
    doc = {"images": [], "annotations": [], "categories": [{"id": 1, "name": "cat"}]}
    for i in range(1, n_images + 1):
        pixels = rng.integers(0, 256, (24, 32, 3), dtype=np.uint8)
        Image.fromarray(pixels).save(os.path.join(folder, "images", f"{i}.png"))
        doc["images"].append({"id": i, "file_name": f"{i}.png", "width": 32, "height": 24})
        doc["annotations"].append({"id": i, "image_id": i, "category_id": 1, "iscrowd": 0,
                                   "bbox": [1, 2, 10 + i % 5, 8]})
    path = os.path.join(folder, "annotations.json")
    with open(path, "w") as f:
        json.dump(doc, f)
    return path


@pytest.fixture
def sources(tmp_path):
    """Two COCO sources (3 and 5 images) and DST holding the first's conversion to YOLO."""
    old, new = _coco(str(tmp_path / "old"), 3, 0), _coco(str(tmp_path / "new"), 5, 1)
    dst = str(tmp_path / "out" / "dst")
    assert main([old, dst, "--from", "coco", "--to", "yolo"]) == 0
    return old, new, dst


def _killed_run(argv, kill_at, no_exchange=False):
    """Run the converter in a child process that exits (status 9, like a kill) at the
    ``kill_at`` call: ``("rename", n)`` the n-th os.rename, ``("rmtree", n)`` the n-th
    shutil.rmtree, ``("place_image", n)`` the n-th image written. ``no_exchange``: as on a
    system without renameat2 (the fallback of two renames)."""
    script = textwrap.dedent(f"""
        import os, shutil, sys
        import readers.writers as W
        from detaug.cli import convert

        what, n = {kill_at!r}
        calls = [0]

        def killing(fn):
            def wrapper(*args, **kwargs):
                calls[0] += 1
                if calls[0] == n:
                    os._exit(9)
                return fn(*args, **kwargs)
            return wrapper

        if what == "rename":
            os.rename = killing(os.rename)
        elif what == "rmtree":
            shutil.rmtree = killing(shutil.rmtree)
        else:
            W.place_image = killing(W.place_image)
        if {no_exchange!r}:
            try:
                import detaug.cli.place as P
                P.exchange = lambda a, b: False
            except ImportError:  # a version without it has the two renames anyway
                pass
        sys.exit(convert.main({argv!r}))
    """)
    env = dict(os.environ, PYTHONPATH=REPO)
    return subprocess.run([sys.executable, "-c", script], env=env, capture_output=True,
                          text=True, timeout=120)


def _hidden(dst):
    parent = os.path.dirname(dst)
    return sorted(n for n in os.listdir(parent) if n.startswith("."))


def test_overwrite_killed_between_two_renames_still_leaves_a_destination(sources):
    old, new, dst = sources
    before = snapshot(dst)
    run = _killed_run([new, dst, "--from", "coco", "--to", "yolo", "--overwrite"],
                      ("rename", 2))
    # the old code renamed DST aside, then the new folder in: a kill between left no DST
    after = snapshot(dst)
    assert after is not None, (run.returncode, run.stderr)
    if run.returncode == 9:
        assert after == before  # killed before the swap: the old dataset, whole
    else:
        assert run.returncode == 0, run.stderr
        assert len([k for k in after if k.startswith("labels")]) == 5


def test_overwrite_killed_right_after_the_swap_leaves_the_new_dataset(sources):
    old, new, dst = sources
    if not sys.platform.startswith("linux"):
        pytest.skip("renameat2 is Linux's")
    run = _killed_run([new, dst, "--from", "coco", "--to", "yolo", "--overwrite"],
                      ("rmtree", 1))
    assert run.returncode == 9, run.stderr
    after = snapshot(dst)
    assert len([k for k in after if k.startswith("labels")]) == 5  # the new one, complete
    assert len(_hidden(dst)) == 1  # the old content, at the temporary name
    status = subprocess.run([sys.executable, "-m", "detaug.cli.convert", new, dst + "2",
                             "--from", "coco", "--to", "yolo"], env=dict(
                                os.environ, PYTHONPATH=REPO), capture_output=True, text=True)
    assert status.returncode == 0 and len(_hidden(dst)) == 1, status.stderr  # not DST's: kept
    from detaug.cli.place import recover

    lines = recover(dst)
    assert len(lines) == 1 and "removed" in lines[0] and _hidden(dst) == []
    assert snapshot(dst) == after


def test_fallback_kill_between_renames_is_restored_by_the_next_run(sources, capsys):
    old, new, dst = sources
    before = snapshot(dst)
    run = _killed_run([new, dst, "--from", "coco", "--to", "yolo", "--overwrite"],
                      ("rename", 2), no_exchange=True)
    assert run.returncode == 9, run.stderr
    assert snapshot(dst) is None  # the window the fallback cannot close ...
    assert main([new, dst, "--from", "coco", "--to", "yolo"]) == 2  # ... the next run does
    err = capsys.readouterr().err
    assert "restored" in err and "killed between its two renames" in err, err
    assert "is not empty" in err  # restored first, then refused without --overwrite
    assert snapshot(dst) == before and _hidden(dst) == []


def test_leftover_partial_folders_of_killed_runs_are_removed_by_the_next_run(sources, capsys):
    old, new, dst = sources
    run = _killed_run([new, dst, "--from", "coco", "--to", "yolo", "--overwrite"],
                      ("place_image", 3))
    assert run.returncode == 9, run.stderr
    assert len(_hidden(dst)) == 1  # the partial dataset of the killed run
    parent = os.path.dirname(dst)
    old_style = os.path.join(parent, ".dst.detaug-convert-ab12cd_3")  # earlier versions' name
    live = os.path.join(parent, f".dst.detaug-convert-{os.getpid()}-livefold")
    other = os.path.join(parent, ".other.detaug-convert-ab12cd_3")  # another DST's
    for folder in (old_style, live, other):
        os.makedirs(os.path.join(folder, "labels"))
    assert main([new, dst, "--from", "coco", "--to", "yolo", "--overwrite"]) == 0
    err = capsys.readouterr().err
    assert err.count("a partial dataset of a killed run") == 2, err
    assert _hidden(dst) == sorted([os.path.basename(live), os.path.basename(other)])
    assert len([k for k in snapshot(dst) if k.startswith("labels")]) == 5


@pytest.mark.parametrize("fmt", ["coco", "tfrecord"])
def test_dry_run_creates_no_folder_anywhere_near_the_destination(tmp_path, capsys, fmt):
    src = _coco(str(tmp_path / "src"), 2, 2)
    if fmt == "tfrecord":
        import readers
        from readers.tfrecord_od import write_tfrecord

        write_tfrecord(readers.read_coco(src, str(tmp_path / "src" / "images")),
                       str(tmp_path / "tfr"))
        src = str(tmp_path / "tfr")
    dst = tmp_path / "new" / "deeper" / "dst"
    assert main([src, str(dst), "--from", fmt, "--to", "voc", "--dry-run"]) == 0
    assert "dry run: nothing was written" in capsys.readouterr().out
    assert not (tmp_path / "new").exists()
