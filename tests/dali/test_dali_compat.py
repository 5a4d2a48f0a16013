"""DALI programs port by changing their imports (nvidia.dali -> detaug).

Each tutorial-style program below is written as DALI's tutorials write it; only the import lines
name detaug (the DALI line each replaces is in the comment beside it). The CPU runs are here; the
same programs with device="mixed" / "gpu" are in tests/dali/test_dali_compat.py. Values are
checked against independent float64 references (and hand-computed cases), not just shapes.
"""
import io
import json
import os

import numpy as np
import pytest
from PIL import Image

# import nvidia.dali.fn as fn / import nvidia.dali.ops as ops / import nvidia.dali.types as types
import detaug.fn as fn
import detaug.ops as ops
import detaug.types as types
# from nvidia.dali import pipeline_def / from nvidia.dali.pipeline import Pipeline
from detaug import pipeline_def
from detaug.pipeline import Pipeline
# from nvidia.dali.plugin.pytorch import DALIGenericIterator, DALIClassificationIterator, LastBatchPolicy
from detaug.dali.plugin.pytorch import (DALIClassificationIterator, DALIGenericIterator,
    LastBatchPolicy)

from helpers import COCO
from helpers import close_pipelines, track  # noqa: F401  (fixture)

DEVICE = {"decoder": "cpu", "ops": "cpu"}  # the GPU file runs the same programs with mixed/gpu


# ---- data: lossless PNGs in class folders (exact pixels after decoding) --------------------------
def _png(arr):
    buf = io.BytesIO()
    Image.fromarray(arr).save(buf, format="PNG")
    return buf.getvalue()


@pytest.fixture
def folder(tmp_path, rng):
    """root/<class>/<k>.png: 2 classes, 7 images of random sizes; returns (root, {path: (label, pixels)})."""
    truth = {}
    for c, cls in enumerate(["cat", "dog"]):
        os.makedirs(tmp_path / cls)
        for k in range(3 + c):
            img = rng.integers(0, 256, (int(rng.integers(20, 40)), int(rng.integers(20, 40)), 3), np.uint8)
            p = tmp_path / cls / f"{k}.png"
            p.write_bytes(_png(img))
            truth[str(p)] = (c, img)
    return str(tmp_path), truth


def _h(a):
    """A sample as a host array (device outputs are cupy arrays)."""
    from detaug.core.backend import to_host

    return np.asarray(to_host(a))


def _find(img, truth):
    """The truth entry whose pixels equal ``img``."""
    hits = [(lab, t) for lab, t in truth.values() if t.shape == img.shape and (t == img).all()]
    assert len(hits) == 1
    return hits[0]


# ---- the getting-started tutorial: file reader, decoder, shuffle, random rotation ----------------
def test_getting_started_file_reader_decoder_shuffle_rotate(folder):
    root, truth = folder

    @pipeline_def
    def rotated_pipeline():
        jpegs, labels = fn.readers.file(file_root=root, random_shuffle=True, initial_fill=21)
        images = fn.decoders.image(jpegs, device=DEVICE["decoder"], output_type=types.RGB)
        angle = fn.random.uniform(values=[90.0, -90.0])
        rotated = fn.rotate(images, angle=angle, fill_value=0)
        return images, rotated, labels, angle

    pipe = track(rotated_pipeline(batch_size=5, num_threads=1, device_id=0, seed=1234))
    pipe.build()
    seen = []
    for _ in range(len(pipe)):
        images, rotated, labels, angle = pipe.run()
        for img, rot, lab, a in zip(images.data, rotated.data, labels, angle):
            img, rot = _h(img), _h(rot)
            want_label, _ = _find(img, truth)
            assert lab == want_label
            # DALI: angle counter-clockwise, canvas enlarged (a quarter turn: the turned size)
            assert rot.shape == (img.shape[1], img.shape[0], 3)
            np.testing.assert_array_equal(rot, np.rot90(img, 1 if a > 0 else -1))
            seen.append(img.tobytes())
    assert len(set(seen)) == len(truth)  # one epoch, every file once (5 + 2 wrapped under 'fill')


