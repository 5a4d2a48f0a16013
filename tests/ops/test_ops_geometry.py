"""Geometric ops: hand-computed boxes, exact pixel moves, float64 references, composition."""
import numpy as np
import pytest

from detaug import fn
from detaug.core import geometry as G
from helpers import boxes_of, images_of, run_graph


def rand_img(rng, h, w, c=3):
    return rng.integers(0, 256, (h, w, c), dtype=np.uint8)


def test_flip_hand_computed(rng):
    img = rand_img(rng, 50, 100)
    out_img, out_b = run_graph([img], [[[10, 20, 30, 40]]],
                               lambda i, b: fn.flip(i, b, horizontal=1))
    np.testing.assert_array_equal(boxes_of(out_b)[0]["boxes"], [[70, 20, 90, 40]])
    np.testing.assert_array_equal(images_of(out_img)[0], img[:, ::-1])


def test_vertical_flip_and_flip_twice_identity(rng):
    img = rand_img(rng, 50, 100)
    box = [[10.5, 20.25, 30, 40]]
    out_img, out_b = run_graph([img], [box], lambda i, b: fn.flip(i, b, horizontal=0, vertical=1))
    np.testing.assert_allclose(boxes_of(out_b)[0]["boxes"], [[10.5, 10, 30, 29.75]])
    np.testing.assert_array_equal(images_of(out_img)[0], img[::-1])

    def twice(i, b):
        i, b = fn.flip(i, b, horizontal=1, vertical=1)
        return fn.flip(i, b, horizontal=1, vertical=1)

    out_img, out_b = run_graph([img], [box], twice)
    np.testing.assert_array_equal(images_of(out_img)[0], img)
    np.testing.assert_allclose(boxes_of(out_b)[0]["boxes"], box)


def test_per_sample_flip_follows_coin(rng):
    imgs = [rand_img(rng, 8, 10) for _ in range(6)]
    boxes = [[[1, 2, 3, 4]]] * 6

    def g(i, b):
        coin = fn.random.coin_flip()
        i, b = fn.flip(i, b, horizontal=coin)
        return i, b, coin

    out_img, out_b, coin = run_graph(imgs, boxes, g, seed=3)
    for k in range(6):
        flipped = bool(coin[k])
        exp = imgs[k][:, ::-1] if flipped else imgs[k]
        np.testing.assert_array_equal(images_of(out_img)[k], exp)
        np.testing.assert_array_equal(boxes_of(out_b)[k]["boxes"], [[7, 2, 9, 4]] if flipped else [[1, 2, 3, 4]])


def test_rotate_90_exact(rng):
    img = rand_img(rng, 40, 60)
    out_img, out_b = run_graph([img], [[[10, 5, 30, 15]]],
                               lambda i, b: fn.rotate(i, b, angle=90, expand=True))
    got = images_of(out_img)[0]
    assert got.shape == (60, 40, 3)
    np.testing.assert_array_equal(got, np.rot90(img))
    # counter-clockwise as displayed: (x, y) -> (y, W - x)
    np.testing.assert_allclose(boxes_of(out_b)[0]["boxes"], [[5, 30, 15, 50]], atol=1e-4)


def test_rotate_keeps_canvas_and_fills_zero(rng):
    img = np.full((41, 41, 3), 200, np.uint8)
    out_img, _ = run_graph([img], [[[0, 0, 1, 1]]], lambda i, b: fn.rotate(i, b, angle=45))
    got = images_of(out_img)[0]
    assert got.shape == img.shape
    assert (got[0, 0] == 0).all() and (got[20, 20] == 200).all()


def test_rotate_ellipse_keeps_square_size(rng):
    img = rand_img(rng, 100, 100)
    box = [[40, 40, 60, 60]]
    for angle in (17.0, 30.0, 45.0):
        _, ob = run_graph([img], [box], lambda i, b: fn.rotate(i, b, angle=angle, box_mode="ellipse"))
        bx = boxes_of(ob)[0]["boxes"][0]
        np.testing.assert_allclose(bx, [40, 40, 60, 60], atol=1e-3)
        _, ob = run_graph([img], [box], lambda i, b: fn.rotate(i, b, angle=angle))
        bx = boxes_of(ob)[0]["boxes"][0]
        half = 10 * (abs(np.cos(np.deg2rad(angle))) + abs(np.sin(np.deg2rad(angle))))
        np.testing.assert_allclose(bx, [50 - half, 50 - half, 50 + half, 50 + half], atol=1e-3)


