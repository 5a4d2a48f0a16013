"""The ports of DALI's expressions and tensor-joining tutorials and of its box operators
(tests/dali/ports/expressions.py, tensor_join.py, box_ops.py) under detaug, checked against
NumPy written here (tests/dali/test_against_dali.py compares them with DALI itself where DALI is
installed); and the DALI forms they needed: ``types.Constant``, ``external_source``'s positional
source, a pipeline of constants alone."""
import json

import numpy as np


def _c_floordiv(a, b):  # C++'s integer division: truncation toward zero
    return (np.sign(a) * np.sign(b) * (np.abs(a) // np.abs(b))).astype(a.dtype)


def test_expressions(run_port):
    g = run_port("expressions")
    left = [np.int32(t) for t in g["left"]]
    right = [np.int32(t) for t in g["right"]]
    t, c, s = g["tensors"], g["constants"], g["scalar_outputs"]
    for k in range(2):
        lk, rk = left[k], right[k]
        for out, want in zip(t[2:], (lk + rk, lk * rk, _c_floordiv(lk, rk), -lk, lk - rk)):
            assert out.at(k).dtype == np.int32
            np.testing.assert_array_equal(out.at(k), want)
        np.testing.assert_array_equal(c[0].at(k), lk + 200)
        assert c[1].at(k).dtype == np.float32 and c[2].at(k).dtype == np.float32
        np.testing.assert_array_equal(c[1].at(k), lk * np.float32(0.75))
        np.testing.assert_array_equal(c[2].at(k), 15 - rk.astype(np.float32))
        np.testing.assert_allclose(c[3].at(k), lk / rk, rtol=1e-6)  # int / int: float32
        assert c[4].at(k).dtype == np.int32  # uint8 constant with int32: int32
        np.testing.assert_array_equal(c[4].at(k), 3 * rk)
        np.testing.assert_array_equal(s[2].at(k), lk + (k + 1))
        np.testing.assert_array_equal(s[3].at(k), lk * (k + 1))


def test_tensor_join(run_port):
    g = run_port("tensor_join")
    a = g["arr"]
    srcs = [a, a + 100, a + 200]
    for axis, out in enumerate(g["concatenated"]):
        assert out.at(0).dtype == np.int32  # DALI's Constant: int64 arrays made int32
        np.testing.assert_array_equal(out.at(0), np.concatenate(srcs, axis))
    for axis, out in enumerate(g["stacked"]):
        np.testing.assert_array_equal(out.at(0), np.stack(srcs, axis))


def test_box_ops(run_port):
    g = run_port("box_ops")
    ann = json.load(open(g["COCO_ANNOTATIONS"]))
    assert len(ann["images"]) > 4
    for k in range(4):
        img, b = g["images"].at(k), g["boxes"].at(k).astype(np.float64)
        h, w = img.shape[:2]
        np.testing.assert_array_equal(g["flipped"].at(k), img[::-1, ::-1])
        np.testing.assert_allclose(g["boxes_h"].at(k), np.c_[1 - b[:, 2], b[:, 1], 1 - b[:, 0],
                                                             b[:, 3]], atol=1e-6)
        np.testing.assert_allclose(g["boxes_v"].at(k), np.c_[b[:, 0], 1 - b[:, 3], b[:, 2],
                                                             1 - b[:, 1]], atol=1e-6)
        # xywh layout flipped both ways: x' = 1 - x - w, y' = 1 - y - h
        np.testing.assert_allclose(g["xywh"].at(k), np.c_[1 - b[:, 0] - b[:, 2],
                                                          1 - b[:, 1] - b[:, 3], b[:, 2:]],
                                   atol=1e-6)
        # paste on a canvas twice the size at (0.25, 0.75) of the free room
        ph, pw = g["pasted"].at(k).shape[:2]
        assert (ph, pw) == (2 * h, 2 * w)
        y0, x0 = int(0.75 * h), int(0.25 * w)  # DALI's paste truncates the offset
        np.testing.assert_array_equal(g["pasted"].at(k)[y0:y0 + h, x0:x0 + w], img)
        np.testing.assert_array_equal(g["pasted"].at(k)[0, 0], [118, 185, 0])
        np.testing.assert_allclose(g["boxes_pasted"].at(k),
                                   (b + [0.25, 0.75, 0.25, 0.75]) / 2, atol=1e-6)
        p = b.reshape(-1, 2)
        np.testing.assert_allclose(g["points"].at(k), np.c_[1 - p[:, 0], 0.8 - p[:, 1]], atol=1e-6)
        # the crop transform maps [0.1, 0.9] x [0.2, 0.7] onto [0, 1]^2
        np.testing.assert_allclose(g["in_crop"].at(k), (p - [0.1, 0.2]) / [0.8, 0.5], atol=1e-5)
        x = img.astype(np.float64)
        np.testing.assert_allclose(g["normalized"].at(k), (x - x.mean((0, 1))) / x.std((0, 1)),
                                   rtol=1e-4, atol=1e-4)
        np.testing.assert_allclose(g["normalized_scaled"].at(k), (x - 128) / 64 * 2 + 1, atol=1e-5)
        bc = np.clip(np.floor(0.1 * 255 + 1.2 * (100 + 0.7 * (x - 100)) + 0.5), 0, 255)
        np.testing.assert_array_equal(g["bc"].at(k), bc)


def test_constant_forms():
    import detaug.fn as fn
    import detaug.types as types
    from detaug.pipeline import Pipeline

    assert types.Constant(3).value.dtype == np.int32
    assert types.Constant(2.5).value.dtype == np.float32
    assert types.Constant(np.arange(3)).value.dtype == np.int32
    assert types.Constant(np.arange(3, dtype=np.uint8)).value.dtype == np.uint8
    assert types.Constant(7).uint8().value.dtype == np.uint8
    outside = types.Constant(np.arange(6).reshape(2, 3)).float32()  # made outside any pipeline
    pipe = Pipeline(batch_size=2, num_threads=1)
    with pipe:
        data = fn.external_source(lambda: [np.full(3, 10, np.uint8)] * 2)  # positional source
        pipe.set_outputs(data + types.Constant(250, types.UINT8), data * types.Constant(2.0),
                         fn.cat(outside, outside, axis=1))
    wrapped, doubled, cat = pipe.run()
    assert wrapped.dtype == np.uint8 and wrapped.at(1).tolist() == [4, 4, 4]  # uint8 wraps
    assert doubled.dtype == np.float32 and doubled.at(0).tolist() == [20.0] * 3
    np.testing.assert_array_equal(cat.at(1), np.tile(np.arange(6.0).reshape(2, 3), 2))


def test_external_source_forms(run_port):
    g = run_port("external_source_forms")
    for it, (a, b, c, d) in enumerate(g["batches"]):
        for k in range(3):
            assert a.at(k).tolist() == [3 * it + k, k, it] and a.at(k).dtype == np.int32
            np.testing.assert_array_equal(d.at(k), a.at(k) * 2 + 1)
            np.testing.assert_array_equal(b.at(k), np.full((k + 1, 2), 10 * it + k, np.float32))
            # cycle="quiet": the two batches, then the first again
            np.testing.assert_array_equal(c.at(k), np.full((2, 2, 1), (it % 2 + 1) * 7 + k))


def test_coco_reader_variants(run_port):
    g = run_port("coco_reader_variants")
    ann = json.load(open(g["COCO_ANNOTATIONS"]))
    by_id = {im["id"]: im for im in ann["images"]}
    shape, boxes, labels, ids = g["results"]["ltrb_ratio_ids"][0]
    xywh = g["results"]["xywh_pixels"][0][1]
    for k in range(8):
        im = by_id[int(ids.at(k)[0])]
        assert tuple(shape.at(k)[:2]) == (im["height"], im["width"])
        anns = [a["bbox"] for a in ann["annotations"] if a["image_id"] == im["id"]]
        np.testing.assert_allclose(xywh.at(k), anns, rtol=1e-6)
        w, h = im["width"], im["height"]
        np.testing.assert_allclose(boxes.at(k), [[x / w, y / h, (x + bw) / w, (y + bh) / h]
                                                 for x, y, bw, bh in anns], atol=1e-6)
