"""Keras adapter: a ``keras.utils.PyDataset`` (Keras' ``Sequence``) over a pipeline.

keras is imported on first use of :class:`DetaugSequence` (a module ``__getattr__`` builds the
class then), never by ``import detaug`` or by importing this module. Set ``KERAS_BACKEND``
before that first use (there is no default without TensorFlow).

``seq[i]`` is batch ``i`` of the epoch ``seq.epoch`` holds when it is called, computed on its
own with ``pipeline.run_batch(i, epoch=seq.epoch)``: any order, any thread, the same ``i`` gives
the same batch within an epoch (every random draw is keyed by seed, op, epoch and the record's
index, docs/design.md "Randomness"). ``on_epoch_end`` moves to the next epoch: a new shuffle and new
draws. ``seq.get_batch(i, epoch=e)`` is batch ``i`` of any epoch ``e``.

Workers (``workers=N``, threads or processes) are the sequence's own, not Keras': Keras 3's
enqueuer keeps the batches it fetched but did not hand out (after ``fit`` peeks at one batch to
build the model, or a run stopped early) and hands them out first in the next epoch, so with its
workers ``fit`` trained on batches of the wrong epoch, in another order than with one worker. The
sequence therefore reports ``workers == 1`` and ``use_multiprocessing == False`` to Keras
(``seq[i]`` called in Keras' order, in the main process, ``on_epoch_end`` between epochs, nothing
carried over) and computes the next batches of the epoch ahead itself, keyed by (epoch, index):
``N - 1`` in its threads, or ``N`` in its worker processes.

Thread safety (Keras' ``workers=N`` with threads): ``Pipeline.run_batch`` keeps no per-call state
on the pipeline for a CPU pipeline once its executor exists, so CPU batches run concurrently
(the first call is serialised, since it creates the executor). A pipeline with a device stage
reports its batch's event through the shared attribute ``pipeline.last_event``, and its GPU
decoder is shared, so there each ``run_batch`` and the read of its event are serialised by a lock
of the sequence; the copy to the host runs outside the lock.

Processes (``use_multiprocessing=True``): the sequence's worker processes (a
``concurrent.futures.ProcessPoolExecutor``, started on the first batch computed ahead) each
rebuild the pipeline from ``pipeline.serialize()`` on their first batch (a forked copy of the
pipeline's thread pools would not run) and send the batch back as NumPy arrays; the graph's
arguments must therefore be data (``serialize()`` refuses an external source's callable), and
only CPU pipelines are allowed (CUDA does not survive a fork). ``seq.close()`` (or garbage collection) stops them.
"""
from __future__ import annotations

import os
import threading
import warnings

from typing import TYPE_CHECKING, Any, Callable, Mapping, Sequence, Union

import numpy as np

from ..core import backend
from ..core.batch import BoxBatch, ImageBatch
from ..ops.boxes import PaddedBoxes

if TYPE_CHECKING:
    from ..pipeline import Pipeline

