"""DALI's TensorFlow plugin (``nvidia.dali.plugin.tf``): ``DALIDataset``, a ``tf.data.Dataset``
whose elements are a pipeline's ``run()`` outputs, each a dense tensor of the declared shape and
dtype. TensorFlow is imported when a dataset is made. The dataset runs the pipeline on the host
(detaug's outputs are handed over as NumPy arrays; no device placement of TensorFlow's own), one
``run()`` per element, until the pipeline raises StopIteration (a reader goes on into the next
epoch, as DALI's dataset does)."""
from __future__ import annotations

import numpy as np

from ...core.batch import ImageBatch

# DALIDataset arguments that tune DALI's TensorFlow op and change no value here
HINTS = ("fail_on_device_mismatch", "num_threads", "device_id", "prefetch_queue_depth",
         "cpu_prefetch_queue_depth", "gpu_prefetch_queue_depth", "exec_separated",
         "exec_async", "exec_pipelined")


def _dense(k, v):
    if isinstance(v, ImageBatch):
        return np.asarray(v.as_array())
    try:
        return np.asarray(v)
    except ValueError:
        raise ValueError(f"DALIDataset: output {k} has samples of different shapes: a "
                         "tf.data element is one dense tensor (pad it: fn.pad)") from None


def DALIDataset(pipeline=None, output_shapes=None, output_dtypes=None, batch_size=None,
                **tuning):
    """A ``tf.data.Dataset`` of ``pipeline``'s outputs (DALI's DALIDataset): ``output_dtypes``
    (TensorFlow dtypes, one per output) are required, ``output_shapes`` optional (None: any);
    ``batch_size``, if given, must be the pipeline's."""
    import tensorflow as tf

    unknown = sorted(set(tuning) - set(HINTS))
    if unknown:
        raise TypeError(f"DALIDataset: argument(s) {unknown} are not in detaug (input_datasets "
                        "and the other DALI-only ones: docs/dali.md#not-in-detaug)")
    if pipeline is None or output_dtypes is None:
        raise ValueError("DALIDataset: pipeline= and output_dtypes= are required")
    if batch_size is not None and int(batch_size) != pipeline.batch_size:
        raise ValueError(f"DALIDataset: batch_size={batch_size} but the pipeline's is "
                         f"{pipeline.batch_size}")
    dtypes = tuple(output_dtypes) if isinstance(output_dtypes, (list, tuple)) else (output_dtypes,)
    shapes = (tuple(output_shapes) if isinstance(output_shapes, (list, tuple)) and output_shapes
              and isinstance(output_shapes[0], (list, tuple, type(None))) else (output_shapes,))
    if output_shapes is None:
        shapes = (None,) * len(dtypes)
    if len(shapes) != len(dtypes):
        raise ValueError(f"DALIDataset: {len(shapes)} output_shapes for {len(dtypes)} dtypes")
    signature = tuple(tf.TensorSpec(shape=s, dtype=d) for s, d in zip(shapes, dtypes))

    def elements():
        pipeline.build()
        while True:
            try:
                outs = pipeline.run()
            except StopIteration:
                return
            if len(outs) != len(dtypes):
                raise ValueError(f"DALIDataset: the pipeline has {len(outs)} outputs, "
                                 f"output_dtypes {len(dtypes)}")
            yield tuple(_dense(k, v).astype(d.as_numpy_dtype)
                        for k, (v, d) in enumerate(zip(outs, dtypes)))

    return tf.data.Dataset.from_generator(elements, output_signature=signature)


__all__ = ["DALIDataset"]
