"""The type and meaning of every op argument that its ``@register`` declaration does not describe,
for the generated signatures, ``help(fn.<op>)`` and docs/api.md (detaug/ops/registry.py reads
them; tests/ops/test_op_docs.py fails when a public op's argument has no type or no meaning).

An entry is ``"argument": ("type", "meaning")``; a declaration's own ``arg_docs`` (and the 'hint'
text of its hints) wins over the meaning given here. ``SHARED`` holds the arguments that mean the
same in every op that takes them (the readers' sharding and shuffling, mostly).
"""
from __future__ import annotations

RANGE = "(float, float)"

SHARED = {
    "adjust_orientation": ("bool | None", "DALI's EXIF rotation: only False is accepted (boxes "
                                          "refer to the stored pixels); True raises"),
    "stick_to_shard": ("bool | None", "DALI's: False moves an unshuffled reader's shard on by one "
                                      "every epoch (shard_id + epoch; refused where the shards "
                                      "differ in length), True keeps it; None (not given): False "
                                      "where the shards have one length, else the shard stays. A "
                                      "shuffled reader draws a new permutation of the whole "
                                      "dataset every epoch either way. Given (True or False), the "
                                      "reader's shards are DALI's (lengths may differ by one), not "
                                      "evened out by the pipeline's shard_policy"),
    "dtype": ("str | None", "DALI's output type of the draws (e.g. 'int32', 'float32'): values "
                            "rounded half away from zero and clamped to the type's range"),
    "file_filters": ("sequence of str", "DALI: glob patterns of the file names the reader takes "
                                        "(its list of endings by default)"),
    "random_shuffle": ("bool", "shuffle the records every epoch (keyed by seed and epoch: the same "
                               "seed gives the same order)"),
    "shard_id": ("int | None", "this process's shard, 0 <= shard_id < num_shards (None: the "
                               "pipeline's shard_id)"),
    "num_shards": ("int | None", "split the records into this many shards (None: the pipeline's "
                                 "num_shards)"),
    "pad_last_batch": ("bool", "DALI's: True repeats the shard's last record after it, so that "
                               "every shard has the largest shard's length (ceil(records / "
                               "num_shards)), and under last_batch_policy 'fill' fills the last "
                               "batch with it too (instead of wrapping round the shard's order); "
                               "the reader's shards are then DALI's, not evened out by the "
                               "pipeline's shard_policy. False: shard_policy and "
                               "last_batch_policy alone"),
    "shuffle_after_epoch": ("bool", "DALI: reshuffle the whole dataset after each epoch (exclusive "
                                    "with random_shuffle)"),
    "on_error": ("str", "'raise' (stop at the first bad file or annotation, naming it) or 'skip' "
                        "(leave it out, counted in pipe.stats)"),
    "fill": ("float | sequence", "value of the pixels outside the source image (one value or one "
                                 "per channel)"),
    "box_mode": ("str", "how a box follows a rotation or shear: 'corners' (box enclosing the four "
                        "moved corners) or 'ellipse' (box enclosing the inscribed ellipse, tighter)"),
    "shape": ("int | tuple | None", "per-sample output shape: None draws one value per sample, "
                                    "shape=(k,) draws k"),
    "ltrb": ("bool", "box layout: True [left, top, right, bottom], False [x, y, width, height]"),
    "axis_names": ("str | None", "the axes by layout letters, e.g. 'WH' for axes=(1, 0) (DALI)"),
    "out_of_bounds_policy": ("str", "a window reaching outside the image: 'error' raises, 'pad' "
                                    "fills with fill_values, 'trim_to_shape' cuts it to the image"),
    "fill_values": ("float | sequence", "value (or one per channel) of pixels outside the image"),
    "normalized_anchor": ("bool", "the anchor is relative to the image size (True) or in pixels"),
    "normalized_shape": ("bool", "the shape is relative to the image size (True) or in pixels"),
    "antialias": ("bool", "low-pass filter when shrinking (area-averaging as Pillow's / "
                          "torchvision's antialias; DALI's triangle filter where the op is "
                          "DALI's form: images alone); False samples bilinearly"),
    "output_type": ("str", "colour space of the decoded image: 'RGB' (or types.RGB); 'BGR' and "
                           "'GRAY' as DALI's"),
}