def test_rotate_dali_canvas_rule_and_no_border_repeat():
    from detaug.ops.geometry import dali_rotated_size

    # hand-computed: 30 deg of 40x20 (H x W): w' = ceil(20 cos + 40 sin - .01) = ceil(37.32) = 38
    # (even as the 20-wide input: kept), h' = ceil(40 cos + 20 sin - .01) = ceil(44.64) = 45,
    # odd where the 40-high input is even: 46
    np.testing.assert_array_equal(dali_rotated_size([30.0], np.array([[40, 20]])), [[46, 38]])
    # 60 deg: w' = ceil(10 + 34.64 - .01) = 45, its dominant side is h = 40 (even): 46;
    # h' = ceil(20 + 17.32 - .01) = 38, dominant side w = 20 (even): 38
    np.testing.assert_array_equal(dali_rotated_size([60.0], np.array([[40, 20]])), [[38, 46]])
    pipe = Pipeline(batch_size=1, num_threads=1, seed=0)
    with pipe:
        img = fn.external_source(source=lambda info: np.zeros((8, 8, 3), np.uint8), batch=False, size=1)
        pipe.set_outputs(fn.rotate(img, angle=10.0, keep_size=True))
    (out,) = pipe.run()  # (DALI's border repeat; its values: tests/dali/)
    assert (out.at(0) == 0).all() and out.at(0).shape == (8, 8, 3)
    track(pipe)


# ---- the external-source tutorial: JPEG bytes and multi-labels through feed_input ---------------
class ExternalInputIterator:
    """As DALI's tutorial: files read as 1-D uint8 arrays (np.frombuffer) and labels of different
    lengths per sample."""

    def __init__(self, files, batch_size):
        self.files, self.batch_size, self.i = files, batch_size, 0

    def __iter__(self):
        self.i = 0
        return self

    def __next__(self):
        batch, labels = [], []
        for _ in range(self.batch_size):
            path, lab = self.files[self.i % len(self.files)]
            with open(path, "rb") as f:
                batch.append(np.frombuffer(f.read(), dtype=np.uint8))
            labels.append(np.array([lab] * (1 + self.i % 3), dtype=np.int32))  # ragged
            self.i += 1
        return batch, labels


class ExternalSourcePipeline(Pipeline):
    def __init__(self, batch_size, num_threads, device_id, external_data, with_raw=True):
        super().__init__(batch_size, num_threads, device_id, seed=12)
        self.with_raw = with_raw
        self.input = ops.ExternalSource()
        self.input_label = ops.ExternalSource()
        self.decode = ops.nvJPEGDecoder(device=DEVICE["decoder"], output_type=types.RGB)
        self.res = ops.Resize(device=DEVICE["ops"], resize_x=24, resize_y=24,
                              interp_type=types.INTERP_TRIANGULAR)
        self.external_data = external_data
        self.iterator = iter(self.external_data)

    def define_graph(self):
        self.jpegs = self.input()
        self.labels = self.input_label()
        images = self.decode(self.jpegs)
        out = self.res(images), fn.pad(self.labels, fill_value=-1)
        return out + (self.labels,) if self.with_raw else out

    def iter_setup(self):
        images, labels = next(self.iterator)
        self.feed_input(self.jpegs, images)
        self.feed_input(self.labels, labels)


