"""Each op's declared output rule (OpSchema.rule, detaug/core/shapes.py) against what the op
really makes on the CPU: random images of the sizes a reader gives (the rule sees their bound,
as the memory plan does), random boxes, each op run in a pipeline; every output sample must fit
the rule (the canvas exactly where the rule fixes one, within the bound otherwise; channels and
bytes per value exactly; arrays' bytes per sample exactly, padded boxes within). Every op that
runs on the device has a case here: a new one without one fails."""
from __future__ import annotations

import io

import numpy as np
import pytest

from detaug import Pipeline, fn
from detaug.core import shapes as S
from detaug.core.batch import BoxBatch, ImageBatch, PaddedBoxes
from detaug.graph.trace import REGISTRY

N = 6
# op -> [(arguments, same sizes for every image?, decoded from encoded bytes?)]
CASES = {
    "flip": [dict(horizontal=1)], "affine": [dict(rotate=10.0, scale=0.8)],
    "crop": [dict(crop=(40, 50)), dict()], "resize": [
        dict(size=(64, 48)), dict(size=(64, 64), mode="not_larger"), dict(resize_longer=70),
        dict(size=(50, 50), mode="not_smaller"), dict(resize_shorter=40)],
    "letterbox": [dict(size=(96, 80))], "rotate": [dict(angle=30.0), dict(angle=30.0, expand=True)],
    "zoom_out": [dict(ratio=(1.0, 2.5), probability=1.0)], "materialize": [dict()],
    "normalize": [dict(mean=[1, 2, 3], std=[2, 3, 4]), dict(dtype="float16", output_layout="CHW")],
    "crop_mirror_normalize": [dict(crop=(30, 40), mean=[1, 2, 3]),
                              dict(output_dtype="float16", mirror=1)],
    "brightness_contrast": [dict(brightness=1.3)], "hsv": [dict(hue=20.0)],
    "random_iou_crop": [dict()], "random_resized_crop": [dict(size=(56, 72))],
    "gaussian_blur": [dict(sigma=1.5)], "noise": [dict(std=5.0)], "noise.gaussian": [dict()],
    "noise.salt_and_pepper": [dict()], "noise.shot": [dict()], "jitter": [dict()],
    "jpeg_compression": [dict()],
    "random_erasing": [dict(probability=1.0)], "erase": [dict(anchor=(5, 5), shape=(10, 20))],
    "mosaic": [dict(size=48, partners="batch")], "mixup": [dict(partners="batch")],
    "photometric_distort": [dict(p=1.0)], "grayscale": [dict(), dict(num_output_channels=1)],
    "color_twist": [dict(hue=30.0), dict(dtype="float32")], "saturation": [dict(saturation=0.5)],
    "hue": [dict(hue=10.0)], "brightness": [dict(brightness=1.5)], "contrast": [dict(contrast=0.5)],
    "perspective": [dict(p=1.0)], "scale_jitter": [dict(size=(64, 64)), dict(size=(64, 64), pad=False)],
    "random_shortest_size": [dict(min_size=(30, 40), max_size=90), dict(min_size=(30,))],
    "warp_affine": [dict(matrix=[1, 0, 2, 0, 1, 3], fill_value=0.0),
                    dict(matrix=[1, 0, 0, 0, 1, 0], size=(40, 50), fill_value=0.0)],
    "paste": [dict(ratio=1.5)], "cast": [dict(dtype="float32")], "transpose": [dict(perm=(2, 0, 1))],
    "prune_boxes": [dict(min_size=2.0)], "clip_boxes": [dict()], "box_convert": [dict(fmt="xywh")],
    "pad_boxes": [dict(max_boxes=12), dict()],
    "retinanet_encode": [dict(num_classes=5, sizes=(16, 32), strides=(8, 16), scales=(1.0,))],
    "instance_masks": [dict(), dict(pixelwise=True)],
    "decoders.image": [dict(), dict(output_type="GRAY")],
    "decoders.image_random_crop": [dict()],
    "water": [dict(), dict(interp_type="INTERP_LINEAR")], "sphere": [dict()],
}
SAME_SIZE = {"retinanet_encode"}  # it needs one canvas a batch
TAKES_BOXES_ONLY = {"prune_boxes", "clip_boxes", "box_convert", "pad_boxes", "retinanet_encode",
                    "instance_masks"}
