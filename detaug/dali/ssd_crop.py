"""DALI's older ``ops.SSDRandomCrop`` (``fn.ssd_random_crop``): SSD's crop of images with their
normalised ltrb boxes and labels, MLPerf's sampling: one of seven options with equal chance (no
crop, a minimum IoU of 0.1, 0.3, 0.5, 0.7 or 0.9 with every box, or any window), then up to
``num_attempts`` windows of relative extents U(0.3, 1) with 0.5 <= w / h <= 2, placed uniformly;
a window is taken when every box meets the option's IoU and some box has its centre inside it.
The boxes whose centres are inside are kept, clipped to the window and renormalised. It is
``fn.random_bbox_crop(thresholds=(0, 0.1, 0.3, 0.5, 0.7, 0.9), allow_no_crop=True,
aspect_ratio=(0.5, 2), scaling=(0.3, 1), ltrb=True)`` followed by ``fn.slice`` of the images
(DALI's rounding), in one op. Draws come from detaug's keyed streams. Host only ('cpu').
"""
from __future__ import annotations

from ..core.batch import ImageBatch
from ..ops.registry import register
from .ops import SLICE_ARGS, _slice_images, random_bbox_crop
from ..graph import arg_check as AC

SSD_CROP = {"thresholds": (0.0, 0.1, 0.3, 0.5, 0.7, 0.9), "allow_no_crop": True,
            "aspect_ratio": (0.5, 2.0), "scaling": (0.3, 1.0), "total_num_attempts": -1,
            "all_boxes_above_threshold": True, "threshold_type": "iou", "bbox_layout": None,
            "ltrb": True, "output_bbox_indices": False, "crop_shape": None, "input_shape": None,
            "shape_layout": None, "bbox_prune_threshold": None}


AC.declare_ranges("ssd_random_crop", num_attempts=AC.count(1, 10**6))
@register("ssd_random_crop", devices=("cpu",), inputs=(3, 3), outputs=3, kind="other",
          input_names=("images", "bboxes", "labels"), args={"num_attempts": 1},
          arg_docs={"num_attempts": "windows tried per sampled option before another option "
                                    "is drawn"},
          output_spec="(images cropped (uint8 HWC), boxes per sample (n, 4) float32 ltrb "
                      "relative to the crop, labels per sample)",
          doc="DALI's older SSDRandomCrop: SSD's (MLPerf's) random IoU crop of images with their "
              "normalised ltrb boxes and labels")
def ssd_random_crop(ctx, op, inputs, args):
    images, boxes, labels = inputs
    if not isinstance(images, ImageBatch):
        raise TypeError(f"{op.name}: its first input is images, got {type(images).__name__}")
    n = int(args["num_attempts"])
    if n < 1:
        raise ValueError(f"{op.name}: num_attempts must be >= 1, got {n}")
    anchor, shape, out_boxes, out_labels = random_bbox_crop(
        ctx, op, [boxes, labels], {**SSD_CROP, "num_attempts": n})
    cropped = _slice_images(ctx, op, images, anchor, shape,
                            {**SLICE_ARGS, "out_of_bounds_policy": "trim_to_shape"})
    return cropped, out_boxes, out_labels