@pytest.mark.parametrize("size", [(64, 100), (20, 30), (37, 53), (1, 1)])
def test_resize_constant_image_stays_constant(size):
    img = np.full((37, 53, 3), 77, np.uint8)
    out_img, out_b = run_graph([img], [[[0, 0, 53, 37]]], lambda i, b: fn.resize(i, b, size=size))
    got = images_of(out_img)[0]
    assert got.shape == size + (3,)
    np.testing.assert_array_equal(got, 77)
    np.testing.assert_allclose(boxes_of(out_b)[0]["boxes"], [[0, 0, size[1], size[0]]], atol=1e-4)


def test_resize_shorter_max_size_and_keep_aspect():
    img = np.zeros((100, 200, 3), np.uint8)
    out, _ = run_graph([img], [[]], lambda i, b: fn.resize(i, b, resize_shorter=50))
    assert images_of(out)[0].shape == (50, 100, 3)
    out, _ = run_graph([img], [[]], lambda i, b: fn.resize(i, b, resize_shorter=80, max_size=120))
    assert images_of(out)[0].shape == (60, 120, 3)
    out, _ = run_graph([img], [[]], lambda i, b: fn.resize(i, b, size=(64, 64), keep_aspect=True))
    assert images_of(out)[0].shape == (32, 64, 3)


def test_checkerboard_downscale_is_antialiased():
    yy, xx = np.mgrid[:64, :64]
    img = np.repeat((((yy + xx) % 2) * 255).astype(np.uint8)[..., None], 3, 2)
    out, _ = run_graph([img], [[]], lambda i, b: fn.resize(i, b, size=(16, 16)))
    got = images_of(out)[0].astype(float)
    assert np.all(np.abs(got - 127.5) <= 2)


def test_crop_is_slicing_and_letterbox_pads(rng):
    img = rand_img(rng, 30, 40)
    out, ob = run_graph([img], [[[5, 5, 25, 20]]],
                        lambda i, b: fn.crop(i, b, window=(10, 4, 30, 24)))
    np.testing.assert_array_equal(images_of(out)[0], img[4:24, 10:30])
    # the box reaches past the window's left edge: clipped there, as torchvision's F.crop does
    np.testing.assert_allclose(boxes_of(ob)[0]["boxes"], [[0, 1, 15, 16]])
    out, ob = run_graph([img], [[[0, 0, 40, 30]]], lambda i, b: fn.letterbox(i, b, size=(80, 80), fill=114))
    got = images_of(out)[0]
    assert got.shape == (80, 80, 3)
    np.testing.assert_allclose(boxes_of(ob)[0]["boxes"], [[0, 10, 80, 70]], atol=1e-4)
    assert (got[:10] == 114).all() and (got[70:] == 114).all()


def test_crop_pos_anchor():
    img = np.arange(10 * 20 * 3, dtype=np.uint8).reshape(10, 20, 3)
    out, _ = run_graph([img], [[]], lambda i, b: fn.crop(i, b, crop=(4, 6), crop_pos_x=1.0, crop_pos_y=0.0))
    np.testing.assert_array_equal(images_of(out)[0], img[0:4, 14:20])


def _corner_ref(m, box):
    pts = np.array([[box[0], box[1]], [box[2], box[1]], [box[0], box[3]], [box[2], box[3]]], float)
    p = pts @ m[:2, :2].T + m[:2, 2]
    return np.concatenate([p.min(0), p.max(0)])


