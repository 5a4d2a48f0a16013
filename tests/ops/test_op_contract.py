"""The contract every op keeps, checked for every op of the registry.

Each op is run the way tests/ops/test_op_args.py runs it (its ``CASES``: how it is fed and its base
arguments), but on fresh random inputs made from a fixed seed and a batch of ``N`` samples:

* its inputs are not modified (copies of every input array taken before the run compare equal
  after it);
* its outputs are on the CPU (NumPy arrays, batches with ``device == 'cpu'``);
* the dtype is kept where the op keeps it (images of a geometric or colour op stay uint8, boxes
  stay float32);
* a batch of one gives the same sample as that sample in a batch of many: every draw is keyed by
  the sample index, so batch ``k`` of a batch-of-one pipeline over the same sized source
  (``pipe.run_batch(k)``: sample index ``k``) equals sample ``k`` of the batch of ``N``.
"""
from __future__ import annotations

import copy
import warnings

import numpy as np
import pytest

from helpers import op_cases as oa
from detaug import fn
from detaug.core.batch import BoxBatch, EncodedBatch, ImageBatch, PaddedBoxes
from detaug.ops import REGISTRY

from helpers import close_pipelines  # noqa: F401 (fixture)

N = 5
SEED = 20261124

# ops whose image output has the dtype of their image input
KEEPS_IMAGE_DTYPE = {"flip", "affine", "crop", "resize", "letterbox", "rotate", "zoom_out", "paste",
                     "random_iou_crop", "random_resized_crop", "materialize",
                     "brightness_contrast", "hsv", "slice", "transpose", "pad",
                     "gaussian_blur", "noise", "noise.gaussian", "noise.salt_and_pepper",
                     "noise.shot", "jitter", "jpeg_compression", "random_erasing", "erase",
                     "perspective", "scale_jitter", "random_shortest_size", "warp_affine",
                     "photometric_distort", "grayscale", "color_twist", "brightness", "contrast",
                     "saturation", "hue", "mosaic", "mixup"}
# ops whose output shape depends on the batch by definition (padded to the batch's largest
# sample): a sample alone is compared with the same region of its padded version (the
# polygons field is as wide as the batch's longest box: instance_masks' case carries it)
BATCH_SHAPED = {"pad", "instance_masks"}
# ops run as sources elsewhere (no input to modify, no per-op case): tests/ops/test_op_args.py SOURCES
NOT_HERE = oa.SOURCES


def _fresh_inputs(seed):
    """Random stand-ins for test_op_args' fixed inputs, N samples, from ``seed``."""
    rng = np.random.default_rng(seed)
    images, boxes, labels, rel = [], [], [], []
    for _ in range(N):
        h, w = int(rng.integers(24, 64)), int(rng.integers(24, 64))
        images.append(rng.integers(0, 256, (h, w, 3), dtype=np.uint8))
        k = int(rng.integers(1, 4))
        x0, y0 = rng.uniform(0, w * 0.6, k), rng.uniform(0, h * 0.6, k)
        x1, y1 = x0 + rng.uniform(4, w * 0.4, k), y0 + rng.uniform(4, h * 0.4, k)
        boxes.append(np.stack([x0, y0, np.minimum(x1, w), np.minimum(y1, h)], 1).astype(np.float32))
        labels.append(rng.integers(0, 3, k))
        a = rng.uniform(0, 0.5, (2, 2))  # two boxes: test_op_args labels them [1, 2]
        rel.append(np.concatenate([a, a + rng.uniform(0.1, 0.5, (2, 2))], 1).astype(np.float32))
    return images, boxes, labels, rel


def _capture(name, monkeypatch):
    """(columns, graph function) that test_op_args' runner of ``name`` feeds, on fresh inputs."""
    images, boxes, labels, rel = _fresh_inputs(SEED)
    monkeypatch.setattr(oa, "IMAGES", images)
    monkeypatch.setattr(oa, "BOXES", boxes)
    monkeypatch.setattr(oa, "LABELS", labels)
    monkeypatch.setattr(oa, "REL", rel)
    seen = {}

    def record(cols, graph_fn, seed=0, batch_size=None):
        seen["cols"], seen["graph_fn"] = cols, graph_fn
        return (None, None)

    monkeypatch.setattr(oa, "_feed", record)
    runner, base, _ = oa.CASES[name]
    oa._run(name, runner, base)
    # columns the runner builds with a fixed length (two samples) are cycled to N
    cols = [[c[i % len(c)] for i in range(N)] for c in seen["cols"]]
    return cols, seen["graph_fn"], base


