# The box and image operators of DALI's operator reference (the documented arguments of
# fn.bb_flip, fn.flip, fn.paste, fn.bbox_paste, fn.coord_flip, fn.transforms.* with
# fn.coord_transform, fn.normalize as in docs/examples/general/normalize.ipynb, fn.hsv and
# fn.brightness_contrast as in docs/examples/image_processing/hsv_example.ipynb and
# brightness_contrast_example.ipynb) on COCO images and their boxes, every argument fixed (no
# random draw), in one @pipeline_def program. Written here in DALI's API (not a copy of DALI's
# code); changed: the imports, the data (the repository's COCO sample), device "cpu".
import numpy as np
from detaug import pipeline_def
import detaug.fn as fn
import detaug.types as types

from _data import COCO_ANNOTATIONS, COCO_IMAGES


@pipeline_def(batch_size=4, num_threads=2, device_id=0)
def box_pipe():
    jpegs, boxes, labels = fn.readers.coco(file_root=COCO_IMAGES, annotations_file=COCO_ANNOTATIONS,
                                           ratio=True, ltrb=True)
    images = fn.decoders.image(jpegs, device="cpu", output_type=types.RGB)
    flipped = fn.flip(images, horizontal=1, vertical=1)
    boxes_h = fn.bb_flip(boxes, horizontal=1, ltrb=True)
    boxes_v = fn.bb_flip(boxes, horizontal=0, vertical=1, ltrb=True)
    xywh = fn.bb_flip(boxes, horizontal=1, vertical=1)  # the xywh layout (ltrb=False)
    pasted = fn.paste(images, ratio=2.0, paste_x=0.25, paste_y=0.75, fill_value=(118, 185, 0))
    boxes_pasted = fn.bbox_paste(boxes, ratio=2.0, paste_x=0.25, paste_y=0.75, ltrb=True)
    points = fn.coord_flip(fn.reshape(boxes, shape=[-1, 2]), flip_x=1, flip_y=1, center_y=0.4)
    mt = fn.transforms.combine(fn.transforms.scale(scale=[0.5, 2.0], center=[0.5, 0.5]),
                               fn.transforms.rotation(angle=30.0),
                               fn.transforms.shear(angles=[10.0, 0.0]),
                               fn.transforms.translation(offset=[0.1, -0.2]))
    moved = fn.coord_transform(fn.reshape(boxes, shape=[-1, 2]), MT=mt)
    cropped_mt = fn.transforms.crop(from_start=[0.1, 0.2], from_end=[0.9, 0.7],
                                    to_start=[0.0, 0.0], to_end=[1.0, 1.0])
    in_crop = fn.coord_transform(fn.reshape(boxes, shape=[-1, 2]), MT=cropped_mt)
    normalized = fn.normalize(images, axes=[0, 1], dtype=types.FLOAT)
    normalized_scaled = fn.normalize(images, mean=128.0, stddev=64.0, scale=2.0, shift=1.0)
    hsv = fn.hsv(images, hue=120.0, saturation=0.6, value=1.2)
    bc = fn.brightness_contrast(images, brightness=1.2, brightness_shift=0.1, contrast=0.7,
                                contrast_center=100.0)
    return (images, flipped, boxes, boxes_h, boxes_v, xywh, pasted, boxes_pasted, points, mt,
            moved, cropped_mt, in_crop, normalized, normalized_scaled, hsv, bc, labels)


pipe = box_pipe()
pipe.build()
(images, flipped, boxes, boxes_h, boxes_v, xywh, pasted, boxes_pasted, points, mt, moved,
 cropped_mt, in_crop, normalized, normalized_scaled, hsv, bc, labels) = pipe.run()
