"""The op argument cases of tests/ops/test_op_args.py, also run by tests/ops/test_op_contract.py:
fixed inputs, a runner per kind of op input, and for every op of the registry its base
arguments and the changes each declared argument is tried with; comparing two runs' outputs."""
from __future__ import annotations

import io
import warnings

import numpy as np
from PIL import Image

from detaug import Pipeline, fn
from detaug.core.batch import BoxBatch, EncodedBatch, ImageBatch, PaddedBoxes
from detaug import types

from helpers import track


RNG = np.random.default_rng(1234)
IMAGES = [RNG.integers(0, 256, (40, 60, 3), dtype=np.uint8), RNG.integers(0, 256, (50, 30, 3), dtype=np.uint8)]
BOXES = [np.array([[5, 5, 40, 30], [30, 10, 58, 38]], np.float32),
         np.array([[2, 3, 20, 45], [10, 20, 29, 49]], np.float32)]
LABELS = [np.array([0, 1]), np.array([2, 0])]
REL = [np.array([[0.1, 0.2, 0.5, 0.6], [0.4, 0.1, 0.9, 0.7]], np.float32),
       np.array([[0.05, 0.05, 0.3, 0.9], [0.5, 0.5, 0.95, 0.95]], np.float32)]


class With:
    """A changed value that needs other arguments set in both runs (``context``); ``before``:
    the value of the first run where the default cannot run alone (resize's resize_shorter
    without size)."""

    def __init__(self, value, before=None, **context):
        self.value, self.before, self.context = value, before, context


def _jpeg(img):
    buf = io.BytesIO()
    Image.fromarray(img).save(buf, format="JPEG", quality=90)
    return np.frombuffer(buf.getvalue(), np.uint8)


def feed_pipe(cols, graph_fn, batch_size, seed=0):
    """A pipeline running ``graph_fn(*sources)`` on per-sample columns ``cols`` (a sized
    per-sample source: sample k has sample index k), ``batch_size`` samples a batch."""
    def src(info):
        return tuple(c[info.idx_in_epoch] for c in cols)

    pipe = track(Pipeline(batch_size=batch_size, num_threads=1, seed=seed))
    with pipe:
        ins = fn.external_source(source=src, batch=False, num_outputs=len(cols), size=len(cols[0]))
        ins = ins if isinstance(ins, tuple) else (ins,)
        out = graph_fn(*ins)
        pipe.set_outputs(*(out if isinstance(out, tuple) else (out,)))
    return pipe


def _feed(cols, graph_fn, seed=0, batch_size=None):
    """Run ``graph_fn(*sources)`` once on per-sample columns ``cols`` (one batch of them all, or
    the first of ``batch_size``); the outputs."""
    return feed_pipe(cols, graph_fn, batch_size or len(cols[0]), seed).run()


def _box_dicts():
    return [{"boxes": b, "labels": lab} for b, lab in zip(BOXES, LABELS)]


# input kinds: how an op is fed and called
def _images_boxes(op, args):
    return _feed([IMAGES, _box_dicts()], lambda i, b: op(i, b, **args))


def _images_boxes_batch_of_two(op, args):
    """Four samples (the images and their mirror images) in batches of two: the first batch."""
    cols = [IMAGES + [i[:, ::-1].copy() for i in IMAGES], _box_dicts() * 2]
    return _feed(cols, lambda i, b: op(i, b, **args), batch_size=2)


def _images(op, args):
    return _feed([IMAGES], lambda i: op(i, **args))


def _boxes(op, args):
    return _feed([IMAGES, _box_dicts()], lambda i, b: op(b, **args))


def _moved_boxes(op, args):
    """Boxes that a translation pushed partly off the canvas."""
    return _feed([IMAGES, _box_dicts()], lambda i, b: op(fn.affine(i, b, translate_x=25.0)[1], **args))


def _letterboxed_boxes(op, args):
    return _feed([IMAGES, _box_dicts()], lambda i, b: op(fn.letterbox(i, b, size=(64, 64))[1], **args))


def _rel_boxes(op, args):
    return _feed([REL], lambda b: op(b, **args))


def _rel_boxes_labels(op, args):
    return _feed([REL, [np.array([1, 2], np.int32)] * 2], lambda b, lab: op(b, lab, **args))