def test_affine_boxes_match_float64_reference(rng):
    img = rand_img(rng, 48, 64)
    boxes = np.sort(rng.uniform(0, 48, (7, 4)).reshape(7, 2, 2), axis=1).transpose(0, 2, 1).reshape(7, 4)
    params = dict(rotate=float(rng.uniform(-40, 40)), scale=float(rng.uniform(0.5, 2)),
                  translate_x=float(rng.uniform(-5, 5)), translate_y=float(rng.uniform(-5, 5)),
                  shear_x=float(rng.uniform(-15, 15)))
    _, ob = run_graph([img], [boxes], lambda i, b: fn.affine(i, b, **params))
    c = np.array([32.0, 24.0])
    lin = (G.rotation_linear(params["rotate"])[0] @ np.diag([params["scale"]] * 2)
           @ np.array([[1, np.tan(np.deg2rad(params["shear_x"]))], [0, 1]]))
    m = np.eye(3)
    m[:2, :2] = lin
    m[:2, 2] = c + [params["translate_x"], params["translate_y"]] - lin @ c
    ref = np.array([_corner_ref(m, b) for b in boxes])
    # a box that the transform moves wholly off the canvas is gone (and so are its fields); the
    # others are clipped to the canvas
    on_canvas = (ref[:, 0] < 64) & (ref[:, 2] > 0) & (ref[:, 1] < 48) & (ref[:, 3] > 0)
    ref = np.clip(ref, 0, [64, 48, 64, 48])
    got = boxes_of(ob)[0]
    np.testing.assert_allclose(got["boxes"], ref[on_canvas], atol=1e-3)
    np.testing.assert_array_equal(got["labels"], np.arange(7)[on_canvas])


def _axis_chain(fused):
    def g(i, b):
        steps = [lambda i, b: fn.flip(i, b, horizontal=1),
                 lambda i, b: fn.crop(i, b, window=(3, 2, 45, 30)),
                 lambda i, b: fn.resize(i, b, size=(56, 84)),
                 lambda i, b: fn.rotate(i, b, angle=90, expand=True),
                 lambda i, b: fn.letterbox(i, b, size=(90, 90))]
        for s in steps:
            i, b = s(i, b)
            if not fused:
                i, b = fn.materialize(i, b)
        return i, b
    return g


def test_fused_axis_chain_equals_one_at_a_time(rng):
    img = rand_img(rng, 32, 48)
    # smooth image so that interpolating twice stays within 2 grey levels of interpolating once
    yy, xx = np.mgrid[:32, :48]
    img = np.stack([(yy * 7) % 256, (xx * 5) % 256, (yy + xx) * 2], -1).astype(np.uint8)
    boxes = [[4, 3, 20, 12], [10, 10, 40, 28], [0, 0, 48, 32]]
    fi, fb = run_graph([img], [boxes], _axis_chain(True))
    si, sb = run_graph([img], [boxes], _axis_chain(False))
    np.testing.assert_allclose(boxes_of(fb)[0]["boxes"], boxes_of(sb)[0]["boxes"], atol=1e-3)
    a, b = images_of(fi)[0].astype(int), images_of(si)[0].astype(int)
    assert a.shape == b.shape == (90, 90, 3)
    inner = (slice(4, -4), slice(20, -20))  # away from borders (letterbox pads left and right)
    assert np.abs(a[inner] - b[inner]).max() <= 2


def test_free_rotation_fused_box_equals_one_at_a_time(rng):
    """Fusion never changes results: two free rotations fused give the box that each rotation
    gives in turn (the enclosing box of the enclosing box), not the tighter box of one 45-degree
    turn."""
    img = rand_img(rng, 60, 60)
    box = [[20, 20, 40, 40]]

    def chain(fused):
        def g(i, b):
            i, b = fn.rotate(i, b, angle=30)
            if not fused:
                i, b = fn.materialize(i, b)
            return fn.rotate(i, b, angle=15)
        return g

    _, fb = run_graph([img], [box], chain(True))
    _, sb = run_graph([img], [box], chain(False))
    rot = []
    for angle in (30.0, 15.0):
        m = np.eye(3)
        m[:2, :2] = G.rotation_linear(angle)[0]
        m[:2, 2] = [30, 30] - m[:2, :2] @ [30, 30]
        rot.append(m)
    ref = _corner_ref(rot[1], _corner_ref(rot[0], box[0]))
    np.testing.assert_allclose(boxes_of(fb)[0]["boxes"][0], ref, atol=1e-3)
    np.testing.assert_allclose(boxes_of(sb)[0]["boxes"][0], ref, atol=1e-3)
    once = _corner_ref(rot[1] @ rot[0], box[0])
    assert np.diff(ref[[0, 2]]) > np.diff(once[[0, 2]]) + 1  # the one-turn box is tighter


