"""Keras adapter: a ``keras.utils.PyDataset`` (Keras' ``Sequence``) over a pipeline.

keras is imported on first use of :class:`DetaugSequence` (a module ``__getattr__`` builds the
class then), never by ``import detaug`` or by importing this module. Set ``KERAS_BACKEND``
before that first use (there is no default without TensorFlow).

``seq[i]`` is batch ``i`` of the sequence's current epoch, computed on its own with
``pipeline.run_batch(i, epoch=seq.epoch)``: any order, any thread, the same ``i`` gives the same
batch within an epoch (every random draw is keyed by seed, op, epoch and the record's index,
DESIGN.md "Randomness"). ``on_epoch_end`` moves to the next epoch: a new shuffle and new draws.

Thread safety (Keras' ``workers=N`` with threads): ``Pipeline.run_batch`` keeps no per-call state
on the pipeline for a CPU pipeline once its executor exists, so CPU batches run concurrently
(the first call is serialised, since it creates the executor). A pipeline with a device stage
reports its batch's event through the shared attribute ``pipeline.last_event``, and its GPU
decoder is shared, so there each ``run_batch`` and the read of its event are serialised by a lock
of the sequence; the copy to the host runs outside the lock.

Processes (``use_multiprocessing=True``): a worker process rebuilds the pipeline from
``pipeline.serialize()`` on its first batch (a forked copy of the pipeline's thread pools would
not run); the graph's arguments must therefore be picklable, and only CPU pipelines are allowed
(CUDA does not survive a fork).
"""
from __future__ import annotations

import os
import threading
import warnings

import numpy as np

from .. import backend
from ..batch import BoxBatch, ImageBatch
from ..ops.boxes import PaddedBoxes

_TARGET_FORMATS = ("tuple", "dict")


# ---- conversion of one batch (no keras needed) -----------------------------------------------
def _fresh(a) -> np.ndarray:
    """A host array that nothing else refers to: device arrays are copied with ``.get()``; a host
    array is copied unless it owns its (writeable) memory, so the pipeline can never alias it."""
    if backend.is_device_array(a):
        return a.get()
    a = np.asarray(a)
    return a if (a.flags.owndata and a.flags.writeable) else a.copy()


def _dense_images(batch: ImageBatch, name: str) -> np.ndarray:
    if batch.is_dense:
        return _fresh(batch.data)
    samples = [_fresh(s) for s in batch.data]
    if samples and any(s.shape != samples[0].shape for s in samples):
        raise ValueError(f"output {name!r}: images of one batch have different sizes "
                         f"{sorted({s.shape for s in samples})}; Keras needs one dense array "
                         "(resize or letterbox to one size)")
    return np.stack(samples) if samples else np.zeros((0, 0, 0, 3), np.uint8)


def _padded_boxes(bb: BoxBatch, name: str, max_boxes) -> dict:
    """A BoxBatch as {'boxes' (B, M, 4), 'labels' (B, M), <field> (B, M), 'counts' (B,)} on the
    host, padded as ``fn.pad_boxes`` (boxes 0, labels and fields -1). M is ``max_boxes`` or the
    batch's largest count."""
    from ..kernels import boxes as kb

    valid = None if bb.valid is None else np.asarray(_fresh(bb.valid), bool)
    sample = bb.sample_index()
    counts = np.bincount(sample if valid is None else sample[valid], minlength=bb.batch_size)
    largest = int(counts.max()) if len(counts) else 0
    m = largest if max_boxes is None else int(max_boxes)
    if largest > m:
        warnings.warn(f"output {name!r}: a sample has {largest} boxes, more than max_boxes={m}; "
                      "the first max_boxes are kept")
    fields = {"labels": _fresh(bb.labels), **{k: _fresh(v) for k, v in bb.fields.items()}}
    boxes, fields, cnt = kb.pad_boxes_numpy(_fresh(bb.boxes), fields, valid, bb.offsets, m)
    return {"boxes": boxes, **fields, "counts": cnt}


