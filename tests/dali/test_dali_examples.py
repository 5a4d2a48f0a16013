"""Programs from DALI's documentation and examples, ported by changing their imports
(tests/dali/ports/*.py, each names its source and what was adapted: data paths, CPU devices).
Each is run as a script and its outputs are checked against DALI's documented semantics, with
float64 references written here (box_encoder from DALI's BoxEncoder rules, transforms from their
matrices, pixels from Pillow's decode)."""
import json
import os

import numpy as np
import pytest
from PIL import Image

from helpers import COCO
from helpers.dali_refs import encode_ref


def _decoded(path):
    return np.asarray(Image.open(path).convert("RGB"))


# ---- box_encoder: DALI's BoxEncoder, written out as loops in float64 (helpers.dali_refs) ----------
def _encode(boxes, labels, anchors, **kw):
    from detaug.dali.tensor_ops import box_encoder_one

    kw = {"criteria": 0.5, "offset": False, "means": np.zeros(4, np.float32),
          "stds": np.ones(4, np.float32), **kw}
    return box_encoder_one(np.asarray(boxes, np.float32).reshape(-1, 4), np.asarray(labels),
                           np.asarray(anchors, np.float32).reshape(-1, 4), kw["criteria"],
                           kw["offset"], np.asarray(kw["means"], np.float32),
                           np.asarray(kw["stds"], np.float32))


def test_box_encoder_hand_case():
    anchors = [[0, 0, 0.5, 0.5], [0.5, 0, 1, 0.5], [0, 0.5, 0.5, 1], [0.5, 0.5, 1, 1]]
    boxes = [[0, 0, 0.5, 0.4]]          # IoU 0.8 with anchor 0, 0 with the others
    out, lab = _encode(boxes, [7], anchors)
    assert lab.tolist() == [7, 0, 0, 0]
    np.testing.assert_allclose(out[0], [0.25, 0.2, 0.5, 0.4], rtol=1e-6)
    np.testing.assert_allclose(out[1], [0.75, 0.25, 0.5, 0.5])  # unmatched: the anchor, centre form
    # a box below criteria everywhere still takes its best anchor (forced IoU 2)
    out, lab = _encode([[0.45, 0.45, 0.55, 0.55]], [3], anchors)
    assert lab.tolist() == [0, 0, 0, 3]  # four equal IoUs: the last anchor, as DALI's >=
    # offsets: SSD's ((c_b - c_a) / wh_a - mean) / std, log(wh_b / wh_a); unmatched are zeros
    out, lab = _encode(boxes, [7], anchors, offset=True, means=[0.1, 0, 0, 0], stds=[0.1, 0.1, 0.2, 0.2])
    np.testing.assert_allclose(out[0], [(0 - 0.1) / 0.1, (-0.05 / 0.5) / 0.1, 0.0,
                                        np.log(0.8) / 0.2], rtol=1e-5, atol=1e-6)
    assert (out[1:] == 0).all()


@pytest.mark.parametrize("offset", [False, True])
def test_box_encoder_matches_reference_on_random_boxes(rng, offset):
    for _ in range(5):
        a0 = rng.uniform(0, 0.7, (40, 2))
        anchors = np.concatenate([a0, a0 + rng.uniform(0.05, 0.3, (40, 2))], 1).astype(np.float32)
        b0 = rng.uniform(0, 0.7, (int(rng.integers(0, 6)), 2))
        boxes = np.concatenate([b0, b0 + rng.uniform(0.05, 0.3, b0.shape)], 1).astype(np.float32)
        labels = rng.integers(1, 20, len(boxes))
        kw = dict(offset=offset, means=[0.1, -0.1, 0.0, 0.2], stds=[0.1, 0.1, 0.2, 0.2],
                  criteria=0.3)  # (the reference applies DALI's scale=2: it cancels)
        out, lab = _encode(boxes, labels, anchors, **kw)
        ref_out, ref_lab = encode_ref(boxes.astype(np.float64), labels, anchors.astype(np.float64),
                                      **{**kw, "means": np.array(kw["means"]),
                                         "stds": np.array(kw["stds"])})
        np.testing.assert_array_equal(lab, ref_lab)
        np.testing.assert_allclose(out, ref_out, rtol=1e-4, atol=1e-5)


