"""Boundary rules, each pinned by a hand-computed case that sits exactly on the boundary, so
that flipping a comparison (``>=`` / ``>``, ``<`` / ``<=``) or a rounding (floor / round /
ceil, half away / half to even) fails a test. Expected values are worked out in the comments
from the rule's definition (the paper, DALI, torchvision, the format), never read from the module
under test. The CUDA twins of the kernel rules are pinned on the same cases in
tests/kernels/test_kernel_parity.py."""
import numpy as np
import pytest

from detaug import fn
from detaug.core import geometry as G
from detaug.kernels.boxes import box_transform_numpy
from detaug.kernels.color import brightness_contrast_numpy, hsv_numpy
from detaug.ops.crops import iou_crop_windows, resized_crop_windows
from detaug.ops.geometry import zoom_out_windows
from detaug.targets import retinanet as R
from helpers import boxes_of, images_of, run_graph
from helpers.cases import PRUNE_CASES, RN_ANCHORS, RN_BOX, RN_STATES


# ---------------------------------------------------------------------------------- letterbox
def test_letterbox_centred_offset_rounds_down():
    """A 40 x 100 (H x W) image into (21, 51): scale min(21/40, 51/100) = 0.51, content
    round(20.4) x 51 = 20 x 51, vertical margin 1: the offset is floor(1 / 2) = 0 (the extra
    row goes to the bottom). The transposed case puts the extra column on the right."""
    wide, tall = np.full((40, 100, 3), 200, np.uint8), np.full((100, 40, 3), 200, np.uint8)
    for img, size, box, want_box, content in (
            (wide, (21, 51), [0, 0, 100, 40], [0, 0, 51, 20], (slice(0, 20), slice(0, 51))),
            (tall, (51, 21), [0, 0, 40, 100], [0, 0, 20, 51], (slice(0, 51), slice(0, 20)))):
        out_img, out_b = run_graph([img], [[box]], lambda i, b: fn.letterbox(i, b, size=size, fill=7))
        np.testing.assert_allclose(boxes_of(out_b)[0]["boxes"], [want_box], atol=1e-4)
        got = images_of(out_img)[0]
        assert got.shape == size + (3,)
        assert (got[content] == 200).all()
        pad = np.ones(size, bool)
        pad[content] = False
        assert (got[pad] == 7).all()


# ---------------------------------------------------------------------------------- crop
def test_crop_anchor_rounds_halves_away_from_zero():
    """DALI: anchor = std::round(crop_pos * (W - crop_w)). W 12, crop 7, pos 0.5: 2.5 -> 3
    (NumPy's to-even gives 2, floor 2). W 5, crop 10: -2.5 -> -3 (to-even -2, ceil -2): the
    image lands at x = 3, and what lies outside it is fill."""
    rng = np.random.default_rng(0)
    img = rng.integers(0, 256, (10, 12, 3), dtype=np.uint8)
    out_img, out_b = run_graph([img], [[[3, 0, 10, 10]]], lambda i, b: fn.crop(i, b, crop=(10, 7)))
    np.testing.assert_array_equal(boxes_of(out_b)[0]["boxes"], [[0, 0, 7, 10]])
    np.testing.assert_array_equal(images_of(out_img)[0], img[:, 3:10])
    small = img[:, :5]
    out_img, out_b = run_graph([small], [[[0, 0, 5, 10]]],
                               lambda i, b: fn.crop(i, b, crop=(10, 10), fill=9))
    np.testing.assert_array_equal(boxes_of(out_b)[0]["boxes"], [[3, 0, 8, 10]])
    got = images_of(out_img)[0]
    np.testing.assert_array_equal(got[:, 3:8], small)
    assert (got[:, :3] == 9).all() and (got[:, 8:] == 9).all()


