# DALI's "External Source Operator" tutorial (docs/examples/general/data_loading/
# external_input.ipynb): a batch iterator (ExternalInputIterator) feeding encoded files and
# labels, decoded and then enhanced by brightness_contrast; and the same data from a
# zero-argument callable and from a generator function, as DALI's docs list the source forms.
# Changed: the imports, the file list (the repository's VOC images), device "cpu".
import os
import numpy as np
from random import shuffle
from detaug.pipeline import Pipeline
import detaug.fn as fn
import detaug.types as types

from _data import VOC_IMAGES

batch_size = 4
images_dir = VOC_IMAGES + "/"
files = sorted(os.listdir(VOC_IMAGES))[:8]


class ExternalInputIterator(object):
    def __init__(self, batch_size):
        self.images_dir = images_dir
        self.batch_size = batch_size
        self.files = [(f, k % 3) for k, f in enumerate(files)]
        self.n = len(self.files)

    def __iter__(self):
        self.i = 0
        return self

    def __next__(self):
        batch = []
        labels = []
        if self.i >= self.n:
            self.__iter__()
            raise StopIteration
        for _ in range(self.batch_size):
            jpeg_filename, label = self.files[self.i % self.n]
            batch.append(np.fromfile(self.images_dir + jpeg_filename, dtype=np.uint8))
            labels.append(np.array([label], dtype=np.uint8))
            self.i += 1
        return (batch, labels)

    def __len__(self):
        return self.n

    next = __next__


eii = ExternalInputIterator(batch_size)

pipe = Pipeline(batch_size=batch_size, num_threads=2, device_id=0)
with pipe:
    jpegs, labels = fn.external_source(source=eii, num_outputs=2, dtype=types.UINT8)
    decode = fn.decoders.image(jpegs, device="cpu")
    enhance = fn.brightness_contrast(decode, contrast=2)
    pipe.set_outputs(enhance, labels)

pipe.build()
pipe_out = pipe.run()
batch_cpu = pipe_out[0].as_cpu()
labels_cpu = pipe_out[1]

# the same data from a zero-argument callable (one batch a call) and from a generator function
calls = iter(eii)


def next_batch():
    return next(calls)


def batches():
    yield from ExternalInputIterator(batch_size)


outs = {}
for name, source in (("callable", next_batch), ("generator", batches)):
    p = Pipeline(batch_size=batch_size, num_threads=2, device_id=0)
    with p:
        jpegs, labels = fn.external_source(source=source, num_outputs=2, dtype=types.UINT8)
        p.set_outputs(fn.decoders.image(jpegs, device="cpu"), labels)
    p.build()
    outs[name] = p.run()