# ---- the ported programs ----------------------------------------------------------------------------
def test_coco_reader_tutorial(run_port):
    g = run_port("coco_reader")
    ann = json.load(open(g["COCO_ANNOTATIONS"]))
    bboxes, labels = g["out_boxes"], g["out_labels"]
    assert len(bboxes) == 16 and bboxes.at(4).shape[1] == 4 and len(g["lines"]) == len(bboxes.at(4))
    images = g["images_on_host"]
    # which image sample 4 is: its decoded size and boxes identify it among the annotations
    h, w = images.at(4).shape[:2]
    cats = sorted(c["id"] for c in ann["categories"])
    found = False
    for im in ann["images"]:
        if (im["height"], im["width"]) != (h, w):
            continue
        anns = [a for a in ann["annotations"] if a["image_id"] == im["id"]]
        exp = np.array([[a["bbox"][0] / w, a["bbox"][1] / h, a["bbox"][2] / w, a["bbox"][3] / h]
                        for a in anns], np.float32)
        if exp.shape == bboxes.at(4).shape and np.allclose(exp, bboxes.at(4), atol=1e-6):
            found = True
            # DALI's labels: the category ids made contiguous from 1
            assert labels.at(4).tolist() == [cats.index(a["category_id"]) + 1 for a in anns]
    assert found


def test_ssd_pipeline(run_port):
    g = run_port("ssd_coco_pipeline")
    images, bboxes, labels = g["images"], g["bboxes"], g["labels"]
    anchors = g["anchors"]
    assert images.as_tensor().shape() == [4, 3, 300, 300] and images.layout() == "CHW"
    assert bboxes.shape() == [(8732, 4)] * 4 and labels.shape() == [(8732,)] * 4
    lab = labels.as_array()
    assert lab.dtype == np.int32 and (lab > 0).any(axis=1).all()
    cwh = np.stack([(anchors[:, 0] + anchors[:, 2]) / 2, (anchors[:, 1] + anchors[:, 3]) / 2,
                    anchors[:, 2] - anchors[:, 0], anchors[:, 3] - anchors[:, 1]], 1)
    for s in range(4):
        b = bboxes.at(s)
        np.testing.assert_allclose(b[lab[s] == 0], cwh[lab[s] == 0], atol=1e-6)
        m = b[lab[s] > 0]  # matched: boxes of the crop in centre form, inside [0, 1]
        assert (m[:, 2:] > 0).all() and (m[:, :2] >= 0).all() and (m[:, :2] <= 1).all()


def test_pytorch_ssd_loader(run_port):
    """DALIGenericIterator over the SSD pipeline: torch tensors of DALI's shapes and dtypes, the
    epoch's 68 images in batches of 16 with the last one partial (PARTIAL), labels from 1 where
    an anchor matched, and auto_reset going on into the next epoch."""
    import torch

    g = run_port("pytorch_ssd_loader")
    seen = g["seen"]
    assert [s[0][0] for s in seen] == [16, 16, 16, 16, 4]
    for shape_i, shape_b, shape_l, dtype, positives in seen:
        n = shape_i[0]
        assert shape_i == (n, 3, 300, 300) and shape_b == (n, 8732, 4) and shape_l == (n, 8732)
        assert dtype == torch.int32 and positives >= n  # every image keeps a matched anchor
    first = g["next_epoch_first"]
    assert first["images"].shape == (16, 3, 300, 300) and first["images"].dtype == torch.float32


def test_parallel_external_source(run_port):
    g = run_port("parallel_external_source")
    epoch = g["epoch"]
    assert len(epoch) == 10 // 4  # the partial third batch ends the epoch (StopIteration)
    for it, (images, labels) in enumerate(epoch):
        assert labels.shape() == [(1,)] * 4 and labels.dtype == np.int32
        for k in range(4):
            idx = it * 4 + k
            assert labels.at(k).tolist() == [idx % 5]
            np.testing.assert_array_equal(images.at(k),
                                          _decoded(os.path.join(g["VOC_IMAGES"], g["FILES"][idx])))