def test_external_source_feed_input_bytes_and_ragged_labels(folder):
    root, truth = folder
    files = sorted((p, lab) for p, (lab, _) in truth.items())
    pipe = track(ExternalSourcePipeline(batch_size=4, num_threads=1, device_id=0,
                                        external_data=ExternalInputIterator(files, 4)))
    pipe.build()
    images, padded, labels = pipe.run()
    assert _h(images.data[0]).shape == (24, 24, 3)
    assert [len(v) for v in labels] == [1, 2, 3, 1]
    np.testing.assert_array_equal(padded, [[files[k][1]] * n + [-1] * (3 - n)
                                           for k, n in enumerate([1, 2, 3, 1])])
    # decoded bytes == the files' pixels; INTERP_TRIANGULAR == detaug's antialiased resize of them
    srcs = [truth[files[k][0]][1] for k in range(4)]
    (want,) = _run(lambda i: fn.resize(i, size=(24, 24), antialias=True), [srcs])
    for k in range(4):
        if DEVICE["decoder"] == "mixed":  # nvImageCodec's IDCT rounds apart from libjpeg's
            d = np.abs(_h(images.data[k]).astype(np.int64) - _h(want.data[k]))
            assert d.max() <= 4 and d.mean() < 0.5, (d.max(), d.mean())
        else:
            np.testing.assert_array_equal(_h(images.data[k]), _h(want.data[k]))
    it = DALIGenericIterator([track(ExternalSourcePipeline(4, 1, 0, ExternalInputIterator(files, 4),
                                                           with_raw=False))],
                             ["images", "labels"], size=8, auto_reset=True)
    steps = 0
    for data in it:
        assert isinstance(data, list) and set(data[0]) == {"images", "labels"}
        assert tuple(data[0]["images"].shape) == (4, 24, 24, 3)
        assert tuple(data[0]["labels"].shape) == (4, 3)
        steps += 1
    assert steps == 2
    raw = DALIGenericIterator([track(ExternalSourcePipeline(4, 1, 0, ExternalInputIterator(files, 4)))],
                              ["images", "padded", "ragged"])
    with pytest.raises(ValueError, match="'ragged': its samples have different shapes"):
        next(raw)


# ---- the hybrid classification pipeline: DALIClassificationIterator and reader_name --------------
class HybridTrainPipe(Pipeline):
    def __init__(self, batch_size, num_threads, device_id, data_dir, crop, shard_id=0, num_shards=1):
        super().__init__(batch_size, num_threads, device_id, seed=12 + device_id)
        self.input = ops.FileReader(file_root=data_dir, shard_id=shard_id, num_shards=num_shards,
                                    random_shuffle=True, pad_last_batch=True, name="Reader")
        self.decode = ops.ImageDecoder(device=DEVICE["decoder"], output_type=types.RGB)
        self.cmnp = ops.CropMirrorNormalize(device=DEVICE["ops"], output_dtype=types.FLOAT,
                                            output_layout=types.NCHW, crop=(crop, crop),
                                            image_type=types.RGB,
                                            mean=[0.485 * 255, 0.456 * 255, 0.406 * 255],
                                            std=[0.229 * 255, 0.224 * 255, 0.225 * 255])
        self.coin = ops.CoinFlip(probability=0.5)

    def define_graph(self):
        rng = self.coin()
        self.jpegs, self.labels = self.input(name="Reader")
        images = self.decode(self.jpegs)
        return self.cmnp(images, mirror=rng), self.labels


def _cmn_reference(img, crop, mirror):
    """float64 crop (DALI's anchor: round half up of 0.5 * margin) + mirror + normalise, CHW."""
    h, w = img.shape[:2]
    y0, x0 = int(np.floor((h - crop) * 0.5 + 0.5)), int(np.floor((w - crop) * 0.5 + 0.5))
    win = img[y0:y0 + crop, x0:x0 + crop].astype(np.float64)
    if mirror:
        win = win[:, ::-1]
    mean = np.array([0.485, 0.456, 0.406]) * 255
    std = np.array([0.229, 0.224, 0.225]) * 255
    return ((win - mean) / std).transpose(2, 0, 1)


def test_hybrid_classification_iterator_reader_name(folder):
    root, truth = folder
    pipe = track(HybridTrainPipe(batch_size=3, num_threads=1, device_id=0, data_dir=root, crop=17))
    pipe.build()
    it = DALIClassificationIterator([pipe], reader_name="Reader",
                                    last_batch_policy=LastBatchPolicy.PARTIAL, auto_reset=True)
    assert pipe.epoch_size("Reader") == 7 and len(it) == 3
    for epoch in range(2):
        sizes, seen = [], 0
        for data in it:
            x, y = data[0]["data"], data[0]["label"]
            assert str(x.dtype) == "torch.float32" and str(y.dtype) == "torch.int32"
            assert tuple(y.shape) == (x.shape[0], 1)  # DALI's (B, 1) labels
            sizes.append(x.shape[0])
            seen += x.shape[0]
        assert sizes == [3, 3, 1] and seen == 7
    # the values: an independent float64 reference of each sample (its source found by label and
    # by matching the reference of the un-mirrored and mirrored crops)
    it.reset()
    data = next(it)[0]
    for x, y in zip(data["data"].cpu().numpy(), data["label"].cpu().numpy()):
        cands = [_cmn_reference(img, 17, m) for lab, img in truth.values() if lab == y[0] for m in (0, 1)]
        assert min(np.abs(c - x).max() for c in cands) < 1e-3


