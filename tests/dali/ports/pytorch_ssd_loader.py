# Follows how DALI's SSD example feeds PyTorch (docs/examples/use_cases/pytorch/
# single_stage_detector: main.py and src/coco_pipeline.py, in DALI's fn API as its newer
# examples write pipelines): a @pipeline_def detection pipeline (COCO reader with ratio / ltrb,
# random_bbox_crop + slice, coin-flipped flip + bb_flip, resize to 300x300,
# crop_mirror_normalize to NCHW float, box_encoder on the default boxes) wrapped in
# DALIGenericIterator with output names, reader_name, auto_reset and LastBatchPolicy.PARTIAL,
# looped over an epoch as a training loop would, then into the next. Written here in DALI's API (not a copy of
# DALI's code); the data are the repository's COCO sample, devices "cpu".
import numpy as np
import torch

from detaug import pipeline_def
import detaug.fn as fn
import detaug.types as types
from detaug.plugin.pytorch import DALIGenericIterator, LastBatchPolicy

from _data import COCO_ANNOTATIONS, COCO_IMAGES
from ssd_anchors import ssd300_anchors

BATCH = 16
ANCHORS = ssd300_anchors()


@pipeline_def(batch_size=BATCH, num_threads=2, device_id=0, seed=21)
def ssd_pipeline(anchors):
    jpegs, boxes, labels = fn.readers.coco(file_root=COCO_IMAGES, annotations_file=COCO_ANNOTATIONS,
                                           ratio=True, ltrb=True, skip_empty=True,
                                           shuffle_after_epoch=True, name="Reader")
    images = fn.decoders.image(jpegs, device="cpu", output_type=types.RGB)
    begin, size, boxes, labels = fn.random_bbox_crop(boxes, labels, aspect_ratio=[0.5, 2.0],
                                                     thresholds=[0, 0.1, 0.3, 0.5, 0.7, 0.9],
                                                     scaling=[0.3, 1.0], ltrb=True,
                                                     allow_no_crop=True, num_attempts=1)
    images = fn.slice(images, begin, size, out_of_bounds_policy="trim_to_shape")
    flip = fn.random.coin_flip(probability=0.5)
    images = fn.flip(images, horizontal=flip)
    boxes = fn.bb_flip(boxes, horizontal=flip, ltrb=True)
    images = fn.resize(images, resize_x=300, resize_y=300,
                       min_filter=types.DALIInterpType.INTERP_TRIANGULAR)
    images = fn.crop_mirror_normalize(images, crop=(300, 300),
                                      mean=[0.485 * 255, 0.456 * 255, 0.406 * 255],
                                      std=[0.229 * 255, 0.224 * 255, 0.225 * 255],
                                      dtype=types.FLOAT, output_layout=types.NCHW)
    boxes, labels = fn.box_encoder(boxes, labels, criteria=0.5, anchors=anchors)
    return images, boxes, labels


pipe = ssd_pipeline(ANCHORS.ravel().tolist())
pipe.build()
loader = DALIGenericIterator(pipe, ["images", "boxes", "labels"], reader_name="Reader",
                             auto_reset=True, last_batch_policy=LastBatchPolicy.PARTIAL)
seen = []
for data in loader:  # one epoch
    images, boxes, labels = data[0]["images"], data[0]["boxes"], data[0]["labels"]
    assert isinstance(images, torch.Tensor)
    seen.append((tuple(images.shape), tuple(boxes.shape), tuple(labels.shape), labels.dtype,
                 int((labels > 0).sum())))
next_epoch_first = next(iter(loader))[0]  # auto_reset: the loop can go on into the next epoch
