"""examples/maskrcnn_torchvision.py and examples/keypointrcnn_torchvision.py run end to end on the
CPU with small settings: the data part always (``--dry-run``: detaug and torch; in this process,
through each script's main()), and two training steps of torchvision's model as a subprocess (as
a user runs it) where torchvision imports, each step printing a finite loss and its parts; and the
keypoint example's generated data is its stated ground truth."""
import importlib.util
import math
import os
import re

import numpy as np
import pytest

from helpers import REPO, torchvision_or_skip
from helpers.cases import run_example

SMALL = ("--device", "cpu", "--size", "128", "--batch-size", "2", "--threads", "1")
STEP = re.compile(r"step (\d)/2  loss (\S+)  \((.*)\)")


def _example(script):
    spec = importlib.util.spec_from_file_location(script[:-3], os.path.join(REPO, "examples",
                                                                            script))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _dry_run(script, iters, capsys):
    pytest.importorskip("torch")
    _example(script).main(["--dry-run", "--iters", str(iters), *SMALL])
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


def test_generated_keypoints_are_exact_and_follow_flip_and_resize(tmp_path):
    """The keypoint example's data: every annotated keypoint is a pixel of its figure's drawing
    (background < 60, figures >= 120 in every channel), and readers.coco -> flip -> resize puts
    it where a float64 hand computation does: COCO's pixel (x, y) is the point (x + 0.5,
    y + 0.5), mirrored to W - x, scaled, left and right swapped."""
    import json

    import cv2

    from detaug import Pipeline, fn

    root = _example("keypointrcnn_torchvision.py").make_figures(str(tmp_path), n_images=3, seed=5)
    with open(os.path.join(root, "annotations.json")) as f:
        data = json.load(f)
    for ann in data["annotations"]:
        img = cv2.imread(os.path.join(root, "images", f"{ann['image_id']:06d}.png"))
        kp = np.asarray(ann["keypoints"]).reshape(-1, 3)
        assert (img[kp[:, 1], kp[:, 0]] >= 120).all()
    pipe = Pipeline(batch_size=3, num_threads=1, seed=0)
    with pipe:
        enc, boxes = fn.readers.coco(file_root=os.path.join(root, "images"),
                                     annotations_file=os.path.join(root, "annotations.json"),
                                     keypoints=True)
        img, boxes = fn.flip(fn.decoders.image(enc), boxes, horizontal=1)
        img, boxes = fn.resize(img, boxes, size=(96, 128))
        pipe.set_outputs(img, boxes)
    _, out = pipe.run()
    pipe.close()
    swap = [0, 2, 1, 4, 3]  # head; left <-> right hand; left <-> right foot
    for b, got in enumerate(out.per_sample()):
        anns = [a for a in data["annotations"] if a["image_id"] == b + 1]
        assert len(got["keypoints"]) == len(anns)
        for row, ann in zip(got["keypoints"], anns):
            kp = np.asarray(ann["keypoints"], np.float64).reshape(-1, 3)
            ref = np.stack([(160 - (kp[:, 0] + 0.5)) * 128 / 160, (kp[:, 1] + 0.5) * 96 / 120,
                            kp[:, 2]], 1)[swap]
            assert np.allclose(row, ref, atol=1e-3), (row, ref)