def test_reader_name_must_name_a_reader(folder):
    root, _ = folder
    pipe = track(HybridTrainPipe(batch_size=3, num_threads=1, device_id=0, data_dir=root, crop=17))
    with pytest.raises(ValueError, match="no reader of that name"):
        DALIClassificationIterator(pipe, reader_name="Nope", last_batch_policy=LastBatchPolicy.DROP)


# ---- the SSD / COCO detection pipeline -------------------------------------------------------------
@pipeline_def
def coco_ssd_pipeline(file_root, annotations_file):
    jpegs, bboxes, labels = fn.readers.coco(file_root=file_root, annotations_file=annotations_file,
                                            skip_empty=True, ratio=True, ltrb=True,
                                            shuffle_after_epoch=True, name="Reader")
    crop_begin, crop_size, bboxes_c, labels_c = fn.random_bbox_crop(
        bboxes, labels, device="cpu", aspect_ratio=[0.5, 2.0], thresholds=[0, 0.1, 0.3, 0.5, 0.7, 0.9],
        scaling=[0.3, 1.0], bbox_layout="xyXY", allow_no_crop=True, num_attempts=50)
    images = fn.decoders.image_slice(jpegs, crop_begin, crop_size, device=DEVICE["decoder"],
                                     output_type=types.RGB)
    flip = fn.random.coin_flip(probability=0.5)
    images = fn.flip(images, horizontal=flip, device=DEVICE["ops"])
    bboxes_f = fn.bb_flip(bboxes_c, ltrb=True, horizontal=flip)
    ratio = fn.random.uniform(range=[1.0, 2.0])
    px, py = fn.random.uniform(range=[0.0, 1.0]), fn.random.uniform(range=[0.0, 1.0])
    images = fn.paste(images, ratio=ratio, paste_x=px, paste_y=py, fill_value=(104, 117, 123),
                      device=DEVICE["ops"])
    bboxes_p = fn.bbox_paste(bboxes_f, ratio=ratio, paste_x=px, paste_y=py, ltrb=True)
    return (images, fn.pad(bboxes_p, fill_value=-1.0), fn.pad(labels_c, fill_value=-1), bboxes, labels,
            crop_begin, crop_size, flip, ratio, px, py, jpegs)


def _coco_truth():
    ann = json.load(open(os.path.join(COCO, "annotations.json")))
    cats = sorted(c["id"] for c in ann["categories"])
    images = {im["file_name"]: im for im in ann["images"]}
    return ann, cats, images


def test_coco_reader_dali_layouts_and_labels_from_1():
    ann, cats, images = _coco_truth()
    outs = {}
    for ltrb, ratio in ((False, False), (True, False), (True, True)):
        pipe = track(Pipeline(batch_size=3, num_threads=1, seed=0))
        with pipe:
            jpegs, b, lab = fn.readers.coco(file_root=os.path.join(COCO, "images"),
                                            annotations_file=os.path.join(COCO, "annotations.json"),
                                            ltrb=ltrb, ratio=ratio)
            pipe.set_outputs(b, lab, jpegs)
        outs[(ltrb, ratio)] = pipe.run()
    b0, lab0, enc = outs[(False, False)]
    for s, path in enumerate(enc.paths):
        im = images[os.path.basename(path)]
        anns = [a for a in ann["annotations"] if a["image_id"] == im["id"] and min(a["bbox"][2:]) >= 0.1]
        # xywh back from detaug's float32 xyxy: equal to the JSON within float32 rounding of x + w
        np.testing.assert_allclose(b0[s], np.array([a["bbox"] for a in anns]).reshape(-1, 4),
                                   rtol=0, atol=1e-4)
        np.testing.assert_array_equal(lab0[s], [cats.index(a["category_id"]) + 1 for a in anns])
        assert lab0[s].dtype == np.int32
        xyxy = np.array([[x, y, x + w, y + h] for x, y, w, h in (a["bbox"] for a in anns)]).reshape(-1, 4)
        np.testing.assert_allclose(outs[(True, False)][0][s], xyxy, rtol=1e-6)
        wh = np.array([im["width"], im["height"]] * 2, np.float64)
        np.testing.assert_allclose(outs[(True, True)][0][s], xyxy / wh, rtol=1e-6)
    pipe = track(Pipeline(batch_size=1, num_threads=1, seed=0))
    with pipe:  # detaug's own form is unchanged without DALI's arguments
        assert len(fn.readers.coco(file_root=os.path.join(COCO, "images"),
                                   annotations_file=os.path.join(COCO, "annotations.json"))) == 2


