# Follows the DALI input pipeline of DALI's EfficientDet example (docs/examples/use_cases/
# tensorflow/efficient_det/pipeline/dali/: fn_pipeline.py and ops.py): TFRecords read with
# DALI's feature dict (readers.tfrecord(features=...) and nvidia.dali.tfrecord's feature
# classes), boxes stacked and transposed from the four coordinate features, a coin-flipped
# crop_mirror_normalize with bb_flip, a random rescale computed with DataNode arithmetic and
# dali.math.min on fn.shapes / fn.slice of the shape, resize with per-sample resize_x / resize_y,
# a fixed-size random_bbox_crop (crop_shape / input_shape) sliced with integer anchors, SSD-style
# targets with box_encoder(offset=True), split per pyramid level with fn.slice and fn.reshape of
# tensors, all handed to TensorFlow through plugin.tf.DALIDataset. Written here in DALI's API (not
# a copy of DALI's code); the anchors are generated here (levels 3..7, three scales, three aspect
# ratios, as the example's); the data are the repository's COCO sample written as TFRecords by
# the caller (TFRECORDS), devices "cpu".
import os

import numpy as np
import tensorflow as tf

import detaug as dali
import detaug.math as dmath
import detaug.plugin.tf as dali_tf

TFRECORDS = sorted(os.environ["PORT_TFRECORDS"].split(os.pathsep))
IMAGE_SIZE = (128, 128)
LEVELS = range(3, 8)
SCALES = [2 ** 0, 2 ** (1 / 3), 2 ** (2 / 3)]
RATIOS = [1.0, 2.0, 0.5]
ANCHOR_SCALE = 4.0
BATCH = 2