def test_external_input_tutorial(run_port):
    g = run_port("external_input")
    batch, labels = g["contrasted"], g["labels_out"]
    for k in range(4):
        x = _decoded(os.path.join(g["VOC_IMAGES"], g["FILES"][k])).astype(np.float64)
        np.testing.assert_array_equal(batch.at(k), np.clip(np.floor(128 + 2 * (x - 128) + 0.5),
                                                           0, 255).astype(np.uint8))
        assert labels.at(k).tolist() == [k % 3] and labels.at(k).dtype == np.uint8
    for name in ("callable", "generator"):
        imgs, labs = g["outs"][name]
        np.testing.assert_array_equal(labs.as_array(), labels.as_array())
        for k in range(4):
            np.testing.assert_array_equal(imgs.at(k), _decoded(os.path.join(g["VOC_IMAGES"],
                                                                            g["FILES"][k])))


def _h(m23):
    return np.vstack([np.asarray(m23, np.float64).reshape(2, 3), [0, 0, 1]])


def test_transforms_and_warp_affine(run_port):
    g = run_port("warp_transforms")
    mt, both, angle, moved = g["mt"], g["both"], g["angle"], g["moved"]
    images, warped, size, shapes = g["images"], g["warped"], g["size"], g["shapes"]
    np.testing.assert_array_equal(size.as_array(), shapes.as_array())
    for s in range(4):
        assert tuple(size.at(s)) == images.at(s).shape
        a = np.deg2rad(float(angle.at(s)))
        rot = np.array([[np.cos(a), -np.sin(a), 0], [np.sin(a), np.cos(a), 0], [0, 0, 1]])
        c = np.array([[1, 0, 100.0], [0, 1, 80], [0, 0, 1]])
        ref = (np.array([[1, 0, 20.0], [0, 1, 10], [0, 0, 1]]) @ np.diag([0.8, 0.8, 1])
               @ c @ rot @ np.linalg.inv(c))
        np.testing.assert_allclose(_h(mt.at(s)), ref, atol=1e-5)
        np.testing.assert_allclose(_h(both.at(s)), ref @ np.array([[1, 0.1, 0], [0, 1, 0],
                                                                    [0, 0, 1]]), atol=1e-5)
        pts = np.array([[0, 0, 1], [50, 20, 1.0]])
        np.testing.assert_allclose(moved.at(s), (pts @ ref.T)[:, :2], atol=1e-4)
        # warp_affine(inverse_map=False) puts source pixel centre p at mt @ p
        src, dst = images.at(s).astype(np.float64), warped.at(s).astype(np.float64)
        assert dst.shape == src.shape
        y, x = 60, 90
        q = ref @ [x + 0.5, y + 0.5, 1]
        qx, qy = int(np.floor(q[0])), int(np.floor(q[1]))
        if 1 <= qx < dst.shape[1] - 1 and 1 <= qy < dst.shape[0] - 1:
            near = src[y - 2:y + 3, x - 2:x + 3].reshape(-1, 3)
            assert np.abs(near - dst[qy, qx]).min(0).max() <= 40  # a pixel of the neighbourhood


def test_resize_per_sample_and_slice_rel(run_port):
    g = run_port("resize_slice")
    images, shorter, resized, sliced = g["images"], g["shorter"], g["resized"], g["sliced"]
    for s in range(4):
        h, w = images.at(s).shape[:2]
        k = float(shorter.at(s)) / min(h, w)
        rh, rw = resized.at(s).shape[:2]
        assert (rh, rw) == (round(h * k), round(w * k))
        x0, y0 = int(np.floor(0.25 * rw + 0.5)), int(np.floor(0.1 * rh + 0.5))
        x1, y1 = int(np.floor(0.75 * rw + 0.5)), int(np.floor(0.7 * rh + 0.5))
        # the window's pixels: the fused resize + slice warp copies the materialised resize's
        # window (OpenCV, the CPU default, resizes the whole image with cv2.resize and the
        # window with warpAffine, each within 1 level of the exact value; tests/dali/
        # test_resize_crop.py checks both against a float64 reference)
        diff = np.abs(sliced.at(s).astype(int) - resized.at(s)[y0:y1, x0:x1])
        assert diff.max() <= 2 and (diff > 0).mean() < 0.05
        np.testing.assert_array_equal(g["hw"].at(s), [[y1 - y0, x1 - x0, 3]] * 2)
        b = g["boxes"].at(s).reshape(-1, 2)
        np.testing.assert_allclose(g["flipped"].at(s), np.c_[1 - b[:, 0], b[:, 1]], atol=1e-6)