def _iou(a, b):
    iw = max(0.0, min(a[2], b[2]) - max(a[0], b[0]))
    ih = max(0.0, min(a[3], b[3]) - max(a[1], b[1]))
    inter = iw * ih
    return inter / ((a[2] - a[0]) * (a[3] - a[1]) + (b[2] - b[0]) * (b[3] - b[1]) - inter)


def test_ssd_pipeline_boxes_follow_crop_flip_paste_float64_reference():
    pipe = track(coco_ssd_pipeline(os.path.join(COCO, "images"), os.path.join(COCO, "annotations.json"),
                                   batch_size=4, num_threads=1, device_id=0,
                                   seed=4242))
    pipe.build()
    assert pipe.epoch_size("Reader") == len(_coco_truth()[2])
    for _ in range(3):
        images, bpad, lpad, b_in, l_in, anchor, shape, flip, ratio, px, py, enc = pipe.run()
        for s in range(len(anchor)):
            src = Image.open(enc.paths[s])
            W, H = src.size
            # the crop window as DALI rounds it: start = round(a * W), end = round((a + s) * W)
            x0, y0 = np.floor(anchor[s] * [W, H] + 0.5)
            x1, y1 = np.floor((anchor[s] + shape[s]) * [W, H] + 0.5)
            cw, ch = int(x1 - x0), int(y1 - y0)
            Wp, Hp = int(cw * np.float64(ratio[s])), int(ch * np.float64(ratio[s]))
            img = _h(images.data[s])
            assert img.shape == (Hp, Wp, 3)
            # pixels: the decoded window, mirrored, pasted at int(p * (W' - w)) on the fill colour
            ox, oy = int(px[s] * (Wp - cw)), int(py[s] * (Hp - ch))
            win = np.asarray(src.convert("RGB"))[int(y0):int(y1), int(x0):int(x1)]
            win = win[:, ::-1] if flip[s] else win
            np.testing.assert_array_equal(img[oy:oy + ch, ox:ox + cw], win)
            if oy > 0:
                np.testing.assert_array_equal(img[0, 0], [104, 117, 123])
            # boxes: float64 reference from the reader's boxes
            lo, ext = anchor[s].astype(np.float64), shape[s].astype(np.float64)
            bx = np.asarray(b_in[s], np.float64).reshape(-1, 4)
            c = (bx[:, :2] + bx[:, 2:]) / 2
            keep = ((c >= lo) & (c <= lo + ext)).all(1)
            if ext.min() < 1:  # a crop was taken: all boxes reach the option's threshold, some kept
                assert keep.any()
            ref = np.clip((bx[keep] - np.tile(lo, 2)) / np.tile(ext, 2), 0, 1)
            if flip[s]:
                ref[:, [0, 2]] = 1 - ref[:, [2, 0]]
            sc = 1 / np.float64(ratio[s])
            ref = ref * sc + np.array([px[s], py[s]] * 2) * (1 - sc)
            n = len(ref)
            np.testing.assert_allclose(bpad[s, :n], ref, atol=2e-6)
            assert (bpad[s, n:] == -1).all()
            np.testing.assert_array_equal(lpad[s, :n], np.asarray(l_in[s])[keep])
            assert (lpad[s, n:] == -1).all()


# ---- op-level DALI semantics, hand-computed --------------------------------------------------------
def _run(outputs_fn, batch, **kw):
    """Feed ``batch`` (a list of per-output sample lists) and return the outputs of one run."""
    pipe = track(Pipeline(batch_size=len(batch[0]), num_threads=1, seed=kw.pop("seed", 0)))
    with pipe:
        srcs = [fn.external_source(source=[col], name=f"in{k}") for k, col in enumerate(batch)]
        out = outputs_fn(*srcs)
        pipe.set_outputs(*(out if isinstance(out, tuple) else (out,)))
    return pipe.run()