def test_crop_window_rounds_to_nearest_and_keeps_one_pixel():
    """window=(2.4, 1.6, 8.6, 7.4) -> pixels [2, 9) x [2, 7) (round; floor gives [2, 8) x [1, 7),
    ceil [3, 9) x [2, 8)); a crop narrower than half a pixel keeps one column."""
    rng = np.random.default_rng(1)
    img = rng.integers(0, 256, (10, 12, 3), dtype=np.uint8)
    out_img, out_b = run_graph([img], [[[2, 2, 9, 7]]],
                               lambda i, b: fn.crop(i, b, window=(2.4, 1.6, 8.6, 7.4)))
    np.testing.assert_array_equal(images_of(out_img)[0], img[2:7, 2:9])
    np.testing.assert_array_equal(boxes_of(out_b)[0]["boxes"], [[0, 0, 7, 5]])
    out_img = run_graph([img], [[[0, 0, 1, 1]]], lambda i, b: fn.crop(i, crop_w=0.3, crop_h=4))[0]
    assert images_of(out_img)[0].shape == (4, 1, 3)


# ---------------------------------------------------------------------------------- resize
def test_resize_sizes_round_to_nearest_and_keep_one_pixel():
    """resize_shorter=5: 3 x 4 -> 5 x 6.67 -> 5 x 7 (floor: 6); 3 x 5 -> 5 x 8.33 -> 5 x 8
    (ceil: 9). resize_longer=10 of 1 x 30 -> 0.33 x 10 -> 1 x 10 (never 0 rows)."""
    imgs = [np.full((3, 4, 3), 50, np.uint8), np.full((3, 5, 3), 50, np.uint8)]
    out_img, out_b = run_graph(imgs, [[[0, 0, 4, 3]], [[0, 0, 5, 3]]],
                               lambda i, b: fn.resize(i, b, resize_shorter=5))
    assert [a.shape[:2] for a in images_of(out_img)] == [(5, 7), (5, 8)]
    got = boxes_of(out_b)
    np.testing.assert_allclose(got[0]["boxes"], [[0, 0, 7, 5]], atol=1e-5)
    np.testing.assert_allclose(got[1]["boxes"], [[0, 0, 8, 5]], atol=1e-5)
    out_img = run_graph([np.zeros((1, 30, 3), np.uint8)], [[[0, 0, 1, 1]]],
                        lambda i, b: fn.resize(i, resize_longer=10))[0]
    assert images_of(out_img)[0].shape[:2] == (1, 10)


# ---------------------------------------------------------------------------------- zoom out
def test_zoom_out_probability_is_strict_and_canvas_and_offset_round():
    """probability 0.5: u0 = 0.5 does not zoom (u0 < p), u0 = 0.4999 does. Ratio 1 + u1: 1.26 ->
    canvas round(12.6) = 13 (floor: 12), 1.24 -> round(12.4) = 12 (ceil: 13). Position
    floor(u * (13 - 10 + 1)): u 0.7 -> floor(2.8) = 2 (round: 3); u 0.999 -> 3, the largest."""
    u = np.array([[0.5, 0.9, 0.3, 0.3], [0.4999, 0.26, 0.7, 0.999], [0.0, 0.24, 0.0, 0.0]])
    x0, y0, out = zoom_out_windows(u, np.array([[10, 10]] * 3), (1.0, 2.0), 0.5)
    np.testing.assert_array_equal(out, [[10, 10], [13, 13], [12, 12]])
    np.testing.assert_array_equal(x0, [0, 2, 0])
    np.testing.assert_array_equal(y0, [0, 3, 0])


# ---------------------------------------------------------------------------------- random crops
def _iou_crop(u, sizes, boxes, offsets, thresholds, scale=(0.5, 0.5), aspect=(0.5, 2.0)):
    boxes = np.asarray(boxes, np.float64).reshape(-1, 4)
    return iou_crop_windows(np.asarray(u, np.float64), np.asarray(sizes), boxes,
                            np.asarray(offsets, np.int64), np.ones(len(boxes), bool),
                            thresholds, False, scale, aspect)


def test_iou_crop_accepts_iou_equal_to_threshold():
    """10 x 10 image, scale 0.5: the one candidate is [0, 0, 5, 5] (area 25). Box [0, 0, 5, 2.5]
    (centre inside) has IoU 12.5 / 25 = 0.5 exactly: accepted at threshold 0.5 (IoU >= t, as
    torchvision's RandomIoUCrop). Box [7, 7, 9, 9] has its centre outside: dropped."""
    win, keep = _iou_crop([[0, 0, 0, 0, 0]], [[10, 10]], [[0, 0, 5, 2.5], [7, 7, 9, 9]], [0, 2],
                          (0.5,))
    np.testing.assert_array_equal(win, [[0, 0, 5, 5]])
    np.testing.assert_array_equal(keep, [True, False])