def _encoded(op, args):
    return _feed([[_jpeg(a) for a in IMAGES]], lambda e: op(e, **args))


WINDOW = ([np.array([0.1, 0.2], np.float32)] * 2, [np.array([0.5, 0.6], np.float32)] * 2)
OUTSIDE = ([np.array([0.7, 0.6], np.float32)] * 2, [np.array([0.5, 0.6], np.float32)] * 2)


def _images_outside(op, args):
    return _feed([IMAGES, *OUTSIDE], lambda i, a, s: op(i, a, s, **args))


def _encoded_outside(op, args):
    return _feed([[_jpeg(a) for a in IMAGES], *OUTSIDE], lambda e, a, s: op(e, a, s, **args))


def _images_window(op, args):
    return _feed([IMAGES, *WINDOW], lambda i, a, s: op(i, a, s, **args))


def _encoded_window(op, args):
    return _feed([[_jpeg(a) for a in IMAGES], *WINDOW], lambda e, a, s: op(e, a, s, **args))


def _ragged(op, args):
    return _feed([[np.arange(6, dtype=np.float32).reshape(2, 3), np.ones((1, 2), np.float32)]],
                 lambda x: op(x, **args))


def _random(op, args):
    return _feed([IMAGES], lambda i: (i, op(**args)))[1:]


def _external(op, args):
    return _feed([IMAGES], lambda i: i)  # replaced in the test: the op is the source


# DALI's tensor ops: points, matrices, two inputs, transforms after a rotation
POINTS = [np.array([[0.1, 0.2], [0.5, 0.9], [0.3, 0.3]], np.float32),
          np.array([[0.7, 0.4], [0.2, 0.6], [0.9, 0.1]], np.float32)]
ANCHORS = [0.0, 0.0, 0.5, 0.5, 0.5, 0.0, 1.0, 0.5, 0.0, 0.5, 0.5, 1.0, 0.5, 0.5, 1.0, 1.0,
           0.2, 0.2, 0.8, 0.8]


def _points(op, args):
    return _feed([POINTS], lambda p: op(p, **args))


def _matrix(op, args):
    return _feed([[np.arange(8, dtype=np.float32).reshape(2, 4)] * 2], lambda m: op(m, **args))


def _two(op, args):
    return _feed([POINTS], lambda p: op(p, p, **args))


def _after_rotation(op, args):
    return _feed([IMAGES], lambda i: (i, op(fn.transforms.rotation(angle=30.0), **args)))[1:]


def _after_translation(op, args):
    return _feed([IMAGES], lambda i: (i, op(fn.transforms.translation(offset=(1.0, 2.0)),
                                            **args)))[1:]


def _two_transforms(op, args):
    return _feed([IMAGES], lambda i: (i, op(fn.transforms.rotation(angle=30.0),
                                            fn.transforms.translation(offset=(1.0, 2.0)),
                                            **args)))[1:]


def _positive(op, args):
    return _feed([[np.abs(p) + 0.1 for p in POINTS]], lambda p: op(p, **args))


def _positive_two(op, args):
    return _feed([[np.abs(p) + 0.1 for p in POINTS]], lambda p: op(p, p * 0.5, **args))


def _clamped(op, args):
    return _feed([POINTS], lambda p: op(p, 0.2, 0.6, **args))


def _images_rel_boxes_labels(op, args):
    return _feed([IMAGES, REL, [np.array([1, 2], np.int32)] * 2],
                 lambda i, b, lab: op(i, b, lab, **args))


def _rel_boxes_int_labels(op, args):
    return _feed([REL, [np.array([1, 2], np.int32)] * 2], lambda b, lab: op(b, lab, **args))


def _masks(op, args):
    """Mask ids [2] of polygons [[0, 0, 3], [2, 3, 6]] (reindexing makes the id 0)."""
    polys = [np.array([[0, 0, 3], [2, 3, 6]], np.int32)] * 2
    verts = [np.arange(12, dtype=np.float32).reshape(6, 2)] * 2
    return _feed([[np.array([2], np.int32)] * 2, polys, verts],
                 lambda i, p, v: op(i, p, v, **args))