def test_augmentation_gallery(run_port):
    """Every entry runs; water and sphere give DALI's displacement of the decoded image (their
    defaults: ampl 10, freq 2 pi / 128, INTERP_NN, fill 0; tests/ops/test_displace.py checks the
    rules themselves)."""
    from detaug.kernels.displace import sample, sphere_points, water_points

    g = run_port("augmentation_gallery")
    im = _decoded(os.path.join(g["VOC_IMAGES"], g["IMAGE"]))
    for name, (orig, out) in g["results"].items():
        np.testing.assert_array_equal(orig.at(0), im)
        assert out.at(0).dtype == np.uint8
    h, w = im.shape[:2]
    fill = np.zeros(3, np.uint8)
    f = 2 * np.pi / 128
    water = sample(im, *water_points(h, w, 10, 10, f, f, 0, 0), False, fill)
    np.testing.assert_array_equal(g["results"]["water"][1].at(0), water)
    np.testing.assert_array_equal(g["results"]["sphere"][1].at(0),
                                  sample(im, *sphere_points(h, w), False, fill))
    # a spot check written out: water's pixel (x=5, y=40) is the input's (floor(5 + 10 sin(40 f)),
    # floor(40 + 10 cos(5 f)))
    sx, sy = int(np.floor(5 + 10 * np.sin(40 * f))), int(np.floor(40 + 10 * np.cos(5 * f)))
    np.testing.assert_array_equal(water[40, 5], im[sy, sx])
    assert g["results"]["resize"][1].at(0).shape == (300, 300, 3)


# ---- the forms and outputs the programs rely on ------------------------------------------------------
def test_run_outputs_are_tensor_lists_and_arrays():
    import detaug.fn as fn
    from detaug.pipeline import Pipeline

    pipe = Pipeline(batch_size=3, num_threads=1, seed=0)
    with pipe:
        u = fn.random.uniform(range=[0.0, 1.0], shape=2)
        ragged = fn.external_source(source=lambda si: np.arange(si.idx_in_epoch + 1.0),
                                    batch=False, size=6)
        pipe.set_outputs(u, ragged)
    u, r = pipe.run()
    assert isinstance(u, np.ndarray) and u.shape == (3, 2) and u.shape() == [(2,)] * 3
    assert type(u + 1) is np.ndarray and type(u[0]) is np.ndarray
    np.testing.assert_array_equal(u.as_array(), np.asarray(u)) and u.at(2).shape == (2,)
    assert u.as_tensor().shape() == [3, 2] and u.is_dense_tensor() and u.layout() == ""
    assert isinstance(r, list) and r.shape() == [(1,), (2,), (3,)] and not r.is_dense_tensor()
    with pytest.raises(ValueError, match="different shapes"):
        r.as_tensor()
    assert r.at(2).tolist() == [0.0, 1.0, 2.0]


def test_constants_as_inputs_and_reshape_of_a_list():
    import detaug.fn as fn
    from detaug.pipeline import Pipeline

    pipe = Pipeline(batch_size=2, num_threads=1)
    with pipe:
        src = fn.external_source(source=lambda si: np.zeros(1, np.float32), batch=False, size=2)
        pipe.set_outputs(fn.reshape(fn.constant(idata=[1, 2, 3, 4, 5, 6]), [3, -1]),
                         fn.cat([1.5, 2.5], [3.5], src))
    a, c = pipe.run()
    assert a.dtype == np.int32 and a.at(1).tolist() == [[1, 2], [3, 4], [5, 6]]
    assert c.dtype == np.float32 and c.at(0).tolist() == [1.5, 2.5, 3.5, 0.0]


