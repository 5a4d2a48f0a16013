# Follows DALI's external source tutorial (docs/examples/general/data_loading/
# external_input.ipynb): an iterator object that hands out whole batches (a list of encoded
# files, a list of labels) and raises StopIteration at the end of the data, fed through
# fn.external_source(num_outputs=2, dtype=UINT8), decoded and given more contrast with
# fn.brightness_contrast; then the same data from the other source forms DALI documents: a
# zero-argument callable returning a batch, and a generator function. Written here in DALI's API
# (not a copy of DALI's code); the files are the repository's VOC images.
import os

import numpy as np
from detaug.pipeline import Pipeline
import detaug.fn as fn
import detaug.types as types

from _data import VOC_IMAGES

BATCH = 4
FILES = sorted(os.listdir(VOC_IMAGES))[:8]


class Batches:
    """Whole batches of (encoded files, labels), label = position % 3; StopIteration at the end
    (and a fresh pass on the next iter())."""

    def __init__(self, batch):
        self.batch = batch

    def __iter__(self):
        self.pos = 0
        return self

    def __next__(self):
        if self.pos >= len(FILES):
            raise StopIteration
        names = FILES[self.pos:self.pos + self.batch]
        labels = [np.array([(self.pos + k) % 3], dtype=np.uint8) for k in range(len(names))]
        self.pos += len(names)
        return [np.fromfile(os.path.join(VOC_IMAGES, n), dtype=np.uint8) for n in names], labels


pipe = Pipeline(batch_size=BATCH, num_threads=2, device_id=0)
with pipe:
    encoded, labels = fn.external_source(source=Batches(BATCH), num_outputs=2, dtype=types.UINT8)
    images = fn.decoders.image(encoded, device="cpu")
    pipe.set_outputs(fn.brightness_contrast(images, contrast=2), labels)
pipe.build()
contrasted, labels_out = pipe.run()
contrasted = contrasted.as_cpu()

stream = iter(Batches(BATCH))


def one_batch():          # a zero-argument callable: one batch per call
    return next(stream)


def all_batches():        # a generator function: called once, then iterated
    yield from Batches(BATCH)


outs = {}
for name, source in (("callable", one_batch), ("generator", all_batches)):
    p = Pipeline(batch_size=BATCH, num_threads=2, device_id=0)
    with p:
        encoded, labels = fn.external_source(source=source, num_outputs=2, dtype=types.UINT8)
        p.set_outputs(fn.decoders.image(encoded, device="cpu"), labels)
    p.build()
    outs[name] = p.run()