def _polygon_boxes(op, args):
    """The boxes with one polygon each (dense rows: core/instances.py dense_polygons)."""
    polys = [np.array([[[6, 6], [38, 8], [20, 29], [np.nan, np.nan]],
                       [[31, 11], [57, 12], [44, 37], [np.nan, np.nan]]])] * 2
    dicts = [dict(d, polygons=p) for d, p in zip(_box_dicts(), polys)]
    return _feed([IMAGES, dicts], lambda i, b: op(fn.flip(i, b, horizontal=1)[1], **args))


# thresholds that a first attempt often misses
HARD = {"thresholds": (0.3, 0.5, 0.7), "scaling": (0.2, 0.6), "allow_no_crop": False}

# perspective's given corners (torchvision's: the image's, to a keystone)
PERSP_START, PERSP_END = ((0, 0), (60, 0), (60, 40), (0, 40)), ((4, 3), (50, 1), (60, 40), (2, 33))

# op -> (how to run it, base arguments, {argument: changed value or With(value, **context)})
CASES = {
    "flip": (_images_boxes, {}, {"horizontal": 0, "vertical": 1}),
    "affine": (_images_boxes, {}, {
        "rotate": 30.0, "scale": 1.5, "scale_y": 0.5, "translate_x": 5.0, "translate_y": -5.0,
        "shear_x": 10.0, "shear_y": 10.0, "fill": With(200.0, rotate=30.0),
        "box_mode": With("ellipse", rotate=30.0), "perspective_x": 0.005, "perspective_y": 0.005,
        "antialias": With(False, scale=0.4)}),
    "crop": (_images_boxes, {}, {
        "crop": (20, 20), "crop_h": With(15, crop_w=20), "crop_w": With(10, crop_h=20),
        "crop_pos_x": With(0.0, crop=(20, 20)), "crop_pos_y": With(0.0, crop=(20, 20)),
        "window": (0, 0, 20, 20), "fill": With(99.0, window=(-5, -5, 20, 20))}),
    "resize": (_images_boxes, {"size": (20, 20)}, {
        "size": (10, 16), "resize_shorter": With(12, before=24, size=None),
        "resize_longer": With(24, before=12, size=None), "resize_x": With(16, size=None, resize_y=10),
        "resize_y": With(16, size=None, resize_x=10), "max_size": With(40, size=None, resize_shorter=36),
        "keep_aspect": True, "antialias": False, "interp_type": types.INTERP_NN,
        "min_filter": types.INTERP_CUBIC, "mag_filter": With(types.INTERP_CUBIC, size=(80, 80)),
        "mode": "not_larger", "subpixel_scale": With(True, size=None, resize_shorter=13)}),
    "letterbox": (_images_boxes, {"size": (32, 32)}, {"size": (24, 40), "fill": 0.0, "center": False}),
    "rotate": (_images_boxes, {"angle": 30.0}, {
        "angle": 45.0, "expand": True, "fill": 7.0, "box_mode": "ellipse",
        "keep_size": With(True, fill_value=0.0), "fill_value": 9.0,
        "size": With((20, 20), fill_value=0.0), "interp_type": types.INTERP_NN}),
    "zoom_out": (_images_boxes, {"probability": 1.0}, {
        "ratio": (2.0, 3.0), "probability": 0.0, "fill": 50.0}),
    "paste": (_images_boxes, {"ratio": 2.0}, {
        "ratio": 3.0, "paste_x": 0.0, "paste_y": 1.0, "fill_value": 33.0,
        "min_canvas_size": 200.0}),
    "random_iou_crop": (_images_boxes, {}, {
        "thresholds": (0.9,), "allow_no_crop": With(False, thresholds=(0.3,)),
        "scaling": (0.1, 0.2), "aspect_ratio": (1.9, 2.0),
        "num_attempts": With(1, thresholds=(0.5,), allow_no_crop=False)}),
    "random_resized_crop": (_images_boxes, {"size": (16, 16)}, {
        "size": (20, 10), "random_area": (0.2, 0.3), "random_aspect_ratio": (0.5, 0.6),
        "num_attempts": 1, "antialias": False}),
    "perspective": (_images_boxes, {}, {
        "startpoints": With(((1, 2), (55, 0), (60, 40), (0, 35)), before=PERSP_START, endpoints=PERSP_END),
        "endpoints": With(((1, 2), (55, 0), (60, 40), (0, 35)), before=PERSP_END, startpoints=PERSP_START),
        "distortion_scale": With(0.9, p=1.0), "p": With(0.0, before=1.0), "fill": With(200.0, p=1.0),
        "antialias": With(False, p=1.0, distortion_scale=0.9)}),
    "scale_jitter": (_images_boxes, {"size": (32, 32)}, {
        "size": (24, 40), "scale_range": (0.5, 0.6), "crop": False,
        "pad": With(False, scale_range=(0.3, 0.4)), "fill": With(0.0, scale_range=(0.3, 0.4)),
        "rounding": With("trunc", size=(31, 31), scale_range=(1.0, 1.0)),  # 40x60: 20.67 -> 21 / 20
        "antialias": With(False, scale_range=(0.3, 0.4))}),
    "random_shortest_size": (_images_boxes, {"min_size": 20}, {
        "min_size": 30, "max_size": 25, "rounding": With("round", min_size=25),  # 37.5 -> 38 / 37
        "antialias": False}),
    "warp_affine": (_images_boxes, {"matrix": (1, 0.1, 2, 0, 1, 1), "fill_value": 0.0}, {
        "matrix": (1, 0, -3, 0, 1, 2), "size": (30, 30), "fill_value": 50.0,
        "interp_type": With(types.INTERP_TRIANGULAR, matrix=(2, 0, 0, 0, 2, 0)),
        "inverse_map": False, "dtype": types.FLOAT}),
    "materialize": (_images_boxes, {}, {}),
    "mosaic": (_images_boxes_batch_of_two, {"size": 32}, {
        "size": 24, "probability": 0.0, "fill": 0.0, "resize": False, "antialias": False,
        "min_size": 12.0, "min_area": 300.0, "min_visibility": 0.9, "partners": "batch",
        "pool_batches": -1}),  # its effect: tests/runtime/test_partner_pool.py
    "mixup": (_images_boxes_batch_of_two, {}, {"probability": 0.0, "alpha": 0.5, "beta": 4.0,
                                  "fill": With(0.0, partners="batch"), "weight_field": "w",
                                  "partners": "batch", "pool_batches": -1}),
    "brightness_contrast": (_images, {}, {"brightness": 1.5, "contrast": 0.5,
                                          "contrast_center": With(0.0, contrast=0.5)}),
    "hsv": (_images, {}, {"hue": 40.0, "saturation": 0.5, "value": 0.5}),
    "photometric_distort": (_images, {"p": 1.0}, {
        "brightness": (1.2, 1.3), "contrast": (0.2, 0.3), "saturation": (0.1, 0.2),
        "hue": (0.2, 0.3), "p": 0.0}),
    "grayscale": (_images, {}, {"p": 0.0, "num_output_channels": 1}),
    "color_twist": (_images, {}, {"brightness": 0.5, "contrast": 0.5, "saturation": 0.5,
                                  "hue": 30.0, "dtype": types.FLOAT, "image_type": types.BGR}),
    "brightness": (_images, {}, {"brightness": 0.5, "brightness_shift": 0.1, "dtype": types.FLOAT}),
    "contrast": (_images, {}, {"contrast": 0.5, "contrast_center": With(20.0, contrast=0.5),
                               "dtype": types.FLOAT}),
    "saturation": (_images, {}, {"saturation": 0.5, "dtype": types.FLOAT, "image_type": types.BGR}),
    "hue": (_images, {}, {"hue": 30.0, "dtype": types.FLOAT, "image_type": types.BGR}),
    "normalize": (_images, {}, {
        "mean": 10.0, "std": 3.0, "output_layout": "CHW", "dtype": "float16", "stddev": 3.0,
        "axes": (2,), "axis_names": "C", "batch": True, "scale": 2.0, "shift": 1.0,
        "epsilon": 100.0, "ddof": 1}),
    "crop_mirror_normalize": (_images_boxes, {}, {
        "crop": (20, 20), "crop_h": With(15, crop_w=20), "crop_w": With(10, crop_h=20),
        "crop_pos_x": With(0.0, crop=(20, 20)), "crop_pos_y": With(0.0, crop=(20, 20)),
        "mirror": 1, "mean": 10.0, "std": 3.0, "output_layout": "HWC", "dtype": "float16",
        "fill": With(5.0, crop=(60, 70)), "output_dtype": types.FLOAT16,
        "scale": 2.0, "shift": 1.0, "pad_output": True,
        "fill_values": With(5.0, crop=(60, 70)), "out_of_bounds_policy": "trim_to_shape"}),
    "prune_boxes": (_moved_boxes, {}, {"clip": False, "min_size": 20.0, "min_area": 600.0,
                                 "min_visibility": 0.9}),
    "clip_boxes": (_moved_boxes, {}, {}),
    "box_convert": (_boxes, {}, {"fmt": "xywh", "normalized": True}),
    "pad_boxes": (_boxes, {}, {"max_boxes": 5, "fill": With(-1.0, max_boxes=4)}),
    "instance_masks": (_polygon_boxes, {}, {"pixelwise": True}),
    "retinanet_encode": (_letterboxed_boxes, {"num_classes": 3}, {
        "num_classes": 4, "sizes": (16, 32, 64, 128, 256), "strides": (4, 8, 16, 32, 64),
        "ratios": (1.0,), "scales": (1.0,), "positive_overlap": 0.3, "negative_overlap": 0.2,
        "force_match": With(True, positive_overlap=0.9), "std": 0.1, "ignore_padding": False}),
    "bb_flip": (_rel_boxes, {}, {"horizontal": 0, "vertical": 1, "ltrb": True}),
    "bbox_paste": (_rel_boxes, {"ratio": 2.0}, {"ratio": 3.0, "paste_x": 0.0, "paste_y": 1.0,
                                                "ltrb": True}),
    "random_bbox_crop": (_rel_boxes_labels, {"scaling": (0.3, 1.0)}, {
        "thresholds": (0.9,), "allow_no_crop": False, "aspect_ratio": (0.5, 2.0),
        "scaling": (0.1, 0.3), "num_attempts": With(5, **HARD),
        "total_num_attempts": With(1, **HARD), "all_boxes_above_threshold": With(False, **HARD),
        "threshold_type": With("overlap", thresholds=(0.5,)),
        "bbox_layout": "xyWH", "ltrb": False, "output_bbox_indices": True,
        "crop_shape": With((10, 10), before=(20, 20), input_shape=(20, 20), scaling=(1.0, 1.0)),
        "input_shape": With((40, 40), before=(20, 20), crop_shape=(10, 10), scaling=(1.0, 1.0)),
        "shape_layout": With("HW", crop_shape=(10, 20), input_shape=(20, 40), scaling=(1.0, 1.0)),
        "bbox_prune_threshold": With(0.9, **HARD)}),
    "slice": (_images_window, {}, {
        "axes": (0, 1), "axis_names": "HW", "normalized_anchor": False, "normalized_shape": False}),
    "slice@outside": (_images_outside, {"out_of_bounds_policy": "trim_to_shape"}, {
        "out_of_bounds_policy": "pad", "fill_values": With(7.0, out_of_bounds_policy="pad")}),
    "decoders.image_slice": (_encoded_window, {}, {
        "output_type": types.GRAY, "axes": (0, 1), "axis_names": "HW", "normalized_anchor": False,
        "normalized_shape": False, "adjust_orientation": True, "dtype": types.FLOAT}),
    "decoders.image_slice@outside": (_encoded_outside, {"out_of_bounds_policy": "trim_to_shape"}, {
        "out_of_bounds_policy": "pad", "fill_values": With(7.0, out_of_bounds_policy="pad")}),
    "decoders.image": (_encoded, {}, {"output_type": types.GRAY, "adjust_orientation": True,
                                      "dtype": types.FLOAT, "reduce": 2}),
    "decoders.image_random_crop": (_encoded, {}, {
        "output_type": types.GRAY, "random_area": (0.5, 0.6), "random_aspect_ratio": (0.5, 0.6),
        "num_attempts": 1, "adjust_orientation": True, "dtype": types.FLOAT}),
    "cast": (_images, {"dtype": types.FLOAT}, {"dtype": types.INT32}),
    "transpose": (_images, {"perm": (0, 1, 2)}, {"perm": (2, 0, 1),
                                                 "transpose_layout": With(False, perm=(2, 0, 1)),
                                                 "output_layout": "CHW"}),
    "pad": (_ragged, {}, {"fill_value": 5.0, "axes": (0,), "axis_names": "H", "shape": (3, 4),
                          "align": 4}),
    "gaussian_blur": (_images, {"sigma": 1.0}, {
        "sigma": 2.0, "window_size": 5, "kernel_size": With((5, 1), before=(1, 5), sigma=None),
        "sigma_range": With((2.0, 3.0), sigma=None, window_size=7), "probability": 0.0}),
    "noise": (_images, {}, {
        "mode": "salt_and_pepper", "mean": 5.0, "std": (1.0, 30.0),
        "amount": With(0.3, mode="salt_and_pepper"),
        "salt_vs_pepper": With(0.9, mode="salt_and_pepper"), "per_channel": False,
        "probability": 0.0}),
    "noise.gaussian": (_images, {}, {"mean": 5.0, "stddev": 9.0}),
    "noise.salt_and_pepper": (_images, {}, {"prob": 0.5, "salt_vs_pepper": 0.9, "salt_val": 200.0,
                                            "pepper_val": 30.0, "per_channel": True}),
    "noise.shot": (_images, {}, {"factor": 5.0}),
    "jitter": (_images, {}, {"nDegree": 5, "fill_value": With(99.0, nDegree=9), "mask": 0,
                             "interp_type": types.INTERP_LINEAR}),
    "water": (_images, {}, {"ampl_x": 3.0, "ampl_y": 3.0, "freq_x": 0.3, "freq_y": 0.3,
                            "phase_x": 1.0, "phase_y": 1.0, "interp_type": types.INTERP_LINEAR,
                            "fill_value": 99.0, "mask": 0}),
    "sphere": (_images, {}, {"interp_type": types.INTERP_LINEAR, "fill_value": 99.0, "mask": 0}),
    "segmentation.select_masks": (_masks, {}, {"reindex_masks": True}),
    "jpeg_compression": (_images, {}, {"quality": (5, 10), "probability": 0.0}),
    "random_erasing": (_images_boxes, {"probability": 1.0, "scale": (0.3, 0.4)}, {
        "probability": 0.0, "scale": (0.1, 0.15), "ratio": (2.0, 3.0), "value": "random",
        "min_visibility": 0.9, "box_policy": With("flag", min_visibility=0.9)}),
    "erase": (_images_boxes, {"anchor": (5, 5), "shape": (20, 20)}, {
        "anchor": (0, 0), "shape": (10, 10), "axis_names": "H", "axes": (1,),
        "fill_value": 99.0, "normalized": With(True, anchor=(0.1, 0.1), shape=(0.5, 0.5)),
        "normalized_anchor": With(True, anchor=(0.1, 0.1)),
        "normalized_shape": With(True, shape=(0.5, 0.5)), "centered_anchor": True,
        "min_visibility": 0.9, "box_policy": With("flag", min_visibility=0.9)}),
    "random.uniform": (_random, {}, {"range": (5.0, 6.0), "values": (1.0, 2.0), "shape": (3,),
                                     "dtype": types.INT32}),
    "random.coin_flip": (_random, {"shape": (16,)}, {"probability": 0.0, "shape": (8,),
                                                     "dtype": types.UINT8}),
    "random.normal": (_random, {}, {"mean": 5.0, "stddev": 3.0, "shape": (3,), "dtype": types.INT32}),
    "random.choice": (_random, {"shape": (16,)}, {"values": 5, "p": (0.0, 1.0), "shape": (8,)}),

    "box_encoder": (_rel_boxes_int_labels, {"anchors": ANCHORS}, {
        "anchors": ANCHORS[:16], "criteria": 0.05, "offset": True,
        "means": With((0.1, 0.0, 0.0, 0.0), offset=True),
        "stds": With((0.5, 0.5, 0.5, 0.5), offset=True)}),
    "coord_transform": (_points, {}, {"M": (2.0, 0.0, 0.0, 1.0), "T": (1.0, 2.0),
                                      "MT": (1.0, 0.0, 1.0, 0.0, 1.0, 1.0), "dtype": types.INT32}),
    "coord_flip": (_points, {}, {"layout": "yx", "flip_x": 0, "flip_y": 1, "flip_z": 1,
                                 "center_x": 0.0, "center_y": With(0.0, flip_y=1),
                                 "center_z": 0.0}),
    "peek_image_shape": (_encoded, {}, {"dtype": types.INT32, "image_type": types.GRAY,
                                        "adjust_orientation": True}),
    "shapes": (_ragged, {}, {"dtype": types.INT32}),
    "cat": (_two, {}, {"axis": 1, "axis_name": "C"}),
    "stack": (_two, {}, {"axis": 1, "axis_name": "C"}),
    "reshape": (_matrix, {"shape": (-1,)}, {
        "shape": (-1, 2), "rel_shape": With((0.5, 2.0), before=(1.0, 1.0), shape=None),
        "src_dims": (1, 0)}),
    "constant": (_random, {"fdata": (1.0, 2.0)}, {
        "fdata": (3.0,), "idata": With((1, 2), before=(3, 4), fdata=None), "shape": (2, 1),
        "dtype": types.FLOAT16}),
    "slice@args": (_images, {"rel_start": (0.1, 0.2), "rel_shape": (0.5, 0.5)}, {
        "rel_start": (0.0, 0.0), "rel_shape": (0.3, 0.3),
        "start": With((2, 3), rel_start=None),
        "end": With((20, 20), before=(10, 10), rel_shape=None, rel_start=None),
        "rel_end": With((0.9, 0.9), before=(0.7, 0.7), rel_shape=None),
        "shape": With((10, 10), before=(5, 5), rel_shape=None, rel_start=None)}),
    "transforms.translation": (_after_rotation, {"offset": (1.0, 2.0)}, {
        "offset": (3.0, 4.0), "reverse_order": True}),
    "transforms.scale": (_after_rotation, {"scale": (2.0, 3.0)}, {
        "scale": (1.0, 4.0), "center": (1.0, 1.0), "ndim": 3, "reverse_order": True}),
    "transforms.rotation": (_after_translation, {"angle": 30.0}, {
        "angle": 45.0, "center": (1.0, 1.0), "axis": (0.0, 0.0, 1.0), "reverse_order": True}),
    "transforms.shear": (_after_rotation, {"shear": (0.1, 0.2)}, {
        "shear": (0.3, 0.0), "angles": With((10.0, 0.0), before=(20.0, 0.0), shear=None),
        "center": (1.0, 1.0), "reverse_order": True}),
    "transforms.crop": (_after_rotation, {}, {
        "from_start": (0.1, 0.1), "from_end": (2.0, 2.0), "to_start": (0.5, 0.5),
        "to_end": (3.0, 3.0), "absolute": With(True, from_start=(1.0, 1.0), from_end=(0.0, 0.0)),
        "reverse_order": With(True, to_start=(0.5, 0.5))}),
    "transforms.combine": (_two_transforms, {}, {"reverse_order": True}),
    "ssd_random_crop": (_images_rel_boxes_labels, {}, {"num_attempts": 3}),
    **{f"math.{n}": (_positive, {}, {}) for n in (
        "abs", "fabs", "sqrt", "rsqrt", "cbrt", "exp", "log", "log2", "log10", "sin", "cos",
        "tan", "asin", "acos", "atan", "sinh", "cosh", "tanh", "floor", "ceil")},
    **{f"math.{n}": (_positive_two, {}, {}) for n in ("min", "max", "pow", "fpow", "atan2")},
    "math.clamp": (_clamped, {}, {}),
    "hsv@dtype": (_images, {}, {"dtype": types.FLOAT}),
    "brightness_contrast@dtype": (_images, {}, {"dtype": types.FLOAT, "brightness_shift": 0.1}),
}