WITH_POLYGONS = {"instance_masks"}  # its boxes carry polygons: each box's own rectangle
DECODES = {"decoders.image", "decoders.image_random_crop"}
THREE_INPUTS = {"slice", "decoders.image_slice"}  # (anchor and shape inputs: rule 'unknown')
# DALI's ops on plain tensors (no image or box input): their rules are checked against what they
# make in tests/dali/test_tensor_ops_devices.py
PLAIN_TENSORS = {"box_encoder", "coord_flip", "coord_transform", "cat", "stack", "reshape",
                 "shapes"}


def device_ops():
    return sorted(n for n, s in REGISTRY.items() if set(s.devices) & {"gpu", "mixed"})


def _data(rng, same):
    hw = [(int(rng.integers(20, 90)), int(rng.integers(20, 90))) for _ in range(N)]
    if same:
        hw = [hw[0]] * N
    images = [rng.integers(0, 256, (h, w, 3), dtype=np.uint8) for h, w in hw]
    boxes = []
    for h, w in hw:
        n = int(rng.integers(0, 5))
        x0, y0 = rng.uniform(0, w / 2, n), rng.uniform(0, h / 2, n)
        boxes.append(np.stack([x0, y0, x0 + rng.uniform(2, w / 2, n), y0 + rng.uniform(2, h / 2, n)],
                              1).astype(np.float32).reshape(-1, 4))
    return hw, images, boxes


def _png(a):
    from PIL import Image

    buf = io.BytesIO()
    Image.fromarray(a).save(buf, format="PNG")
    return np.frombuffer(buf.getvalue(), np.uint8)


def _host(a):
    return a.get() if hasattr(a, "get") else np.asarray(a)


def _run(name, args, images, boxes, encoded, gpu=False):
    def src(info):
        i = info.idx_in_epoch
        img = _png(images[i]) if encoded else images[i]
        d = {"boxes": boxes[i], "labels": np.arange(len(boxes[i]))}
        if name in WITH_POLYGONS:
            b = boxes[i].astype(np.float64)
            corners = np.stack([b[:, [0, 1]], b[:, [2, 1]], b[:, [2, 3]], b[:, [0, 3]],
                                np.full((len(b), 2), np.nan)], 1)
            d["polygons"] = corners.reshape(len(b), 5, 2)
        return img, d

    pipe = Pipeline(batch_size=N, num_threads=1, seed=3, device_id=0 if gpu else None)
    with pipe:
        img, bx = fn.external_source(source=src, batch=False, num_outputs=2, size=N)
        if gpu:
            img, bx = img.gpu(), bx.gpu()
        op = getattr(fn, name.split(".")[0])
        for part in name.split(".")[1:]:
            op = getattr(op, part)
        if name in TAKES_BOXES_ONLY:
            outs = op(bx, **args)
        elif encoded or name in ("cast", "transpose") or REGISTRY[name].inputs[1] == 1:
            outs = op(img, **args)
        else:
            outs = op(img, bx, **args)
        outs = outs if isinstance(outs, tuple) else (outs,)
        pipe.set_outputs(*outs)
    try:
        return pipe.run()
    finally:
        pipe.close()


def _check_image(rule: S.Img, v, where):
    assert isinstance(v, ImageBatch), where
    data = [_host(a) for a in (list(v.data) if hasattr(v.data, "shape") else v.data)]
    for a in data:
        c_axis = 0 if v.layout == "CHW" else 2
        hw = (a.shape[1], a.shape[2]) if c_axis == 0 else a.shape[:2]
        assert a.shape[c_axis] == rule.channels, where
        assert a.dtype.itemsize == rule.itemsize, where
        if rule.hw is not None:
            assert tuple(hw) == tuple(rule.hw), (where, hw, rule)
        else:
            assert hw[0] <= rule.bound[0] and hw[1] <= rule.bound[1], (where, hw, rule)
        assert a.nbytes <= rule.sample_bytes(), where


