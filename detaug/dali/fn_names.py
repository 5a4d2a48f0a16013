"""DALI's ``fn`` names (the one table), and what ``fn.<name>`` says when detaug lacks it.

:data:`DALI_FN_NAMES` is the list of operations in DALI's documentation ("nvidia.dali.fn": the
table of all operations, DALI 1.4x, legacy aliases included). What detaug lacks is that table
minus the registry *at run time*, so an op registered later (by any module) leaves the list by
itself; docs/dali.md's list "Not in detaug" is generated from it
(``python -m detaug.cli.dali_docs``; tests/dali/test_dali_port.py checks it is current).
"""
from __future__ import annotations

import re

DOCS = "docs/dali.md#not-in-detaug"

DALI_FN_NAMES = (
    # top level
    "audio_decoder", "audio_resample", "batch_permutation", "bb_flip", "bbox_paste", "bbox_rotate",
    "box_encoder", "brightness", "brightness_contrast", "caffe2_reader", "caffe_reader", "cast",
    "cast_like", "cat", "clahe", "coco_reader", "coin_flip", "color_space_conversion",
    "color_twist", "contrast", "coord_flip", "coord_transform", "copy", "crop",
    "crop_mirror_normalize", "debayer", "dl_tensor_python_function", "dump_image",
    "element_extract", "equalize", "erase", "expand_dims", "external_source",
    "fast_resize_crop_mirror", "file_reader", "flip", "full", "full_like", "gaussian_blur",
    "get_property", "grid_mask", "hsv", "hue", "image_decoder", "image_decoder_crop",
    "image_decoder_random_crop", "image_decoder_slice", "jitter", "jpeg_compression_distortion",
    "laplacian", "lookup_table", "mel_filter_bank", "mfcc", "multi_paste", "mxnet_reader",
    "nonsilent_region", "normal_distribution", "normalize", "numba_function", "numpy_reader",
    "one_hot", "ones", "ones_like", "optical_flow", "pad", "paste", "peek_image_shape",
    "per_frame", "permute_batch", "power_spectrum", "preemphasis_filter", "python_function",
    "random_bbox_crop", "random_crop_generator", "random_resized_crop", "reinterpret",
    "reshape", "resize", "resize_crop_mirror", "roi_random_crop", "rotate", "saturation",
    "select", "select_masks", "sequence_reader", "sequence_rearrange", "shapes", "slice",
    "spectrogram", "sphere", "squeeze", "stack", "tensor_resize", "tfrecord_reader",
    "to_decibels", "torch_python_function", "transpose", "uniform", "video_reader",
    "video_reader_resize", "warp_affine", "water", "zeros", "zeros_like",
    # decoders
    "decoders.audio", "decoders.image", "decoders.image_crop", "decoders.image_random_crop",
    "decoders.image_slice", "decoders.inflate", "decoders.numpy", "decoders.video",
    # experimental
    "experimental.audio_resample", "experimental.debayer", "experimental.decoders.image",
    "experimental.decoders.image_crop", "experimental.decoders.image_random_crop",
    "experimental.decoders.image_slice", "experimental.decoders.video", "experimental.dilate",
    "experimental.equalize", "experimental.erode", "experimental.filter",
    "experimental.inflate", "experimental.median_blur", "experimental.peek_image_shape",
    "experimental.remap", "experimental.resize", "experimental.tensor_resize",
    "experimental.warp_perspective", "experimental.readers.fits", "experimental.readers.video",
    "experimental.inputs.video",
    # io / math / noise / random / readers / reductions / segmentation / transforms
    "io.file.read", "math.abs", "math.acos", "math.asin", "math.atan", "math.atan2",
    "math.cbrt", "math.ceil", "math.clamp", "math.cos", "math.cosh", "math.exp", "math.fabs",
    "math.floor", "math.fpow", "math.log", "math.log10", "math.log2", "math.max", "math.min",
    "math.pow", "math.rsqrt", "math.sin", "math.sinh", "math.sqrt", "math.tan", "math.tanh",
    "noise.gaussian", "noise.salt_and_pepper", "noise.shot",
    "random.beta", "random.choice", "random.coin_flip", "random.normal", "random.uniform",
    "readers.caffe", "readers.caffe2", "readers.coco", "readers.file", "readers.mxnet",
    "readers.nemo_asr", "readers.numpy", "readers.sequence", "readers.tfrecord",
    "readers.video", "readers.video_resize", "readers.webdataset",
    "reductions.max", "reductions.mean", "reductions.mean_square", "reductions.min",
    "reductions.rms", "reductions.std_dev", "reductions.sum", "reductions.variance",
    "segmentation.random_mask_pixel", "segmentation.random_object_bbox",
    "segmentation.select_masks",
    "transforms.combine", "transforms.crop", "transforms.rotation", "transforms.scale",
    "transforms.shear", "transforms.translation",
    "plugin.video.decoder",
)


def missing(registry_names) -> list:
    """DALI's fn names that ``registry_names`` (the registry and its aliases now) lacks."""
    have = set(registry_names)
    return sorted(n for n in DALI_FN_NAMES if n not in have)


def _snake(camel: str) -> str:
    """``ColorTwist`` -> ``color_twist`` (DALI's class names to its functional names)."""
    return re.sub(r"(?<=[a-z0-9])([A-Z])", r"_\1", camel).lower()


def missing_message(path: str, api: str = "fn") -> str:
    """The one line ``fn.<path>`` (or ``ops.<Path>``) raises when detaug has no such op; None
    where ``path`` is one of DALI's namespaces (``fn.math``: its ops are named one by one)."""
    if any(n.startswith(path + ".") for n in DALI_FN_NAMES):
        return None
    name = path if api == "fn" else ".".join(path.split(".")[:-1] + [_snake(path.split(".")[-1])])
    if name in DALI_FN_NAMES:
        return (f"{api}.{path}: DALI's op {name!r} is not in detaug; see the list 'Not in detaug' "
                f"in {DOCS}")
    return f"{api}.{path}: no such op in detaug or in DALI; the ops: docs/api.md"


def not_in_detaug_markdown(registry_names) -> str:
    """docs/dali.md's list of DALI's fn names detaug lacks (generated; the table above minus the
    registry)."""
    names = missing(registry_names)
    return ("<!-- generated by `python -m detaug.cli.dali_docs` from detaug/dali/fn_names.py "
            "minus the registry -->\n" + ", ".join(f"`fn.{n}`" for n in names) + "\n")