# Arguments a changed value of which needs other data than these fixed inputs; each is tested
# where named.
ELSEWHERE = {
    "file_root": ("readers read a dataset: tests/readers/test_readers_*.py, "
                  "tests/graph/test_pipeline.py"),
    "annotations_file": "tests/readers/test_readers_coco.py", "root": "tests/readers/test_readers_voc.py",
    "split": "tests/readers/test_readers_voc.py", "classes": "tests/readers/test_readers_voc.py",
    "skip_difficult": "tests/readers/test_readers_voc.py", "skip_empty": "tests/readers/test_readers_coco.py",
    "include_iscrowd": "tests/readers/test_readers_coco.py", "size_threshold": "tests/dali/test_dali_compat.py",
    "categories": "tests/readers/test_readers_coco.py", "keep_original_ids": "tests/readers/test_readers_coco.py",
    "on_error": "tests/readers/test_readers_bad_input.py, test_pipeline.py (skip counts)",
    "random_shuffle": "tests/graph/test_pipeline.py (epoch orders)",
    "shuffle_after_epoch": "tests/dali/test_dali_compat.py", "shard_id": "tests/graph/test_pipeline.py",
    "num_shards": "tests/graph/test_pipeline.py", "ltrb": "tests/dali/test_dali_compat.py",
    "ratio": "tests/dali/test_dali_compat.py", "image_ids": "tests/dali/test_dali_compat.py",
    "avoid_class_remapping": "tests/dali/test_dali_compat.py",
    "polygon_masks": "tests/dali/test_coco_masks.py", "pixelwise_masks": "tests/dali/test_coco_masks.py",
    "keypoints": "tests/ops/test_instance_shapes_pipeline.py",
    "polygons": "tests/ops/test_instance_shapes_pipeline.py",
    "tight_boxes": "tests/ops/test_instance_shapes_pipeline.py, tests/ops/test_tight_mask_boxes.py",
    "bitmasks": "tests/ops/test_bitmasks_pipeline.py, tests/readers/test_bitmasks_reader.py",
    "pad_last_batch": "tests/dali/test_dali_semantics.py (the shard's last sample repeated)",
    "stick_to_shard": "tests/dali/test_dali_semantics.py (shards move on every epoch)",
    "file_filters": "tests/dali/test_dali_semantics.py", "case_sensitive_filter": "tests/dali/test_dali_semantics.py",
    "file_list": "tests/dali/test_dali_compat.py", "files": "tests/dali/test_dali_compat.py",
    "labels": "tests/dali/test_dali_compat.py", "path": "tests/readers/test_tfrecord_od.py",
    "label_map": "tests/readers/test_tfrecord_od.py", "image_label": "tests/readers/test_tfrecord_od.py",
    "source": "tests/graph/test_random_fed.py", "num_outputs": "tests/graph/test_random_fed.py",
    "batch": "tests/graph/test_random_fed.py", "size": "tests/graph/test_random_fed.py",
    "cycle": "tests/dali/test_dali_compat.py", "layout": "tests/dali/test_dali_compat.py",
    "dtype": "tests/dali/test_dali_compat.py",
    "ndim": "test_external_source_ndim_is_checked below",
    "batch_info": "tests/dali/test_dali_examples.py (BatchInfo of a per-batch callable)",
    "features": "tests/dali/test_dali_examples.py (DALI's TFRecord feature dict)",
}
SOURCES = {"readers.coco", "coco_reader", "readers.voc", "readers.file", "readers.tfrecord",
           "external_source"}


