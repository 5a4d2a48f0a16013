# DALI's SSD example input pipeline (docs/examples/use_cases/pytorch/single_stage_detector/
# src/coco_pipeline.py), the class as written. Changed: the imports, device="gpu" -> "cpu" (and
# images.gpu() / .gpu() of the outputs dropped: a CPU run), and below the class a driver that
# makes its arguments (SSD300's default boxes, from src/utils.py's dboxes300_coco) on local data.
import torch
from detaug.pipeline import Pipeline
import detaug.ops as ops
import detaug.types as types


class COCOPipeline(Pipeline):
    def __init__(self, default_boxes, args, seed):
        super(COCOPipeline, self).__init__(
            batch_size=args.batch_size,
            device_id=args.local_rank,
            num_threads=args.num_workers,
            seed=seed)

        try:
            shard_id = torch.distributed.get_rank()
            num_shards = torch.distributed.get_world_size()
        except (RuntimeError, ValueError):
            shard_id = 0
            num_shards = 1

        self.input = ops.COCOReader(
            file_root=args.train_coco_root,
            annotations_file=args.train_annotate,
            skip_empty=True,
            shard_id=shard_id,
            num_shards=num_shards,
            ratio=True,
            ltrb=True,
            random_shuffle=False,
            shuffle_after_epoch=True,
            pad_last_batch=True)

        self.decode = ops.ImageDecoder(device="cpu", output_type=types.RGB)

        # Augumentation techniques
        self.crop = ops.RandomBBoxCrop(
            device="cpu",
            aspect_ratio=[0.5, 2.0],
            thresholds=[0, 0.1, 0.3, 0.5, 0.7, 0.9],
            scaling=[0.3, 1.0],
            ltrb=True,
            allow_no_crop=True,
            num_attempts=1)
        self.slice = ops.Slice(device="cpu")

        self.hsv = ops.Hsv(device="cpu", dtype=types.FLOAT)  # use float to avoid clipping and
                                                             # quantizing the intermediate result
        self.bc = ops.BrightnessContrast(device="cpu",
                        contrast_center=128,  # input is in float, but in 0..255 range
                        dtype=types.UINT8)

        self.resize = ops.Resize(
            device="cpu",
            resize_x=300,
            resize_y=300,
            min_filter=types.DALIInterpType.INTERP_TRIANGULAR)

        output_dtype = types.FLOAT16 if args.fp16 else types.FLOAT

        self.normalize = ops.CropMirrorNormalize(
            device="cpu",
            crop=(300, 300),
            mean=[0.485 * 255, 0.456 * 255, 0.406 * 255],
            std=[0.229 * 255, 0.224 * 255, 0.225 * 255],
            mirror=0,
            output_dtype=output_dtype,
            output_layout=types.NCHW,
            pad_output=False)

        # Random variables
        self.rng1 = ops.Uniform(range=[0.5, 1.5])
        self.rng2 = ops.Uniform(range=[0.875, 1.125])
        self.rng3 = ops.Uniform(range=[-0.5, 0.5])

        self.flip = ops.Flip(device="cpu")
        self.bbflip = ops.BbFlip(device="cpu", ltrb=True)
        self.flip_coin = ops.CoinFlip(probability=0.5)

        self.box_encoder = ops.BoxEncoder(
            device="cpu",
            criteria=0.5,
            anchors=default_boxes.as_ltrb_list())


    def define_graph(self):
        saturation = self.rng1()
        contrast = self.rng1()
        brightness = self.rng2()
        hue = self.rng3()
        coin_rnd = self.flip_coin()

        inputs, bboxes, labels = self.input(name="Reader")
        images = self.decode(inputs)

        crop_begin, crop_size, bboxes, labels = self.crop(bboxes, labels)
        images = self.slice(images, crop_begin, crop_size)

        images = self.flip(images, horizontal=coin_rnd)
        bboxes = self.bbflip(bboxes, horizontal=coin_rnd)
        images = self.resize(images)

        images = self.hsv(images, hue=hue, saturation=saturation)
        images = self.bc(images, brightness=brightness, contrast=contrast)

        images = self.normalize(images)
        bboxes, labels = self.box_encoder(bboxes, labels)

        return (images, bboxes, labels)


# ---- the driver (main.py / utils.py's parts that the pipeline needs) ------------------------------
import itertools
from math import sqrt
from types import SimpleNamespace

import numpy as np

from _data import COCO_ANNOTATIONS, COCO_IMAGES


class DefaultBoxes(object):
    """SSD300's default boxes, as utils.py's DefaultBoxes (ltrb, clipped to [0, 1])."""

    def __init__(self, fig_size, feat_size, steps, scales, aspect_ratios):
        self.default_boxes = []
        for idx, sfeat in enumerate(feat_size):
            sk1 = scales[idx] / fig_size
            sk2 = scales[idx + 1] / fig_size
            sk3 = sqrt(sk1 * sk2)
            all_sizes = [(sk1, sk1), (sk3, sk3)]
            for alpha in aspect_ratios[idx]:
                w, h = sk1 * sqrt(alpha), sk1 / sqrt(alpha)
                all_sizes.append((w, h))
                all_sizes.append((h, w))
            for w, h in all_sizes:
                for i, j in itertools.product(range(sfeat), repeat=2):
                    cx, cy = (j + 0.5) / (fig_size / steps[idx]), (i + 0.5) / (fig_size / steps[idx])
                    self.default_boxes.append((cx, cy, w, h))
        self.dboxes = np.clip(np.array(self.default_boxes, np.float32), 0, 1)
        self.dboxes_ltrb = self.dboxes.copy()
        self.dboxes_ltrb[:, 0] = self.dboxes[:, 0] - 0.5 * self.dboxes[:, 2]
        self.dboxes_ltrb[:, 1] = self.dboxes[:, 1] - 0.5 * self.dboxes[:, 3]
        self.dboxes_ltrb[:, 2] = self.dboxes[:, 0] + 0.5 * self.dboxes[:, 2]
        self.dboxes_ltrb[:, 3] = self.dboxes[:, 1] + 0.5 * self.dboxes[:, 3]

    def as_ltrb_list(self):
        return self.dboxes_ltrb.reshape(-1).tolist()


def dboxes300_coco():
    return DefaultBoxes(300, [38, 19, 10, 5, 3, 1], [8, 16, 32, 64, 100, 300],
                        [21, 45, 99, 153, 207, 261, 315], [[2], [2, 3], [2, 3], [2, 3], [2], [2]])


args = SimpleNamespace(batch_size=4, local_rank=0, num_workers=2, fp16=False,
                       train_coco_root=COCO_IMAGES, train_annotate=COCO_ANNOTATIONS)
dboxes = dboxes300_coco()
pipe = COCOPipeline(dboxes, args, seed=12)
pipe.build()
images, bboxes, labels = pipe.run()