def test_modules_dali_programs_import():
    import detaug.backend as backend
    import detaug.math as dmath
    import detaug.plugin.tf as dali_tf
    import detaug.tfrecord as tfrec

    assert tfrec.FixedLenFeature([], tfrec.string, "").dtype == "string" and callable(dmath.clamp)
    for mod, name in ((dmath, "erf"), (dali_tf, "DALIRawDataset"), (backend, "GetCudaVersion")):
        with pytest.raises(AttributeError, match="docs/dali.md"):
            getattr(mod, name)
    assert backend.TensorCPU is not None


def test_per_batch_callable_with_batch_info_and_its_epochs():
    import detaug.fn as fn
    from detaug.pipeline import Pipeline

    seen = []

    def source(info):
        seen.append((info.iteration, info.epoch_idx))
        if info.iteration == 2:
            raise StopIteration
        return [np.full(2, 10 * info.epoch_idx + info.iteration, np.int32)] * 3

    pipe = Pipeline(batch_size=3, num_threads=1)
    with pipe:
        pipe.set_outputs(fn.external_source(source=source, batch_info=True))
    got = []
    for _ in range(2):
        try:
            while True:
                got.append(int(pipe.run()[0].at(0)[0]))
        except StopIteration:
            pipe.reset()
    assert got == [0, 1, 10, 11] and seen[:3] == [(0, 0), (1, 0), (2, 0)]


def test_warp_affine_without_fill_value_repeats_the_border(rng):
    """DALI's warp_affine without fill_value: taps clamped to the image. A translation by
    (-k, -1) (output -> input) shows the first row and the first column repeated; a rotation is
    checked against the same sampling written here in float64."""
    import detaug.fn as fn
    from detaug.pipeline import Pipeline

    imgs = [rng.integers(0, 256, (20, 30, 3), dtype=np.uint8) for _ in range(3)]
    pipe = Pipeline(batch_size=3, num_threads=1)
    with pipe:
        i = fn.external_source(source=lambda si: imgs[si.idx_in_epoch], batch=False, size=3)
        m = fn.external_source(source=lambda si: np.array([1, 0, -si.idx_in_epoch - 1, 0, 1, -1],
                                                          np.float32), batch=False, size=3)
        rot = fn.transforms.rotation(angle=25.0, center=(15.0, 10.0))
        pipe.set_outputs(fn.warp_affine(i, m), fn.warp_affine(i, rot, inverse_map=False), rot)
    shifted, rotated, mats = pipe.run()
    for k in range(3):
        a, src = shifted.at(k), imgs[k]
        d = k + 1
        np.testing.assert_array_equal(a[1:, d:], src[:-1, :30 - d])
        np.testing.assert_array_equal(a[0, d:], src[0, :30 - d])           # row repeated
        np.testing.assert_array_equal(a[1:, :d], np.repeat(src[:-1, :1], d, 1))  # column
        inv = np.linalg.inv(np.vstack([mats.at(k).astype(np.float64), [0, 0, 1]]))
        oy, ox = np.mgrid[0:20, 0:30] + 0.5
        x = inv[0, 0] * ox + inv[0, 1] * oy + inv[0, 2] - 0.5
        y = inv[1, 0] * ox + inv[1, 1] * oy + inv[1, 2] - 0.5
        ref = np.zeros((20, 30, 3))
        for r in range(20):
            for c in range(30):
                x0, y0 = int(np.floor(x[r, c])), int(np.floor(y[r, c]))
                fx, fy = x[r, c] - x0, y[r, c] - y0
                px = lambda yy, xx: src[min(max(yy, 0), 19), min(max(xx, 0), 29)].astype(float)  # noqa: E731
                ref[r, c] = ((px(y0, x0) * (1 - fx) + px(y0, x0 + 1) * fx) * (1 - fy)
                             + (px(y0 + 1, x0) * (1 - fx) + px(y0 + 1, x0 + 1) * fx) * fy)
        np.testing.assert_array_equal(rotated.at(k), np.floor(ref + 0.5).astype(np.uint8))


