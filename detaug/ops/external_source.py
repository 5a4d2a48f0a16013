"""external_source: data from Python (a per-sample callable, an iterable of batches, or
``feed_input``), with DALI's SampleInfo and BatchInfo, and turning fed values into batches."""
from __future__ import annotations

import inspect
from dataclasses import dataclass

import numpy as np

from ..core.batch import BoxBatch, EncodedBatch, ImageBatch, concat_boxes
from ..graph.arg_check import DTYPES, FREE, STRS, count, declare_kinds, declare_ranges
from .registry import register
from .sources import _SHARDING, _Source

_EXTERNAL_HINTS = {
    "parallel": "DALI's source worker processes; detaug calls the source in its host stage",
    "prefetch_queue_depth": "DALI's source queue; the Pipeline's prefetch_queue_depth sets detaug's",
    "no_copy": "DALI's copy avoidance", "blocking": "DALI's parallel-source tuning",
    "cuda_stream": "DALI's copy stream", "use_copy_kernel": "DALI's copy tuning"}


@dataclass
class SampleInfo:
    """What a per-sample external source callable receives (as DALI's SampleInfo)."""
    idx_in_epoch: int
    idx_in_batch: int
    iteration: int
    epoch_idx: int


@dataclass(frozen=True)
class BatchInfo:
    """What a per-batch external source callable receives with ``batch_info=True`` (DALI's)."""
    iteration: int
    epoch_idx: int


def _positional_arity(f) -> int:
    """How many positional arguments callable ``f`` can take (0 or more)."""
    try:
        params = inspect.signature(f).parameters.values()
    except (TypeError, ValueError):  # a builtin without a signature: assume DALI's one argument
        return 1
    P = inspect.Parameter
    if any(p.kind is P.VAR_POSITIONAL for p in params):
        return 1
    return sum(1 for p in params if p.kind in (P.POSITIONAL_ONLY, P.POSITIONAL_OR_KEYWORD))


def host_sample(s):
    """One fed sample as a host NumPy array: torch tensors (on any device) and cupy arrays are
    copied to the host; anything else goes through np.asarray."""
    mod = type(s).__module__ or ""
    if mod.startswith("torch"):
        return s.detach().cpu().numpy()
    if mod.startswith("cupy"):
        return s.get()
    return np.asarray(s)


def to_batch_value(samples: list, device="cpu", sizes=None, layout=None):
    """Turn a list of per-sample values into the graph's batch types: bytes -> encoded images;
    dicts with 'boxes' -> a BoxBatch; 3-D uint8 arrays (layout None or 'HWC') and float32 HWC
    arrays of 1 or 3 channels (layout 'HWC') -> an ImageBatch;
    other arrays stacked where they share a shape and dtype, else kept as a list (a ragged batch,
    as DALI's TensorList: e.g. 1-D uint8 arrays of encoded files for a decoder)."""
    if samples and isinstance(samples[0], (bytes, bytearray)):
        return EncodedBatch([np.frombuffer(s, np.uint8) for s in samples],
                            [f"<external sample {i}>" for i in range(len(samples))])
    if samples and isinstance(samples[0], dict) and "boxes" in samples[0]:
        canvas = sizes if sizes is not None else np.zeros((len(samples), 2), np.int64)
        return concat_boxes([np.asarray(s["boxes"], np.float32).reshape(-1, 4) for s in samples],
                            [np.asarray(s.get("labels", np.zeros(len(s["boxes"]))), np.int64)
                             for s in samples],
                            [{k: np.asarray(v) for k, v in s.items() if k not in ("boxes", "labels")}
                             for s in samples], canvas)
    arrays = [host_sample(s) for s in samples]
    layout = None if layout is None else str(layout)
    if layout and arrays and any(a.ndim != len(layout) for a in arrays):
        raise ValueError(f"layout {layout!r} has {len(layout)} dimensions but the samples have "
                         f"{sorted({a.ndim for a in arrays})}")
    images = layout in (None, "", "HWC")
    if images and arrays and (all(a.dtype == np.uint8 and a.ndim == 3 for a in arrays) or (
            layout == "HWC" and all(a.dtype == np.float32 and a.ndim == 3 and a.shape[2] in (1, 3)
                                    for a in arrays))):
        # float32 HWC samples are images when the layout says so (the CPU's geometric ops
        # take them); without a layout they stay tensors
        return ImageBatch([np.ascontiguousarray(a) for a in arrays], "cpu")
    if not arrays:
        return np.zeros((0,))
    if all(a.shape == arrays[0].shape and a.dtype == arrays[0].dtype for a in arrays):
        return np.stack(arrays)
    return [np.ascontiguousarray(a) for a in arrays]