def test_iou_crop_centre_on_the_window_edge_is_outside():
    """Window [0, 0, 5, 5]. A box whose centre lies on an edge of it is not inside (strict, as
    torchvision): boxes centred at x = 5, y = 5 and x = 0 are dropped; [0, 0, 5, 5] is kept. A
    box centred on the edge does not count for the IoU either: the only box, [2.5, 0, 7.5, 5]
    (centre x = 5, IoU 12.5 / 37.5 = 0.33 >= 0.3), gives no crop."""
    boxes = [[0, 0, 5, 5], [4, 0, 6, 5], [0, 4, 2, 6], [-1, 1, 1, 3]]
    win, keep = _iou_crop([[0, 0, 0, 0, 0]], [[10, 10]], boxes, [0, 4], (0.1,))
    np.testing.assert_array_equal(win, [[0, 0, 5, 5]])
    np.testing.assert_array_equal(keep, [True, False, False, False])
    win, keep = _iou_crop([[0, 0, 0, 0, 0]], [[10, 10]], [[2.5, 0, 7.5, 5]], [0, 1], (0.3,))
    np.testing.assert_array_equal(win, [[0, 0, 10, 10]])
    np.testing.assert_array_equal(keep, [True])
    # the left edge alike: window [3, 0, 8, 5] (x0 = floor(0.5 * 6)), box centred at x = 3
    win, _ = _iou_crop([[0, 0, 0, 0.5, 0]], [[10, 10]], [[0.5, 0, 5.5, 5]], [0, 1], (0.3,))
    np.testing.assert_array_equal(win, [[0, 0, 10, 10]])
    win, _ = _iou_crop([[0, 0, 0, 0.5, 0]], [[10, 10]], [[0.6, 0, 5.6, 5]], [0, 1], (0.3,))
    np.testing.assert_array_equal(win, [[3, 0, 8, 5]])


def test_iou_crop_aspect_range_is_inclusive_and_windows_round():
    """Candidate 10 x 5 of a 10 x 20 (H x W) image has w / h = 2 exactly, 5 x 10 of 20 x 10 has
    0.5: both inside aspect (0.5, 2) (inclusive). Scale (0.3, 1): w = round(10 * 0.51) = 5
    (ceil: 6), h = round(10 * 0.58) = 6 (floor: 5); x0 = floor(0.55 * (10 - 5 + 1)) = 3
    (ceil: 4), y0 = floor(0.6 * (10 - 6 + 1)) = 3 (round: 3.0, ceil: 3 -- pinned by x0)."""
    u = [[0, 0, 0, 0, 0]]
    win, _ = _iou_crop(u, [[10, 20]], [[0, 0, 10, 5]], [0, 1], (0.1,))
    np.testing.assert_array_equal(win, [[0, 0, 10, 5]])
    win, _ = _iou_crop(u, [[20, 10]], [[0, 0, 5, 10]], [0, 1], (0.1,))
    np.testing.assert_array_equal(win, [[0, 0, 5, 10]])
    win, _ = _iou_crop([[0, 0.3, 0.4, 0.55, 0.6]], [[10, 10]], [], [0, 0], (0.1,),
                       scale=(0.3, 1.0))
    np.testing.assert_array_equal(win, [[3, 3, 8, 9]])


def test_resized_crop_window_may_span_the_whole_side_and_rounds():
    """10 x 20 image, area 0.25 (50 px), ratio 0.5: w = round(sqrt(25)) = 5, h = round(sqrt(100))
    = 10 = H: accepted (h <= H, torchvision's `0 < h <= height`), at x0 = floor(0.55 * 16) = 8
    (round: 9). Without an accepted attempt (area 2: every window too large) the fallback is a
    central crop with the ratio clamped to 1: 10 x 10 of 10 x 21 at floor(11 / 2) = 5 (ceil: 6)."""
    win = resized_crop_windows(np.array([[0.0, 0.0, 0.55, 0.0]]), np.array([[10, 20]]),
                               (0.25, 0.25), (0.5, 1.0))
    np.testing.assert_array_equal(win, [[8, 0, 13, 10]])
    win = resized_crop_windows(np.array([[0.5, 0.5, 0.5, 0.5]]), np.array([[10, 21]]),
                               (2.0, 2.0), (0.5, 1.0))
    np.testing.assert_array_equal(win, [[5, 0, 15, 10]])