def test_ssd_random_crop_old_op(rng):
    """ops.SSDRandomCrop (DALI's older op): the image is the slice of the window it draws, the
    kept boxes are those whose centre lies in the window, renormalised to it; with the same
    window ops.Slice cuts the same pixels (checked through RandomBBoxCrop's rule: every box of
    a sample meets the drawn IoU or the crop is the whole image)."""
    import detaug.ops as ops
    from detaug.pipeline import Pipeline

    imgs = [rng.integers(0, 256, (int(rng.integers(30, 60)), int(rng.integers(30, 60)), 3),
                         dtype=np.uint8) for _ in range(6)]
    boxes = []
    for _ in range(6):
        a = rng.uniform(0, 0.6, (3, 2))
        boxes.append(np.concatenate([a, a + rng.uniform(0.1, 0.4, (3, 2))], 1).astype(np.float32))
    labels = [np.arange(1, 4, dtype=np.int32)] * 6

    def src(si):
        k = si.idx_in_epoch
        return imgs[k], boxes[k], labels[k]

    pipe = Pipeline(batch_size=6, num_threads=1, seed=5)
    with pipe:
        i, b, lab = __import__("detaug").fn.external_source(source=src, batch=False, num_outputs=3,
                                                            size=6)
        out = ops.SSDRandomCrop(device="cpu", num_attempts=1)(i, b, lab)
        pipe.set_outputs(*out)
    img, ob, ol = pipe.run()
    for s in range(6):
        h, w = imgs[s].shape[:2]
        ch, cw = img.at(s).shape[:2]
        assert 0.3 * h - 1 <= ch <= h and 0.3 * w - 1 <= cw <= w
        # find the window's place: the crop is a sub-array of the source image
        hits = [(y, x) for y in range(h - ch + 1) for x in range(w - cw + 1)
                if np.array_equal(imgs[s][y:y + ch, x:x + cw], img.at(s))]
        assert hits
        y0, x0 = hits[0]
        win = np.array([x0 / w, y0 / h, (x0 + cw) / w, (y0 + ch) / h])
        c = (boxes[s][:, :2] + boxes[s][:, 2:]) / 2
        inside = ((c >= win[:2] - 0.02) & (c <= win[2:] + 0.02)).all(1)
        assert len(ob.at(s)) == len(ol.at(s)) and 1 <= len(ol.at(s)) <= inside.sum()
        assert set(ol.at(s).tolist()) <= set(labels[s][inside].tolist())
        assert (ob.at(s) >= 0).all() and (ob.at(s) <= 1).all()


def _coco_tfrecords(folder, n):
    """The first ``n`` images of the repository's COCO sample written as TFRecords."""
    import copy

    from readers.coco import read_coco
    from readers.tfrecord_od import write_tfrecord

    ds = read_coco(os.path.join(COCO, "annotations.json"), os.path.join(COCO, "images"))
    part = copy.copy(ds)
    part.records = [ds.records[k] for k in range(n)]
    write_tfrecord(part, folder, num_shards=1)
    return part, sorted(str(p) for p in folder.glob("*.tfrecord"))


@pytest.mark.slow  # TensorFlow's import alone takes ~8 s here
def test_efficientdet_input(tmp_path, monkeypatch, run_port):
    """DALI's EfficientDet input pipeline runs whole (TFRecord features, DataNode arithmetic,
    dali.math, slices of tensors, resize of the normalised float images, box_encoder(offset=True),
    DALIDataset). The images stay float32: each pixel a bilinear mix of normalised pixels (inside
    the channel's normalised range) or the slice's pad (0); the pyramid levels are the encoded
    targets cut in order (tests/ops/test_float_geometry.py checks the float warp's values)."""
    pytest.importorskip("tensorflow")
    _, files = _coco_tfrecords(tmp_path, 6)
    monkeypatch.setenv("PORT_TFRECORDS", os.pathsep.join(files))
    g = run_port("efficientdet_input")
    first = [np.asarray(t) for t in g["first"]]
    images, levels, enc_boxes, enc_classes = first[0], first[1:-2], first[-2], first[-1]
    assert images.dtype == np.float32 and images.shape == (g["BATCH"], 128, 128, 3)
    mean = np.array([0.485, 0.456, 0.406]) * 255
    std = np.array([0.229, 0.224, 0.225]) * 255
    lo, hi = (0 - mean) / std, (255 - mean) / std
    assert (images >= np.minimum(lo, 0) - 1e-4).all() and (images <= hi + 1e-4).all()
    assert np.abs(images - np.round(images)).max() > 0.01  # float values, not rounded
    start = 0
    for (h, w, a), cls, box in zip(g["sizes"], levels[0::2], levels[1::2]):
        n = h * w * a
        np.testing.assert_array_equal(cls.reshape(g["BATCH"], -1), enc_classes[:, start:start + n])
        np.testing.assert_array_equal(box.reshape(g["BATCH"], -1, 4), enc_boxes[:, start:start + n])
        start += n
    assert start == enc_boxes.shape[1] and (enc_classes > 0).any()


