"""Keypoints and oriented boxes carried through a CPU pipeline's geometric ops as per-box fields
(graph/materialize.py -> core/instances.py): they land where a float64 reference of the ops
puts them, trade left and right slots on a mirror, become (0, 0, 0) off the canvas, and drop
with their boxes."""
import numpy as np
import pytest

from detaug import fn
from helpers import run_graph
from helpers.geometry import polygons_of_row

FI = np.array([0, 2, 1])


def _chain(i, b):
    i, b = fn.flip(i, b, horizontal=1)
    i, b = fn.crop(i, b, window=(4, 2, 50, 38))
    return fn.resize(i, b, size=(92, 72))


def _reference(kp, w):
    """flip x -> W - x, crop by (4, 2) to 46 x 36, resize to 72 x 92, in float64."""
    out = np.zeros_like(kp, dtype=np.float64)
    for k, (x, y, v) in enumerate(kp.astype(np.float64)):
        if v <= 0:
            continue
        x, y = w - x, y
        x, y = x - 4, y - 2
        if not (0 <= x < 46 and 0 <= y < 36):
            continue
        out[FI[k]] = [x * 72 / 46, y * 92 / 36, v]
    return out


def test_keypoints_follow_flip_crop_resize_and_drop_with_boxes(rng):
    w, h = 60, 40
    imgs = [rng.integers(0, 256, (h, w, 3), np.uint8) for _ in range(2)]
    boxes, fields = [], []
    for _ in imgs:
        n = 4
        b = np.concatenate([rng.uniform(12, 25, (n, 2)), rng.uniform(30, 40, (n, 2))], 1)
        b[:, 3] = np.minimum(b[:, 3], h)
        b[0] = [56, 1, 59.5, 3]  # flips to x in [0.5, 4]: left of the crop, dropped
        kp = np.zeros((n, 3, 3), np.float32)
        kp[..., 0] = rng.uniform(0, w, (n, 3))
        kp[..., 1] = rng.uniform(0, h, (n, 3))
        kp[..., 2] = rng.integers(0, 3, (n, 3))
        kp[kp[..., 2] == 0] = 0
        boxes.append(b)
        fields.append({"keypoints": kp, "keypoint_flip": np.tile(FI, (n, 1))})
    _, out = run_graph(imgs, boxes, _chain, fields=fields)
    for got, b, f in zip(out.per_sample(), boxes, fields):
        assert len(got["boxes"]) == len(b) - 1  # the first box left the crop: gone, with its points
        for row, kp in zip(got["keypoints"], f["keypoints"][1:]):
            assert np.allclose(row, _reference(kp, w), atol=1e-4)


def test_oriented_boxes_follow_rotation(rng):
    w, h = 64, 48
    img = rng.integers(0, 256, (h, w, 3), np.uint8)
    corners = np.array([[[20, 15], [40, 15], [40, 30], [20, 30]]], np.float32)
    _, out = run_graph([img], [[[20, 15, 40, 30]]], lambda i, b: fn.rotate(i, b, angle=30, expand=False),
                       fields=[{"obb": corners}])
    got = out.per_sample()[0]["obb"][0].astype(np.float64)
    c, s = np.cos(np.deg2rad(30)), np.sin(np.deg2rad(30))
    d = corners[0].astype(np.float64) - [w / 2, h / 2]
    ref = np.stack([c * d[:, 0] + s * d[:, 1], -s * d[:, 0] + c * d[:, 1]], 1) + [w / 2, h / 2]
    assert np.allclose(got, ref, atol=1e-4)
    # the box is the enclosing box of the rotated box's corners (clipped), as before
    assert np.allclose(out.per_sample()[0]["boxes"][0], [*ref.min(0), *ref.max(0)], atol=1e-3)


def test_coco_reader_keypoints_through_flip_and_crop(tmp_path, rng):
    """readers.coco(keypoints=True): COCO's pixel-index keypoints (+ 0.5) mirrored, swapped by
    the pairing of their names, cropped; a box cropped away leaves with its points."""
    from detaug import Pipeline
    from helpers.reader_files import write_coco

    names = ["nose", "left_eye", "right_eye"]
    cat = {"id": 1, "name": "person", "keypoints": names, "skeleton": [[1, 2], [1, 3]]}
    w, h = 50, 40
    kps = [[10, 12, 2, 30, 5, 1, 0, 0, 0], [45, 30, 2, 2, 2, 2, 48, 38, 1]]
    anns = [{"id": 1, "image_id": 1, "category_id": 1, "bbox": [5, 2, 30, 20], "iscrowd": 0,
             "keypoints": kps[0], "num_keypoints": 2},
            {"id": 2, "image_id": 1, "category_id": 1, "bbox": [40, 25, 9, 14], "iscrowd": 0,
             "keypoints": kps[1], "num_keypoints": 3}]
    path, root = write_coco(tmp_path, [{"id": 1, "file_name": "1.jpg", "width": w, "height": h}],
                            anns, [cat])
    pipe = Pipeline(batch_size=1, num_threads=1, seed=0)
    with pipe:
        enc, boxes = fn.readers.coco(file_root=root, annotations_file=path, keypoints=True)
        img = fn.decoders.image(enc)
        img, boxes = fn.flip(img, boxes, horizontal=1)
        img, boxes = fn.crop(img, boxes, window=(10, 0, 50, 40))
        pipe.set_outputs(img, boxes)
    _, out = pipe.run()
    pipe.close()
    got = out.per_sample()[0]
    # box 2 flips to x in [1, 10]: left of the window, gone; box 1 flips to [15, 45] -> [5, 35]
    assert np.allclose(got["boxes"], [[5, 2, 35, 22]])
    ref = np.zeros((3, 3))
    ref[0] = [w - 10.5 - 10, 12.5, 2]  # nose: no partner
    ref[2] = [w - 30.5 - 10, 5.5, 1]  # the left eye, mirrored: now the right eye's slot
    assert np.allclose(got["keypoints"][0], ref)


