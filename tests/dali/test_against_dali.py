"""The ported DALI programs (tests/dali/ports/*.py) run under detaug and under NVIDIA DALI itself
(the same text, its ``detaug`` imports written back to ``nvidia.dali``: helpers.dali_ports), on
the same local data; every output each program produces is compared value by value.

Skipped where ``nvidia.dali`` is not installed. DALI's CPU pipelines run without a GPU (the DALI
run gets ``device_id=None`` on a machine without CUDA), so this runs anywhere DALI is installed:
``PYTHONPATH=/path/to/dali_site:$PWD python -m pytest -q tests/dali/test_against_dali.py``.

The rules, per kind of output:
- integers, strings, shapes, dtypes, sample counts: equal;
- floats (boxes, matrices, points, normalised images): ``rtol=1e-5, atol=1e-6`` (float32
  arithmetic done in another order; boxes differ by at most 1.2e-7 here), ``atol`` given where
  a value is a difference of larger terms (warp_transforms' matrices);
- uint8 pixels: equal, except where an op resamples in float32 and rounds (resize, hsv): within
  1 level (DALI's own float32 sums land on the other side of a half now and then,
  docs/dali.md); rotate / warp_affine with ``fill_value``: within 1 level off a 2-pixel band
  along the edge of the filled area and of the image, where detaug takes the fill for a sample
  point outside the image whole and DALI blends it (docs/dali.md), the band at most 10% of the
  pixels;
- random draws: detaug's come from its keyed streams, not DALI's generator (same distributions,
  other values), so the DALI run records its draws and the detaug run of the same program
  takes them (REPLAYED below); outputs whose draws cannot be handed over (a shuffled reader's
  order, draws made inside DALIGenericIterator's loop) are compared in number of samples, dtype
  and number of dimensions only;
- detection_pipeline's select_masks outputs: a sample holding a mask made of several polygons
  differs in its counts (detaug keeps every polygon, DALI the last one: docs/dali.md); the
  other samples are compared by the rules above."""
import importlib.util
import os
import re

import numpy as np
import pytest

from helpers import REPO
from helpers import dali_ports

needs_dali = pytest.mark.skipif(
    importlib.util.find_spec("nvidia") is None or importlib.util.find_spec("nvidia.dali") is None,
    reason="NVIDIA DALI (nvidia.dali) is not installed: nothing to compare against")

DRAWN = "drawn"
BAND = "band"
MASKS = "masks"
DETAUG_FORM = "detaug's form"

# per port: {regex over the output's path: rule}; outputs not named get the default rules.
# REPLAYED ports: the DALI run records its random draws (random.uniform, random.coin_flip,
# random_bbox_crop) and the detaug run takes them (helpers.dali_ports), so that everything
# computed from them is compared value by value; random_bbox_crop's own window is then DALI's.
REPLAYED = {"resize_slice", "warp_transforms", "ssd_coco_pipeline", "detection_pipeline"}
PORTS = {
    "coco_reader": {},
    "external_input": {},
    "parallel_external_source": {},
    "expressions": {},
    "tensor_join": {},
    "external_source_forms": {},
    # readers.coco given no argument only DALI's reader has returns detaug's own (encoded,
    # BoxBatch) (docs/dali.md): the boxes and labels DALI gives there have no counterpart
    "coco_reader_variants": {r"results\['bare'\]\[\d\]\[[12]\]": DETAUG_FORM},
    "box_ops": {r"hsv": 1},
    "augmentation_gallery": {r"results\['(resize|hsv)'\]\[1\]": 1,
                             r"results\['(rotate|warp_affine)'\]\[1\]": BAND},
    "resize_slice": {r"resized|sliced": 1},
    # the matrices' translations are sums of terms near 100 (the rotation's centre): float32
    # rounding of those, 7.6e-6 at most here
    "warp_transforms": {r"warped": BAND, r"mt|both|moved": 2e-5},
    # shuffle_after_epoch: the reader's order is DALI's own permutation (not replayed)
    "ssd_coco_pipeline": {r"images": DRAWN},
    # the loop goes through DALIGenericIterator: the draws are not replayed
    "pytorch_ssd_loader": {r"seen\[\d+\]\[4\]|next_epoch_first|images|boxes|labels|data": DRAWN},
    # select_masks keeps every polygon of a mask, DALI's its last one only (docs/dali.md): a
    # sample holding a mask in several polygons differs in its polygon and vertex counts
    "detection_pipeline": {r"outputs\[\d\]\[[4-8]\]|sel_|out_vertices": MASKS},
}