def test_tfrecord_features_dict(tmp_path):
    """readers.tfrecord(features=...): a dict of outputs, DALI's FixedLen / VarLen values, the
    records' own values (checked against the COCO annotations they were written from)."""
    import detaug.fn as fn
    import detaug.tfrecord as tfrec
    from detaug.pipeline import Pipeline

    ds, files = _coco_tfrecords(tmp_path, 6)
    pipe = Pipeline(batch_size=4, num_threads=1)
    with pipe:
        f = fn.readers.tfrecord(path=files, features={
            "image/encoded": tfrec.FixedLenFeature((), tfrec.string, ""),
            "image/width": tfrec.FixedLenFeature([1], tfrec.int64, -1),
            "image/object/bbox/xmin": tfrec.VarLenFeature(tfrec.float32, 0.0),
            "image/object/bbox/xmax": tfrec.VarLenFeature(tfrec.float32, 0.0),
            "no/such/feature": tfrec.FixedLenFeature([2], tfrec.float32, 7.0)})
        assert isinstance(f, dict) and list(f)[0] == "image/encoded"
        pipe.set_outputs(fn.decoders.image(f["image/encoded"], device="cpu"), f["image/width"],
                         f["image/object/bbox/xmin"], f["image/object/bbox/xmax"],
                         f["no/such/feature"])
    img, width, x0, x1, missing = pipe.run()
    for k in range(4):
        rec = ds.records[k]
        assert img.at(k).shape[:2] == (rec.height, rec.width)
        assert width.at(k).tolist() == [rec.width]
        np.testing.assert_allclose(x0.at(k), rec.boxes[:, 0] / rec.width, rtol=1e-6)
        np.testing.assert_allclose(x1.at(k), rec.boxes[:, 2] / rec.width, rtol=1e-6)
        assert missing.at(k).tolist() == [7.0, 7.0]


def test_tensor_arguments_of_resize_and_crop(rng):
    """DALI's tensor arguments: resize's size and crop's crop (crop_mirror_normalize's too) as
    per-sample DataNodes: each sample gets its own extents (resize's rounded, crop's truncated
    as DALI's CropAttr), and the crop is the window at crop_pos 0.5 (DALI's rounding: halves
    up)."""
    import detaug.fn as fn
    from detaug.pipeline import Pipeline

    imgs = [rng.integers(0, 256, (60, 80, 3), dtype=np.uint8) for _ in range(3)]
    pipe = Pipeline(batch_size=3, num_threads=1, seed=2)
    with pipe:
        i = fn.external_source(source=lambda si: imgs[si.idx_in_epoch], batch=False, size=3)
        sz = fn.random.uniform(range=(20, 50), shape=2)
        c = fn.random.uniform(range=(10, 30), shape=2)
        pipe.set_outputs(fn.resize(i, size=sz), sz, fn.crop(i, crop=c), c,
                         fn.crop_mirror_normalize(i, crop=c, mean=0.0, std=1.0,
                                                  output_layout="HWC"))
    r, sz, cr, c, cm = pipe.run()
    for k in range(3):
        assert r.at(k).shape == (round(float(sz.at(k)[0])), round(float(sz.at(k)[1])), 3)
        ch, cw = (int(v) for v in c.at(k))
        y0 = int(np.floor(0.5 * (60 - ch) + 0.5))
        x0 = int(np.floor(0.5 * (80 - cw) + 0.5))
        np.testing.assert_array_equal(cr.at(k), imgs[k][y0:y0 + ch, x0:x0 + cw])
        np.testing.assert_allclose(cm.at(k), imgs[k][y0:y0 + ch, x0:x0 + cw].astype(np.float32))


