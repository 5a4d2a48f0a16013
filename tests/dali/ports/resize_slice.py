# DALI's resize and slice docs (docs/examples/image_processing/resize.ipynb; fn.slice's
# arguments): resize_shorter as a per-sample tensor argument (fn.random.uniform), then a slice
# given by rel_start / rel_shape, and the reshape / cat of its shape. Changed: the imports, the
# images (the repository's COCO JPEGs), device "cpu".
import numpy as np
from detaug import pipeline_def
import detaug.fn as fn
import detaug.types as types

from _data import COCO_ANNOTATIONS, COCO_IMAGES


@pipeline_def(batch_size=4, num_threads=2, device_id=0, seed=3)
def resize_pipe():
    jpegs, boxes, labels = fn.readers.coco(file_root=COCO_IMAGES, annotations_file=COCO_ANNOTATIONS,
                                           ratio=True, ltrb=True)
    images = fn.decoders.image(jpegs, device="cpu", output_type=types.RGB)
    shorter = fn.random.uniform(range=(96, 160))
    resized = fn.resize(images, resize_shorter=shorter)
    sliced = fn.slice(resized, rel_start=(0.25, 0.1), rel_shape=(0.5, 0.6))
    shape = fn.shapes(sliced)
    hw = fn.reshape(fn.cat(shape, shape), shape=[2, 3])
    flipped = fn.coord_flip(fn.reshape(boxes, shape=[-1, 2]), flip_x=1)
    return images, shorter, resized, sliced, hw, boxes, flipped


pipe = resize_pipe()
pipe.build()
images, shorter, resized, sliced, hw, boxes, flipped = pipe.run()
