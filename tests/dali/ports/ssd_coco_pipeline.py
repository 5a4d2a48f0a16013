# Follows the input pipeline of DALI's SSD example (docs/examples/use_cases/pytorch/
# single_stage_detector/src/coco_pipeline.py): a Pipeline subclass in DALI's older ops API whose
# define_graph reads COCO (ratio, ltrb, skip_empty, shuffle_after_epoch, pad_last_batch), crops
# with RandomBBoxCrop + Slice, flips image and boxes by one coin, resizes to 300x300 with
# INTERP_TRIANGULAR, twists colours with Hsv(dtype=FLOAT) then BrightnessContrast(dtype=UINT8),
# normalises to NCHW float and encodes the boxes on SSD300's default boxes with BoxEncoder. The
# same ops and arguments as the example, written here (not a copy of DALI's code); devices are
# "cpu" (the example's hsv, brightness_contrast and normalisation run on "gpu").
from types import SimpleNamespace

import numpy as np
from detaug.pipeline import Pipeline
import detaug.ops as ops
import detaug.types as types

from _data import COCO_ANNOTATIONS, COCO_IMAGES
from ssd_anchors import ssd300_anchors

MEAN = [0.485 * 255, 0.456 * 255, 0.406 * 255]
STD = [0.229 * 255, 0.224 * 255, 0.225 * 255]


class SSDTrainPipe(Pipeline):
    def __init__(self, cfg, anchors):
        super().__init__(batch_size=cfg.batch_size, num_threads=cfg.workers, device_id=cfg.gpu,
                         seed=cfg.seed)
        self.reader = ops.COCOReader(file_root=cfg.images, annotations_file=cfg.annotations,
                                     skip_empty=True, shard_id=0, num_shards=1, ratio=True,
                                     ltrb=True, random_shuffle=False, shuffle_after_epoch=True,
                                     pad_last_batch=True)
        self.decoder = ops.ImageDecoder(device="cpu", output_type=types.RGB)
        self.bbox_crop = ops.RandomBBoxCrop(device="cpu", aspect_ratio=[0.5, 2.0],
                                            thresholds=[0, 0.1, 0.3, 0.5, 0.7, 0.9],
                                            scaling=[0.3, 1.0], ltrb=True, allow_no_crop=True,
                                            num_attempts=1)
        self.cut = ops.Slice(device="cpu")
        self.mirror_image = ops.Flip(device="cpu")
        self.mirror_boxes = ops.BbFlip(device="cpu", ltrb=True)
        self.coin = ops.CoinFlip(probability=0.5)
        self.to300 = ops.Resize(device="cpu", resize_x=300, resize_y=300,
                                min_filter=types.DALIInterpType.INTERP_TRIANGULAR)
        # float between the two colour ops: no rounding or clamping in the middle
        self.colour = ops.Hsv(device="cpu", dtype=types.FLOAT)
        self.light = ops.BrightnessContrast(device="cpu", contrast_center=128, dtype=types.UINT8)
        self.norm = ops.CropMirrorNormalize(device="cpu", crop=(300, 300), mean=MEAN, std=STD,
                                            mirror=0, output_dtype=types.FLOAT,
                                            output_layout=types.NCHW, pad_output=False)
        self.wide = ops.Uniform(range=[0.5, 1.5])
        self.narrow = ops.Uniform(range=[0.875, 1.125])
        self.shift = ops.Uniform(range=[-0.5, 0.5])
        self.encode = ops.BoxEncoder(device="cpu", criteria=0.5, anchors=anchors.ravel().tolist())

    def define_graph(self):
        sat, con, bri, hue = self.wide(), self.wide(), self.narrow(), self.shift()
        flip = self.coin()
        jpegs, boxes, labels = self.reader(name="Reader")
        images = self.decoder(jpegs)
        begin, size, boxes, labels = self.bbox_crop(boxes, labels)
        images = self.cut(images, begin, size)
        images = self.mirror_image(images, horizontal=flip)
        boxes = self.mirror_boxes(boxes, horizontal=flip)
        images = self.to300(images)
        images = self.colour(images, hue=hue, saturation=sat)
        images = self.light(images, brightness=bri, contrast=con)
        images = self.norm(images)
        boxes, labels = self.encode(boxes, labels)
        return images, boxes, labels


cfg = SimpleNamespace(batch_size=4, workers=2, gpu=0, seed=12, images=COCO_IMAGES,
                      annotations=COCO_ANNOTATIONS)
anchors = ssd300_anchors()
pipe = SSDTrainPipe(cfg, anchors)
pipe.build()
images, bboxes, labels = pipe.run()