def level_anchors(size):
    """(per level (h, w, anchors per cell), all anchors ltrb normalised, flattened)."""
    sizes, boxes = [], []
    for level in LEVELS:
        stride = 2 ** level
        h, w = -(-size[0] // stride), -(-size[1] // stride)
        sizes.append((h, w, len(SCALES) * len(RATIOS)))
        cy, cx = np.meshgrid(np.arange(h) * stride + stride / 2, np.arange(w) * stride + stride / 2,
                             indexing="ij")
        per_cell = []
        for s in SCALES:
            for r in RATIOS:
                half_w = ANCHOR_SCALE * stride * s * np.sqrt(r) / 2
                half_h = ANCHOR_SCALE * stride * s / np.sqrt(r) / 2
                per_cell.append(np.stack([(cx - half_w) / size[1], (cy - half_h) / size[0],
                                          (cx + half_w) / size[1], (cy + half_h) / size[0]], -1))
        boxes.append(np.stack(per_cell, 2).reshape(-1, 4))
    return sizes, np.concatenate(boxes).astype(np.float32)


def read(files):
    feats = dali.fn.readers.tfrecord(
        path=files, index_path=[f + "_idx" for f in files], random_shuffle=True,
        shard_id=0, num_shards=1,
        features={
            "image/encoded": dali.tfrecord.FixedLenFeature((), dali.tfrecord.string, ""),
            "image/height": dali.tfrecord.FixedLenFeature((), dali.tfrecord.int64, -1),
            "image/width": dali.tfrecord.FixedLenFeature((), dali.tfrecord.int64, -1),
            "image/object/bbox/xmin": dali.tfrecord.VarLenFeature(dali.tfrecord.float32, 0.0),
            "image/object/bbox/ymin": dali.tfrecord.VarLenFeature(dali.tfrecord.float32, 0.0),
            "image/object/bbox/xmax": dali.tfrecord.VarLenFeature(dali.tfrecord.float32, 0.0),
            "image/object/bbox/ymax": dali.tfrecord.VarLenFeature(dali.tfrecord.float32, 0.0),
            "image/object/class/label": dali.tfrecord.VarLenFeature(dali.tfrecord.int64, 0)})
    images = dali.fn.decoders.image(feats["image/encoded"], device="cpu",
                                    output_type=dali.types.RGB)
    corners = [feats[f"image/object/bbox/{k}"] for k in ("xmin", "ymin", "xmax", "ymax")]
    boxes = dali.fn.transpose(dali.fn.stack(*corners), perm=[1, 0])
    classes = dali.fn.cast(feats["image/object/class/label"], dtype=dali.types.INT32)
    return images, boxes, classes


def flip_and_normalize(images, boxes):
    coin = dali.fn.random.coin_flip(probability=0.5)
    images = dali.fn.crop_mirror_normalize(images, mirror=coin,
                                           mean=[0.485 * 255, 0.456 * 255, 0.406 * 255],
                                           std=[0.229 * 255, 0.224 * 255, 0.225 * 255],
                                           output_layout=dali.types.NHWC)
    return images, dali.fn.bb_flip(boxes, horizontal=coin, ltrb=True)


def rescale_and_crop(images, boxes, classes, size, scaling=(0.1, 2.0)):
    factor = dali.fn.random.uniform(range=scaling)
    want_w, want_h = factor * size[0], factor * size[1]
    hwc = dali.fn.shapes(images, dtype=dali.types.INT32)
    width = dali.fn.slice(hwc, 1, 1, axes=[0])
    height = dali.fn.slice(hwc, 0, 1, axes=[0])
    scale = dmath.min(want_w / width, want_h / height)
    new_w, new_h = width * scale, height * scale
    images = dali.fn.resize(images, resize_x=new_w, resize_y=new_h)
    anchor, extent, boxes, classes = dali.fn.random_bbox_crop(
        boxes, classes, crop_shape=dali.fn.constant(idata=list(size)),
        input_shape=dali.fn.cast(dali.fn.cat(new_w, new_h), dtype=dali.types.INT32),
        bbox_layout="xyXY", allow_no_crop=False)
    images = dali.fn.slice(images, dali.fn.cast(anchor, dtype=dali.types.INT32),
                           dali.fn.cast(extent, dtype=dali.types.INT32), out_of_bounds_policy="pad")
    return images, boxes, classes


def split_levels(enc_boxes, enc_classes, sizes):
    outs, start = [], 0
    for h, w, a in sizes:
        n = h * w * a
        outs.append(dali.fn.reshape(dali.fn.slice(enc_classes, start, n, axes=[0]), [h, w, -1]))
        outs.append(dali.fn.reshape(dali.fn.slice(enc_boxes, (start, 0), (n, 4), axes=[0, 1]),
                                    [h, w, -1]))
        start += n
    return outs


sizes, anchors = level_anchors(IMAGE_SIZE)
pipe = dali.pipeline.Pipeline(batch_size=BATCH, num_threads=2, device_id=None, seed=5)
with pipe:
    images, boxes, classes = read(TFRECORDS)
    images, boxes = flip_and_normalize(images, boxes)
    images, boxes, classes = rescale_and_crop(images, boxes, classes, IMAGE_SIZE)
    enc_boxes, enc_classes = dali.fn.box_encoder(boxes, classes, anchors=anchors.ravel().tolist(),
                                                 offset=True)
    pipe.set_outputs(images, *split_levels(enc_boxes, enc_classes, sizes), enc_boxes, enc_classes)

shapes = [(BATCH, IMAGE_SIZE[1], IMAGE_SIZE[0], 3)]
dtypes = [tf.float32]
for h, w, a in sizes:
    shapes += [(BATCH, h, w, a), (BATCH, h, w, 4 * a)]
    dtypes += [tf.int32, tf.float32]
shapes += [(BATCH, len(anchors), 4), (BATCH, len(anchors))]
dtypes += [tf.float32, tf.int32]
dataset = dali_tf.DALIDataset(pipeline=pipe, batch_size=BATCH, output_shapes=tuple(shapes),
                              output_dtypes=tuple(dtypes), device_id=0)
first = next(iter(dataset))
