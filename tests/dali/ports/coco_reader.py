# Follows DALI's COCO reader tutorial (docs/examples/general/data_loading/coco_reader.ipynb): a
# Pipeline object, `with pipe:` and set_outputs, fn.readers.coco with ratio=True, the mixed
# decoder, then the outputs read through DALI's TensorList methods (as_cpu, at). Written here in
# DALI's API (not a copy of DALI's code); what differs from a DALI program is the import lines,
# the data paths (the repository's COCO sample) and device="cpu". The tutorial's polygon outputs
# are left out: COCO masks are not in detaug yet.
import numpy as np
from detaug.pipeline import Pipeline
import detaug.fn as fn
import detaug.types as types

from _data import COCO_ANNOTATIONS, COCO_IMAGES

BATCH = 16

pipe = Pipeline(batch_size=BATCH, num_threads=4, device_id=0)
with pipe:
    encoded, boxes, labels = fn.readers.coco(file_root=COCO_IMAGES,
                                            annotations_file=COCO_ANNOTATIONS, ratio=True)
    decoded = fn.decoders.image(encoded, device="cpu", output_type=types.RGB)
    pipe.set_outputs(decoded, boxes, labels)
pipe.build()

out_images, out_boxes, out_labels = pipe.run()
images_on_host = out_images.as_cpu()
sample = 4
lines = [f"box x={x:.4f} y={y:.4f} w={w:.4f} h={h:.4f} label={int(c)}"
         for (x, y, w, h), c in zip(out_boxes.at(sample), out_labels.at(sample))]
