"""decoders.image(reduce=r): CPU reduced-scale decode (detaug/ops/decode_reduced.py, detaug/ops/decode.py). Sizes
ceil(W / r) x ceil(H / r); pixels near the mean of each r x r block of the full decode (an
independent float64 reference; the DCT scaling is not that mean, so a tolerance); the block-mean
fallback exact; the reader's boxes scaled x -> x / r onto the decoded canvas; off by default."""
import io
import os

import cv2
import numpy as np
import pytest
from PIL import Image

from detaug import Pipeline, fn
from detaug.core.errors import SampleError
from detaug.ops.decode import decode_pillow, decode_reduced
from detaug.ops.decode_reduced import block_mean
from helpers import COCO, boxes_of, fresh_seed, images_of


def _smooth(rng, h, w):
    y, x = np.mgrid[0:h, 0:w]
    base = np.stack([x * 255 / w, y * 255 / h, 128 + 60 * np.sin(x / 5.0)], -1)
    return np.clip(base + rng.normal(0, 6, (h, w, 3)), 0, 255).astype(np.uint8)


def _block_mean_f64(a, r):
    """Mean of each r x r block (edge repeated), float64: the reference of x -> x / r."""
    h, w = a.shape[:2]
    oh, ow = -(-h // r), -(-w // r)
    out = np.zeros((oh, ow, a.shape[2]))
    for i in range(oh):
        for j in range(ow):
            ys = np.minimum(np.arange(i * r, i * r + r), h - 1)
            xs = np.minimum(np.arange(j * r, j * r + r), w - 1)
            out[i, j] = a[np.ix_(ys, xs)].astype(np.float64).mean((0, 1))
    return out


@pytest.mark.parametrize("seed", [0, fresh_seed()])
def test_block_mean_is_the_float64_block_mean_rounded_half_up(seed):
    rng = np.random.default_rng(seed)
    for r in range(2, 9):
        a = rng.integers(0, 256, (int(rng.integers(1, 20)), int(rng.integers(1, 20)), 3), np.uint8)
        assert np.array_equal(block_mean(a, r), np.floor(_block_mean_f64(a, r) + 0.5).astype(np.uint8))


@pytest.mark.parametrize("seed", [1, fresh_seed()])
def test_reduced_jpeg_sizes_and_pixels_near_the_block_mean(seed):
    rng = np.random.default_rng(seed)
    h, w = int(rng.integers(40, 70)), int(rng.integers(40, 70))
    img = Image.fromarray(_smooth(rng, h, w))
    for kw in ({"quality": 95}, {"quality": 95, "progressive": True}):  # OpenCV, Pillow draft
        buf = io.BytesIO()
        img.save(buf, "JPEG", **kw)
        data = np.frombuffer(buf.getvalue(), np.uint8)
        full = decode_pillow(data, "RGB")
        for r in (2, 3, 4, 6, 8):
            got = decode_reduced(data, "RGB", r)
            assert got.shape == (-(-h // r), -(-w // r), 3) and got.dtype == np.uint8
            diff = np.abs(got - _block_mean_f64(full, r))
            assert diff.mean() < 2.0 and diff.max() < 40, (kw, r, diff.mean(), diff.max())
            bgr = decode_reduced(data, "BGR", r)
            assert np.array_equal(bgr, got[:, :, ::-1])


def test_opencv_and_pillow_draft_give_the_same_reduced_pixels():
    rng = np.random.default_rng(2)
    buf = io.BytesIO()
    Image.fromarray(_smooth(rng, 45, 61)).save(buf, "JPEG", quality=90)
    data = np.frombuffer(buf.getvalue(), np.uint8)
    for r in (2, 4, 8):
        with Image.open(io.BytesIO(buf.getvalue())) as im:
            im.draft(None, (61 // r, 45 // r))
            pil = np.asarray(im.convert("RGB"))
        ocv = cv2.cvtColor(cv2.imdecode(data, {2: cv2.IMREAD_REDUCED_COLOR_2, 4: cv2.IMREAD_REDUCED_COLOR_4,
                                               8: cv2.IMREAD_REDUCED_COLOR_8}[r]), cv2.COLOR_BGR2RGB)
        assert np.array_equal(decode_reduced(data, "RGB", r), ocv)
        assert np.array_equal(pil, ocv), r


def test_png_and_gray_fall_back_to_the_exact_block_mean():
    rng = np.random.default_rng(3)
    a = rng.integers(0, 256, (23, 31, 3), np.uint8)
    buf = io.BytesIO()
    Image.fromarray(a).save(buf, "PNG")
    data = np.frombuffer(buf.getvalue(), np.uint8)
    assert np.array_equal(decode_reduced(data, "RGB", 4), block_mean(a, 4))
    assert np.array_equal(decode_reduced(data, "RGB", 7), block_mean(a, 7))
    gray = decode_pillow(data, "GRAY")
    assert np.array_equal(decode_reduced(data, "GRAY", 2), block_mean(gray, 2))


def _coco_pipe(reduce, with_boxes=True):
    pipe = Pipeline(batch_size=3, num_threads=1, seed=0)
    with pipe:
        enc, boxes = fn.readers.coco(file_root=os.path.join(COCO, "images"),
                                     annotations_file=os.path.join(COCO, "annotations.json"))
        if with_boxes:
            images, boxes = fn.decoders.image(enc, boxes, reduce=reduce)
        else:
            images = fn.decoders.image(enc)
        pipe.set_outputs(images, boxes)
    return pipe


def test_pipeline_boxes_scaled_onto_the_decoded_canvas():
    full_pipe, red_pipe = _coco_pipe(1, with_boxes=False), _coco_pipe(4)
    (full, fboxes), (red, rboxes) = full_pipe.run(), red_pipe.run()
    full_pipe.close()
    red_pipe.close()
    fi, ri = images_of(full), images_of(red)
    for a, b in zip(fi, ri):
        assert b.shape == (-(-a.shape[0] // 4), -(-a.shape[1] // 4), 3)
    fb, rb = boxes_of(fboxes), boxes_of(rboxes)
    assert len(fb) == len(rb) == 3 and sum(len(x["boxes"]) for x in fb) > 0
    for x, y in zip(fb, rb):
        np.testing.assert_allclose(y["boxes"], np.asarray(x["boxes"], np.float64) / 4,
                                   rtol=1e-6, atol=1e-5)
        assert np.array_equal(y["labels"], x["labels"])
    assert np.array_equal(rboxes.canvas, [im.shape[:2] for im in ri])
    assert np.array_equal(rboxes.labels, fboxes.labels)


def test_reduce_refused_out_of_its_values_and_on_the_gpu():
    for bad in (0, 16, 2.5, float("nan")):
        with pytest.raises(ValueError, match="decoders.image: argument reduce="):
            _coco_pipe(bad)
    pipe = _coco_pipe(6.0)  # a whole float is taken as the int
    (img, _) = pipe.run()
    pipe.close()
    assert all(a.shape[0] <= 100 for a in images_of(img))
    pipe = Pipeline(batch_size=1, seed=0)
    with pipe:
        enc, boxes = fn.readers.coco(file_root=os.path.join(COCO, "images"),
                                     annotations_file=os.path.join(COCO, "annotations.json"))
        with pytest.raises(NotImplementedError, match="reduce=2 is CPU-only"):
            fn.decoders.image(enc, reduce=2, device="mixed")
        with pytest.raises(NotImplementedError, match="a boxes input is CPU-only"):
            fn.decoders.image(enc, boxes, device="mixed")
        img, boxes = fn.decoders.image(enc, boxes, reduce=2, device="auto")  # auto: the CPU
        assert img.device == "cpu" and boxes.device == "cpu"
        pipe.set_outputs(img, boxes)
