"""TensorFlow adapter: a ``tf.data.Dataset`` of a pipeline's batches.

TensorFlow is imported when :func:`to_tf_dataset` is called, never by ``import detaug`` or by
importing this module.

The hand-over is from host memory: each batch is computed by the pipeline (on the GPU, where it
has a device stage), copied to fresh NumPy arrays (``adapters.keras.batch_to_numpy``: images one
dense array, boxes padded with counts), and given to TensorFlow through
``tf.data.Dataset.from_generator``, which copies them into TensorFlow tensors. There is no
DLPack hand-over to TensorFlow's GPU: TensorFlow cannot be carried to the project's device
machines, so that path could not be tested; the copy costs a host round trip per batch.

Each pass over the dataset (each epoch of ``model.fit``) is one epoch of the pipeline: batch
``i`` of pass ``k`` is ``pipeline.run_batch(i, epoch=start + k)``, so every pass has its own
shuffle and its own random draws, and a pass is reproducible from the seed.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from .keras import batch_to_numpy, select, split_xy


def to_tf_dataset(pipeline: Any, *, output_map: tuple = ("images", "targets"), x: Any = None,
                  y: Any = None, max_boxes: int | None = None, targets_format: str = "tuple",
                  max_batches: int | None = None, epochs_shuffle: bool = True) -> Any:
    """A ``tf.data.Dataset`` whose elements are the pipeline's batches as ``(x, y)``.

    Args:
        pipeline: a detaug Pipeline whose source has a size (a reader); built here if needed.
        output_map: a name for each pipeline output, in order.
        x, y: what an element holds, chosen by name as in ``DetaugSequence`` (a name, a tuple
            or dict of names; box outputs also offer ``"boxes"``, ``"labels"``, ``"counts"``,
            ``"<output>.<field>"``). Default: x the first output, y the rest.
        max_boxes: box outputs are padded to this many boxes (boxes 0, labels and fields -1,
            with ``counts``), which makes their shape fixed: ``(None, max_boxes, 4)``. None pads
            to each batch's largest count (shape ``(None, None, 4)``).
        targets_format: 'tuple' or 'dict' for two or more targets (default selection).
        max_batches: at most this many batches per pass.
        epochs_shuffle: each pass is the next pipeline epoch (False: every pass is the first).

    Returns:
        ``tf.data.Dataset`` with a fixed ``element_spec``, taken from batch 0 (computed once
        here): the batch dimension is None (a last partial batch), the other dimensions those
        of batch 0, so images need one size (resize / letterbox in the pipeline). Use it with
        ``prefetch`` and ``model.fit``.
    """
    import tensorflow as tf

    pipeline.build()
    n = len(pipeline) if max_batches is None else min(len(pipeline), int(max_batches))
    if n < 1:
        raise ValueError("the dataset has no batches (an empty reader, or max_batches < 1)")
    output_map = tuple(output_map)
    start = pipeline.epoch

    def element(index, epoch):
        named = batch_to_numpy(pipeline.run_batch(index, epoch=epoch), output_map,
                               max_boxes=max_boxes)
        if x is None and y is None:
            return split_xy(named, output_map, targets_format)
        xs = select(named, output_map[0] if x is None else x, "x")
        return (xs,) if y is None else (xs, select(named, y, "y"))

    probe = element(0, start)
    spec = _spec(tf, probe, fixed_boxes=max_boxes is not None)
    passes = [0]

    def generate():
        epoch = start + passes[0] if epochs_shuffle else start
        passes[0] += 1
        for i in range(n):
            yield element(i, epoch)

    dataset = tf.data.Dataset.from_generator(generate, output_signature=spec)
    # a known length: Keras then ends each epoch after n batches without an 'out of data' stop
    return dataset.apply(tf.data.experimental.assert_cardinality(n))


def _spec(tf, tree, fixed_boxes, key=None):
    """``tf.TensorSpec``s of a batch: batch dimension None; other dimensions as in the probe
    batch, except a box dimension padded per batch (None unless ``max_boxes`` fixed it) and
    the polygons' point dimension (padded per batch, whatever ``max_boxes``) and the masks'
    planes (each batch's largest canvas)."""
    if isinstance(tree, dict):
        return {k: _spec(tf, v, fixed_boxes, k) for k, v in tree.items()}
    if isinstance(tree, (tuple, list)):
        return tuple(_spec(tf, v, fixed_boxes, key) for v in tree)
    a = np.asarray(tree)
    shape = [None] + list(a.shape[1:])
    if key is not None and not fixed_boxes and len(shape) > 1 and key != "counts":
        shape[1] = None  # padded to each batch's largest box count
    if key == "polygons" and len(shape) > 2:
        shape[2] = None  # each batch's longest box of polygons (ops/instance_fields.pad_fields)
    if key in ("masks", "bitmasks") and len(shape) > 3:
        shape[2] = shape[3] = None  # planes of each batch's largest canvas
    return tf.TensorSpec(shape=shape, dtype=tf.as_dtype(a.dtype))
