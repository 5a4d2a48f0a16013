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


# the two tests of the module fixture voc_demo run on one pytest-xdist worker (it is made once)
@pytest.mark.xdist_group("voc_demo")
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


@pytest.mark.xdist_group("voc_demo")
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


def test_grid_is_filled_as_announced(tmp_path, capsys):
    """--grid 10 with 1 batch of 8: the demo runs more (untimed) batches, round the 40-image
    epoch, until all 100 cells hold an image; the line says the grid it drew."""
    out = tmp_path / "g.png"
    rc = cli.main(["demo", "--batches", "1", "--grid", "10", "--cell", "32", "--out", str(out),
                   "--device", "cpu"])
    text = capsys.readouterr().out
    assert rc == 0
    assert "1 batches x 8 images" in text  # the throughput line counts the timed batch only
    assert f"wrote {out} (10x10 grid, 320x320 px)" in text
    grid = np.asarray(Image.open(out).convert("RGB")).astype(int)
    assert grid.shape == (320, 320, 3)
    for r in range(10):
        for c in range(10):
            assert grid[r * 32:(r + 1) * 32, c * 32:(c + 1) * 32].std() > 10, (r, c)


def test_generated_sample_when_the_repository_has_none(tmp_path, monkeypatch, capsys):
    """Installed without examples/data: the demo generates its sample into the cache folder,
    once; the VOC files read back as the shapes that were drawn (boxes = the shapes' pixels)."""
    from detaug.cli import sample
    from readers.voc import read_voc

    monkeypatch.setattr(cli, "repository_sample", lambda data: None)
    monkeypatch.setenv("DETAUG_CACHE", str(tmp_path / "cache"))
    rc = cli.main(["demo", "--batches", "1", "--batch-size", "4", "--grid", "2", "--cell", "64",
                   "--out", str(tmp_path / "s.png"), "--device", "cpu"])
    text = capsys.readouterr().out
    root = tmp_path / "cache" / f"sample-voc-v{sample.VERSION}"
    assert rc == 0 and f"voc sample, 40 images, 4 classes ({root})" in text
    mtime = (root / "Annotations" / "shapes_000.xml").stat().st_mtime_ns
    assert cli.find_sample_root("voc") == str(root)  # kept, not generated again
    assert (root / "Annotations" / "shapes_000.xml").stat().st_mtime_ns == mtime
    drawn = sample.make_images(str(tmp_path), n=40, seed=0)
    back = read_voc(str(root), classes=list(sample.CLASSES))
    assert back.class_names == list(sample.CLASSES)
    for a, b in zip(drawn.records, back.records, strict=True):
        np.testing.assert_array_equal(a.boxes, b.boxes)
        np.testing.assert_array_equal(a.labels, b.labels)
    coco = cli.find_sample_root("coco")
    assert coco == str(tmp_path / "cache" / f"sample-coco-v{sample.VERSION}")
    ds = cli.load_dataset("coco", coco)
    assert ds.class_names == list(sample.CLASSES)
    for a, b in zip(drawn.records, ds.records, strict=True):
        np.testing.assert_array_equal(a.boxes, b.boxes)


def test_generated_boxes_are_the_drawn_shapes_pixels(tmp_path):
    """Each shape's box is the rectangle its pixels fill, checked on the mask of a hand-placed
    shape of every class (continuous coordinates: pixels x0..x1 give [x0, x1 + 1))."""
    from PIL import Image as I, ImageDraw

    from detaug.cli import sample

    for kind in sample.CLASSES:
        m = I.new("L", (64, 48), 0)
        sample._shape(ImageDraw.Draw(m), kind, (10, 5, 41, 30), 255)
        ys, xs = np.nonzero(np.asarray(m))
        assert (xs.min(), ys.min(), xs.max(), ys.max()) == (10, 5, 41, 30), kind
    ds = sample.make_images(str(tmp_path), n=3, seed=1)
    for r in ds.records:
        im = np.asarray(I.open(r.path).convert("RGB"))
        assert im.shape == (r.height, r.width, 3)
        assert np.all(r.boxes >= 0) and np.all(r.boxes[:, [2, 3]] <= [r.width, r.height])
        assert np.all(r.boxes[:, [2, 3]] - r.boxes[:, [0, 1]] >= [r.width // 8, r.height // 8])


def test_demo_op_list():
    """Every image or box op the grid can draw, the multi-sample ones included; none of the
    ops whose output it cannot draw (normalised images, padded or converted boxes, targets)."""
    ops = set(cli.demo_ops())
    assert {"mosaic", "mixup", "affine", "hsv", "flip", "letterbox", "prune_boxes",
            "photometric_distort"} <= ops
    assert not ops & {"normalize", "crop_mirror_normalize", "pad_boxes",
                      "retinanet_encode", "decoders.image", "bb_flip", "slice"}


@pytest.mark.parametrize("op", cli.demo_ops())
def test_demo_shows_one_op(tmp_path, capsys, op):
    """``--op``: the grid is the op's output with its boxes; the rate line names the op.
    Cells of 64 px (the grid's drawing scale only: the op runs at the demo's canvas either
    way; the PNG of 256 px cells took half of each run)."""
    out = tmp_path / "op.png"
    rc = cli.main(["demo", "--op", op, "--batches", "1", "--batch-size", "4", "--grid", "2",
                   "--cell", "64", "--out", str(out), "--device", "cpu"])
    text = capsys.readouterr().out
    assert rc == 0 and f"(fn.{op})" in text
    grid = np.asarray(Image.open(out).convert("RGB"))
    assert grid.shape == (128, 128, 3) and grid.std() > 10
    if op == "mosaic":  # the canvas' fill (114) shows where no sample landed
        assert (grid == 114).all(-1).mean() > 0.02


def test_demo_refuses_an_op_it_cannot_draw(tmp_path, capsys):
    rc = cli.main(["demo", "--op", "readers.coco", "--out", str(tmp_path / "x.png"),
                   "--device", "cpu"])
    assert rc == 1 and "not an op that takes and gives images" in capsys.readouterr().err
