"""The snippets of the README and docs/ run on the pipelines they stand beside, read from the
markdown (a stale snippet fails here), and the newcomer's first hour meets no stumble: the
demo's own code raises no DALI warning, the examples run as their documentation says, and what
they print is whole.

tests/frontends/test_readme_examples.py runs every ```python block as a script; this file runs the
```python no-run blocks that need a pipeline from beside them (the README's drawing snippet on
the README's own pipeline), and says for every other no-run block why it is shown only."""
from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
import warnings

import numpy as np
import pytest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
EXAMPLES = os.path.join(REPO, "examples")
FENCE = re.compile(r"^```([^\n]*)\n(.*?)^```", re.S | re.M)

# no-run blocks this file does not run, each with why (a new no-run block fails until it is run
# below or listed here): page -> first line of the block -> why
SHOWN_ONLY = {
    "docs/training.md": {
        "from torchvision.models.detection import retinanet_resnet50_fpn":
            "needs torchvision and trains an epoch of RetinaNet; examples/retinanet_torchvision.py "
            "runs the same model on the same iterator (tests/frontends/test_examples.py)",
        'dist.init_process_group("nccl")                  # "gloo" on the CPU':
            "a fragment of examples/retinanet_ddp.py, which "
            "tests/frontends/test_ddp_example.py runs under torchrun",
    },
}


def blocks(page):
    """(info string, code) of every fenced block of ``page`` (relative to the repository)."""
    with open(os.path.join(REPO, page), encoding="utf-8") as f:
        return [(m.group(1).strip(), m.group(2)) for m in FENCE.finditer(f.read())]


def pages():
    docs = sorted(f"docs/{f}" for f in os.listdir(os.path.join(REPO, "docs")) if f.endswith(".md"))
    return ["README.md"] + docs


def readme_pipeline_block():
    """The README's Example: the block that defines a pipeline with @pipeline_def."""
    (code,) = [c for info, c in blocks("README.md") if info == "python" and "@pipeline_def" in c]
    return code


def drawing_block():
    (code,) = [c for info, c in blocks("README.md") if info == "python no-run" and "draw_boxes" in c]
    return code


def test_every_no_run_block_is_run_here_or_says_why_not():
    run_here = {("README.md", drawing_block().splitlines()[0])}
    for page in pages():
        for info, code in blocks(page):
            if info != "python no-run":
                continue
            first = code.splitlines()[0]
            assert (page, first) in run_here or first in SHOWN_ONLY.get(page, {}), \
                f"{page}: a no-run block ({first!r}) is neither run by this file nor listed"
    for page, firsts in SHOWN_ONLY.items():  # the list holds no block that has gone
        present = {c.splitlines()[0] for info, c in blocks(page) if info == "python no-run"}
        assert set(firsts) <= present, (page, set(firsts) - present)


