"""fn.retinanet_encode inside a CPU pipeline equals the NumPy reference computed on its own.

A twin pipeline (same seed, same ops up to the encoder, so the same op ids and draws) gives the
boxes; the reference encodes them with image sizes computed here from the original image sizes
(letterbox with center=False keeps content at the top-left, round(h * s) x round(w * s) with
s = min(H / h, W / w)), not from anything the pipeline reports.
"""
import numpy as np
import pytest
from PIL import Image

from detaug import fn, pipeline_def
from detaug.targets.retinanet import (AnchorConfig, TargetConfig, anchors_for_shape,
    encode_targets_numpy)
from conftest import VOC
from helpers import close_pipelines, track  # noqa: F401  (an autouse fixture)

SIZE = (256, 256)
NUM_CLASSES = 20


@pipeline_def
def voc_letterbox(root, encode, **encode_args):
    enc, boxes = fn.readers.voc(root=root, random_shuffle=True)
    img = fn.decoders.image(enc)
    img, boxes = fn.flip(img, boxes, horizontal=fn.random.coin_flip())
    img, boxes = fn.letterbox(img, boxes, size=SIZE, center=False)
    if encode:
        reg, cls = fn.retinanet_encode(boxes, num_classes=NUM_CLASSES, **encode_args)
        return img, reg, cls
    return enc, boxes


def make(**kw):
    return track(voc_letterbox(VOC, **kw))


def content_sizes(paths):
    """(B, 2) float (H_valid, W_valid) of each letterboxed image, from the file's own size."""
    out = []
    for p in paths:
        with Image.open(p) as im:
            w, h = im.size
        s = min(SIZE[0] / h, SIZE[1] / w)
        out.append((round(h * s), round(w * s)))
    return np.asarray(out, np.float64)


def reference(twin_out, config=TargetConfig(), anchors=AnchorConfig()):
    enc, boxes = twin_out
    per = boxes.per_sample()
    packed = np.concatenate([d["boxes"] for d in per]).reshape(-1, 4)
    labels = np.concatenate([d["labels"] for d in per]).astype(np.int64)
    offsets = np.concatenate([[0], np.cumsum([len(d["boxes"]) for d in per])])
    sizes = content_sizes(enc.paths)
    reg, cls = encode_targets_numpy(anchors_for_shape(SIZE, anchors), packed, labels, offsets,
                                    NUM_CLASSES, image_sizes=sizes, config=config)
    return reg, cls, sizes


@pytest.mark.parametrize("seed,batch_size", [(0, 8), (11, 5)])
def test_op_equals_numpy_reference_on_voc(seed, batch_size):
    pipe = make(encode=True, batch_size=batch_size, num_threads=2, seed=seed)
    twin = make(encode=False, batch_size=batch_size, num_threads=2, seed=seed)
    anchors = anchors_for_shape(SIZE, AnchorConfig())
    centres = (anchors[:, :2] + anchors[:, 2:]) / 2
    padded_seen = positives = 0
    for epoch in (0, 1):
        for b in range(len(pipe)):
            img, reg, cls = pipe.run_batch(b, epoch=epoch)
            ref_reg, ref_cls, sizes = reference(twin.run_batch(b, epoch=epoch))
            assert reg.shape == (batch_size, len(anchors), 5) and reg.dtype == np.float32
            assert cls.shape == (batch_size, len(anchors), NUM_CLASSES + 1)
            assert cls.dtype == np.float32
            np.testing.assert_array_equal(cls, ref_cls)            # one-hot and states, exactly
            np.testing.assert_array_equal(reg[..., 4], ref_reg[..., 4])
            np.testing.assert_allclose(reg[..., :4], ref_reg[..., :4], rtol=0, atol=1e-5)
            for s, (h, w) in enumerate(sizes):
                # anchors centred in the padding (bottom/right) are ignored
                outside = (centres[:, 0] >= w) | (centres[:, 1] >= h)
                assert (cls[s, outside, -1] == -1).all() and (reg[s, outside, 4] == -1).all()
                assert not cls[s, outside, :NUM_CLASSES].any()
                padded_seen += int(outside.any())
                positives += int((cls[s, :, -1] == 1).sum())
            assert np.isin(cls[..., -1], (-1, 0, 1)).all()
    assert padded_seen > 0 and positives > 0  # both rules were exercised


def test_op_arguments_reach_the_encoder():
    """Non-default thresholds, std and force_match give the reference's result too."""
    args = dict(positive_overlap=0.6, negative_overlap=0.3, force_match=True, std=0.1)
    pipe = make(encode=True, batch_size=8, seed=4, **args)
    twin = make(encode=False, batch_size=8, seed=4)
    cfg = TargetConfig(0.6, 0.3, True, std=(0.1,) * 4)
    _, reg, cls = pipe.run_batch(2)
    ref_reg, ref_cls, _ = reference(twin.run_batch(2), config=cfg)
    np.testing.assert_array_equal(cls, ref_cls)
    np.testing.assert_allclose(reg, ref_reg, rtol=0, atol=1e-5)
    default = make(encode=True, batch_size=8, seed=4).run_batch(2)[2]
    assert not np.array_equal(default, cls)


def test_ignore_padding_false_uses_the_whole_canvas():
    pipe = make(encode=True, batch_size=8, seed=2, ignore_padding=False)
    twin = make(encode=False, batch_size=8, seed=2)
    enc, boxes = twin.run_batch(0)
    per = boxes.per_sample()
    offsets = np.concatenate([[0], np.cumsum([len(d["boxes"]) for d in per])])
    ref_reg, ref_cls = encode_targets_numpy(
        anchors_for_shape(SIZE, AnchorConfig()), np.concatenate([d["boxes"] for d in per]),
        np.concatenate([d["labels"] for d in per]), offsets, NUM_CLASSES, canvas=SIZE)
    _, reg, cls = pipe.run_batch(0)
    np.testing.assert_array_equal(cls, ref_cls)
    np.testing.assert_allclose(reg, ref_reg, rtol=0, atol=1e-5)