def test_zoom_out_pastes_exactly(rng):
    img = rand_img(rng, 20, 30)
    out, ob = run_graph([img], [[[1, 2, 11, 12]]],
                        lambda i, b: fn.zoom_out(i, b, ratio=(2, 3), probability=1.0, fill=7), seed=5)
    got = images_of(out)[0]
    assert 40 <= got.shape[0] <= 60 and 60 <= got.shape[1] <= 90
    bx = boxes_of(ob)[0]["boxes"][0]
    x0, y0 = int(bx[0] - 1), int(bx[1] - 2)
    np.testing.assert_array_equal(got[y0:y0 + 20, x0:x0 + 30], img)
    assert (got == 7).all(-1).sum() == got.shape[0] * got.shape[1] - 600


def test_random_iou_crop_constraint_and_fields(rng):
    imgs = [rand_img(rng, 60, 80) for _ in range(8)]
    boxes = [np.array([[5, 5, 30, 30], [40, 10, 75, 50], [10, 35, 25, 55]], float) for _ in range(8)]
    ids = [np.array([100, 200, 300]) + k for k in range(8)]
    fields = [{"annotation_id": i} for i in ids]
    labels = [np.array([0, 1, 2])] * 8
    out, ob = run_graph(imgs, boxes, lambda i, b: fn.random_iou_crop(i, b), labels=labels,
                        fields=fields, seed=11)
    for k, s in enumerate(boxes_of(ob)):
        h, w = images_of(out)[k].shape[:2]
        # the surviving boxes keep their own label and id, whatever was dropped
        for lab, aid in zip(s["labels"], s["annotation_id"]):
            assert aid == ids[k][lab]
        c = (s["boxes"][:, :2] + s["boxes"][:, 2:]) / 2
        assert ((c > 0) & (c < [w, h])).all()


def test_one_pixel_images_and_no_boxes():
    img = np.full((1, 1, 3), 9, np.uint8)
    out, ob = run_graph([img, img], [[], [[0, 0, 1, 1]]],
                        lambda i, b: fn.resize(*fn.flip(i, b), size=(3, 3)))
    assert [a.shape for a in images_of(out)] == [(3, 3, 3)] * 2
    assert (images_of(out)[0] == 9).all()
    s = boxes_of(ob)
    assert len(s[0]["boxes"]) == 0
    np.testing.assert_allclose(s[1]["boxes"], [[0, 0, 3, 3]])


def _iou_crop_reference(u, sizes, boxes, offsets, valid, thresholds, scale, aspect):
    """Plain-loop statement of random_iou_crop's rule (see crops.iou_crop_windows)."""
    options = list(thresholds) + [None]
    t = (u.shape[1] - 1) // 4
    wins, keep = [], np.ones(len(boxes), bool)
    for s in range(len(sizes)):
        h, w = sizes[s]
        thr = options[min(int(u[s, 0] * len(options)), len(options) - 1)]
        win = [0.0, 0.0, float(w), float(h)]
        bs = [(k, boxes[k]) for k in range(offsets[s], offsets[s + 1]) if valid[k]]
        if thr is not None:
            for a in range(t):
                fw, fh, fx, fy = u[s, 1 + 4 * a:5 + 4 * a]
                cw = max(round(w * (scale[0] + (scale[1] - scale[0]) * fw)), 1)
                ch = max(round(h * (scale[0] + (scale[1] - scale[0]) * fh)), 1)
                x0 = max(np.floor(fx * (w - cw + 1)), 0)
                y0 = max(np.floor(fy * (h - ch + 1)), 0)
                if not aspect[0] <= cw / ch <= aspect[1]:
                    continue
                c = [x0, y0, x0 + cw, y0 + ch]
                ious = []
                for _, bb in bs:
                    cx, cy = (bb[0] + bb[2]) / 2, (bb[1] + bb[3]) / 2
                    if c[0] < cx < c[2] and c[1] < cy < c[3]:
                        inter = max(min(c[2], bb[2]) - max(c[0], bb[0]), 0) * max(min(c[3], bb[3]) - max(c[1], bb[1]), 0)
                        union = cw * ch + (bb[2] - bb[0]) * (bb[3] - bb[1]) - inter
                        ious.append(inter / union)
                if (not bs) or (ious and max(ious) >= thr):
                    win = c
                    for k in range(offsets[s], offsets[s + 1]):
                        cx, cy = (boxes[k, 0] + boxes[k, 2]) / 2, (boxes[k, 1] + boxes[k, 3]) / 2
                        keep[k] = c[0] < cx < c[2] and c[1] < cy < c[3]
                    break
        wins.append(win)
    return np.array(wins), keep