class LaidOut:
    """A fed batch with DALI's ``layout`` (``pipe.feed_input(node, data, layout="HWC")``)."""

    def __init__(self, data, layout):
        self.data, self.layout = data, layout


class _External(_Source):
    """external_source: a per-sample callable (``batch=False``, needs ``size``: the schedule sets
    the samples, as a reader's), or whole batches from an iterable or ``feed_input``.

    A fed batch's length sets its number of samples, and so of random draws: batch b of the
    epoch fed n samples uses the sample indices ``b * batch_size + arange(n)`` (with ``size`` and
    a shuffle or shard: the first n of those the schedule gives batch b), the indices a per-sample
    callable gets for the same positions. ``batch_size`` (with ``size``: what the last batch and
    ``last_batch_policy`` leave) is the most a fed batch may hold; a longer one raises ValueError,
    a shorter one (an iterable's last batch) is a smaller batch."""

    wraps_around = False  # pipe.run() raises StopIteration at its end, as DALI's

    def __init__(self, op, pipe):
        super().__init__(op, pipe)
        a = op.args
        self.pipe, self.source, self.batch = pipe, a["source"], a["batch"]
        self.layout, self.cycle = a["layout"], a["cycle"]
        if self.cycle not in (None, False, True, "quiet", "raise", "no"):
            raise ValueError(f"{op.name}: cycle must be True, False, 'quiet', 'raise' or 'no'")
        self.n_out = a["num_outputs"] or 1
        from ..core import types

        # one dtype for every output, or one per output (DALI's list with num_outputs)
        dts = a["dtype"] if isinstance(a["dtype"], (list, tuple)) else [a["dtype"]] * self.n_out
        if len(dts) != self.n_out:
            raise ValueError(f"{op.name}: dtype has {len(dts)} entries for {self.n_out} outputs")
        self.dtypes = [None if d is None else types.to_numpy_type(d) for d in dts]
        self.ndim = None if a["ndim"] is None else int(a["ndim"])
        self.batch_info = bool(a["batch_info"])
        self._epoch = -1
        # A per-sample callable with size= is random access (the schedule sets its samples);
        # every other source (an iterable, a generator function, a per-batch callable, a
        # per-sample callable without size=, feed_input) gives batches in order until it raises
        # StopIteration, as DALI's: they cannot be rewound to a batch.
        per_sample = callable(self.source) and not self.batch \
            and not inspect.isgeneratorfunction(self.source)
        self.fed = not (per_sample and a["size"] is not None)
        if not self.fed:
            self.size = int(a["size"])
        elif self.source is not None:
            self.restart()
        self.size = self.size if self.size is not None else a["size"]

    def restart(self, epoch=None):
        """Epoch ``epoch`` (default: the next) of an iterable source: iterate it again (a
        one-shot iterator stays spent)."""
        if self.fed and self.source is not None:
            self._epoch = self._epoch + 1 if epoch is None else int(epoch)
            self._iter = self._batches(self._epoch)

    def _batches(self, epoch):
        """The fed batches of one epoch, by the form of ``source`` (DALI's forms): an iterable;
        a generator function (called, then iterated); a per-batch callable, called with no
        argument, the iteration (an int) or, with ``batch_info=True``, a :class:`BatchInfo`;
        a per-sample callable (``batch=False``), called with no argument or a
        :class:`SampleInfo` once per sample. A callable ends the epoch by raising
        StopIteration (a batch it breaks off is dropped, as DALI's)."""
        src = self.source
        if inspect.isgeneratorfunction(src):
            yield from src()
            return
        if not callable(src):
            yield from src
            return
        takes = _positional_arity(src)
        bs = self.pipe.batch_size
        it = 0
        while True:
            try:
                if self.batch:
                    info = BatchInfo(it, epoch) if self.batch_info else it
                    data = src(info) if takes else src()
                else:
                    data = [src(SampleInfo(it * bs + k, k, it, epoch)) if takes else src()
                            for k in range(bs)]
                    if self.n_out > 1:
                        data = tuple(list(col) for col in zip(*data))
            except StopIteration:
                return
            yield data
            it += 1

    def prepare(self, key):
        """The data of the launch ``key = (epoch, first batch, count)``: ``count`` fed batches,
        the next ones of the iterable or of the ``feed_input`` queue. A batch is one list (or
        array, along axis 0) of samples per output (a tuple of them for num_outputs > 1), all of
        the same length: its number of samples. Returns ``{"samples": a sample list per output,
        the launch's batches one after another, "sizes": samples per batch}``, which the pipeline
        turns into the batch context's samples (one random draw each); ``{"end": True}`` when the
        iterable is spent before the launch's first batch (a launch it ends in the middle keeps
        the batches it got); None for a per-sample callable, whose samples the schedule sets."""
        if not self.fed:
            return None
        batches = []
        for _ in range(key[2]):
            data = self._next_batch()
            if data is None:
                break
            batches.append(self._outputs_of(data))
        if not batches:
            return {"end": True}
        sizes = [self._batch_len(outs) for outs in batches]
        if len(batches) == 1:
            return {"samples": batches[0], "sizes": sizes}
        return {"samples": tuple([s for outs in batches for s in outs[k]] for k in range(self.n_out)),
                "sizes": sizes}

    def _next_batch(self):
        """The next fed batch, or None when the iterable is spent."""
        if self.source is None:
            fed = self.pipe.dali.fed.get(self.op.name) or []
            if not fed:
                raise RuntimeError(f"{self.op.name}: no data fed; call pipe.feed_input() in iter_setup()")
            data = fed.pop(0)
            if isinstance(data, LaidOut):
                self.layout, data = data.layout, data.data
            return data
        try:
            return next(self._iter)
        except StopIteration:
            if self.cycle not in (True, "quiet"):
                return None
        self._iter = self._batches(self._epoch)  # cycle=True / 'quiet': start again, no end
        try:
            return next(self._iter)
        except StopIteration:
            return None

    def _outputs_of(self, data):
        """A fed batch as a tuple of one batch per output."""
        if self.n_out == 1:
            return (data,)
        if not isinstance(data, (tuple, list)) or len(data) != self.n_out:
            raise ValueError(f"{self.op.name}: num_outputs={self.n_out}, so each fed batch must be a "
                             f"tuple of {self.n_out} batches (one per output), got {type(data).__name__}"
                             + (f" of {len(data)}" if isinstance(data, (tuple, list)) else ""))
        return tuple(data)

    def _batch_len(self, outs):
        """Samples in a fed batch: the length of every output's batch (along axis 0), which must
        be the same for all outputs."""
        try:
            lens = [len(o) for o in outs]
        except TypeError:
            raise TypeError(f"{self.op.name}: a fed batch must be a list or array of samples per "
                            f"output, got {[type(o).__name__ for o in outs]}") from None
        if len(set(lens)) > 1:
            raise ValueError(f"{self.op.name}: its outputs were fed batches of different sizes {lens}: "
                             "every output needs one entry per sample")
        return lens[0]

    def _check_ndim(self, col):
        if self.ndim is None:
            return
        for s in col:
            if isinstance(s, dict):
                raise ValueError(f"{self.op.name}: ndim={self.ndim} is for array samples, "
                                 "not box dicts")
            nd = np.ndim(host_sample(s))
            if nd != self.ndim:
                raise ValueError(f"{self.op.name}: declared ndim={self.ndim} but a sample has "
                                 f"{nd} dimensions")

    @staticmethod
    def _positions(ctx):
        """Each sample's place in the epoch order (the callable's ``idx_in_epoch``). A sample
        that replaces a skipped one (``on_error='skip'``) is the next record of the order: it
        has that record's own place (``BatchMaking.make_ctx``), so that the callable is asked for
        another sample (asked for the same place again, it gave the same bad sample until the
        whole order failed)."""
        return np.asarray(ctx.positions, np.int64)

    def read(self, ctx, payload):
        if payload is None:
            infos = [SampleInfo(int(p), k, ctx.batch_index, ctx.epoch)
                     for k, p in enumerate(self._positions(ctx))]
            rows = ctx.map_samples(lambda k: self.source(infos[k]), len(infos))
            if self.n_out == 1:
                rows = [r[0] if isinstance(r, tuple) and len(r) == 1 else r for r in rows]
            cols = list(zip(*rows)) if self.n_out > 1 else [rows]
        else:
            cols = payload["samples"]
        outs, sizes = [], None
        for col, dtype in zip(cols, self.dtypes):
            self._check_ndim(col)
            v = to_batch_value(list(col), sizes=sizes, layout=self.layout)
            got = v.dtype if isinstance(v, np.ndarray) else (
                v[0].dtype if isinstance(v, list) and v and hasattr(v[0], "dtype") else None)
            if dtype is not None and got is not None and got != dtype:
                raise TypeError(f"{self.op.name}: declared dtype={dtype} but was given {got} "
                                "data (as DALI, the data is not converted)")
            if isinstance(v, ImageBatch):
                sizes = v.sizes()
            outs.append(v)
        for k, v in enumerate(outs):
            if isinstance(v, BoxBatch) and sizes is not None:
                outs[k] = v.replace(canvas=sizes)
        if payload is not None:  # a fed batch's samples cannot be replaced (decode.py reads this)
            ctx.fed_values = getattr(ctx, "fed_values", set()) | {id(v) for v in outs}
        return tuple(outs)


