"""The examples run end to end on the CPU with small settings, as subprocesses (as a user runs
them)."""
import importlib.util
import os
import re

import pytest

from helpers import REPO, torchvision_or_skip
from helpers.cases import run_example

EXAMPLES = os.path.join(REPO, "examples")


def test_keras_retinanet_sequence_example(voc_small):
    pytest.importorskip("keras")
    # --root: the VOC sample at 1/8 size (conftest.voc_small; the example letterboxes to 128)
    rc, out = run_example("keras_retinanet_sequence.py", "--device", "cpu", "--iters", "2",
                          "--epochs", "2", "--size", "128", "--batch-size", "4", "--root", voc_small)
    assert rc == 0, out
    assert "classification (4, 3069, 21)" in out, out  # 128 x 128 canvas: 3069 anchors
    losses = re.findall(r"epoch (\d): loss ([0-9.]+)  regression ([0-9.]+)  "
                        r"classification ([0-9.]+)", out)
    assert [e for e, *_ in losses] == ["1", "2"], out
    assert all(float(v) > 0 for _, *vals in losses for v in vals), out


def test_classification_example():
    pytest.importorskip("torch")
    rc, out = run_example("classification.py", "--device", "cpu", "--iters", "3",
                          "--batch-size", "4", "--threads", "2")
    assert rc == 0, out
    assert re.search(r"classes, device cpu", out), out
    assert len(re.findall(r"iter +\d+  loss [0-9.]+", out)) == 3, out


def test_retinanet_torchvision_dry_run():
    pytest.importorskip("torch")
    rc, out = run_example("retinanet_torchvision.py", "--dry-run", "--device", "cpu", "--iters",
                          "6", "--size", "128", "--batch-size", "8")
    assert rc == 0, out
    # 6 batches of an epoch of 5: the iterator went on into the next epoch by itself
    assert len(re.findall(r"batch \d: images \(8, 3, 128, 128\) torch.float32", out)) == 6, out
    assert "all boxes positive: False" not in out, out
    assert "dry run done" in out, out


@pytest.mark.parametrize("fault", ["ImportError('No module named torchvision')",
                                   "RuntimeError('operator torchvision::nms does not exist')"],
                         ids=["absent", "unloadable"])
def test_retinanet_torchvision_without_torchvision_says_so(tmp_path, monkeypatch, fault):
    """torchvision absent, or installed but failing to import (PyPI's wheel, linked to the CUDA
    torch, on a CPU torch raises RuntimeError): simulated by a package of that name first on the
    path that raises, so the test runs whether or not this machine has torchvision."""
    (tmp_path / "torchvision").mkdir()
    (tmp_path / "torchvision" / "__init__.py").write_text(f"raise {fault}\n")
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(
        [str(tmp_path), REPO, *filter(None, [os.environ.get("PYTHONPATH")])]))
    rc, out = run_example("retinanet_torchvision.py", "--device", "cpu", "--iters", "1")
    assert rc != 0 and "needs torchvision" in out and "Traceback" not in out, out


@pytest.mark.slow
def test_retinanet_torchvision_trains_two_iterations():
    torchvision_or_skip()
    rc, out = run_example("retinanet_torchvision.py", "--device", "cpu", "--iters", "2",
                          "--size", "128", "--batch-size", "2", "--threads", "2", timeout=300)
    assert rc == 0, out
    assert re.search(r"iter +2/2  loss [0-9.]+", out), out
    # two iterations: windows of one step say nothing of a trend, and the line says so
    assert "2 iteration(s): too few to compare the loss" in out, out


def test_retinanet_loss_trend_windows_never_overlap():
    spec = importlib.util.spec_from_file_location("rt", os.path.join(EXAMPLES, "retinanet_torchvision.py"))
    rt = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(rt)
    assert rt.loss_trend([3.0] * 5 + [2.0] + [1.0] * 5, 20) == (
        "mean loss of iterations 1-5: 3.0000; of iterations 7-11: 1.0000; decreased")
    assert "too few" in rt.loss_trend([3.0, 2.0, 1.0], 20)  # windows of one step say nothing
    assert "iterations 1-20: 1.5000; of iterations 81-100: 2.0000; did NOT decrease" in \
        rt.loss_trend([1.5] * 20 + [9.0] * 60 + [2.0] * 20, 20)
    assert "too few" in rt.loss_trend([1.0], 20)


def test_yolo_style_example_trains_on_the_cpu(coco_small):
    pytest.importorskip("torch")
    # --root: the COCO sample at 1/8 size (conftest.coco_small; the example trains at 128, and
    # its mosaic and mixup partners decoded 4 to 8 full-size photographs a sample)
    rc, out = run_example("yolo_style.py", "--device", "cpu", "--size", "128", "--iters", "3",
                          "--batch-size", "4", "--threads", "1", "--root", coco_small, timeout=300)
    assert rc == 0, out
    assert "pipeline on cpu" in out, out
    steps = re.findall(r"step (\d): images \(4, 3, 128, 128\)  boxes (\d+)  loss ([0-9.]+)", out)
    assert [s for s, _, _ in steps] == ["0", "1", "2"], out
    assert all(int(n) > 0 and 0 < float(v) < 10 for _, n, v in steps), out