def _check(rule, v, where):
    if rule is None:
        return
    if isinstance(rule, S.Img):
        _check_image(rule, v, where)
    elif isinstance(rule, S.Boxes):
        assert isinstance(v, BoxBatch), where
        if rule.canvas is not None and rule.canvas.hw is not None:
            assert (_host(v.canvas) == np.asarray(rule.canvas.hw)).all(), where
        if rule.box_bytes:  # what each box carries besides its row (a mask), at most
            masks = _host(v.fields["masks"])
            assert masks[0].nbytes <= rule.box_bytes if len(masks) else True, where
    elif isinstance(rule, S.Array):
        if isinstance(v, PaddedBoxes):  # padded rows: within the declared bytes
            assert sum(_host(a).nbytes for a in v.values()) / N <= rule.sample_bytes, where
        else:
            assert _host(v).nbytes / N == rule.sample_bytes, where
    else:
        raise AssertionError(f"{where}: unknown symbolic value {rule!r}")


def test_every_device_op_has_a_case():
    missing = sorted(set(device_ops()) - set(CASES) - THREE_INPUTS - PLAIN_TENSORS - {"_upload"})
    assert not missing, f"add output-rule cases for {missing}"


def _cases_on(device):
    return sorted(n for n in CASES if device in REGISTRY[n].devices)


@pytest.mark.parametrize("name", sorted(CASES))
def test_rule_matches_what_the_op_makes(name, rng):
    _check_op(name, rng, gpu=False)


@pytest.mark.gpu
@pytest.mark.parametrize("name", _cases_on("gpu"))
def test_rule_matches_what_the_op_makes_on_the_gpu(name, rng):
    _check_op(name, rng, gpu=True)


def _check_op(name, rng, gpu):
    schema = REGISTRY[name]
    for k, args in enumerate(CASES[name]):
        hw, images, boxes = _data(rng, name in SAME_SIZE)
        bound = (max(h for h, _ in hw), max(w for _, w in hw))
        img = S.Img(hw[0], None) if name in SAME_SIZE else S.Img(None, bound)
        if name in DECODES:
            ins = [S.Encoded(bound)]
        elif name in TAKES_BOXES_ONLY:
            ins = [S.Boxes(img)]
        elif schema.inputs[1] == 1 or name in ("cast", "transpose"):
            ins = [img]
        else:
            ins = [img, S.Boxes(img)]
        full = {**schema.args, **args}
        out = schema.rule(ins, full)
        outs = _run(name, args, images, boxes, name in DECODES, gpu)
        assert len(out.values) == len(outs), name
        known = [r for r in out.values if r is not None]
        for j, (r, v) in enumerate(zip(out.values, outs)):
            _check(r, v, f"{name} case {k} output {j}")
        if name in ("cast", "transpose", "paste"):  # declared unknown: nothing to hold to
            assert not known


def test_the_unknown_rules_say_unknown():
    for name in THREE_INPUTS:
        out = REGISTRY[name].rule([None, None, None], dict(REGISTRY[name].args))
        assert all(v is None or v.sample_bytes() is None for v in out.values)


def test_a_wrong_rule_is_caught(rng, monkeypatch):
    """The check fails where a rule is wrong: a flip declared to double the canvas."""
    bad = S.image_rule(lambda img, a: S.Img((200, 200), None, img.channels, img.itemsize))
    hw, images, boxes = _data(rng, False)
    bound = (max(h for h, _ in hw), max(w for _, w in hw))
    out = bad([S.Img(None, bound), S.Boxes(None)], {})
    outs = _run("flip", {}, images, boxes, False)
    with pytest.raises(AssertionError):
        _check(out.values[0], outs[0], "flip")