def _area(p):
    x, y = p[:, 0], p[:, 1]
    return 0.5 * abs(np.dot(x, np.roll(y, -1)) - np.dot(y, np.roll(x, -1)))


def test_coco_reader_polygons_through_flip_crop_resize(tmp_path, rng):
    """readers.coco(polygons=True): polygons mapped by a float64 reference of flip, crop and
    resize; one reaching past the crop is clipped to it (area = OpenCV's convex intersection);
    a box cropped away leaves with its polygons."""
    import cv2

    from detaug import Pipeline
    from helpers.reader_files import write_coco

    w, h = 60, 40
    inner = rng.uniform([28, 8], [40, 30], (5, 2)).round(2)  # x in [28, 40]: flips to [20, 32]
    inner = cv2.convexHull(inner.astype(np.float32))[:, 0].astype(np.float64).round(2)
    edge = np.array([[2.0, 5.0], [14.0, 5.0], [14.0, 20.0]])  # flips to x in [46, 58]: cut at 50
    gone = np.array([[57.0, 30.0], [59.5, 30.0], [59.5, 38.0]])  # flips to x < 4: cropped away

    def ann(i, poly):
        lo, hi = poly.min(0), poly.max(0)
        return {"id": i, "image_id": 1, "category_id": 1, "iscrowd": 0,
                "bbox": [*lo.tolist(), *(hi - lo).tolist()],
                "segmentation": [poly.reshape(-1).tolist()]}
    path, root = write_coco(tmp_path, [{"id": 1, "file_name": "1.jpg", "width": w, "height": h}],
                            [ann(1, inner), ann(2, edge), ann(3, gone)])
    pipe = Pipeline(batch_size=1, num_threads=1, seed=0)
    with pipe:
        enc, boxes = fn.readers.coco(file_root=root, annotations_file=path, polygons=True)
        img = fn.decoders.image(enc)
        pipe.set_outputs(*_chain(img, boxes))
    _, out = pipe.run()
    pipe.close()
    got = out.per_sample()[0]
    assert list(got["annotation_id"]) == [1, 2]

    def ref(p):  # flip, crop (4, 2), resize 46 x 36 -> 72 x 92, in float64
        return np.stack([(w - p[:, 0] - 4) * 72 / 46, (p[:, 1] - 2) * 92 / 36], 1)
    (poly,) = polygons_of_row(got["polygons"][0])
    assert np.allclose(poly, ref(inner), atol=1e-4)
    (clipped,) = polygons_of_row(got["polygons"][1])
    window = np.array([[0, 0], [72, 0], [72, 92], [0, 92]], np.float32)
    expect, _ = cv2.intersectConvexConvex(ref(edge).astype(np.float32), window)
    assert _area(clipped) == pytest.approx(expect, rel=1e-4)
    assert clipped[:, 0].max() == pytest.approx(72)


def test_shapes_with_dalis_outputs_are_refused(tmp_path):
    import os

    from detaug import Pipeline
    from helpers import COCO as COCO_MINI

    pipe = Pipeline(batch_size=1, num_threads=1, seed=0)
    with pytest.raises(ValueError, match="the outputs are DALI's"):
        with pipe:
            out = fn.readers.coco(file_root=os.path.join(COCO_MINI, "images"),
                                  annotations_file=os.path.join(COCO_MINI, "annotations.json"),
                                  polygons=True, ratio=True)
            pipe.set_outputs(*out[1:])
        pipe.build()
        pipe.run()
    pipe.close()


def test_tight_boxes_follow_rotated_polygons(tmp_path):
    """readers.coco(polygons=True, tight_boxes=True): a diamond turned 45 degrees is a square;
    its box is the square's (half-side 5 / sqrt 2 about the centre), not the enclosing box of
    the turned box's corners (half-side 5 sqrt 2)."""
    from detaug import Pipeline
    from helpers.reader_files import write_coco

    diamond = [20, 10, 25, 15, 20, 20, 15, 15]  # centre (20, 15), the image's centre
    ann = {"id": 1, "image_id": 1, "category_id": 1, "iscrowd": 0, "bbox": [15, 10, 10, 10],
           "segmentation": [diamond]}
    path, root = write_coco(tmp_path, [{"id": 1, "file_name": "1.jpg", "width": 40, "height": 30}],
                            [ann])
    got = {}
    for tight in (False, True):
        pipe = Pipeline(batch_size=1, num_threads=1, seed=0)
        with pipe:
            enc, boxes = fn.readers.coco(file_root=root, annotations_file=path, polygons=True,
                                         tight_boxes=tight)
            img = fn.decoders.image(enc)
            pipe.set_outputs(*fn.rotate(img, boxes, angle=45, expand=False))
        got[tight] = pipe.run()[1].per_sample()[0]["boxes"][0]
        pipe.close()
    r = 5 / np.sqrt(2)
    assert np.allclose(got[True], [20 - r, 15 - r, 20 + r, 15 + r], atol=1e-4)
    big = 5 * np.sqrt(2)
    assert np.allclose(got[False], [20 - big, 15 - big, 20 + big, 15 + big], atol=1e-4)