# ---------------------------------------------------------------------------------- rotate canvas
def torchvision_expanded_size(angle_deg, h, w):
    """torchvision's ``_compute_affine_output_size`` (after PIL), in float64: the corners of the
    image turned about its centre, both ends truncated to 1e-4, then ceil(max) - floor(min)."""
    a = np.deg2rad(angle_deg)
    rot = np.array([[np.cos(a), np.sin(a)], [-np.sin(a), np.cos(a)]])  # y down: counter-clockwise
    pts = np.array([[-w, -h], [-w, h], [w, h], [w, -h]]) * 0.5 @ rot.T + [w * 0.5, h * 0.5]
    cmax = np.ceil(np.trunc(pts.max(0) * 1e4) * 1e-4)
    cmin = np.floor(np.trunc(pts.min(0) * 1e4) * 1e-4)
    return int(cmax[1] - cmin[1]), int(cmax[0] - cmin[0])


def test_rotate_expand_canvas_rounds_outward_after_truncation():
    """30 degrees of 50 x 100: x spans 50 -+ 55.80 -> floor(-5.80) .. ceil(105.80) = 112 wide,
    y 25 -+ 46.65 -> 94 high. 4 degrees of 30 x 38: the low end -0.99997 truncates to -0.9999 and
    floors to -1 (not -2), so the canvas is 40 wide, not 42."""
    from detaug.ops.geometry import expanded_size

    assert torchvision_expanded_size(30.0, 50, 100) == (94, 112)
    for angle, h, w in ((30.0, 50, 100), (4.0, 30, 38), (-17.0, 23, 61)):
        got = expanded_size(G.rotation_linear(np.array([angle])), np.array([[h, w]]))
        assert tuple(got[0]) == torchvision_expanded_size(angle, h, w), (angle, h, w)
    assert torchvision_expanded_size(4.0, 30, 38)[1] == 40


def test_prune_thresholds_are_inclusive_and_empty_boxes_drop():
    for box, (size, area, vis), kept in PRUNE_CASES:
        _, keep = box_transform_numpy(np.array([box], np.float32), [0], np.eye(3)[None],
                                      [[10, 10]], min_size=size, min_area=area, min_visibility=vis)
        assert keep.tolist() == [kept], (box, size, area, vis)


def test_clip_is_to_the_canvas_and_prune_op_passes_its_thresholds():
    out, keep = box_transform_numpy(np.array([[-1, 2, 12, 8]], np.float32), [0], np.eye(3)[None],
                                    [[10, 10]])
    np.testing.assert_array_equal(out, [[0, 2, 10, 8]])
    img = np.zeros((10, 10, 3), np.uint8)
    _, b = run_graph([img], [[[0, 0, 2, 3], [0, 0, 1.5, 3], [-5, 0, 5, 10], [-6, 0, 4, 10]]],
                     lambda i, b: (i, fn.prune_boxes(b, min_size=2.0, min_visibility=0.5)))
    np.testing.assert_array_equal(boxes_of(b)[0]["boxes"], [[0, 0, 2, 3], [0, 0, 5, 10]])


# ---------------------------------------------------------------------------------- RetinaNet
def _encode(anchors, boxes, labels, canvas=None, force_match=False):
    cfg = R.TargetConfig(force_match=force_match)
    return R.encode_targets_numpy(np.asarray(anchors, np.float32), np.asarray(boxes, np.float32),
                                  np.asarray(labels), [0, len(boxes)], 3, canvas=canvas,
                                  config=cfg)