def test_bb_flip_xywh_and_ltrb_hand_computed():
    boxes = [np.array([[0.1, 0.2, 0.3, 0.4]], np.float32), np.array([[0.5, 0.5, 0.2, 0.1]], np.float32)]
    (out,) = _run(lambda b: fn.bb_flip(b, horizontal=1, vertical=1), [boxes])
    np.testing.assert_allclose(out[0], [[0.6, 0.4, 0.3, 0.4]], atol=1e-7)   # x -> 1 - x - w
    np.testing.assert_allclose(out[1], [[0.3, 0.4, 0.2, 0.1]], atol=1e-7)
    (out,) = _run(lambda b: fn.bb_flip(b, ltrb=True, horizontal=1, vertical=0), [boxes])
    np.testing.assert_allclose(out[0], [[0.7, 0.2, 0.9, 0.4]], atol=1e-7)   # l, r -> 1 - r, 1 - l


def test_bbox_paste_and_paste_hand_computed():
    boxes = [np.array([[0.0, 0.0, 1.0, 1.0], [0.5, 0.5, 0.75, 1.0]], np.float32)]
    (out,) = _run(lambda b: fn.bbox_paste(b, ratio=2.0, paste_x=1.0, paste_y=0.0, ltrb=True), [boxes])
    np.testing.assert_allclose(out[0], [[0.5, 0.0, 1.0, 0.5], [0.75, 0.25, 0.875, 0.5]], atol=1e-7)
    img = np.arange(5 * 7 * 3, dtype=np.uint8).reshape(5, 7, 3)
    (out,) = _run(lambda i: fn.paste(i, ratio=1.5, paste_x=0.5, paste_y=1.0, fill_value=9), [[img]])
    # canvas int(1.5 * 5) x int(1.5 * 7) = 7 x 10; position int(0.5 * 3) = 1, int(1.0 * 2) = 2
    want = np.full((7, 10, 3), 9, np.uint8)
    want[2:7, 1:8] = img
    np.testing.assert_array_equal(out.data[0], want)


def test_slice_rounds_halves_away_from_zero_and_policies():
    img = np.arange(10 * 10 * 3, dtype=np.uint8).reshape(10, 10, 3)
    anchor = np.array([[0.25, 0.05]], np.float32)   # x = 2.5 -> 3, y = 0.5 -> 1
    shape = np.array([[0.5, 0.3]], np.float32)      # x end 7.5 -> 8, y end 3.5 -> 4
    (out,) = _run(lambda i, a, s: fn.slice(i, a, s), [[img], list(anchor), list(shape)])
    np.testing.assert_array_equal(out.data[0], img[1:4, 3:8])
    (out,) = _run(lambda i, a, s: fn.slice(i, a, s, axis_names="HW"), [[img], list(anchor[:, ::-1]),
                                                                          list(shape[:, ::-1])])
    np.testing.assert_array_equal(out.data[0], img[1:4, 3:8])
    far = [np.array([0.8, 0.0], np.float32)]
    with pytest.raises(ValueError, match="out_of_bounds_policy='error'"):
        _run(lambda i, a, s: fn.slice(i, a, s), [[img], far, list(shape)])
    (out,) = _run(lambda i, a, s: fn.slice(i, a, s, out_of_bounds_policy="trim_to_shape"),
                  [[img], far, list(shape)])
    np.testing.assert_array_equal(out.data[0], img[0:3, 8:10])


def test_crop_anchor_rounds_half_up_as_dali():
    img = np.arange(6 * 9 * 3, dtype=np.uint8).reshape(6, 9, 3)
    # margin 9 - 4 = 5 -> 2.5 -> 3 (NumPy's to-even rounding would give 2); 6 - 3 = 3 -> 1.5 -> 2
    (out,) = _run(lambda i: fn.crop(i, crop=(3, 4)), [[img]])
    np.testing.assert_array_equal(out.data[0], img[2:5, 3:7])


