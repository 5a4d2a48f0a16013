# The source forms of DALI's external source documentation (fn.external_source's reference and
# docs/examples/general/data_loading/external_input.ipynb): a per-sample callable given a
# SampleInfo (batch=False, its idx_in_epoch / idx_in_batch / iteration fields), a per-batch
# callable given a BatchInfo (batch_info=True), an iterable restarted with cycle="quiet", arrays
# of different shapes with a layout, all in one pipeline run for three batches. Written here in
# DALI's API (not a copy of DALI's code); nothing else is adapted.
import numpy as np
from detaug import pipeline_def
import detaug.fn as fn
import detaug.types as types

BATCH = 3


def per_sample(info):
    return np.array([info.idx_in_epoch, info.idx_in_batch, info.iteration], dtype=np.int32)


def per_batch(info):
    return [np.full((k + 1, 2), 10 * info.iteration + k, dtype=np.float32) for k in range(BATCH)]


class TwoBatches:
    def __iter__(self):
        self.n = 0
        return self

    def __next__(self):
        if self.n == 2:
            raise StopIteration
        self.n += 1
        return [np.full((2, 2, 1), self.n * 7 + k, dtype=np.uint8) for k in range(BATCH)]


@pipeline_def(batch_size=BATCH, num_threads=1, device_id=0)
def forms():
    a = fn.external_source(source=per_sample, batch=False, dtype=types.INT32)
    b = fn.external_source(source=per_batch, batch_info=True)
    c = fn.external_source(source=TwoBatches(), cycle="quiet", layout="HWC")
    return a, b, c, a * 2 + 1


pipe = forms()
pipe.build()
batches = [pipe.run() for _ in range(3)]
