"""The benchmark pipeline (``bench_gpu.make_det_pipe``) written for NVIDIA DALI, as the peer of
``bench_startup.py`` (DALI 2.4; DALI is never a dependency of detaug: it travels as a wheel for
the device run only). This module imports nothing but DALI, so that a child process timing its
own start pays for DALI alone.

Per image, as close to detaug's work as DALI's operators allow:

    readers.coco(ltrb=True, ratio=True, random_shuffle=True, skip_empty=False): boxes relative to
       the image (random_bbox_crop refuses pixel boxes: "out of bounds {(0, 0), (1, 1)}")
    -> random_bbox_crop: SSD's window (IoU thresholds 0.1 ... 0.9 or no crop, scaling 0.3-1.0,
       aspect ratio 0.5-2.0 in pixels through input_shape = peek_image_shape, 50 attempts per
       threshold; boxes whose centre leaves the window dropped, as detaug's random_iou_crop)
    -> decoders.image(device="mixed") (nvImageCodec, the whole image, as detaug decodes it)
    -> resize 640x640 of the window (roi_start/roi_end: crop and resize in one kernel, bilinear
       with antialias as detaug's resize)
    -> crop_mirror_normalize(mirror=coin_flip, mean/std of bench_gpu, float32, CHW)
    -> boxes: bb_flip with the same coin, scaled to 640x640 pixels, padded to ``max_boxes``
       (fn.pad), labels padded with -1.

What differs from detaug's pipeline: detaug does crop + flip + resize + normalize in one warp
launch, DALI in two kernels (resize of the window, then crop_mirror_normalize); detaug drops
boxes under 1 px after the resize (prune_boxes(min_size=1)), DALI has no such operator and keeps
them; DALI's crop search stops at the first window that passes (``total_num_attempts`` bounds it
at 50 per threshold like detaug's 50 attempts, then DALI takes its best candidate where detaug
keeps the whole image); DALI's boxes stay on the host (CPU operators), detaug's are part of its
batch; the random draws differ (each engine its own generator). ``roi_decode=True`` uses
``decoders.image_slice`` instead (DALI decodes only the window's part of the JPEG: less work
than detaug does; off by default).
"""
from __future__ import annotations

MEAN = (123.675, 116.28, 103.53)  # = gpu_common.MEAN / STD (not imported: see the docstring)
STD = (58.395, 57.12, 57.375)
SIZE = 640


def make_dali_pipe(root, device="mixed", *, batch_size=64, num_threads=4, device_id=0, seed=0,
                   max_boxes=64, size=SIZE, prefetch_queue_depth=2, roi_decode=False):
    """A DALI pipeline (not built) over the data set at ``root`` (images/, annotations.json).
    ``device``: "mixed" (GPU decode and GPU image ops) or "cpu" (every op on the host, for a
    check of the graph on a machine without a GPU). Outputs: images (batch, 3, size, size)
    float32, boxes (batch, max_boxes, 4) ltrb pixels (zero rows past each sample's count),
    labels (batch, max_boxes) int32 (-1 past the count)."""
    import os

    from nvidia.dali import fn, pipeline_def, types

    if device not in ("mixed", "cpu"):
        raise ValueError(f"make_dali_pipe: device must be 'mixed' or 'cpu', not {device!r}")
    dev = "gpu" if device == "mixed" else "cpu"

    @pipeline_def(batch_size=batch_size, num_threads=num_threads,
                  device_id=device_id if device == "mixed" else None, seed=seed,
                  prefetch_queue_depth=prefetch_queue_depth)
    def dali_det_pipe():
        jpegs, boxes, labels = fn.readers.coco(
            file_root=os.path.join(root, "images"),
            annotations_file=os.path.join(root, "annotations.json"),
            ltrb=True, ratio=True, random_shuffle=True, skip_empty=False, name="Reader")
        hw = fn.peek_image_shape(jpegs, dtype=types.INT32)[0:2]  # (H, W) of each image
        anchor, shape, boxes, labels = fn.random_bbox_crop(
            boxes, labels, input_shape=hw, shape_layout="HW", bbox_layout="xyXY",
            thresholds=[0.1, 0.3, 0.5, 0.7, 0.9], allow_no_crop=True, scaling=[0.3, 1.0],
            aspect_ratio=[0.5, 2.0], num_attempts=50, total_num_attempts=250, quiet=True)
        if roi_decode:  # decode only the window (less work than detaug's whole-image decode)
            images = fn.decoders.image_slice(jpegs, anchor, shape, device=device,
                                             output_type=types.RGB, axis_names="WH",
                                             normalized_anchor=True, normalized_shape=True)
            images = fn.resize(images, resize_x=size, resize_y=size, antialias=True)
        else:
            images = fn.decoders.image(jpegs, device=device, output_type=types.RGB)
            # the window (relative) as the resize's region of interest, in (y, x) order
            start = fn.stack(anchor[1], anchor[0])
            end = fn.stack(anchor[1] + shape[1], anchor[0] + shape[0])
            images = fn.resize(images, resize_x=size, resize_y=size, roi_start=start,
                               roi_end=end, roi_relative=True, antialias=True, device=dev)
        coin = fn.random.coin_flip(probability=0.5)
        images = fn.crop_mirror_normalize(images, mirror=coin, mean=list(MEAN), std=list(STD),
                                          dtype=types.FLOAT, output_layout="CHW", device=dev)
        # boxes: [0, 1] of the window (random_bbox_crop's output) -> flipped -> pixels of the output
        boxes = fn.bb_flip(boxes, ltrb=True, horizontal=coin)
        boxes = fn.pad(boxes * float(size), axes=(0,), shape=(max_boxes,), fill_value=0.0)
        labels = fn.pad(fn.cast(labels, dtype=types.INT32), axes=(0,), shape=(max_boxes,),
                        fill_value=-1)
        return images, boxes, labels

    return dali_det_pipe()