def _positional_source(inputs, kwargs):
    """DALI's ``fn.external_source(source)``: ``source`` is its first positional parameter."""
    if len(inputs) == 1 and "source" not in kwargs:
        return (), {**kwargs, "source": inputs[0]}
    return inputs, kwargs


declare_kinds("external_source", source=FREE, cycle=FREE, dtype=DTYPES, layout=STRS)
declare_ranges("external_source", num_outputs=count(1, 1024), size=count(0), ndim=count(0, 8),
               shard_id=count(0), num_shards=count(1))
register("external_source", devices=("cpu",), inputs=(0, 0), kind="source",
         rewrite=_positional_source,
         outputs=lambda n, a: a["num_outputs"] or 1,
         args={"source": None, "num_outputs": None, "batch": True, "batch_info": False,
               "size": None, **_SHARDING,
               "layout": None, "dtype": None, "ndim": None, "cycle": None, "parallel": False,
               "prefetch_queue_depth": 1, "no_copy": None, "blocking": None, "cuda_stream": None,
               "use_copy_kernel": None},
         hints=_EXTERNAL_HINTS,
         arg_docs={"ndim": "the number of dimensions each sample must have (checked)",
                   "layout": "DALI's layout of each sample ('HWC': 3-D uint8 samples are images; "
                             "another layout keeps them plain arrays)",
                   "dtype": "the element type the data must have (checked, not converted)",
                   "batch_info": "a per-batch callable gets a BatchInfo (iteration, epoch_idx) "
                                 "instead of the iteration number",
                   "size": "samples per epoch of a per-sample callable: its samples are then "
                           "random access (any batch, any order); without it the callable is "
                           "called in order until it raises StopIteration (DALI's epoch end)",
                   "cycle": "True / 'quiet': restart the iterable when it ends (an endless "
                            "source); 'raise' / None: the epoch ends with it"},
         output_spec="images (uint8 HWC), encoded bytes, boxes dicts, or stacked arrays",
         doc="data from Python: an iterable of batches, a per-sample callable (random access), "
             "or feed_input")(_External)