_TARGET_FORMATS = ("tuple", "dict")
# what x= / y= take: a name, a tuple of names, {keras name: name}, or f(outputs) -> anything
Selection = Union[str, Sequence[str], Mapping[str, str], Callable[[dict], Any]]


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
    host, padded as ``fn.pad_boxes`` (boxes 0, labels and fields -1; shaped fields as it pads
    them: keypoints 0, polygons and oriented boxes NaN). M is ``max_boxes`` or the batch's
    largest count."""
    from ..core.instances import trim_polygons
    from ..ops.instance_fields import pad_fields

    valid = None if bb.valid is None else np.asarray(_fresh(bb.valid), bool)
    sample = bb.sample_index()
    counts = np.bincount(sample if valid is None else sample[valid], minlength=bb.batch_size)
    largest = int(counts.max()) if len(counts) else 0
    m = largest if max_boxes is None else int(max_boxes)
    if largest > m:
        warnings.warn(f"output {name!r}: a sample has {largest} boxes, more than max_boxes={m}; "
                      "the first max_boxes are kept")
    fields = {"labels": _fresh(bb.labels), **{k: _fresh(v) for k, v in bb.fields.items()}}
    if bb.device == "gpu" and "polygons" in fields:  # the GPU leaves NaN rows past the CPU's P
        fields["polygons"] = trim_polygons(fields["polygons"])
    boxes, fields, cnt = pad_fields(_fresh(bb.boxes), fields, valid, bb.offsets, m)
    return {"boxes": boxes, **fields, "counts": cnt}


def batch_to_numpy(outputs: Sequence, output_map: Sequence[str], *,
                   max_boxes: int | None = None) -> dict:
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


def split_xy(named: dict, output_map: Sequence[str], targets_format: str = "tuple") -> tuple:
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


def _flat_names(named: dict) -> dict:
    """Every name a selection may use: each output's name, and for an output that is a dict of
    arrays (padded boxes) ``"<output>.<field>"`` and, where no other output has it, the bare
    field name (``"boxes"``, ``"labels"``, ``"counts"``, ...)."""
    flat, bare = {}, {}
    for name, v in named.items():
        flat[name] = v
        if isinstance(v, dict):
            for k, a in v.items():
                flat[f"{name}.{k}"] = a
                bare.setdefault(k, []).append(a)
    for k, values in bare.items():
        if k not in flat and len(values) == 1:
            flat[k] = values[0]
    return flat


def select(named: dict, spec: Selection, what: str) -> Any:
    """The part of one batch that ``spec`` names: a name -> that array (or dict), a tuple or list
    of names -> a tuple, a dict ``{keras_name: name}`` -> a dict, a callable -> ``spec(named)``.
    An unknown name raises ValueError listing the available ones."""
    if callable(spec):
        return spec(named)
    flat = _flat_names(named)

    def one(n):
        if not isinstance(n, str):
            raise TypeError(f"{what}: a selection is a name, a tuple or dict of names or a "
                            f"callable, not {type(n).__name__}")
        if n not in flat:
            raise ValueError(f"{what}={n!r} is not an output of this pipeline; available: "
                             f"{sorted(flat)}")
        return flat[n]

    if isinstance(spec, dict):
        return {k: one(v) for k, v in spec.items()}
    if isinstance(spec, (tuple, list)):
        return tuple(one(v) for v in spec)
    return one(spec)


# ---- the sequence ------------------------------------------------------------------------------
class _SequenceMixin:
    """The body of DetaugSequence; combined with ``keras.utils.PyDataset`` on first use."""

    def __init__(self, pipeline: Pipeline, *, x: Selection | None = None,
                 y: Selection | None = None, output_map: Sequence[str] = ("images", "targets"),
                 targets_format: str = "tuple", max_boxes: int | None = None,
                 max_batches: int | None = None, epochs_shuffle: bool = True,
                 backend_tensors: bool = False, workers: int = 1, use_multiprocessing: bool = False,
                 max_queue_size: int = 10) -> None:
        super().__init__(workers=workers, use_multiprocessing=use_multiprocessing,
                         max_queue_size=max_queue_size)
        self.x, self.y = x, y
        # Keras sees one worker and no processes (it calls seq[i] in order, on_epoch_end between
        # epochs, nothing carried over); the sequence computes the next batches of the epoch in
        # its own threads or processes (see the module docstring)
        self._procs = bool(use_multiprocessing)
        self._ahead_n = max(int(workers), 1) if self._procs else max(int(workers) - 1, 0)
        self._ahead = {}
        self._ahead_lock = threading.Lock()
        self._ahead_pool = None
        self._last = None
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
        self._check_selection_names()

    def _check_selection_names(self) -> None:
        """An unknown name in ``x`` / ``y`` raises now, not at the first batch: names of
        ``output_map`` pass as they are; any other (``"<output>.<field>"``, a bare field name
        such as ``"labels"``) is looked up in batch 0's outputs, computed once here."""
        names = [n for spec in (self.x, self.y) if spec is not None and not callable(spec)
                 for n in (spec.values() if isinstance(spec, Mapping) else
                           [spec] if isinstance(spec, str) else spec)]
        unsure = [n for n in names if not isinstance(n, str) or n not in self.output_map]
        if unsure:
            self._numpy_batch(0, self.epoch)  # raises ValueError / TypeError naming the bad one

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

    @property
    def workers(self):
        """What Keras reads: 1 when the sequence runs its own workers (``workers=N``, or
        processes), so that Keras' enqueuer never carries batches across an epoch end."""
        return 1 if getattr(self, "_ahead_n", 0) else self._workers

    @workers.setter
    def workers(self, value):
        self._workers = value

    @property
    def use_multiprocessing(self):
        """What Keras reads: always False (process workers are the sequence's own)."""
        return False

    @use_multiprocessing.setter
    def use_multiprocessing(self, value):
        self._use_multiprocessing = value

    @property
    def thread_workers(self) -> int:
        """Threads of this sequence (``workers`` when threads were asked for, else 0)."""
        return self._ahead_n + 1 if (self._ahead_n and not self._procs) else 0

    @property
    def process_workers(self) -> int:
        """Worker processes of this sequence (``workers`` with ``use_multiprocessing``, else 0)."""
        return self._ahead_n if self._procs else 0

    def __getitem__(self, index: int) -> tuple:
        """Batch ``index`` of epoch ``self.epoch`` (read at this call) as ``(x, y)``:
        ``get_batch(index, self.epoch)``.

        Returns NumPy arrays (or backend tensors with ``backend_tensors=True``). Each batch is a
        fresh copy on the host, not shared with the pipeline: it stays valid indefinitely.
        """
        index = self._check_index(index)
        epoch = self.epoch
        with self._ahead_lock:
            fut = self._ahead.pop((epoch, index), None)
        if self._ahead_n:  # submitted before this batch is computed, so the workers start now
            self._look_ahead(index, epoch)
        if fut is None:
            return self.get_batch(index, epoch)
        return self._tensors(fut.result())

    def _check_index(self, index) -> int:
        index = int(index)
        if index < 0:
            index += self._length
        if not 0 <= index < self._length:
            raise IndexError(f"batch {index} out of range (0..{self._length - 1})")
        return index

    def get_batch(self, index: int, epoch: int | None = None) -> tuple:
        """Batch ``index`` of ``epoch`` (default ``self.epoch``) as Keras gets it: the selection
        of ``pipeline.run_batch(index, epoch=epoch)``'s outputs. Any order, any thread."""
        index = self._check_index(index)
        epoch = self.epoch if epoch is None else int(epoch)
        return self._tensors(self._numpy_batch(index, epoch))

    def _numpy_batch(self, index: int, epoch: int):
        """``get_batch`` before the conversion to backend tensors (what a worker process sends)."""
        named = batch_to_numpy(self._run(index, epoch), self.output_map,
                               max_boxes=self.max_boxes)
        return self._xy(named)

    def _tensors(self, xy):
        if self.backend_tensors:
            import keras

            xy = _map_arrays(keras.ops.convert_to_tensor, xy)
        return xy

    def _xy(self, named):
        if self.x is None and self.y is None:
            return split_xy(named, self.output_map, self.targets_format)
        xs = select(named, self.output_map[0] if self.x is None else self.x, "x")
        if self.y is None:
            rest = [n for n in self.output_map if n != (self.x if isinstance(self.x, str)
                                                         else self.output_map[0])]
            if not rest:
                return (xs,)
            return xs, (named[rest[0]] if len(rest) == 1 else
                        {k: named[k] for k in rest} if self.targets_format == "dict" else
                        tuple(named[k] for k in rest))
        return xs, select(named, self.y, "y")

    def _look_ahead(self, index, epoch):
        """After batch ``index`` of ``epoch``, compute the next ``workers - 1`` batches of that
        epoch in this sequence's threads, when the batches are asked for in order (Keras'
        ``fit(shuffle=False)``); a batch computed ahead is keyed by its epoch and index, so it
        is only ever handed out as that batch of that epoch."""
        sequential = self._last is None or index in (0, self._last[1] + 1)
        self._last = (epoch, index)
        if not sequential:
            return
        import concurrent.futures as cf
        import contextlib

        from ..runtime.host_workers import _forking

        # a process pool forks as work is submitted: OpenCV set to one thread around it (its
        # thread pool does not survive a fork: the children hung in CI), as for host workers;
        # threads fork nothing and keep OpenCV's setting
        with self._ahead_lock, (_forking() if self._procs else contextlib.nullcontext()):
            if self._ahead_pool is None:
                if self._procs:
                    self._ahead_pool = cf.ProcessPoolExecutor(
                        self._ahead_n, initializer=_init_worker_process, initargs=(self,))
                else:
                    self._ahead_pool = cf.ThreadPoolExecutor(self._ahead_n,
                                                             thread_name_prefix="detaug-keras")
            for key in [k for k in self._ahead if k[0] != epoch or k[1] <= index]:
                self._ahead.pop(key).cancel()
            work = _worker_process_batch if self._procs else self._numpy_batch
            for j in range(index + 1, min(index + 1 + self._ahead_n, self._length)):
                if (epoch, j) not in self._ahead:
                    self._ahead[(epoch, j)] = self._ahead_pool.submit(work, j, epoch)

    def _run(self, index, epoch):
        """The pipeline's outputs for batch ``index`` of ``epoch``, after the batch's device work
        has completed."""
        pipe = self.pipeline
        if not self._device:
            if self._warm:
                return pipe.run_batch(index, epoch=epoch)
            with self._lock:  # the first batch creates the pipeline's executor
                outs = pipe.run_batch(index, epoch=epoch)
                self._warm = True
            return outs
        import cupy

        with cupy.cuda.Device(self._device_id):  # the current device is per thread
            with self._lock:
                outs = pipe.run_batch(index, epoch=epoch)
                event = pipe.last_event
            if event is not None:
                event.synchronize()
            return outs

    def on_epoch_end(self) -> None:
        """Next epoch (new shuffle, new random draws) unless ``epochs_shuffle=False``. Keras'
        ``fit`` also calls this once before its first epoch (after peeking at the data), so the
        first epoch it trains on is the pipeline's current epoch + 1."""
        if self.epochs_shuffle:
            self.epoch += 1
        with self._ahead_lock:
            for key in [k for k in self._ahead if k[0] != self.epoch]:
                self._ahead.pop(key).cancel()
        self._last = None

    def close(self) -> None:
        """Stop this sequence's worker threads or processes (they start again when needed)."""
        with self._ahead_lock:
            pool, self._ahead_pool = self._ahead_pool, None
            for fut in self._ahead.values():
                fut.cancel()
            self._ahead.clear()
        if pool is not None:
            pool.shutdown(wait=True, cancel_futures=True)

    def __del__(self):
        pool = getattr(self, "_ahead_pool", None)
        if pool is not None and getattr(self, "_pid", None) == os.getpid():
            pool.shutdown(wait=False, cancel_futures=True)

    def __getstate__(self):  # pickled for spawned worker processes: no pipeline, no lock
        if self._blob is None:
            raise TypeError("pickling a DetaugSequence needs use_multiprocessing=True")
        state = dict(self.__dict__)
        state.update(_pipe=None, _lock=None, _pid=None, _ahead={}, _ahead_lock=None,
                     _ahead_pool=None)
        return state

    def __setstate__(self, state):
        self.__dict__.update(state)
        self._ahead_lock = threading.Lock()


