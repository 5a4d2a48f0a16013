"""Box post-processing, colour, normalisation, random draws and the classification tutorial."""
import os
import shutil

import numpy as np
import pytest

from detaug import Pipeline, fn, pipeline_def
from detaug.core.rng import SampleRNG
from helpers import VOC
from helpers import boxes_of, images_of, run_graph


def test_prune_keeps_fields_aligned_and_clip_boxes(rng):
    img = np.zeros((50, 50, 3), np.uint8)
    boxes = [[-10, 5, 20, 20], [45, 45, 80, 80], [10, 10, 11, 11], [60, 60, 70, 70], [5, 5, 40, 40]]
    ids = np.array([11, 22, 33, 44, 55])
    _, ob = run_graph([img], [boxes], lambda i, b: (i, fn.clip_boxes(b)),
                      fields=[{"annotation_id": ids}])
    s = boxes_of(ob)[0]
    np.testing.assert_array_equal(s["annotation_id"], [11, 22, 33, 55])
    np.testing.assert_allclose(s["boxes"], [[0, 5, 20, 20], [45, 45, 50, 50], [10, 10, 11, 11], [5, 5, 40, 40]])
    _, ob = run_graph([img], [boxes], lambda i, b: (i, fn.prune_boxes(b, min_size=2, min_visibility=0.5)),
                      fields=[{"annotation_id": ids}])
    s = boxes_of(ob)[0]
    np.testing.assert_array_equal(s["annotation_id"], [11, 55])  # 22: 5/35 visible; 33: 1 px
    np.testing.assert_array_equal(s["labels"], [0, 4])


def test_fields_follow_boxes_through_random_drops(rng):
    n = 6
    imgs = [rng.integers(0, 255, (40, 60, 3), dtype=np.uint8) for _ in range(n)]
    boxes = []
    for _ in range(n):
        xy = rng.uniform(0, 50, (12, 2))
        wh = rng.uniform(0.5, 20, (12, 2))
        boxes.append(np.concatenate([xy, xy + wh], 1))
    ids = [np.arange(12) * 10 + k for k in range(n)]

    def g(i, b):
        i, b = fn.random_iou_crop(i, b)
        i, b = fn.rotate(i, b, angle=fn.random.uniform(range=(-30, 30)))
        b = fn.prune_boxes(b, min_size=3, min_visibility=0.3)
        return i, b, fn.pad_boxes(b, max_boxes=12)

    _, ob, pb = run_graph(imgs, boxes, g, fields=[{"annotation_id": x} for x in ids],
                          labels=[np.arange(12)] * n, seed=int(rng.integers(1 << 30)))
    for k, s in enumerate(boxes_of(ob)):
        np.testing.assert_array_equal(s["annotation_id"], ids[k][s["labels"]])
        c = int(pb["counts"][k])
        assert c == len(s["boxes"])
        np.testing.assert_allclose(pb["boxes"][k, :c], s["boxes"])
        np.testing.assert_array_equal(pb["annotation_id"][k, :c], s["annotation_id"])
        np.testing.assert_array_equal(pb["labels"][k, c:], -1)


def test_box_convert_formats():
    img = np.zeros((40, 80, 3), np.uint8)
    box = [[8, 4, 24, 36]]
    for fmt, norm, exp in [("xywh", False, [8, 4, 16, 32]), ("cxcywh", False, [16, 20, 16, 32]),
                           ("cxcywh", True, [0.2, 0.5, 0.2, 0.8]), ("xyxy", True, [0.1, 0.1, 0.3, 0.9])]:
        _, ob = run_graph([img], [box], lambda i, b: (i, fn.box_convert(b, fmt=fmt, normalized=norm)))
        np.testing.assert_allclose(boxes_of(ob)[0]["boxes"], [exp], rtol=1e-6)
    with pytest.raises(ValueError, match="convert formats last"):
        run_graph([img], [box], lambda i, b: fn.flip(i, fn.box_convert(b, fmt="xywh")))


def test_crop_mirror_normalize_matches_hand_computation(rng):
    img = rng.integers(0, 256, (20, 30, 3), dtype=np.uint8)
    mean, std = [10.0, 20.0, 30.0], [2.0, 4.0, 8.0]
    out, ob = run_graph([img], [[[2, 12, 12, 18]]],
                        lambda i, b: fn.crop_mirror_normalize(i, b, crop=(10, 16), crop_pos_x=0.0,
                                                              crop_pos_y=1.0, mirror=1, mean=mean, std=std))
    got = images_of(out)[0]
    assert got.shape == (3, 10, 16) and got.dtype == np.float32
    exp = ((img[10:20, 0:16, :][:, ::-1].astype(np.float64) - mean) / std).transpose(2, 0, 1)
    np.testing.assert_allclose(got, exp, atol=1e-4)
    np.testing.assert_allclose(boxes_of(ob)[0]["boxes"], [[4, 2, 14, 8]])


def test_normalize_float16_hwc(rng):
    img = rng.integers(0, 256, (5, 7, 3), dtype=np.uint8)
    out, _ = run_graph([img], [[]], lambda i, b: (fn.normalize(i, mean=128, std=64, dtype="float16"), b))
    got = images_of(out)[0]
    assert got.dtype == np.float16 and got.shape == (5, 7, 3)
    np.testing.assert_allclose(got.astype(np.float32), (img - 128.0) / 64, atol=2e-3)