ARG_DOCS = {
    # pixel ops (detaug/ops/pixel.py, erase.py): types here, meanings in their declarations
    "gaussian_blur": {
        "sigma": ("float | (float, float) | None", "DALI's sigma, per axis (h, w)"),
        "window_size": ("int | (int, int) | None", "DALI's window, per axis (h, w)"),
        "kernel_size": ("int | (int, int) | None", "torchvision's kernel size (kx, ky)"),
        "sigma_range": ("(float, float) | None", "torchvision's sigma range"),
    },
    "noise": {
        "std": ("float | (float, float)", "standard deviation, or a range drawn per sample"),
        "amount": ("float | (float, float)", "fraction replaced, or a range drawn per sample"),
        "salt_vs_pepper": ("float | (float, float)", "salt share, or a range drawn per sample"),
        "per_channel": ("bool | None", "draw per channel or per pixel"),
    },
    "noise.salt_and_pepper": {
        "salt_val": ("float | None", "salt value"), "pepper_val": ("float | None", "pepper value"),
    },
    "jitter": {"interp_type": ("types.DALIInterpType | None", "INTERP_NN only"),
               "fill_value": ("float | sequence", "fill where the moved pixel is outside")},
    "water": {"interp_type": ("types.DALIInterpType | None", "INTERP_NN (default) or INTERP_LINEAR")},
    "sphere": {"interp_type": ("types.DALIInterpType | None", "INTERP_NN (default) or INTERP_LINEAR")},
    "jpeg_compression": {"quality": ("int | (int, int)", "JPEG quality or a range")},
    "random_erasing": {"value": ("float | sequence | str", "fill value(s) or 'random'")},
    "erase": {
        "anchor": ("sequence of float", "region starts"), "shape": ("sequence of float", "region extents"),
        "axis_names": ("str", "the axes anchor and shape give"),
        "axes": ("sequence of int | None", "the axes by index"),
        "fill_value": ("float | sequence", "fill value(s)"),
    },
    "prune_boxes": {
        "clip": ("bool", "clip boxes to [0, W] x [0, H] before the tests below"),
        "min_size": ("float", "drop boxes whose width or height (pixels, after clipping) is below this"),
        "min_area": ("float", "drop boxes whose area (pixels^2, after clipping) is below this"),
        "min_visibility": ("float", "drop boxes that keep less than this fraction of their area "
                                    "after clipping (0-1)"),
    },
    "box_convert": {
        "fmt": ("str", "'xyxy', 'xywh' (corner and size) or 'cxcywh' (centre and size)"),
        "normalized": ("bool", "divide x by the image width and y by its height (values in [0, 1])"),
    },
    "pad_boxes": {
        "max_boxes": ("int | None", "M, the padded length; None: the batch's largest count (a "
                                    "sample with more keeps its first M and warns)"),
        "fill": ("float", "value of the padded box coordinates (labels and fields pad with -1)"),
    },
    "flip": {
        "horizontal": ("int | bool", "1 mirrors left-right (x -> W - x), 0 leaves it"),
        "vertical": ("int | bool", "1 mirrors top-bottom (y -> H - y), 0 leaves it"),
    },
    "crop": {
        "crop": ("(float, float) | None", "the window's (height, width) in pixels (or crop_h / crop_w)"),
        "crop_h": ("float | None", "the window's height in pixels"),
        "crop_w": ("float | None", "the window's width in pixels"),
        "crop_pos_x": ("float", "horizontal anchor in [0, 1]: x0 = round(pos * (W - crop_w)), pos "
                                "in float32, halves away from zero (DALI's rounding)"),
        "crop_pos_y": ("float", "vertical anchor in [0, 1]: y0 = round(pos * (H - crop_h))"),
        "window": ("(x0, y0, x1, y1) | None", "the window in pixels, rounded (instead of crop and "
                                              "crop_pos_x/y); may reach outside the image"),
    },
    "resize": {
        "size": ("(int, int) | None", "output (height, width); with keep_aspect, the box to fit in"),
        "resize_shorter": ("float | None", "scale so that the shorter side is this long (aspect kept)"),
        "resize_longer": ("float | None", "scale so that the longer side is this long (aspect kept)"),
        "resize_x": ("float | None", "output width (DALI); alone, the height keeps the aspect ratio"),
        "resize_y": ("float | None", "output height (DALI); alone, the width keeps the aspect ratio"),
        "max_size": ("float | None", "cap on the longer side after resize_shorter (torchvision's "
                                     "max_size)"),
        "keep_aspect": ("bool", "with size: scale by the smaller ratio so the image fits inside size"),
        "min_filter": ("types.DALIInterpType | None", "DALI's filter when shrinking (as interp_type)"),
        "mag_filter": ("types.DALIInterpType | None", "DALI's filter when enlarging (as interp_type)"),
        "interp_type": ("types.DALIInterpType | None", ""),
        "mode": ("str", ""),
        "subpixel_scale": ("bool | None", ""),
    },
    "letterbox": {
        "size": ("(int, int)", "output (height, width); the image is scaled to fit inside, aspect kept"),
        "fill": ("float | sequence", "value of the padding pixels (114: YOLO's grey)"),
        "center": ("bool", "centre the image (True) or put it at the top-left corner"),
    },
    "perspective": {  # meanings in the op's declaration (ops/recipes_geometry.py)
        "startpoints": ("sequence | None", ""),
        "endpoints": ("sequence | None", ""),
        "distortion_scale": ("float | None", ""),
        "p": ("float | None", ""),
        "fill": ("float | sequence", "value of the pixels the perspective brings in from outside"),
        "antialias": ("bool", ""),
    },
    "scale_jitter": {
        "size": ("(int, int)", ""), "scale_range": ("(float, float)", ""), "crop": ("bool", ""),
        "pad": ("bool", ""), "fill": ("float | sequence", ""), "rounding": ("str", ""),
        "antialias": ("bool", "supersample where the image shrinks; False: one bilinear sample a "
                              "pixel"),
    },
    "random_shortest_size": {
        "min_size": ("int | sequence of int", ""), "max_size": ("int | None", ""),
        "rounding": ("str", ""),
        "antialias": ("bool", "supersample where the image shrinks; False: one bilinear sample a "
                              "pixel"),
    },
    "warp_affine": {
        "matrix": ("sequence of float | None", ""), "size": ("(int, int) | None", ""),
        "fill_value": ("float | None", ""), "interp_type": ("types.DALIInterpType | None", ""),
        "inverse_map": ("bool", ""), "dtype": ("types.DALIDataType | None", ""),
    },
    "rotate": {
        "angle": ("float", "degrees, counter-clockwise, about the image centre"),
        "expand": ("bool | None", "enlarge the canvas to hold the whole rotated image (rounded "
                                  "outward as torchvision's); False keeps the input size; None "
                                  "(not given): False, with a warning once that DALI enlarges "
                                  "the canvas (keep_size=False, fill_value=0 gives DALI's)"),
        "fill": ("float | sequence", "value of the pixels uncovered by the rotation"),
        "interp_type": ("types.DALIInterpType | None", "DALI's filter (checked as resize's); any "
                                                       "DALI argument switches to DALI's canvas rule"),
        "keep_size": ("bool | None", ""),
        "fill_value": ("float | None", ""),
        "size": ("(int, int) | None", ""),
    },
    "affine": {
        "rotate": ("float", "degrees, counter-clockwise"),
        "scale": ("float", "scale factor (x and y, or x when scale_y is given)"),
        "scale_y": ("float | None", "vertical scale factor (None: the same as scale)"),
        "translate_x": ("float", "shift right, in pixels"),
        "translate_y": ("float", "shift down, in pixels"),
        "shear_x": ("float", "horizontal shear, degrees"),
        "shear_y": ("float", "vertical shear, degrees"),
        "perspective_x": ("float", "Ultralytics' perspective term P[2, 0] (per pixel, about the "
                                   "centre; its RandomPerspective draws it in +-perspective)"),
        "perspective_y": ("float", "Ultralytics' perspective term P[2, 1]"),
        "antialias": ("bool", "supersample where the map shrinks; False: one bilinear sample a "
                              "pixel (Ultralytics' cv2.warpAffine / warpPerspective)"),
    },
    "zoom_out": {
        "ratio": (RANGE, "the canvas is r times the image (each side), r drawn uniformly in this "
                         "range per sample"),
        "probability": ("float", "chance that a sample is zoomed out (otherwise left as it is)"),
        "fill": ("float | sequence", "value of the new canvas around the image"),
    },
    "normalize": {
        "mean": ("float | sequence | None", ""),
        "std": ("float | sequence | None", ""),
        "stddev": ("float | sequence | None", ""),
        "axes": ("tuple | None", ""),
        "batch": ("bool", ""),
        "epsilon": ("float", ""),
        "output_layout": ("str", "'HWC' or 'CHW' (or types.NHWC / types.NCHW)"),
        "dtype": ("str", "'float32' or 'float16' (or types.FLOAT / types.FLOAT16)"),
        "scale": ("float", "multiplies the normalised value (DALI)"),
        "shift": ("float", "added after scale (DALI)"),
        "ddof": ("int", "delta degrees of freedom of the computed standard deviation (DALI)"),
    },
    "crop_mirror_normalize": {
        "crop": ("(float, float) | None", "crop window (height, width) in pixels; None: no crop"),
        "crop_h": ("float | None", "crop window height in pixels"),
        "crop_w": ("float | None", "crop window width in pixels"),
        "crop_pos_y": ("float", "vertical anchor in [0, 1], as crop_pos_x"),
        "mirror": ("int | bool", "1 mirrors the sample left-right (boxes too), 0 leaves it"),
        "mean": ("float | sequence", "subtracted, per channel, in pixel units"),
        "std": ("float | sequence", "divides, per channel, in pixel units"),
        "dtype": ("str", "'float32' or 'float16' (or types.FLOAT / types.FLOAT16)"),
        "fill": ("float | sequence", "value of the pixels of a window reaching outside the image"),
        "scale": ("float", "multiplies (x - mean) / std (DALI)"),
        "shift": ("float", "added after scale (DALI)"),
        "pad_output": ("bool", "DALI's padding to a fourth channel: True is not implemented (raises)"),
        "fill_values": ("float | sequence | None", "DALI's name for fill"),
        "out_of_bounds_policy": ("str | None", "None or 'pad' (detaug fills a window outside the "
                                               "image); DALI's 'error' / 'trim_to_shape' raise"),
        "output_dtype": ("types.DALIDataType | None", ""),
        "output_layout": ("str", ""),
        "crop_pos_x": ("float", ""),
        "image_type": ("types.DALIImageType | None", ""),
    },
    "brightness_contrast": {
        "brightness": ("float", "multiplies the result (1 leaves it)"),
        "contrast": ("float", "stretches values about contrast_center (1 leaves them, 0 gives grey)"),
        "contrast_center": ("float", "the value contrast stretches about, in pixel units"),
    },
    "hsv": {
        "hue": ("float", "hue rotation in degrees"),
        "saturation": ("float", "saturation factor (0 grey, 1 unchanged)"),
        "value": ("float", "brightness factor (1 unchanged)"),
    },
    "contrast": {
        "contrast_center": ("float | None", "the level contrast keeps, in input units; None: the "
                                            "middle of the input's range (128 uint8, 0.5 float)"),
    },
    "random_bbox_crop": {
        "thresholds": ("sequence of float", "minimum overlap; one is drawn per sample (0 and "
                                            "allow_no_crop: any window)"),
        "allow_no_crop": ("bool", "the draw may also be 'no crop' (the whole image)"),
        "aspect_ratio": (RANGE, "range of the window's width / height, in relative units"),
        "scaling": (RANGE, "range of the window's side relative to the image's"),
        "num_attempts": ("int", "windows tried per drawn threshold before drawing again"),
        "total_num_attempts": ("int", "windows tried in all before giving up with no crop "
                                      "(-1: 64 rounds of num_attempts)"),
        "all_boxes_above_threshold": ("bool", "every box must meet the threshold (True) or one "
                                              "box is enough"),
        "threshold_type": ("str", "'iou' or 'overlap' (the part of a box inside the window)"),
        "bbox_layout": ("str | None", "'xyXY' (ltrb) or 'xyWH'; overrides ltrb"),
        "output_bbox_indices": ("bool", "add an output with the indices of the kept boxes"),
        "crop_shape": ("tuple | None", "DALI's absolute-size crop: not implemented (raises)"),
        "input_shape": ("tuple | None", "DALI's absolute-size crop: not implemented (raises)"),
        "shape_layout": ("str | None", "DALI's absolute-size crop: not implemented (raises)"),
        "bbox_prune_threshold": ("float | None", "DALI's pruning: not implemented (raises)"),
    },
    "bb_flip": {
        "horizontal": ("int | bool", "1 mirrors x (x -> 1 - x on normalised boxes), 0 leaves it"),
        "vertical": ("int | bool", "1 mirrors y (y -> 1 - y), 0 leaves it"),
    },
    "bbox_paste": {
        "ratio": ("float", "the canvas's size relative to the image's (>= 1), as given to fn.paste"),
        "paste_x": ("float", "horizontal position of the image on the canvas, in [0, 1]"),
        "paste_y": ("float", "vertical position of the image on the canvas, in [0, 1]"),
    },
    "paste": {
        "ratio": ("float", "the canvas's size relative to the image's (>= 1)"),
        "paste_x": ("float", "horizontal position of the image on the canvas, in [0, 1]"),
        "paste_y": ("float", "vertical position of the image on the canvas, in [0, 1]"),
        "fill_value": ("float | sequence", "value of the canvas around the image"),
        "min_canvas_size": ("float", "smallest side of the canvas, in pixels"),
    },
    "slice": {
        "axes": ("tuple", "the axes anchor and shape refer to, in their order ((1, 0): x then y)"),
    },
    "decoders.image_slice": {
        "axes": ("tuple", "the axes anchor and shape refer to, in their order ((1, 0): x then y)"),
    },
    "cast": {
        "dtype": ("types.DALIDataType | str", "the output element type (types.FLOAT, 'float32', "
                                              "types.UINT8, ...); required"),
    },
    "transpose": {
        "perm": ("sequence of int", "the output's axis k is the input's axis perm[k]; required"),
        "transpose_layout": ("bool", "permute the layout's letters too (False is refused: it "
                                     "would misname the data)"),
        "output_layout": ("str | None", "the output's layout, checked against the permuted one"),
    },
    "pad": {
        "fill_value": ("float", "value of the padding"),
        "axes": ("tuple | None", "axes to pad (None: all); the others must agree across samples"),
        "shape": ("tuple | None", "extent to pad each axis to (-1 or 0: the batch's largest)"),
        "align": ("int | tuple | None", "round each padded extent up to a multiple of this"),
    },
    "random_iou_crop": {
        "thresholds": ("sequence of float", "minimum IoU with some box; one is drawn per sample"),
        "allow_no_crop": ("bool", "the draw may also be 'no crop' (the whole image)"),
        "scaling": (RANGE, "range of the window's width and height relative to the image's"),
        "aspect_ratio": (RANGE, "range of the window's width / height"),
        "num_attempts": ("int", "windows tried per sample; none passing: the image is not cropped"),
    },
    "random_resized_crop": {
        "size": ("(int, int)", "output (height, width); required"),
        "random_area": (RANGE, "range of the window's area relative to the image's"),
        "random_aspect_ratio": (RANGE, "range of the window's width / height"),
        "num_attempts": ("int", "windows tried per sample before the centre crop fallback"),
    },
    "random.uniform": {
        "range": (RANGE, "[lo, hi): the interval drawn from"),
        "values": ("sequence | None", "draw one of these, each equally likely (instead of range)"),
    },
    "random.coin_flip": {
        "probability": ("float", "chance of a 1"),
    },
    "random.normal": {
        "mean": ("float", "the distribution's mean"),
        "stddev": ("float", "the distribution's standard deviation"),
    },
    "random.choice": {
        "values": ("int | sequence", "the candidates, or n for range(n)"),
        "p": ("sequence | None", "their probabilities (None: equal)"),
    },
    "readers.coco": {
        "file_root": ("str", "folder that the annotations' file_name entries are under"),
        "annotations_file": ("str", "COCO instances JSON; required"),
        "skip_empty": ("bool", "leave out images with no boxes (counted)"),
        "include_iscrowd": ("bool", "keep crowd boxes, marked by an 'iscrowd' field (False drops "
                                    "them)"),
        "categories": ("sequence | None", "keep only these categories, by name or id (None: all)"),
        "keep_original_ids": ("bool", "labels are the COCO category ids instead of 0-based indices"),
        "image_ids": ("bool", "DALI: a further output with each image's COCO id"),
        "avoid_class_remapping": ("bool", "DALI: labels are the COCO category ids"),
        "polygon_masks": ("bool", "DALI: two further outputs, polygons (P, 3) int32 [box, first "
                                  "vertex, end vertex) and vertices (V, 2) float32 (divided by "
                                  "the image size with ratio); crowd RLE masks give none"),
        "pixelwise_masks": ("bool", "DALI: a further output, (H, W, 1) int32 of each pixel's "
                                    "label (0: no mask; the highest label where they overlap)"),
        "size_threshold": ("float | None", ""),
        "ltrb": ("bool | None", ""),
        "ratio": ("bool | None", ""),
    },
    "readers.voc": {
        "root": ("str", "the VOC folder (Annotations/, JPEGImages/, ImageSets/Main/); required"),
        "split": ("str", "read the ids of ImageSets/Main/<split>.txt"),
        "classes": ("sequence | str | None", "class names (label i is classes[i]), or the path "
                                             "of a class list file, one name a line (as "
                                             "write_voc's classes.txt; readers.read_voc_classes); "
                                             "None: the 20 VOC classes; 'discover': sorted names "
                                             "found"),
        "skip_difficult": ("bool", "leave out objects marked difficult=1 (counted)"),
    },
    "readers.file": {
        "file_root": ("str | None", "folder of class sub-folders (label = sorted folder index), or "
                                    "the folder file_list / files are relative to"),
        "file_list": ("str | None", "DALI's text file of '<path> <label>' lines"),
        "files": ("sequence | None", "the file paths (with labels=)"),
        "labels": ("sequence | None", "one int label per entry of files (None: 0)"),
    },
    "external_source": {
        "source": ("iterable | callable | None", "an iterable of batches, a callable(sample_info) "
                                                 "giving one sample (batch=False, with size), or "
                                                 "None to feed with pipe.feed_input"),
        "num_outputs": ("int | None", "number of outputs a batch holds (a tuple per batch)"),
        "batch": ("bool", "the source gives whole batches (True) or one sample a call (False)"),
        "size": ("int | None", "samples per epoch (needed by a per-sample callable)"),
        "layout": ("str | None", ""),
        "dtype": ("types.DALIDataType | str | None", ""),
        "ndim": ("int | None", ""),
        "cycle": ("bool | str | None", ""),
    },
    "retinanet_encode": {
        "num_classes": ("int", "number of classes C (one-hot width); required"),
        "sizes": ("sequence of float", "anchor base size per pyramid level (P3-P7)"),
        "strides": ("sequence of int", "anchor stride in pixels per pyramid level"),
        "ratios": ("sequence of float", "anchor aspect ratios (height / width)"),
        "scales": ("sequence of float", "anchor scales per ratio"),
        "positive_overlap": ("float", "IoU at or above which an anchor is an object"),
        "negative_overlap": ("float", "IoU below which an anchor is background (in between: ignored)"),
        "force_match": ("bool", "each box also claims its best anchor (IoU > 0) as positive"),
        "std": ("float | sequence", "divides the corner offsets (one value or four)"),
        "ignore_padding": ("bool", "anchors centred in the padding a letterbox or pad added are "
                                   "ignored (state -1)"),
    },
    "readers.tfrecord": {
        "path": ("str | sequence", ""),
        "label_map": ("dict | str | None", ""),
        "image_label": ("str | None", ""),
        "skip_empty": ("bool", ""),
    },
    "decoders.image": {},
}
# DALI's old name takes readers.coco's arguments, in DALI's mode
ARG_DOCS["coco_reader"] = {
    **ARG_DOCS["readers.coco"],
    "size_threshold": ("float", "drop boxes narrower or lower than this many pixels (DALI's 0.1)"),
    "ltrb": ("bool", "boxes [l, t, r, b] (True) or DALI's default [x, y, w, h] (False)"),
    "ratio": ("bool", "boxes divided by the image's width and height"),
}


def arg_type(op: str, arg: str, default) -> str:
    """The type of argument ``arg`` of op ``op``, in words ('' when nothing says it): the table's,
    else that of a non-None default."""
    entry = ARG_DOCS.get(op, {}).get(arg) or SHARED.get(arg)
    if entry:
        return entry[0]
    if isinstance(default, bool):
        return "bool"
    if isinstance(default, (int, float, str)):
        return type(default).__name__
    if isinstance(default, tuple) and default and all(isinstance(v, (int, float)) for v in default):
        return "sequence of " + ("float" if any(isinstance(v, float) for v in default) else "int")
    return ""


def arg_meaning(op: str, arg: str) -> str:
    """The meaning of argument ``arg`` of op ``op`` from this table ('' when it has none)."""
    entry = ARG_DOCS.get(op, {}).get(arg) or SHARED.get(arg)
    return entry[1] if entry else ""
