# Follows DALI's parallel external source tutorial (docs/examples/general/data_loading/
# parallel_external_source.ipynb): a callable object given one SampleInfo per sample
# (batch=False, parallel=True, DALI's py_num_workers / py_start_method on the pipeline) that reads
# an encoded file and its label, declares the dtype of each output, and ends the epoch by raising
# StopIteration once no whole batch is left. Written here in DALI's API (not a copy of DALI's
# code); the files are the repository's VOC images with labels made up from their order. The
# callable lives in _read_sample.py: spawned workers import the module that defines it.
import os

from detaug import pipeline_def
import detaug.fn as fn
import detaug.types as types

from _data import VOC_IMAGES
from _read_sample import ReadSample

BATCH = 4
FILES = sorted(os.listdir(VOC_IMAGES))[:10]
LABELS = [k % 5 for k in range(len(FILES))]


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
