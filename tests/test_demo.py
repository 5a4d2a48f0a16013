"""``detaug demo``: the grid it writes, and boxes drawn where the pipeline put them."""
from __future__ import annotations

import contextlib
import io
import re
import subprocess
import sys

import numpy as np
import pytest
from PIL import Image

from detaug.cli import main as cli


@pytest.fixture(scope="module")
def voc_demo(tmp_path_factory):
    out = tmp_path_factory.mktemp("demo") / "demo.png"
    text = io.StringIO()  # (capsys is per test: it cannot see a module fixture's prints)
    with contextlib.redirect_stdout(text):
        rc = cli.main(["demo", "--batches", "2", "--out", str(out), "--device", "cpu"])
    return rc, out, text.getvalue()


def test_demo_writes_a_grid_and_prints_throughput(voc_demo):
    rc, out, text = voc_demo
    assert rc == 0 and out.exists()
    # the throughput line: 2 batches of 8 (the default) at the demo's canvas size, and a rate
    # that is those 16 images over the printed time (both rounded as printed)
    m = re.search(rf"^2 batches x 8 images \({cli.SIZE}x{cli.SIZE}\) in (\d+\.\d\d) s: "
                  r"(\d+\.\d) img/s$", text, re.MULTILINE)
    assert m, text
    seconds, rate = float(m[1]), float(m[2])
    assert seconds > 0 and rate > 0
    assert abs(rate * seconds - 16) <= 0.005 * rate + 0.05 * seconds + 1e-3, m[0]
    grid = np.asarray(Image.open(out).convert("RGB"))
    assert grid.shape == (4 * 256, 4 * 256, 3)
    assert grid.std() > 30 and len(np.unique(grid.reshape(-1, 3), axis=0)) > 10000  # not blank
    for r in range(4):  # every cell holds an image
        for c in range(4):
            assert grid[r * 256:(r + 1) * 256, c * 256:(c + 1) * 256].std() > 10


def test_demo_output_lines(tmp_path, capsys):
    rc = cli.main(["demo", "--batches", "1", "--batch-size", "4", "--grid", "2",
                   "--out", str(tmp_path / "g.png"), "--device", "cpu"])
    text = capsys.readouterr().out
    assert rc == 0
    assert "device: cpu" in text and "img/s" in text and "40 images, 20 classes" in text
    assert Image.open(tmp_path / "g.png").size == (512, 512)


def test_boxes_are_drawn_where_the_pipeline_put_them(voc_demo):
    """Recompute batches 0 and 1 on their own (same seed) and look at the drawn left edge of
    each sample's largest box, at mid-height, in its cell."""
    _, out, _ = voc_demo
    grid = np.asarray(Image.open(out).convert("RGB")).astype(int)
    root = cli.find_sample_root("voc")
    pipe = cli.demo_pipeline("voc", root, "cpu", batch_size=8, seed=0)
    targets = [t for b in range(2) for t in pipe.run_batch(b)[1].per_sample()]
    scale = 256 / cli.SIZE
    checked = hits = 0
    for k, t in enumerate(targets):
        if len(t["boxes"]) == 0:
            continue
        j = int(np.argmax((t["boxes"][:, 2] - t["boxes"][:, 0]) * (t["boxes"][:, 3] - t["boxes"][:, 1])))
        x0, y0, x1, y1 = (int(round(float(v) * scale)) for v in t["boxes"][j])
        if y1 - y0 < 40:
            continue  # too short: the class-name tag may cover the edge's middle
        cy, cx = (k // 4) * 256, (k % 4) * 256
        y = cy + (y0 + y1) // 2
        color = np.array(cli.class_color(t["labels"][j]))
        checked += 1
        edge = grid[y, cx + x0]
        hits += bool(np.all(edge == color))
        # the box is the drawn one, not a coincidence: 2 px outline, photo pixels beside it
        if x0 >= 3 and np.all(edge == color):
            assert np.all(grid[y, cx + x0 + 1] == color)
    assert checked >= 10
    assert hits >= checked - 1, f"{hits} of {checked} box edges found where the pipeline put them"


def test_class_names_come_from_the_dataset():
    ds = cli.load_dataset("coco", cli.find_sample_root("coco"))
    assert "person" in ds.class_names
    ds = cli.load_dataset("voc", cli.find_sample_root("voc"))
    assert len(ds.class_names) == 20 and ds.class_names[0] == "aeroplane"


def test_missing_root_is_an_error(tmp_path, capsys):
    rc = cli.main(["demo", "--root", str(tmp_path / "nowhere"), "--out", str(tmp_path / "x.png")])
    assert rc == 1 and "no such folder" in capsys.readouterr().err


def test_python_dash_m_detaug_demo(tmp_path):
    out = tmp_path / "m.png"
    r = subprocess.run([sys.executable, "-m", "detaug", "demo", "--data", "coco", "--batches", "1",
                        "--batch-size", "4", "--grid", "2", "--out", str(out), "--device", "auto"],
                       capture_output=True, text=True, cwd=str(tmp_path))
    assert r.returncode == 0, r.stderr
    assert "img/s" in r.stdout and "coco sample" in r.stdout
    assert Image.open(out).size == (512, 512)
