"""The parallel external source port's callable, in a module of its own: with
``py_start_method="spawn"`` DALI's workers unpickle the callable by importing the module that
defines it, so it must not be the program itself (importing the program would build and run
its pipeline again in every worker), as DALI's documentation asks of spawned sources."""
import os

import numpy as np


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