def _flat(v) -> list:
    """The values of one output as plain arrays, to compare two runs."""
    if isinstance(v, ImageBatch):
        return [np.asarray(a) for a in v.data] + [v.layout]
    if isinstance(v, BoxBatch):
        return [a for d in v.per_sample() for k in sorted(d) for a in (k, d[k])] + [v.fmt]
    if isinstance(v, (PaddedBoxes, dict)):
        return [a for k in sorted(v) for a in (k, np.asarray(v[k]))]
    if isinstance(v, EncodedBatch):
        return [np.asarray(a) for a in v.data]
    if isinstance(v, (list, tuple)):
        return [np.asarray(a) for a in v]
    return [np.asarray(v)]


def _same(a, b) -> bool:
    return equal_flat([x for v in a for x in _flat(v)], [x for v in b for x in _flat(v)])


def equal_flat(fa, fb) -> bool:
    """Two lists of flattened values (arrays and strings) are equal: shapes, dtypes and values
    (NaN equal to NaN). Also used by tests/ops/test_op_contract.py."""
    if len(fa) != len(fb):
        return False
    for x, y in zip(fa, fb):
        if isinstance(x, str) or isinstance(y, str):
            if x != y:
                return False
        elif x.shape != y.shape or x.dtype != y.dtype or not np.array_equal(x, y, equal_nan=True):
            return False
    return True


def _run(name, runner, args):
    name = name.split("@")[0]
    op = getattr(fn, name.split(".")[0]) if "." not in name else getattr(
        getattr(fn, name.split(".")[0]), name.split(".")[1])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return runner(op, args)