def test_colour_ops_per_sample(rng):
    imgs = [rng.integers(0, 256, (6, 8, 3), dtype=np.uint8) for _ in range(4)]

    def g(i, b):
        br = fn.random.uniform(range=(0.5, 1.5))
        return fn.brightness_contrast(i, brightness=br, contrast=1.0), br, fn.hsv(i, saturation=0.0)

    out, br, grey = run_graph(imgs, [[]] * 4, g, seed=3)
    for k in range(4):
        exp = np.clip(np.floor(imgs[k] * np.float64(br[k]) + 0.5), 0, 255)
        np.testing.assert_allclose(images_of(out)[k], exp, atol=1)
        gk = images_of(grey)[k].astype(int)
        assert np.abs(gk - gk[..., :1]).max() <= 1


def test_random_ops_distributions_and_keys():
    pipe = Pipeline(batch_size=4000, seed=1)
    with pipe:
        src = fn.external_source(source=lambda info: np.zeros((1, 1, 3), np.uint8), batch=False, size=4000)
        pipe.set_outputs(src, fn.random.normal(mean=2.0, stddev=3.0), fn.random.choice(values=[5, 7, 9], p=[0.2, 0.3, 0.5]),
                         fn.random.uniform(range=(-1, 1)), fn.random.coin_flip(probability=0.25),
                         fn.random.uniform(values=[1, 2]))
    _, nrm, ch, un, coin, disc = pipe.run()
    assert abs(nrm.mean() - 2) < 0.2 and abs(nrm.std() - 3) < 0.2
    freq = [np.mean(ch == v) for v in (5, 7, 9)]
    np.testing.assert_allclose(freq, [0.2, 0.3, 0.5], atol=0.03)
    assert un.min() >= -1 and un.max() < 1 and abs(un.mean()) < 0.05
    assert abs(coin.mean() - 0.25) < 0.03
    assert set(np.unique(disc)) == {1.0, 2.0}


def test_rng_is_keyed_by_sample_not_batch():
    a = SampleRNG(5, 3, 2, np.arange(10)).uniform(3)
    b = SampleRNG(5, 3, 2, np.array([7, 2])).uniform(3)
    np.testing.assert_array_equal(a[[7, 2]], b)
    assert not np.array_equal(SampleRNG(5, 3, 3, [7]).uniform(3), a[[7]])
    assert not np.array_equal(SampleRNG(5, 4, 2, [7]).uniform(3), a[[7]])


@pytest.fixture
def class_folders(tmp_path):
    jpgs = sorted(os.listdir(os.path.join(VOC, "JPEGImages")))[:12]
    for k, name in enumerate(jpgs):
        cls = ["cat", "dog", "fish"][k % 3]
        os.makedirs(tmp_path / cls, exist_ok=True)
        shutil.copy(os.path.join(VOC, "JPEGImages", name), tmp_path / cls / name)
    return str(tmp_path)


def test_dali_tutorial_classification_pipelines(class_folders):
    @pipeline_def(batch_size=6, num_threads=2, seed=12)
    def rotate_pipe(root):
        jpegs, labels = fn.readers.file(file_root=root, random_shuffle=True)
        images = fn.decoders.image(jpegs, output_type="RGB")
        return fn.rotate(images, angle=fn.random.uniform(range=(-10.0, 10.0)), fill=0), labels

    imgs, labels = rotate_pipe(class_folders).run()
    assert imgs.batch_size == 6 and set(labels.as_array().ravel().tolist()) <= {0, 1, 2}

    @pipeline_def(batch_size=6, num_threads=2, seed=12)
    def train_pipe(root):
        jpegs, labels = fn.readers.file(file_root=root, random_shuffle=True)
        images = fn.decoders.image(jpegs)
        images = fn.random_resized_crop(images, size=(64, 64))
        images = fn.crop_mirror_normalize(images, mean=[0.485 * 255, 0.456 * 255, 0.406 * 255],
                                          std=[0.229 * 255, 0.224 * 255, 0.225 * 255],
                                          mirror=fn.random.coin_flip())
        return images, labels

    p = train_pipe(class_folders)
    seen = 0
    for imgs, labels in p:
        assert imgs.data.shape[1:] == (3, 64, 64) and imgs.data.dtype == np.float32
        assert np.isfinite(imgs.data).all() and abs(float(imgs.data.mean())) < 3
        seen += len(labels)
    assert seen == 12


def test_random_resized_crop_boxes_follow(rng):
    """The pixels under the output box are the pixels under the input box, resampled: mark the
    box region in the input and check the output box covers the marked region."""
    img = np.zeros((60, 90, 3), np.uint8)
    img[10:40, 10:50] = 255
    box = np.array([[10, 10, 50, 40]], float)
    for seed in range(6):
        out, ob = run_graph([img], [box], lambda i, b: fn.random_resized_crop(i, b, size=(32, 32)),
                            seed=seed)
        got = images_of(out)[0][..., 0].astype(float)
        assert got.shape == (32, 32)
        bx = boxes_of(ob)[0]["boxes"]
        if not len(bx):
            assert got.max() < 255
            continue
        x0, y0, x1, y1 = np.clip(bx[0], 0, 32)
        inner = got[int(np.ceil(y0)) + 1:int(np.floor(y1)) - 1, int(np.ceil(x0)) + 1:int(np.floor(x1)) - 1]
        assert inner.size == 0 or inner.min() == 255
        outside = np.ones_like(got, bool)
        outside[max(int(y0) - 1, 0):int(np.ceil(y1)) + 1, max(int(x0) - 1, 0):int(np.ceil(x1)) + 1] = False
        assert got[outside].max(initial=0) == 0