def batch_to_numpy(outputs, output_map, *, max_boxes=None) -> dict:
    """``{name: value}`` for one batch of pipeline outputs, on the host, fresh copies.

    ImageBatch -> one dense array (as the pipeline laid it out: (B, H, W, C) or (B, C, H, W));
    BoxBatch or PaddedBoxes -> dict of padded arrays with 'counts'; NumPy / cupy arrays -> NumPy.
    The caller has waited for the batch's device event.
    """
    if len(outputs) != len(output_map):
        raise ValueError(f"the pipeline has {len(outputs)} outputs but output_map names "
                         f"{len(output_map)}: {list(output_map)}")
    out = {}
    for name, v in zip(output_map, outputs):
        if isinstance(v, ImageBatch):
            out[name] = _dense_images(v, name)
        elif isinstance(v, PaddedBoxes):
            out[name] = {k: _fresh(a) for k, a in v.items()}
        elif isinstance(v, BoxBatch):
            out[name] = _padded_boxes(v, name, max_boxes)
        elif isinstance(v, np.ndarray) or backend.is_device_array(v):
            out[name] = _fresh(v)
        else:
            raise TypeError(f"output {name!r}: cannot hand a {type(v).__name__} to Keras "
                            "(encoded bytes must be decoded in the pipeline)")
    return out


def split_xy(named: dict, output_map, targets_format="tuple"):
    """``(x, y)``: x is the first output; y the only other one, or a tuple / dict of the rest.
    ``(x,)`` when the pipeline has a single output (for ``predict``)."""
    names = list(output_map)
    x = named[names[0]]
    rest = names[1:]
    if not rest:
        return (x,)
    if len(rest) == 1:
        return x, named[rest[0]]
    if targets_format == "dict":
        return x, {k: named[k] for k in rest}
    return x, tuple(named[k] for k in rest)


def _map_arrays(fn, tree):
    if isinstance(tree, dict):
        return {k: _map_arrays(fn, v) for k, v in tree.items()}
    if isinstance(tree, (tuple, list)):
        return type(tree)(_map_arrays(fn, v) for v in tree)
    return fn(tree)


# ---- the sequence ------------------------------------------------------------------------------
class _SequenceMixin:
    """The body of DetaugSequence; combined with ``keras.utils.PyDataset`` on first use."""

    def __init__(self, pipeline, *, output_map=("images", "targets"), targets_format="tuple",
                 max_boxes=None, max_batches=None, epochs_shuffle=True, backend_tensors=False,
                 workers=1, use_multiprocessing=False, max_queue_size=10):
        super().__init__(workers=workers, use_multiprocessing=use_multiprocessing,
                         max_queue_size=max_queue_size)
        pipeline.build()
        self.output_map = tuple(output_map)
        if len(set(self.output_map)) != len(self.output_map):
            raise ValueError(f"output_map has repeated names: {list(self.output_map)}")
        if targets_format not in _TARGET_FORMATS:
            raise ValueError(f"targets_format must be one of {_TARGET_FORMATS}, "
                             f"not {targets_format!r}")
        self.targets_format, self.max_boxes = targets_format, max_boxes
        self.epochs_shuffle, self.backend_tensors = bool(epochs_shuffle), bool(backend_tensors)
        self.epoch = pipeline.epoch
        self._pipe = pipeline
        self._length = len(pipeline)
        if max_batches is not None:
            self._length = min(self._length, int(max_batches))
        if self._length < 1:
            raise ValueError("the sequence has no batches (an empty reader, or max_batches < 1)")
        self._device = pipeline.has_device_stage
        self._device_id = pipeline.device_id or 0
        self._lock = threading.Lock()
        self._warm = False
        self._pid = os.getpid()
        self._blob = None
        if use_multiprocessing:
            if self._device:
                raise ValueError("use_multiprocessing=True needs a CPU pipeline: CUDA does not "
                                 "survive a fork; use threads (workers=N) with a GPU pipeline")
            try:
                self._blob = pipeline.serialize()
            except Exception as e:
                raise ValueError("use_multiprocessing=True rebuilds the pipeline in each worker "
                                 f"from pipeline.serialize(), which failed: {e}") from e

    # ---- Sequence protocol --------------------------------------------------------------------
    def __len__(self) -> int:
        """Batches per epoch: ``len(pipeline)`` (or ``max_batches``, if fewer)."""
        return self._length

    @property
    def num_batches(self) -> int:
        return self._length

    @property
    def pipeline(self):
        """The pipeline this process runs (rebuilt once in a worker process)."""
        if os.getpid() != self._pid or self._pipe is None:
            if self._blob is None:
                raise RuntimeError("this DetaugSequence runs in another process than the one it "
                                   "was made in: create it with use_multiprocessing=True")
            from ..pipeline import Pipeline

            self._pipe, self._pid, self._warm = Pipeline.deserialize(self._blob), os.getpid(), False
            self._lock = threading.Lock()
        return self._pipe

    def __getitem__(self, index):
        """Batch ``index`` of the current epoch as ``(x, y)``.

        Returns NumPy arrays (or backend tensors with ``backend_tensors=True``). Each batch is a
        fresh copy on the host, not shared with the pipeline: it stays valid indefinitely.
        """
        index = int(index)
        if index < 0:
            index += self._length
        if not 0 <= index < self._length:
            raise IndexError(f"batch {index} out of range (0..{self._length - 1})")
        named = batch_to_numpy(self._run(index), self.output_map, max_boxes=self.max_boxes)
        xy = split_xy(named, self.output_map, self.targets_format)
        if self.backend_tensors:
            import keras

            xy = _map_arrays(keras.ops.convert_to_tensor, xy)
        return xy

    def _run(self, index):
        """The pipeline's outputs for ``index``, after the batch's device work has completed."""
        pipe = self.pipeline
        if not self._device:
            if self._warm:
                return pipe.run_batch(index, epoch=self.epoch)
            with self._lock:  # the first batch creates the pipeline's executor
                outs = pipe.run_batch(index, epoch=self.epoch)
                self._warm = True
            return outs
        import cupy

        with cupy.cuda.Device(self._device_id):  # the current device is per thread
            with self._lock:
                outs = pipe.run_batch(index, epoch=self.epoch)
                event = pipe.last_event
            if event is not None:
                event.synchronize()
            return outs

    def on_epoch_end(self):
        """Next epoch (new shuffle, new random draws) unless ``epochs_shuffle=False``. Keras'
        ``fit`` also calls this once before its first epoch (after peeking at the data), so the
        first epoch it trains on is the pipeline's current epoch + 1."""
        if self.epochs_shuffle:
            self.epoch += 1

    def __getstate__(self):  # pickled for spawned worker processes: no pipeline, no lock
        if self._blob is None:
            raise TypeError("pickling a DetaugSequence needs use_multiprocessing=True")
        state = dict(self.__dict__)
        state.update(_pipe=None, _lock=None, _pid=None)
        return state