def test_rotate_with_dalis_arguments_without_fill_value_repeats_the_border(rng):
    """fn.rotate(keep_size=True) without fill_value: DALI's border repeat, the same sampling as
    warp_affine's without fill_value on the rotation about the centre."""
    import detaug.fn as fn
    from detaug.ops.border import warp_clamped
    from detaug.pipeline import Pipeline

    imgs = [rng.integers(0, 256, (20, 30, 3), dtype=np.uint8) for _ in range(2)]
    pipe = Pipeline(batch_size=2, num_threads=1)
    with pipe:
        i = fn.external_source(source=lambda si: imgs[si.idx_in_epoch], batch=False, size=2)
        pipe.set_outputs(fn.rotate(i, angle=30.0, keep_size=True),
                         fn.rotate(i, angle=30.0, keep_size=False))
    out, grown = pipe.run()
    a = np.deg2rad(30.0)
    for k in range(2):
        # counter-clockwise on screen (y down) about the centre (15, 10): [[c, s], [-s, c]]
        lin = np.array([[np.cos(a), np.sin(a)], [-np.sin(a), np.cos(a)]])
        m = np.eye(3)
        m[:2, :2] = lin
        m[:2, 2] = np.array([15.0, 10.0]) - lin @ [15.0, 10.0]
        np.testing.assert_array_equal(out.at(k), warp_clamped(imgs[k], np.linalg.inv(m), (20, 30)))
        # DALI's enlarged canvas (34 x 36: dali_rotated_size), the image's centre at its centre
        assert grown.at(k).shape[:2] == (34, 36)
        m[:2, 2] = np.array([18.0, 17.0]) - lin @ [15.0, 10.0]
        np.testing.assert_array_equal(grown.at(k), warp_clamped(imgs[k], np.linalg.inv(m), (34, 36)))


def test_brightness_contrast_shift_and_dtype(rng):
    """DALI's brightness_contrast: out = shift * R_out + brightness * (center + contrast *
    (x - center)), R_out 255 for uint8 (rounded, clamped), 1 for float (kept); hsv(dtype=FLOAT)
    keeps the unrounded values for the next op (the SSD example's chain)."""
    import detaug.fn as fn
    import detaug.types as types
    from detaug.pipeline import Pipeline

    imgs = [rng.integers(0, 256, (5, 7, 3), dtype=np.uint8) for _ in range(2)]
    pipe = Pipeline(batch_size=2, num_threads=1)
    with pipe:
        i = fn.external_source(source=lambda si: imgs[si.idx_in_epoch], batch=False, size=2)
        pipe.set_outputs(fn.brightness_contrast(i, brightness=0.8, contrast=1.5, contrast_center=100,
                                                brightness_shift=0.1),
                         fn.brightness_contrast(i, brightness=0.8, contrast=1.5,
                                                brightness_shift=0.1, dtype=types.FLOAT),
                         fn.brightness_contrast(fn.hsv(i, hue=10.0, saturation=1.2,
                                                       dtype=types.FLOAT),
                                                brightness=1.1, dtype=types.UINT8))
    u8, f32, chained = pipe.run()
    for k in range(2):
        x = imgs[k].astype(np.float64)
        np.testing.assert_array_equal(
            u8.at(k), np.clip(np.floor(25.5 + 0.8 * (100 + 1.5 * (x - 100)) + 0.5), 0, 255))
        assert f32.at(k).dtype == np.float32
        np.testing.assert_allclose(f32.at(k), 0.1 + 0.8 * (128 + 1.5 * (x - 128)), rtol=1e-6)
        # hsv's float output (DALI's YIQ map, unrounded) then brightness 1.1, rounded once
        from detaug.kernels.color import hsv_matrices

        mat = hsv_matrices(np.array([10.0]), np.array([1.2]), np.ones(1))[0].astype(np.float64)
        want = np.clip(np.floor(1.1 * (x @ mat.T).astype(np.float32) + 0.5), 0, 255)
        assert np.abs(chained.at(k).astype(int) - want).max() <= 1
        assert (chained.at(k) == want).mean() > 0.95
