# DALI's "Parallel External Source" tutorial (docs/examples/general/data_loading/
# parallel_external_source.ipynb): a per-sample callable that reads files and ends the epoch with
# StopIteration, run with batch=False, parallel=True. Changed: the imports, the file list (the
# repository's VOC images with made-up labels instead of DALI_extra's), device "cpu".
import os
import numpy as np
from detaug import pipeline_def
import detaug.fn as fn
import detaug.types as types

from _data import VOC_IMAGES

batch_size = 4
files = sorted(os.listdir(VOC_IMAGES))[:10]
image_dir = VOC_IMAGES
labels = [i % 5 for i in range(len(files))]


class ExternalInputCallable:
    def __init__(self, batch_size):
        self.images_dir = image_dir
        self.batch_size = batch_size
        self.files = files
        self.labels = labels
        self.full_iterations = len(self.files) // batch_size

    def __call__(self, sample_info):
        sample_idx = sample_info.idx_in_epoch
        if sample_info.iteration >= self.full_iterations:
            # Indicate end of the epoch
            raise StopIteration()
        jpeg_filename = self.files[sample_idx]
        label = np.int32([self.labels[sample_idx]])
        with open(os.path.join(self.images_dir, jpeg_filename), 'rb') as f:
            encoded_img = np.frombuffer(f.read(), dtype=np.uint8)
        return encoded_img, label


@pipeline_def(batch_size=batch_size, num_threads=2, device_id=0, py_num_workers=4,
              py_start_method='spawn')
def parallel_pipeline():
    jpegs, labels = fn.external_source(source=ExternalInputCallable(batch_size), num_outputs=2,
                                       batch=False, parallel=True, dtype=[types.UINT8, types.INT32])
    decode = fn.decoders.image(jpegs, device="cpu")
    return decode, labels


pipe = parallel_pipeline()
pipe.build()
epoch = []
try:
    while True:
        epoch.append(pipe.run())
except StopIteration:
    pass