# ---- the README's drawing snippet on the README's pipeline -----------------------------------
def test_readme_drawing_snippet_runs_on_the_readme_pipeline(tmp_path, monkeypatch):
    """The Example's pipeline (its own definition, read from the README, at batch 2, decoding on
    the CPU: a GPU run of the Example itself is tests/frontends/test_readme_examples.py's, in a
    process of its own), then the drawing snippet as printed: the PNG holds the sample's image,
    normalised and taken back (float64 here), with each box's outline in its class colour."""
    from PIL import Image

    from detaug.visualize import class_color

    example = readme_pipeline_block()
    assert example.count('device="auto"') == 1
    example = example.replace('device="auto"', 'device="cpu"')
    scope = {"__name__": "readme_example"}  # the example's __main__ part does not run
    exec(compile(example, "README.md (Example)", "exec"), scope)
    (factory, root), = re.findall(r"pipe = (\w+)\(\"([^\"]+)\"\)", example)
    mean, std = (np.array(eval(re.search(rf"{k}=(\[[^\]]*\])", example).group(1)), np.float64)
                 for k in ("mean", "std"))
    pipe = scope[factory](os.path.join(REPO, root), batch_size=2, num_threads=1)
    monkeypatch.chdir(tmp_path)
    snippet = {"pipe": pipe}
    exec(compile(drawing_block(), "README.md (drawing)", "exec"), snippet)
    pipe.close()

    images, boxes = snippet["images"], snippet["boxes"]
    drawn = np.asarray(Image.open(tmp_path / "sample.png").convert("RGB"))
    from detaug.core.backend import to_host

    chw = to_host(images.data[0]).astype(np.float64)  # on the GPU where the Example ran there
    assert chw.shape[0] == 3 and drawn.shape == chw.shape[1:] + (3,)
    want = np.clip(np.rint(chw.transpose(1, 2, 0) * std + mean), 0, 255).astype(np.uint8)
    n = int(to_host(boxes["counts"])[0])
    got = snippet["t"]
    np.testing.assert_array_equal(got["boxes"], to_host(boxes["boxes"])[0, :n])
    np.testing.assert_array_equal(got["labels"], to_host(boxes["labels"])[0, :n])
    assert n >= 1
    # away from every box (and its tag, at most 24 px above it) the image is the sample's
    keep = np.ones(drawn.shape[:2], bool)
    for x0, y0, x1, y1 in np.rint(got["boxes"]).astype(int):
        keep[max(y0 - 24, 0):y1 + 2, max(x0 - 2, 0):x1 + 2] = False
    np.testing.assert_array_equal(drawn[keep], want[keep])
    # each box's left edge, along its middle half, is drawn in its class colour
    for (x0, y0, x1, y1), label in zip(np.rint(got["boxes"]).astype(int), got["labels"]):
        edge = drawn[y0 + (y1 - y0) // 4:y1 - (y1 - y0) // 4, x0]
        assert (edge == class_color(int(label))).all(-1).mean() > 0.5, (x0, y0, x1, y1, label)


@pytest.mark.parametrize("layout", ["CHW", "HWC"])
def test_draw_boxes_of_a_normalised_image_is_the_uint8_drawing(rng, layout):
    """fn.normalize's float output with its mean/std draws exactly as the uint8 image it came
    from (fresh random pixels, boxes and labels)."""
    from detaug.visualize import draw_boxes

    h, w = rng.integers(20, 60, 2)
    img = rng.integers(0, 256, (h, w, 3), dtype=np.uint8)
    mean, std = rng.uniform(50, 200, 3), rng.uniform(20, 80, 3)
    norm = ((img - mean) / std).astype(np.float32)
    if layout == "CHW":
        norm = np.ascontiguousarray(norm.transpose(2, 0, 1))
    xy = np.sort(rng.uniform(0, [w, h, w, h], (4, 4)).reshape(4, 2, 2), axis=1).reshape(4, 4)
    boxes = xy[:, [0, 2, 1, 3]]  # x0, y0, x1, y1 with x0 <= x1, y0 <= y1
    labels = rng.integers(0, 5, 4)
    a = np.asarray(draw_boxes(norm, boxes, labels, mean=list(mean), std=list(std)))
    b = np.asarray(draw_boxes(img, boxes, labels))
    np.testing.assert_array_equal(a, b)


def test_draw_boxes_refuses_what_it_cannot_draw():
    from detaug.visualize import draw_boxes

    with pytest.raises(ValueError, match="uint8 already"):
        draw_boxes(np.zeros((8, 8, 3), np.uint8), [[1, 1, 4, 4]], mean=[0, 0, 0])
    with pytest.raises(TypeError, match="int16"):
        draw_boxes(np.zeros((8, 8, 3), np.int16), [[1, 1, 4, 4]])
    with pytest.raises(TypeError, match="mean= and std="):  # a float image says nothing of its scale
        draw_boxes(np.zeros((3, 8, 8), np.float32), [[1, 1, 4, 4]], mean=[0, 0, 0])


def test_padded_boxes_per_sample_is_the_box_batch_one(rng):
    """PaddedBoxes.per_sample: the first counts[b] rows of every field, as BoxBatch gives them
    (a hand-made case, then fn.pad_boxes of a random BoxBatch through the kernel)."""
    from detaug.core.batch import BoxBatch, PaddedBoxes
    from detaug.kernels import boxes as kb

    p = PaddedBoxes(boxes=np.arange(24, dtype=np.float32).reshape(2, 3, 4),
                    labels=np.array([[4, 5, -1], [-1, -1, -1]]), counts=np.array([2, 0], np.int32))
    got = p.per_sample()
    assert [d["labels"].tolist() for d in got] == [[4, 5], []]
    assert got[0]["boxes"].tolist() == [[0, 1, 2, 3], [4, 5, 6, 7]] and got[1]["boxes"].shape == (0, 4)

    counts = rng.integers(0, 5, 4)
    offsets = np.concatenate([[0], np.cumsum(counts)])
    xy = rng.uniform(0, 50, (offsets[-1], 4)).astype(np.float32)
    b = BoxBatch(xy, rng.integers(0, 9, offsets[-1]), offsets, [[64, 64]] * 4,
                 fields={"difficult": rng.integers(0, 2, offsets[-1])},
                 valid=rng.uniform(size=offsets[-1]) > 0.3)
    fields = {"labels": b.labels, **b.fields}
    boxes, fields, cnt = kb.pad_boxes_numpy(b.boxes, fields, b.valid, b.offsets, 6, fill=0.0)
    padded = PaddedBoxes(boxes=boxes, counts=cnt, **fields).per_sample()
    for mine, ref in zip(padded, b.per_sample(), strict=True):
        assert mine.keys() == ref.keys()
        for k in ref:
            np.testing.assert_array_equal(mine[k], ref[k])


# ---- the demo --------------------------------------------------------------------------------
def test_demo_raises_no_warning_and_users_rotate_still_does(tmp_path, capsys):
    """The demo's own pipeline and its --op rotate pass expand= (no DALI warning for code the
    user did not write); a user's fn.rotate(angle=...) alone still warns (docs/dali.md)."""
    from detaug import fn, pipeline_def
    from detaug.cli import main as cli
    from detaug.ops import geometry

    geometry._CANVAS_SAID.clear()  # the warning is said once per process
    with warnings.catch_warnings(record=True) as said:
        warnings.simplefilter("always")
        for extra in ([], ["--op", "rotate"]):
            rc = cli.main(["demo", "--batches", "1", "--batch-size", "2", "--grid", "1",
                           "--cell", "32", "--out", str(tmp_path / "d.png"), "--device", "cpu",
                           *extra])
            assert rc == 0, capsys.readouterr().err
    assert not [w for w in said if "rotate" in str(w.message)], [str(w.message) for w in said]

    @pipeline_def(batch_size=1, num_threads=1, seed=0)
    def users():
        enc, boxes = fn.readers.voc(root=os.path.join(EXAMPLES, "data", "voc-mini"))
        img = fn.decoders.image(enc)
        return fn.rotate(img, boxes, angle=5.0)

    with pytest.warns(UserWarning, match="keep_size=False, fill_value=0"):
        p = users()
        p.run()
    p.close()


def test_demo_op_list_comes_from_the_declarations():
    """photometric_distort (its description says 'float32') is shown; normalize (dtype
    float32 by default) and crop_mirror_normalize (CHW) are not; a refusal says what qualifies."""
    from detaug.cli import main as cli

    ops = cli.demo_ops()
    assert {"photometric_distort", "hsv", "rotate", "clip_boxes"} <= set(ops)
    assert not {"normalize", "crop_mirror_normalize", "pad_boxes", "retinanet_encode",
                "bb_flip", "cast", "slice"} & set(ops)
    with pytest.raises(ValueError, match=r"takes and gives images \(uint8 HWC.*or boxes; one of"):
        cli.op_pipeline("voc", os.path.join(EXAMPLES, "data", "voc-mini"), "normalize")


def test_gpu_install_command_names_the_wheel_outside_a_checkout(tmp_path):
    from detaug.core.backend import install_command

    pkg = tmp_path / "site" / "detaug"
    pkg.mkdir(parents=True)
    assert install_command("gpu", str(pkg)) == "pip install 'detaug[gpu]'"
    (tmp_path / "site" / "pyproject.toml").write_text('[project]\nname = "detaug"\n')
    assert install_command("gpu", str(pkg)) == "pip install '.[gpu]'"


# ---- the examples as documented --------------------------------------------------------------
def _example(script, *args, env=None, timeout=240):
    env = dict(os.environ, KERAS_BACKEND="torch", PYTHONWARNINGS="ignore", **(env or {}))
    proc = subprocess.run([sys.executable, os.path.join(EXAMPLES, script), *args], cwd=REPO,
                          env=env, capture_output=True, text=True, timeout=timeout)
    return proc.returncode, proc.stdout, proc.stderr


def _coco_subset(src, dst, n):
    """The first ``n`` images of the COCO folder ``src`` (annotations.json, images/) in ``dst``."""
    import json
    import shutil

    with open(os.path.join(src, "annotations.json"), encoding="utf-8") as f:
        ann = json.load(f)
    ann["images"] = ann["images"][:n]
    ids = {im["id"] for im in ann["images"]}
    ann["annotations"] = [a for a in ann["annotations"] if a["image_id"] in ids]
    os.makedirs(os.path.join(dst, "images"))
    for im in ann["images"]:
        shutil.copy(os.path.join(src, "images", im["file_name"]), os.path.join(dst, "images"))
    with open(os.path.join(dst, "annotations.json"), "w", encoding="utf-8") as f:
        json.dump(ann, f)
    return dst


def test_yolo_style_runs_its_iterations_across_epochs(coco_small, tmp_path):
    """--iters is the number of steps, however many epochs they take (it stopped after the
    first): 8 images of the COCO sample in batches of 4 are 2 steps an epoch, so 5 steps run
    through two epochs into a third."""
    pytest.importorskip("torch")
    root = _coco_subset(coco_small, str(tmp_path / "coco8"), 8)
    rc, out, err = _example("yolo_style.py", "--device", "cpu", "--size", "64", "--iters", "5",
                            "--batch-size", "4", "--threads", "1", "--root", root)
    assert rc == 0, out + err
    steps = re.findall(r"step (\d+): images \(\d+, 3, 64, 64\)  boxes \d+  loss [0-9.]+  "
                       r"epoch (\d)", out)
    assert steps == [(str(s), str(s // 2)) for s in range(5)], out


def test_tf_example_without_tensorflow_says_what_to_install(tmp_path):
    """Where `import tensorflow` fails (a folder first on the path whose tensorflow package
    raises ImportError, as a missing one does), one line naming detaug[tf], no traceback."""
    fake = tmp_path / "no_tf" / "tensorflow"
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text("raise ImportError(\"No module named 'tensorflow'\")\n")
    path = os.pathsep.join([str(tmp_path / "no_tf"), REPO])
    rc, out, err = _example("tf_keras_classification.py", env={"PYTHONPATH": path}, timeout=120)
    assert rc != 0 and "Traceback" not in err, err
    assert err.strip().splitlines() == ["this example needs TensorFlow: pip install 'detaug[tf]' "
                                        "(in a source checkout: pip install '.[tf]')"], err


def _load(script):
    spec = importlib.util.spec_from_file_location(script[:-3], os.path.join(EXAMPLES, script))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_retinanet_loss_trend_needs_windows_of_several_steps():
    rt = _load("retinanet_torchvision.py")
    assert "3 iteration(s): too few to compare the loss" in rt.loss_trend([3.0, 2.0, 1.0], 20)
    n = rt.MIN_WINDOW
    assert "too few" in rt.loss_trend([1.0] * (2 * n - 1), 20)
    assert rt.loss_trend([2.0] * n + [1.0] * n, 20).endswith("; decreased")
    assert rt.loss_trend([1.0] * n + [2.0] * n, 20).endswith("; did NOT decrease")


def test_ddp_example_writes_each_line_whole(monkeypatch):
    """Every rank's line goes out in one write, with its newline: lines of two ranks on one
    output cannot run into each other."""
    ddp = _load("retinanet_ddp.py")
    writes = []
    monkeypatch.setattr(ddp.os, "write", lambda fd, data: writes.append((fd, data)) or len(data))
    ddp.say("rank 1/2: pipeline on cpu")
    ddp.say("rank 0: step     2/5  epoch 0")
    assert writes == [(sys.stdout.fileno(), b"rank 1/2: pipeline on cpu\n"),
                      (sys.stdout.fileno(), b"rank 0: step     2/5  epoch 0\n")]
    with open(os.path.join(EXAMPLES, "retinanet_ddp.py"), encoding="utf-8") as f:
        src = f.read()
    assert "print(" not in src.split("def say(")[0], "a line printed, not said"
    assert all(line.startswith('f"rank ') for line in re.findall(r"\bsay\((.*)", src)
               if not line.startswith("line")), "a line without its rank"