def test_retinanet_thresholds_are_inclusive_positive_strict_negative():
    reg, lab = _encode(RN_ANCHORS, RN_BOX, [2], canvas=(8, 8))
    np.testing.assert_array_equal(reg[0, :, 4], RN_STATES)
    np.testing.assert_array_equal(lab[0, :, 3], RN_STATES)
    np.testing.assert_array_equal(lab[0, :, :3], [[0, 0, 1] if s == 1 else [0, 0, 0] for s in RN_STATES])
    reg, _ = _encode(RN_ANCHORS, RN_BOX, [2], canvas=(8, 8.5))  # centre 8 < 8.5: inside
    assert reg[0, 5, 4] == 0


def test_retinanet_force_match_needs_a_positive_overlap():
    """With force_match each box's best anchor turns positive, but only when that IoU is > 0: a
    box overlapping no anchor forces none (else anchor 0 would take it, and its class). Ties go to
    the lowest anchor index: [0, 0, 10, 10] twice, box IoU 0.3 < 0.4 -> the first is forced."""
    reg, lab = _encode([[0, 0, 4, 4], [0, 0, 4, 4]], [[0, 0, 4, 2], [20, 20, 22, 22]], [2, 0],
                       force_match=True)
    np.testing.assert_array_equal(reg[0, :, 4], [1, 1])
    np.testing.assert_array_equal(lab[0, :, :3], [[0, 0, 1], [0, 0, 1]])
    reg, lab = _encode([[0, 0, 10, 10], [0, 0, 10, 10]], [[0, 0, 3, 10]], [1], force_match=True)
    np.testing.assert_array_equal(reg[0, :, 4], [1, 0])


def test_retinanet_feature_map_is_ceil_of_size_over_stride():
    """(9, 17) canvas, stride 8: ceil(9 / 8) x ceil(17 / 8) = 2 x 3 cells, centres at 4, 12, 20."""
    cfg = R.AnchorConfig(sizes=(8,), strides=(8,), ratios=(1.0,), scales=(1.0,))
    a = R.anchors_for_shape((9, 17), cfg)
    np.testing.assert_array_equal(a, [[0, 0, 8, 8], [8, 0, 16, 8], [16, 0, 24, 8],
                                      [0, 8, 8, 16], [8, 8, 16, 16], [16, 8, 24, 16]])


# ---------------------------------------------------------------------------------- colour
# ITU-R BT.601 luma (torchvision's rgb_to_grayscale) and the NTSC YIQ chroma rows DALI's hsv uses,
# written out here from the definition.
BT601_YIQ = np.array([[0.299, 0.587, 0.114], [0.596, -0.274, -0.321], [0.211, -0.523, 0.311]])


def test_hsv_saturation_zero_gives_bt601_luma():
    """Saturation 0 keeps Y only: red 0.299 * 255 = 76.2 -> 76, green 0.587 * 255 = 149.7 -> 150,
    blue 0.114 * 255 = 29.1 -> 29, in every channel (swapping two weights changes them all)."""
    px = np.array([[[255, 0, 0], [0, 255, 0], [0, 0, 255]]], np.uint8)
    out = hsv_numpy(px[None], [0.0], [0.0], [1.0])[0]
    np.testing.assert_array_equal(out, [[[76] * 3, [150] * 3, [29] * 3]])


def test_hsv_against_literal_yiq_definition():
    rng = np.random.default_rng(5)
    img = rng.integers(0, 256, (12, 9, 3), dtype=np.uint8)
    for hue, sat, val in ((30.0, 1.3, 0.9), (-75.0, 0.4, 1.1)):
        yiq = BT601_YIQ @ img.reshape(-1, 3).T.astype(np.float64)
        h = np.deg2rad(hue)  # DALI's hue_mat: I' = cos h I + sin h Q, Q' = -sin h I + cos h Q
        i = sat * (np.cos(h) * yiq[1] + np.sin(h) * yiq[2])
        q = sat * (-np.sin(h) * yiq[1] + np.cos(h) * yiq[2])
        rgb = np.linalg.solve(BT601_YIQ, np.stack([yiq[0], i, q]) * val).T.reshape(img.shape)
        want = np.clip(np.floor(rgb + 0.5), 0, 255)
        got = hsv_numpy(img[None], [hue], [sat], [val])[0].astype(np.float64)
        assert np.abs(got - want).max() <= 1 and (got == want).mean() > 0.95