def test_normalize_without_arguments_standardises_each_sample(rng):
    imgs = [rng.integers(0, 256, (int(rng.integers(3, 9)), 5, 3), np.uint8) for _ in range(3)]
    out, per_ch, scaled = _run(lambda i: (fn.normalize(i), fn.normalize(i, axis_names="HW"),
                                          fn.normalize(i, mean=10.0, scale=64, shift=128)), [imgs])
    for k, img in enumerate(imgs):
        x = img.astype(np.float64)
        np.testing.assert_allclose(out.data[k], (x - x.mean()) / x.std(), rtol=1e-4, atol=1e-4)
        m, s = x.mean((0, 1)), x.std((0, 1))
        np.testing.assert_allclose(per_ch.data[k], (x - m) / s, rtol=1e-4, atol=1e-4)
        np.testing.assert_allclose(scaled.data[k], (x - 10) / x.std() * 64 + 128, rtol=1e-4, atol=1e-3)


def test_cast_and_transpose():
    img = np.arange(2 * 3 * 3, dtype=np.uint8).reshape(2, 3, 3)
    c, t = _run(lambda i: (fn.cast(i, dtype=types.FLOAT), fn.transpose(i, perm=[2, 0, 1])), [[img]])
    assert c.data[0].dtype == np.float32
    np.testing.assert_array_equal(c.data[0], img.astype(np.float32))
    np.testing.assert_array_equal(t.data[0], img.transpose(2, 0, 1))
    assert t.layout == "CHW"


def test_random_bbox_crop_rules_against_brute_force(rng):
    boxes = []
    for _ in range(6):
        xy = rng.uniform(0, 0.7, (4, 2))
        boxes.append(np.concatenate([xy, xy + rng.uniform(0.05, 0.3, (4, 2))], 1).astype(np.float32))
    labels = [np.arange(4, dtype=np.int32) + 10 * k for k in range(6)]
    anchor, shape, b, lab, idx = _run(
        lambda bb, ll: fn.random_bbox_crop(bb, ll, thresholds=[0.1, 0.3], aspect_ratio=[1.0, 1.0],
                                           scaling=[0.3, 1.0], allow_no_crop=False, num_attempts=20,
                                           output_bbox_indices=True),
        [boxes, labels], seed=int(rng.integers(1 << 30)))
    for s in range(6):
        lo, ext = anchor[s].astype(np.float64), shape[s].astype(np.float64)
        assert ext.min() >= 0.3 - 1e-6 and ext.max() <= 1 + 1e-6
        assert abs(ext[0] - ext[1]) < 1e-6               # aspect [1, 1]: square, relative to the image
        crop = np.concatenate([lo, lo + ext])
        bx = boxes[s].astype(np.float64)
        if not (ext == 1).all():                           # a crop: every box reaches 0.1 at least
            assert min(_iou(crop, bb) for bb in bx) >= 0.1 - 1e-6
        c = (bx[:, :2] + bx[:, 2:]) / 2
        keep = np.nonzero(((c >= lo) & (c <= lo + ext)).all(1))[0]
        np.testing.assert_array_equal(idx[s], keep)
        np.testing.assert_array_equal(lab[s], labels[s][keep])
        ref = np.clip((bx[keep] - np.tile(lo, 2)) / np.tile(ext, 2), 0, 1)
        np.testing.assert_allclose(b[s], ref, atol=1e-6)


def test_random_bbox_crop_refuses_detaug_batches_and_a_lone_crop_shape():
    pipe = track(Pipeline(batch_size=1, num_threads=1, seed=0))
    with pipe:
        enc, boxes = fn.readers.voc(root=os.path.join(os.path.dirname(COCO), "voc-mini"))
        pipe.set_outputs(*fn.random_bbox_crop(boxes))
    with pytest.raises(TypeError, match="plain tensor batch"):
        pipe.run()
    with pytest.raises(ValueError, match="crop_shape and input_shape go together"):
        _run(lambda b: fn.random_bbox_crop(b, crop_shape=[10, 10]), [[np.zeros((1, 4), np.float32)]])