def _random_boxes(rng, sizes, max_count, x_lo, scale):
    """Fewer than ``max_count`` boxes per sample of ``sizes`` (B, 2) (H, W): top-left corners
    from ``x_lo * W`` (both coordinates) to (W, H), widths and heights from 1 to ``scale`` x (W, H).
    Returns (boxes (N, 4), offsets (B + 1,))."""
    counts = rng.integers(0, max_count, len(sizes))
    boxes = []
    for (h, w), n in zip(sizes, counts):
        xy = rng.uniform(x_lo * w, [w, h], (n, 2))
        boxes.append(np.concatenate([xy, xy + rng.uniform(1, [w * scale, h * scale], (n, 2))], 1))
    boxes = np.concatenate(boxes) if counts.sum() else np.zeros((0, 4))
    return boxes, np.concatenate([[0], np.cumsum(counts)])


def test_iou_crop_vectorised_equals_plain_loop(rng):
    from detaug.ops.crops import iou_crop_windows

    b, t = 16, 20
    sizes = rng.integers(20, 200, (b, 2))
    boxes, offsets = _random_boxes(rng, sizes, 6, 0.0, 0.5)
    valid = rng.random(len(boxes)) > 0.2
    u = rng.random((b, 1 + 4 * t))
    thr = (0.1, 0.3, 0.5, 0.7, 0.9)
    win, keep = iou_crop_windows(u, sizes, boxes, offsets, valid, thr, True, (0.3, 1.0), (0.5, 2.0))
    rwin, rkeep = _iou_crop_reference(u, sizes, boxes, offsets, valid, thr, (0.3, 1.0), (0.5, 2.0))
    np.testing.assert_array_equal(win, rwin)
    np.testing.assert_array_equal(keep, rkeep)


@pytest.mark.parametrize("box_scale, thresholds", [(3.0, (0.0, 0.5)), (0.2, (0.3, 0.95)),
                                                   (1.5, (0.1, 0.3, 0.5, 0.7, 0.9))])
def test_iou_crop_prefilter_changes_nothing(rng, box_scale, thresholds):
    """The vectorised crop skips windows more than 1/threshold times the largest box (no box can
    reach the threshold there): the choices still equal the plain loop's, for boxes larger than
    the image, tiny boxes, integer boxes, threshold 0 and thresholds near 1."""
    from detaug.ops.crops import iou_crop_windows

    b, t = 24, 30
    sizes = rng.integers(10, 150, (b, 2))
    boxes, offsets = _random_boxes(rng, sizes, 7, -0.25, box_scale)
    if box_scale > 1:
        boxes = np.round(boxes)
    valid = rng.random(len(boxes)) > 0.2
    u = rng.random((b, 1 + 4 * t))
    win, keep = iou_crop_windows(u, sizes, boxes, offsets, valid, thresholds, True, (0.1, 1.0), (0.5, 2.0))
    rwin, rkeep = _iou_crop_reference(u, sizes, boxes, offsets, valid, thresholds, (0.1, 1.0), (0.5, 2.0))
    np.testing.assert_array_equal(win, rwin)
    np.testing.assert_array_equal(keep, rkeep)


def _ultralytics_matrix(w, h, angle, scale, tx, ty, px, py):
    """Ultralytics' RandomPerspective matrix (shear 0), from its definition: M = T R P C, with
    C the centring, P = [[1, 0, 0], [0, 1, 0], [px, py, 1]], R = cv2.getRotationMatrix2D(angle,
    (0, 0), scale), T the translation to the centre plus (tx, ty); input -> output."""
    C = np.array([[1, 0, -w / 2], [0, 1, -h / 2], [0, 0, 1]], float)
    P = np.array([[1, 0, 0], [0, 1, 0], [px, py, 1]], float)
    a = np.deg2rad(angle)
    R = np.array([[scale * np.cos(a), scale * np.sin(a), 0],
                  [-scale * np.sin(a), scale * np.cos(a), 0], [0, 0, 1]])
    T = np.array([[1, 0, w / 2 + tx], [0, 1, h / 2 + ty], [0, 0, 1]], float)
    return T @ R @ P @ C


