# Follows DALI's parallel external source tutorial (docs/examples/general/data_loading/
# parallel_external_source.ipynb): a callable object given one SampleInfo per sample
# (batch=False, parallel=True, DALI's py_num_workers / py_start_method on the pipeline) that reads
# an encoded file and its label, declares the dtype of each output, and ends the epoch by raising
# StopIteration once no whole batch is left. Written here in DALI's API (not a copy of DALI's
# code); the files are the repository's VOC images with labels made up from their order.
import os

import numpy as np
from detaug import pipeline_def
import detaug.fn as fn
import detaug.types as types

from _data import VOC_IMAGES

BATCH = 4
FILES = sorted(os.listdir(VOC_IMAGES))[:10]
LABELS = [k % 5 for k in range(len(FILES))]


class ReadSample:
    """One (encoded file, label) per call; StopIteration past the last whole batch."""

    def __init__(self, root, names, labels, batch):
        self.root, self.names, self.labels = root, names, labels
        self.batches = len(names) // batch

    def __call__(self, info):
        if info.iteration >= self.batches:
            raise StopIteration
        k = info.idx_in_epoch
        data = np.fromfile(os.path.join(self.root, self.names[k]), dtype=np.uint8)
        return data, np.array([self.labels[k]], dtype=np.int32)


@pipeline_def(batch_size=BATCH, num_threads=2, device_id=0, py_num_workers=4,
              py_start_method="spawn")
def files_pipeline():
    encoded, label = fn.external_source(source=ReadSample(VOC_IMAGES, FILES, LABELS, BATCH),
                                        num_outputs=2, batch=False, parallel=True,
                                        dtype=[types.UINT8, types.INT32])
    return fn.decoders.image(encoded, device="cpu"), label


pipe = files_pipeline()
pipe.build()
epoch = []
while True:
    try:
        epoch.append(pipe.run())
    except StopIteration:
        break