_CLASS = None


def _sequence_class():
    global _CLASS
    if _CLASS is None:
        import keras

        class DetaugSequence(_SequenceMixin, keras.utils.PyDataset):
            """A ``keras.utils.PyDataset`` whose ``seq[i]`` is batch ``i`` of a detaug pipeline.

            Args:
                pipeline: a detaug Pipeline whose source has a size (a reader).
                output_map: a name for each pipeline output, in order. x is the first output
                    (the images, one dense array), y the rest: the single remaining output, or a
                    tuple (``targets_format="tuple"``) or a dict keyed by these names
                    (``"dict"``) of them, e.g. RetinaNet's ``(regression, classification)``.
                targets_format: 'tuple' or 'dict', for two or more targets.
                max_boxes: a BoxBatch output is padded to this many boxes (None: to the batch's
                    largest count) and handed over as ``{'boxes': (B, M, 4) float32, 'labels':
                    (B, M) int64, <field>: (B, M), 'counts': (B,) int32}`` (padding: boxes 0,
                    labels and fields -1). A PaddedBoxes output (``fn.pad_boxes``) is passed as is.
                max_batches: serve only the first ``max_batches`` batches of each epoch (short
                    runs; Keras' own ``steps_per_epoch`` below ``len`` does not restart epochs
                    cleanly with a PyDataset).
                epochs_shuffle: ``on_epoch_end`` moves to the next epoch (new shuffle and new
                    augmentation draws); False keeps every epoch identical (validation data).
                backend_tensors: return tensors of the Keras backend
                    (``keras.ops.convert_to_tensor``) instead of NumPy arrays.
                workers, use_multiprocessing, max_queue_size: Keras' PyDataset parallelism.

            ``epoch`` is the epoch that ``seq[i]`` reads (settable, e.g. to resume); it starts at
            the pipeline's current epoch. Batches are fresh NumPy copies, valid indefinitely.
            """

        DetaugSequence.__qualname__ = "DetaugSequence"  # picklable by reference (spawn)
        DetaugSequence.__module__ = __name__
        _CLASS = DetaugSequence
    return _CLASS


def __getattr__(name):
    if name == "DetaugSequence":
        return _sequence_class()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
