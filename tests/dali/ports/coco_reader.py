# DALI's "COCO Reader" tutorial (docs/examples/general/data_loading/coco_reader.ipynb), its code
# cells in order. Changed: the imports (nvidia.dali -> detaug), the data paths (_data), and the
# polygon outputs left out (polygon_masks: COCO masks are not in detaug yet).
from detaug.pipeline import Pipeline
import detaug.fn as fn
import detaug.types as types
import numpy as np
import os.path

from _data import COCO_IMAGES as file_root, COCO_ANNOTATIONS as annotations_file
batch_size = 16

pipe = Pipeline(batch_size=batch_size, num_threads=4, device_id=0)
with pipe:
    jpegs, bboxes, labels = fn.readers.coco(
        file_root=file_root,
        annotations_file=annotations_file,
        ratio=True)
    images = fn.decoders.image(jpegs, device="cpu", output_type=types.RGB)
    pipe.set_outputs(images, bboxes, labels)

pipe.build()
pipe_out = pipe.run()

images_cpu = pipe_out[0].as_cpu()
bboxes_cpu = pipe_out[1]
labels_cpu = pipe_out[2]

bboxes = bboxes_cpu.at(4)
labels = labels_cpu.at(4)
for bbox, label in zip(bboxes, labels):
    x, y, width, height = bbox
    print(f"Bounding box (x={x}, y={y}, width={width}, height={height}), label={label}")