def test_brightness_contrast_rounds_half_up_after_clamping():
    """DALI rounds half up: 0.5 * 101 = 50.5 -> 51 (to-even: 50), 0.5 * 1 = 0.5 -> 1, 1.5 * 171 =
    256.5 -> clamp 255 (rounding first would give 257 -> wraps or clamps the same: 255)."""
    img = np.array([[[101, 1, 171]]], np.uint8)
    np.testing.assert_array_equal(brightness_contrast_numpy(img[None], [0.5], [1.0])[0],
                                  [[[51, 1, 86]]])  # 85.5 -> 86
    np.testing.assert_array_equal(brightness_contrast_numpy(img[None], [1.5], [1.0])[0],
                                  [[[152, 2, 255]]])  # 151.5 -> 152, 1.5 -> 2


# ---------------------------------------------------------------------------------- fused region
def test_clamp_of_rect_takes_centres_in_half_open_rect():
    """Columns whose centre j + 0.5 lies in [x_lo, x_hi): x [2.5, 5.5) -> 2..4 (centre 2.5 in,
    5.5 out); y [0.7, 3.2) -> 1..2 (floor would take row 0)."""
    np.testing.assert_array_equal(G.clamp_of_rect([[2.5, 5.5, 0.7, 3.2]], [[10, 10]]),
                                  [[2, 4, 1, 2]])


# ---------------------------------------------------------------------------------- readers
def test_validate_boxes_edges():
    """Bad: zero width (x1 == x0), starting at the right edge (x0 == W), ending at the left edge
    (x1 == 0). A box moved by exactly the tolerance (1e-3 px) is not counted as clipped."""
    from readers._common import validate_boxes

    boxes = [[3, 1, 3, 5], [10, 1, 12, 5], [-2, 1, 0, 5], [0, 0, 10, 10], [-0.001, 0, 5, 5],
             [-0.002, 0, 5, 5]]
    clipped, bad, moved = validate_boxes(boxes, 10, 10)
    assert bad.tolist() == [True, True, True, False, False, False]
    assert moved == 1
    np.testing.assert_array_equal(clipped[3:], [[0, 0, 10, 10], [0, 0, 5, 5], [0, 0, 5, 5]])


def test_voc_integer_boxes_round_and_keep_a_pixel():
    """Writer inverse of VOC's [xmin - 1, ymin - 1, xmax, ymax]: x0 = min(rint(x0), W - 1),
    x1 = max(rint(x1), x0 + 1). [2.6, 0.4, 3.4, 5.6] -> x 3..max(3, 4) = 4, y 0..6 -> VOC
    [4, 1, 4, 6] (widened); [9.6, 0, 10, 5] on W 10 -> x0 = min(10, 9) = 9 -> [10, 1, 10, 5]."""
    from readers.writers import voc_integer_boxes

    got, widened = voc_integer_boxes([[2.6, 0.4, 3.4, 5.6], [9.6, 0, 10, 5], [1, 1, 4, 4]], 10, 10)
    np.testing.assert_array_equal(got, [[4, 1, 4, 6], [10, 1, 10, 5], [2, 2, 4, 4]])
    assert widened == 2


def test_sixteen_bit_samples_round_half_up():
    """v * 255 / 65535 = v / 257: 128 -> 0.498 -> 0, 129 -> 0.502 -> 1, 385 -> 1.498 -> 1,
    386 -> 1.502 -> 2, 65535 -> 255."""
    from detaug.ops.decode import _to_8bit

    got = _to_8bit(np.array([0, 128, 129, 385, 386, 65535], np.uint16))
    np.testing.assert_array_equal(got, [0, 0, 1, 1, 2, 255])


def test_coco_size_threshold_keeps_boxes_of_exactly_that_size(tmp_path):
    """size_threshold=2 drops w < 2 or h < 2: a 2 x 2 box stays, 1.99 x 5 goes."""
    from readers import read_coco
    from helpers.reader_files import ann, image, write_coco

    anns = [ann(1, 1, [5, 5, 2, 2]), ann(2, 1, [7, 7, 1.99, 5]), ann(3, 1, [1, 1, 5, 1.99])]
    ds = read_coco(*write_coco(tmp_path, [image(1)], anns), size_threshold=2)
    assert ds[0].fields["annotation_id"].tolist() == [1]