def test_interp_types_map_or_raise():
    img = np.zeros((8, 8, 3), np.uint8)
    for t in (types.INTERP_LINEAR, types.INTERP_TRIANGULAR):
        (out,) = _run(lambda i: fn.resize(i, resize_x=4, resize_y=4, interp_type=t), [[img]])
        assert out.data[0].shape == (4, 4, 3)
    for t in (types.INTERP_NN, types.INTERP_CUBIC, types.INTERP_LANCZOS3):
        with pytest.raises(ValueError, match="not available in detaug"):
            _run(lambda i: fn.resize(i, resize_x=4, resize_y=4, interp_type=t), [[img]])


def test_types_constants_are_the_strings_detaug_takes():
    assert types.RGB == "RGB" and types.BGR == "BGR" and types.GRAY == "GRAY"
    assert types.FLOAT == "float32" and types.FLOAT16 == "float16" and types.UINT8 == "uint8"
    assert types.INT32 == "int32" and types.INT64 == "int64"
    assert types.NCHW == "CHW" and types.NHWC == "HWC"
    assert {types.RGB: 1}["RGB"] == 1 and np.dtype(types.to_numpy_type(types.FLOAT)) == np.float32
    assert types.DALIInterpType.INTERP_LINEAR is types.INTERP_LINEAR
    import detaug

    assert detaug.types is types and fn is detaug.fn


def test_old_class_names_exist():
    for name in ("FileReader", "COCOReader", "HostDecoder", "ImageDecoder", "nvJPEGDecoder",
                 "ImageDecoderSlice", "RandomBBoxCrop", "Slice", "Paste", "BbFlip", "BBoxPaste",
                 "CoinFlip", "Uniform", "CropMirrorNormalize", "Normalize", "Cast", "Transpose",
                 "ExternalSource", "Resize", "Rotate", "Flip"):
        assert hasattr(ops, name), name
    assert hasattr(ops.decoders, "ImageSlice") and hasattr(fn.decoders, "image_slice")
    pipe = track(Pipeline(batch_size=2, num_threads=1, seed=0))
    with pipe:  # COCOReader: DALI's three outputs and defaults
        out = ops.COCOReader(file_root=os.path.join(COCO, "images"),
                             annotations_file=os.path.join(COCO, "annotations.json"))()
        assert len(out) == 3
        pipe.set_outputs(*out)
    enc, b, lab = pipe.run()
    assert b[0].dtype == np.float32 and lab[0].min() >= 1


def test_fn_coco_reader_equals_readers_coco_in_dali_mode():
    root, ann = os.path.join(COCO, "images"), os.path.join(COCO, "annotations.json")
    outs = []
    for make in (lambda: fn.coco_reader(file_root=root, annotations_file=ann, ltrb=True, ratio=True),
                 lambda: fn.readers.coco(file_root=root, annotations_file=ann, ltrb=True, ratio=True)):
        pipe = track(Pipeline(batch_size=3, num_threads=1, seed=0))
        with pipe:
            pipe.set_outputs(*make())
        outs.append(pipe.run())
    for a, b in zip(outs[0][1:], outs[1][1:]):
        for x, y in zip(a, b):
            np.testing.assert_array_equal(x, y)


# ---------------------------------------------------------------------------------------- GPU
# The programs above with DALI's device="mixed" decoders and device="gpu" image ops, with the same
# value checks (on the device).
@pytest.fixture
def on_the_gpu(monkeypatch):
    monkeypatch.setitem(DEVICE, "decoder", "mixed")
    monkeypatch.setitem(DEVICE, "ops", "gpu")


@pytest.mark.gpu
@pytest.mark.usefixtures("on_the_gpu")
def test_getting_started_gpu(folder):
    test_getting_started_file_reader_decoder_shuffle_rotate(folder)


@pytest.mark.gpu
@pytest.mark.usefixtures("on_the_gpu")
def test_external_source_gpu(folder):
    test_external_source_feed_input_bytes_and_ragged_labels(folder)


@pytest.mark.gpu
@pytest.mark.usefixtures("on_the_gpu")
def test_hybrid_classification_gpu(folder):
    test_hybrid_classification_iterator_reader_name(folder)


@pytest.mark.gpu
@pytest.mark.usefixtures("on_the_gpu")
def test_ssd_pipeline_gpu():
    test_ssd_pipeline_boxes_follow_crop_flip_paste_float64_reference()