@pytest.mark.parametrize("trial", range(4))
def test_affine_perspective_terms_match_ultralytics_matrix(rng, trial):
    """affine's perspective_x / perspective_y are Ultralytics' P[2, 0], P[2, 1]: boxes are the
    enclosing boxes of the corners mapped with the divide; pixels (antialias=False) follow the
    float64 warp rule through the inverse of Ultralytics' matrix."""
    from helpers.geometry import detaug_rule_image
    from helpers.geometry import psnr

    h, w = int(rng.integers(40, 90)), int(rng.integers(40, 90))
    img = rand_img(rng, h, w)
    img = np.asarray(np.cumsum(np.cumsum(img.astype(float), 0), 1) % 256, np.uint8)  # some structure
    boxes = np.sort(rng.uniform(0, min(h, w), (6, 2, 2)), axis=1).transpose(0, 2, 1).reshape(6, 4)
    p = dict(rotate=float(rng.uniform(-10, 10)), scale=float(rng.uniform(0.6, 1.4)),
             translate_x=float(rng.uniform(-5, 5)), translate_y=float(rng.uniform(-5, 5)),
             perspective_x=float(rng.uniform(-3e-3, 3e-3)), perspective_y=float(rng.uniform(-3e-3, 3e-3)))
    oi, ob = run_graph([img], [boxes], lambda i, b: fn.affine(i, b, antialias=False, fill=114.0, **p))
    m = _ultralytics_matrix(w, h, p["rotate"], p["scale"], p["translate_x"], p["translate_y"],
                            p["perspective_x"], p["perspective_y"])
    cx, cy = boxes[:, [0, 2, 2, 0]], boxes[:, [1, 1, 3, 3]]
    den = m[2, 0] * cx + m[2, 1] * cy + m[2, 2]
    x, y = (m[0, 0] * cx + m[0, 1] * cy + m[0, 2]) / den, (m[1, 0] * cx + m[1, 1] * cy + m[1, 2]) / den
    want = np.clip(np.stack([x.min(1), y.min(1), x.max(1), y.max(1)], 1), 0, [w, h, w, h])
    alive = (want[:, 2] > want[:, 0]) & (want[:, 3] > want[:, 1])
    got = boxes_of(ob)[0]
    np.testing.assert_allclose(got["boxes"], want[alive], atol=1e-3)
    np.testing.assert_array_equal(got["labels"], np.arange(6)[alive])
    out = images_of(oi)[0]
    rule = detaug_rule_image(img, np.linalg.inv(m), (h, w), fill=114.0)
    assert psnr(out, rule) >= 40.0
    assert np.mean(np.abs(out.astype(float) - rule)) < 0.5


def test_affine_antialias_switch(rng):
    """antialias=False on a strong shrink is one bilinear sample a pixel (the float64 rule);
    the default supersamples (a different, smoother image); no shrink: the two agree."""
    from helpers.geometry import detaug_rule_image

    img = rand_img(rng, 64, 80)
    off, _ = run_graph([img], [[[1, 1, 5, 5]]], lambda i, b: fn.affine(i, b, scale=0.4, antialias=False))
    on, _ = run_graph([img], [[[1, 1, 5, 5]]], lambda i, b: fn.affine(i, b, scale=0.4))
    c = np.array([40.0, 32.0])
    m = np.eye(3)
    m[:2, :2] = np.diag([0.4, 0.4])
    m[:2, 2] = c - 0.4 * c
    rule = detaug_rule_image(img, np.linalg.inv(m), (64, 80))
    off, on = images_of(off)[0].astype(float), images_of(on)[0].astype(float)
    assert np.abs(off - rule).max() <= 2
    inner = (slice(24, 40), slice(30, 50))  # inside the shrunk image (the rest is fill in both)
    # random pixels: the supersampled block mean is far from one sample, and smoother
    assert np.abs(on - rule)[inner].mean() > 10
    assert on[inner].std() < 0.8 * off[inner].std()
    same = [run_graph([img], [[[1, 1, 5, 5]]], lambda i, b: fn.affine(i, b, rotate=7.0, antialias=a))[0]
            for a in (False, True)]
    np.testing.assert_array_equal(images_of(same[0])[0], images_of(same[1])[0])