# ---- the sequence's worker processes -------------------------------------------------------------
_WORKER_SEQUENCE = None


def _init_worker_process(seq):
    """A worker process's initializer: keep the sequence (its pipeline is rebuilt from
    ``serialize()`` on first use, since the process id differs); nothing computed ahead here."""
    global _WORKER_SEQUENCE
    from ..runtime import host_workers

    host_workers._IN_WORKER = True  # its pipeline runs in threads here: no nested forks
    seq._ahead_n, seq._ahead, seq._ahead_pool = 0, {}, None
    seq._ahead_lock = threading.Lock()
    _WORKER_SEQUENCE = seq


def _worker_process_batch(index: int, epoch: int):
    """Batch ``index`` of ``epoch`` as NumPy arrays, computed in a worker process."""
    return _WORKER_SEQUENCE._numpy_batch(index, epoch)


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
                x, y: what a batch hands Keras, chosen by name (None: the default below).
                    A name gives that array (or dict of arrays), a tuple of names a tuple, a dict
                    ``{keras_name: name}`` a dict (to match a model's named outputs), a callable
                    ``f(outputs)`` whatever it returns (``outputs``: ``{name: value}``, as
                    below). Names: each ``output_map`` name; for a box output, its fields as
                    ``"<output>.<field>"`` and, when no other output has that field, bare
                    (``"boxes"``, ``"labels"``, ``"counts"``, ``"difficult"``, ...). The rest is
                    dropped. An unknown name raises ValueError listing the available names.
                    E.g. ``x="images", y="boxes"`` for a model with one ``boxes`` output, or
                    ``y=("boxes", "labels")``.
                    Default (both None): x is the first output; y the single other output (for
                    boxes: the dict ``{'boxes', 'labels', <fields>, 'counts'}``), or a tuple /
                    dict (``targets_format``) of the others; ``(x,)`` with a single output. With
                    only ``x`` given, y is that default over the outputs other than the first.
                workers: with threads (``use_multiprocessing=False``), N > 1 computes up to
                    N - 1 batches ahead in the sequence's own threads (Keras sees 1 worker; see
                    "Epochs" below). Look-ahead follows batches asked for in order: use
                    ``fit(..., shuffle=False)`` (the reader already shuffles records every epoch;
                    Keras' ``shuffle`` only reorders whole batches, and then nothing is computed
                    ahead). With ``use_multiprocessing=True``, N worker processes of the sequence
                    compute the next N batches ahead the same way.
                use_multiprocessing: process workers instead of threads (CPU pipelines).
                max_queue_size: Keras' PyDataset argument (unused: Keras runs no enqueuer).

            Epochs: ``epoch`` is the epoch that ``seq[i]`` reads, at the moment of the call
            (settable, e.g. to resume); it starts at the pipeline's current epoch and
            ``on_epoch_end`` adds one (unless ``epochs_shuffle=False``). ``seq[i]`` is exactly
            ``pipeline.run_batch(i, epoch=seq.epoch)`` converted, also for a batch computed
            ahead: that one is keyed by the epoch it was computed for and is handed out only as
            that batch of that epoch; ``on_epoch_end`` drops the others. So ``fit`` trains epoch
            k (counting from 1) on ``get_batch(i, epoch=start + k)`` for every ``i``, in Keras'
            order, whatever ``workers`` is (``start``: the pipeline's epoch when the sequence
            was made; ``fit`` calls ``on_epoch_end`` once after peeking at one batch), with
            threads or processes alike.
            Batches are fresh NumPy copies, valid indefinitely.
            """

        DetaugSequence.__qualname__ = "DetaugSequence"  # picklable by reference (spawn)
        DetaugSequence.__module__ = __name__
        _CLASS = DetaugSequence
    return _CLASS


def __getattr__(name):
    if name == "DetaugSequence":
        return _sequence_class()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