def _rule(rules, path):
    for pattern, rule in rules.items():
        if re.fullmatch(f"(?:{pattern}).*", path):
            return rule
    return None


def _band(a):
    """Pixels within 2 of the filled area (all channels 0) or of the image's edge."""
    import cv2

    filled = np.pad((a == 0).all(-1).astype(np.uint8), 1, constant_values=1)
    k = np.ones((3, 3), np.uint8)
    band = (cv2.dilate(filled, k, iterations=2) > 0) & ~(cv2.erode(filled, k, iterations=2) > 0)
    return band[1:-1, 1:-1]


def _compare_sample(path, ours, theirs, rule):
    assert ours.dtype == theirs.dtype, f"{path}: dtype {ours.dtype} vs DALI's {theirs.dtype}"
    if rule == DRAWN or (rule == MASKS and ours.shape[0] != theirs.shape[0]):
        assert ours.ndim == theirs.ndim, f"{path}: {ours.shape} vs DALI's {theirs.shape}"
        return 0.0
    assert ours.shape == theirs.shape, f"{path}: shape {ours.shape} vs DALI's {theirs.shape}"
    if ours.size == 0 or ours.dtype.kind not in "biuf":
        assert np.array_equal(ours, theirs), path
        return 0.0
    d = np.abs(ours.astype(np.float64) - theirs.astype(np.float64))
    if ours.dtype.kind == "f":
        atol = rule if isinstance(rule, float) else 1e-6
        np.testing.assert_allclose(ours, theirs, rtol=1e-5, atol=atol, err_msg=path)
    elif rule == BAND:
        band = _band(ours) | _band(theirs)
        assert band.mean() <= 0.1, f"{path}: band {band.mean():.3f} of the image"
        assert d.max(-1)[~band].max() <= 1, f"{path}: {d.max(-1)[~band].max()} off the band"
    else:
        tol = rule if isinstance(rule, int) else 0
        assert d.max() <= tol, f"{path}: max difference {d.max()} (allowed {tol})"
    return float(d.max())


def compare(name, ours, theirs):
    """Assert the rules for every output; returns {path: max difference} for the report."""
    rules = PORTS[name]
    unmatched = {p for p in set(ours) ^ set(theirs) if _rule(rules, p) != DETAUG_FORM}
    assert not unmatched, sorted(unmatched)
    worst = {}
    for path in sorted(set(ours) & set(theirs)):
        a, b, rule = ours[path], theirs[path], _rule(rules, path)
        if isinstance(a, list):
            assert isinstance(b, list) and len(a) == len(b), f"{path}: {len(a)} vs {len(b)} samples"
            worst[path] = max([_compare_sample(f"{path}.at({i})", x, y, rule)
                               for i, (x, y) in enumerate(zip(a, b))], default=0.0)
        elif isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
            worst[path] = _compare_sample(path, np.asarray(a), np.asarray(b), rule)
        elif rule != DRAWN:
            assert a == b, f"{path}: {a!r} vs DALI's {b!r}"
    return worst


@needs_dali
@pytest.mark.parametrize("name", sorted(PORTS))
def test_port_gives_dalis_numbers(name):
    replayed = name in REPLAYED
    theirs = dali_ports.run("dali", name, REPO, record=replayed)
    draws = theirs.pop("__draws__", None)
    ours = dali_ports.run("detaug", name, REPO, replay=draws)
    worst = compare(name, ours, theirs)
    print(name, {k: v for k, v in worst.items() if v})


def test_every_port_is_compared():
    """A new port joins the comparison (efficientdet_input needs DALI's TensorFlow plugin,
    which the DALI wheel does not hold)."""
    names = {f[:-3] for f in os.listdir(dali_ports.PORTS)
             if f.endswith(".py") and not f.startswith("_") and f != "ssd_anchors.py"}
    assert names - set(PORTS) == {"efficientdet_input"}


def test_the_rules_catch_a_difference():
    """The comparison fails on a pixel, a box, a dtype or a count that differs."""
    img = np.zeros((20, 20, 3), np.uint8) + 100
    ours = {"im": [img], "boxes": [np.array([[0.1, 0.2, 0.3, 0.4]], np.float32)], "n": 3}
    compare("coco_reader", ours, ours)
    for path, bad in (("im", [img + 1]), ("boxes", [ours["boxes"][0] + 1e-4]),
                      ("boxes", [ours["boxes"][0].astype(np.float64)]), ("n", 4),
                      ("im", [img, img])):
        with pytest.raises(AssertionError):
            compare("coco_reader", ours, {**ours, path: bad})
