"""examples/maskrcnn_torchvision.py and examples/keypointrcnn_torchvision.py run end to end on the
CPU with small settings: the data part always (``--dry-run``: detaug and torch; in this process,
through each script's main()), and two training steps of torchvision's model as a subprocess (as
a user runs it) where torchvision imports, each step printing a finite loss and its parts."""
import importlib.util
import math
import os
import re

import pytest

from helpers import REPO, torchvision_or_skip
from helpers.cases import run_example

SMALL = ("--device", "cpu", "--size", "128", "--batch-size", "2", "--threads", "1")
STEP = re.compile(r"step (\d)/2  loss (\S+)  \((.*)\)")


def _dry_run(script, iters, capsys):
    pytest.importorskip("torch")
    spec = importlib.util.spec_from_file_location(script[:-3], os.path.join(REPO, "examples",
                                                                            script))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    module.main(["--dry-run", "--iters", str(iters), *SMALL])
    return capsys.readouterr().out


def test_maskrcnn_dry_run_gives_one_mask_per_box(capsys):
    out = _dry_run("maskrcnn_torchvision.py", 2, capsys)
    assert "68 images, 80 classes" in out, out
    lines = re.findall(r"batch \d: images \(2, 3, 128, 128\) torch.float32, boxes per image "
                       r"\[\d+, \d+\], mask canvas \[\(128, 128\)\], one mask per box: True", out)
    assert len(lines) == 2, out


def test_keypointrcnn_dry_run_keeps_keypoints_in_their_boxes(capsys):
    out = _dry_run("keypointrcnn_torchvision.py", 3, capsys)
    assert "12 images, 5 keypoints" in out, out
    # generated figures lie inside the 160 x 120 canvas: a flip and a resize keep every point
    seen = re.findall(r"keypoints visible (\d+)/(\d+), within their boxes: True", out)
    assert len(seen) == 3 and all(v == t and int(t) > 0 for v, t in seen), out


@pytest.mark.parametrize("script, part", [("maskrcnn_torchvision.py", "mask"),
                                          ("keypointrcnn_torchvision.py", "keypoint")])
def test_rcnn_example_trains_two_steps(script, part):
    torchvision_or_skip()
    rc, out = run_example(script, "--iters", "2", "--proposals", "64", *SMALL, timeout=300)
    assert rc == 0, out
    steps = STEP.findall(out)
    assert [s for s, *_ in steps] == ["1", "2"], out
    for _, loss, detail in steps:
        parts = dict(p.rsplit(" ", 1) for p in detail.split(", "))
        assert part in parts and "classifier" in parts and "objectness" in parts, out
        assert math.isfinite(float(loss)) and all(math.isfinite(float(v)) for v in parts.values())
        assert float(loss) == pytest.approx(sum(float(v) for v in parts.values()), abs=1e-3)