def _pipe(cols, graph_fn, batch_size):
    return oa.feed_pipe(cols, graph_fn, batch_size, SEED)  # the columns hold N samples


def _arrays(v):
    """Every array an input sample holds."""
    if isinstance(v, dict):
        return [a for k in sorted(v) for a in _arrays(v[k])]
    if isinstance(v, (list, tuple)):
        return [a for x in v for a in _arrays(x)]
    return [v] if isinstance(v, np.ndarray) else []


def _sample(v, k):
    """Sample ``k`` of one output, as a list of host arrays (and strings)."""
    if isinstance(v, ImageBatch):
        return [np.asarray(v.data[k]), v.layout]
    if isinstance(v, BoxBatch):
        d = v.per_sample()[k]
        return [x for key in sorted(d) for x in (key, np.asarray(d[key]))] + [v.fmt]
    if isinstance(v, PaddedBoxes):
        n = int(np.asarray(v["counts"])[k])
        return [x for key in sorted(v) for x in
                (key, np.asarray(v[key])[k] if key == "counts" or np.ndim(v[key]) < 2
                 else np.asarray(v[key])[k][:n])]
    if isinstance(v, dict):
        return [x for key in sorted(v) for x in (key, np.asarray(v[key])[k])]
    if isinstance(v, EncodedBatch):
        return [np.asarray(v.data[k])]
    if isinstance(v, (list, tuple)):
        return [np.asarray(v[k])]
    return [np.asarray(v)[k]]


def _host_arrays(v):
    """Every array of one output (to check where it lives)."""
    if isinstance(v, ImageBatch):
        return list(v.data) if isinstance(v.data, list) else [v.data]
    if isinstance(v, BoxBatch):
        return [v.boxes, v.labels, *v.fields.values()]
    if isinstance(v, dict):
        return list(v.values())
    if isinstance(v, EncodedBatch):
        return list(v.data)
    if isinstance(v, (list, tuple)):
        return list(v)
    return [v]


CONTRACT = sorted(c for c in oa.CASES if oa.CASES[c][0] is not oa._external)


def test_every_op_has_a_contract_case():
    covered = {c.split("@")[0] for c in CONTRACT}
    public = {n for n in REGISTRY if not n.startswith("_")}
    assert public - NOT_HERE <= covered, f"ops with no contract case: {sorted(public - NOT_HERE - covered)}"


@pytest.mark.parametrize("name", CONTRACT)
def test_op_contract(name, monkeypatch):
    cols, graph_fn, _ = _capture(name, monkeypatch)
    before = copy.deepcopy(cols)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        many = _pipe(cols, graph_fn, N).run()
        one = _pipe(cols, graph_fn, 1)
        singles = [one.run_batch(k) for k in range(N)]

    # inputs not modified
    for col, col0 in zip(cols, before):
        for s, s0 in zip(col, col0):
            for a, a0 in zip(_arrays(s), _arrays(s0)):
                assert a.dtype == a0.dtype and np.array_equal(a, a0, equal_nan=True), \
                    f"fn.{name} modified its input"

    for j, out in enumerate(many):
        # on the CPU
        assert getattr(out, "device", "cpu") == "cpu", f"fn.{name} output {j}: on {out.device}"
        for a in _host_arrays(out):
            assert isinstance(a, (np.ndarray, np.generic)), \
                f"fn.{name} output {j}: {type(a).__name__}, not a NumPy array"
        # dtype kept
        if isinstance(out, ImageBatch) and name.split("@")[0] in KEEPS_IMAGE_DTYPE:
            assert all(np.asarray(a).dtype == np.uint8 for a in out.data), \
                f"fn.{name}: uint8 images came out as {np.asarray(out.data[0]).dtype}"
        if isinstance(out, BoxBatch):
            assert np.asarray(out.boxes).dtype == np.float32, f"fn.{name}: boxes {out.boxes.dtype}"
        # a batch of one = the same sample in a batch of many
        for k in range(N):
            alone, in_many = _sample(singles[k][j], 0), _sample(out, k)
            if name in BATCH_SHAPED:
                in_many = [x if isinstance(x, str) else x[tuple(slice(0, d) for d in y.shape)]
                           for x, y in zip(in_many, alone)]
            assert oa.equal_flat(alone, in_many), \
                f"fn.{name} output {j}: sample {k} alone differs from sample {k} in a batch of {N}"
