"""Small helpers shared by the engine tests: run a graph on given images and boxes; close the
pipelines a test made."""
import numpy as np
import pytest

from detaug import Pipeline, fn

_OPEN = []


@pytest.fixture(autouse=True)
def close_pipelines():
    """Close every pipeline a test made with :func:`track` when the test ends, so that its
    threads (and decode processes) stop then, not whenever the garbage collector runs. A module
    that imports this fixture gets it for all its tests."""
    yield
    while _OPEN:
        _OPEN.pop().close()


def random_images(rng, shapes):
    """uint8 images of the given shapes, uniform over 0..255."""
    return [rng.integers(0, 256, s, dtype=np.uint8) for s in shapes]


def track(pipe):
    """Register ``pipe`` with :func:`close_pipelines`; returns it."""
    _OPEN.append(pipe)
    return pipe


def run_graph(images, boxes, graph, *, labels=None, fields=None, seed=0, batch_size=None,
              num_threads=1, device="cpu"):
    """Feed ``images`` (list of HWC uint8) and ``boxes`` (list of (n, 4)) through ``graph(img, bx)``
    (which returns the outputs) and return the first batch's outputs."""
    n = len(images)
    labels = labels if labels is not None else [np.arange(len(b)) for b in boxes]
    fields = fields if fields is not None else [{} for _ in boxes]

    def src(info):
        i = info.idx_in_epoch
        return images[i], {"boxes": np.asarray(boxes[i], np.float32).reshape(-1, 4),
                           "labels": np.asarray(labels[i]), **fields[i]}

    pipe = Pipeline(batch_size=batch_size or n, num_threads=num_threads, seed=seed,
                    device_id=0 if device == "gpu" else None)
    with pipe:
        img, bx = fn.external_source(source=src, batch=False, num_outputs=2, size=n)
        if device == "gpu":
            img, bx = img.gpu(), bx.gpu()
        outs = graph(img, bx)
        pipe.set_outputs(*(outs if isinstance(outs, tuple) else (outs,)))
    out = pipe.run()
    pipe.close()
    return out


def to_np(a):
    return a.get() if hasattr(a, "get") else np.asarray(a)


def images_of(batch):
    return [to_np(a) for a in batch.data]


def boxes_of(boxbatch):
    return boxbatch.per_sample()