# ---------------------------------------------------------------------------------- DALI's ops
def test_dali_random_bbox_crop_threshold_and_centre_edges_are_inclusive():
    """DALI's RandomBBoxCrop (relative coordinates): the window [0, 0, 0.5, 0.5] (scaling 0.5,
    anchor 0) and the box [0, 0, 0.5, 0.25] have IoU 0.125 / 0.25 = 0.5 exactly: accepted at
    threshold 0.5. A box is kept when its centre lies in the window, edges included (DALI's
    rule; torchvision's is strict): centres at x = 0.5 and x = 0 are kept, at 0.55 not."""
    from detaug.dali.ops import bbox_crop_one

    u = np.array([0.0, 0.0, 0.0, 0.0, 0.0, 0.0])  # option, then (w, h, order, x, y)
    boxes = np.array([[0, 0, 0.5, 0.25], [0.25, 0, 0.75, 0.5], [-0.1, 0, 0.1, 0.2],
                      [0.3, 0, 0.8, 0.2]])
    got = bbox_crop_one(u, boxes, [0.5], (0.5, 0.5), (0.5, 2.0), 1, False, "iou")
    assert got is not None
    np.testing.assert_array_equal(got[0], [0, 0, 0.5, 0.5])
    np.testing.assert_array_equal(got[1], [True, True, True, False])


def test_dali_random_bbox_crop_prune_threshold_is_inclusive_and_needs_overlap():
    """bbox_prune_threshold 0.5: [0.25, 0, 0.75, 0.5] overlaps the window by 0.125 of its 0.25:
    kept; a box only touching the window (overlap 0) is never kept, even at threshold 0."""
    from detaug.dali.ops import bbox_crop_one

    u = np.zeros(6)
    boxes = np.array([[0.25, 0, 0.75, 0.5], [0.5, 0, 0.7, 0.2], [0.0, 0.0, 0.2, 0.2]])
    _, keep = bbox_crop_one(u, boxes, [0.0], (0.5, 0.5), (0.5, 2.0), 1, False, "iou", prune=0.5)
    np.testing.assert_array_equal(keep, [True, False, True])
    _, keep = bbox_crop_one(u, boxes, [0.0], (0.5, 0.5), (0.5, 2.0), 1, False, "iou", prune=0.0)
    np.testing.assert_array_equal(keep, [True, False, True])


def test_dali_slice_rounds_halves_away_and_may_end_on_the_edge():
    """Normalised anchor 0.25 and shape 0.5 of a 10-wide image: start round(2.5) = 3, end
    round(7.5) = 8 (halves away from zero: NumPy's to-even gives 2 and 8); a window ending exactly
    at the image's edge is inside (out_of_bounds_policy='error' does not raise)."""
    from detaug.dali.ops import SLICE_ARGS, slice_windows

    class Op:
        name = "slice"

    win = slice_windows(Op, np.array([[10, 10]]), [[0.25, 0.25]], [[0.5, 0.5]], SLICE_ARGS)
    np.testing.assert_array_equal(win, [[3, 3, 8, 8]])
    win = slice_windows(Op, np.array([[10, 10]]), [[0.5, 0.0]], [[0.5, 1.0]], SLICE_ARGS)
    np.testing.assert_array_equal(win, [[5, 0, 10, 10]])


def test_dali_paste_truncates_canvas_and_offset():
    """DALI's paste: canvas int(1.26 * 10) = 12 (round: 13), image at int(0.75 * (12 - 10)) =
    int(1.5) = 1 (round: 2)."""
    img = np.full((10, 10, 3), 200, np.uint8)
    out_img, out_b = run_graph([img], [[[0, 0, 10, 10]]],
                               lambda i, b: fn.paste(i, b, ratio=1.26, paste_x=0.75, paste_y=0.0))
    got = images_of(out_img)[0]
    assert got.shape == (12, 12, 3)
    np.testing.assert_array_equal(boxes_of(out_b)[0]["boxes"], [[1, 0, 11, 10]])
    assert (got[:10, 1:11] == 200).all() and (got[:, 0] == 0).all() and (got[:, 11] == 0).all()
