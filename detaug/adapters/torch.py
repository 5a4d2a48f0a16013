"""PyTorch adapter: an iterator that hands a pipeline's batches over as torch tensors.

torch is imported on first use, never by ``import detaug``. Arrays cross without copies:
host NumPy arrays through ``torch.from_numpy``, device cupy arrays through DLPack
(``torch.from_dlpack``), after torch's current stream has been made to wait on the pipeline's
per-batch event, so no host synchronisation is needed.

Device memory: list targets are views of the pipeline's outputs, or of arrays made by cupy on
torch's current stream from the pipeline's stream-ordered device pool (the valid boxes' small
columns, the masks made from polygons; detaug/adapters/box_lists.py): torch's caching allocator
takes nothing for them. What the adapter still takes (torch's CUDA context, the masks it makes
for the batches the caller holds, its scratch: :func:`consumer_share`) is declared to the
pipeline's build, which plans within the rest of ``device_memory_budget``; make the iterator
before building the pipeline (it builds it).

Distributed training (DistributedDataParallel, one process and one pipeline per GPU, launched
with torchrun on one machine or several):

- Sharding: when torch.distributed is initialised (or torchrun's ``RANK`` / ``WORLD_SIZE`` are
  set) and the pipelines are unsharded, the iterator shards them by global rank itself
  (``Pipeline.set_shard``); pipelines created with ``shard_id, num_shards =
  shard_from_torch_distributed()`` are kept as they are. A pipeline's ``device_id`` defaults to
  ``LOCAL_RANK``. No rank reads anything another rank wrote.
- The same number of steps on every rank: the pipeline's ``shard_policy`` ('pad', the default,
  repeats a record on the short shards; 'drop' drops to the shortest) makes every shard equally
  long, so every rank's ``len(iterator)`` is the same and no all-reduce waits for a rank that has
  stopped (``detaug.core.schedule.shard_positions``).
- The same shuffle: every rank shuffles the epoch with the permutation keyed by (seed, epoch)
  and takes its part of it, so give every rank the same ``seed``. Under an initialised process
  group the iterator checks once, when it is made, that the ranks agree (seed, dataset size,
  batch size, policies, steps per epoch) and raises on every rank where they do not.
- Resume: ``state_dict()`` is (epoch, batch), the same on every rank at any step; the state of
  rank 0 resumes every rank at exactly its next batch (with the same world size; at an epoch's
  start any world size).
- Epoch ends: the pipeline prefetches the next epoch's first launches before this epoch's last
  batches are handed out, and the iterator keeps them when it moves on (``reset``), also where
  it ends an epoch before the pipeline does ('drop', a smaller ``size``).
"""
from __future__ import annotations

import contextlib
import functools
import os
import warnings

import numpy as np

from ..core import backend
from ..core.batch import BoxBatch, ImageBatch
from ..core.tensor_list import detaug_value
from ..ops.boxes import PaddedBoxes
from ..ops.instance_fields import pad_fields
from ..runtime.gpu.memory_plan import ConsumerShare
from ..runtime.run_state import StateDictError
from . import box_lists

_POLICIES = ("fill", "drop", "partial")

# torch's CUDA context on top of cupy's (its kernels, its allocator's first blocks): 96 MB
# measured on an H200 once torch.ones(1, device="cuda") ran after cupy's context
# (benchmarks/bench_memory.py --only seg, its "torch context" column)
TORCH_CONTEXT_BYTES = 100_000_000
# the small columns gathered for the batches the caller holds (boxes, labels, fields, polygons,
# the kept indices: a few hundred kB a batch of 100 boxes), rounded up to the pool's blocks
SMALL_COLUMNS_BYTES = 8 << 20


def consumer_share(boxes_format: str) -> ConsumerShare:
    """The device memory the iterator takes beside a pipeline's outputs, declared to its build
    (memory_plan.ConsumerShare): torch's CUDA context, the scratch of an in-place compaction
    (box_lists.IN_PLACE_CHUNK) and the small columns; with list targets the masks it makes of
    polygons or bitmap masks too (a plane of the canvas a box, for each batch the caller holds).
    The padded form's padded copies (``pad_fields``) are not counted."""
    return ConsumerShare(
        fixed=TORCH_CONTEXT_BYTES + box_lists.IN_PLACE_CHUNK + SMALL_COLUMNS_BYTES,
        box_planes=boxes_format == "list",
        what="the torch adapter (torch's CUDA context" + (
            ", the masks it makes" if boxes_format == "list" else "") + ", its scratch)")


def _torch():
    import torch

    return torch


def _world():
    """``(rank, world_size)`` of the initialised ``torch.distributed`` process group, else of
    torchrun's ``RANK`` / ``WORLD_SIZE`` variables, else None."""
    dist = _torch().distributed
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    rank, world = os.environ.get("RANK", "").strip(), os.environ.get("WORLD_SIZE", "").strip()
    if rank and world:
        return int(rank), int(world)
    return None


def shard_from_torch_distributed(default=(0, 1)) -> tuple:
    """``(rank, world_size)`` of the initialised ``torch.distributed`` process group, else of
    torchrun's ``RANK`` / ``WORLD_SIZE`` variables, else ``default``. Pass them to the pipeline
    as ``shard_id`` / ``num_shards``."""
    return _world() or tuple(default)


def _shard_of(pipe) -> tuple:
    """(shard_id, num_shards) that the pipeline's reader uses (a reader may override the
    pipeline's default)."""
    pipe.build()
    drv = getattr(pipe, "_driver", None)
    return tuple(getattr(drv, "shard", (pipe.shard_id, pipe.num_shards)))


def _tensor(a):
    """Zero-copy tensor of a host NumPy or device cupy array."""
    torch = _torch()
    if backend.is_device_array(a):
        return torch.from_dlpack(a)
    a = np.asarray(a)
    if not a.flags.c_contiguous and not a.flags.f_contiguous:
        a = np.ascontiguousarray(a)
    if not a.flags.writeable:  # torch cannot wrap a read-only buffer without warning
        a = a.copy()
    return torch.from_numpy(a)


def _wait_for(pipe, event):
    """Make torch's current stream (on the pipeline's device) wait on the batch's event."""
    if event is None:
        return
    import cupy

    cupy.cuda.runtime.streamWaitEvent(_torch_stream_ptr(pipe), event.ptr, 0)


def _torch_stream_ptr(pipe) -> int:
    """torch's current stream on the pipeline's device (of the calling thread), as a handle."""
    torch = _torch()
    return torch.cuda.current_stream(pipe.device_id or 0).cuda_stream


_external = {}  # (device id, handle) -> cupy's ExternalStream of one of torch's streams


def _torch_stream_for_cupy(pipe):
    """torch's current stream as a cupy stream, for the kernels run at hand-over. One object per
    stream, kept: cupy's stream-ordered allocations free on the stream object they were made on
    while it lives (else on whatever stream is current when they are freed)."""
    import cupy

    dev, ptr = pipe.device_id or 0, _torch_stream_ptr(pipe)
    s = _external.get((dev, ptr))
    if s is None:
        s = _external[(dev, ptr)] = cupy.cuda.ExternalStream(ptr, device_id=dev)
    return s


@contextlib.contextmanager
def _on_device(pipe, stream):
    """cupy's work in the block on ``stream`` of the pipeline's device, allocating from the
    pipeline's device pool (detaug/runtime/gpu/allocator.py), not the caller's default pool."""
    import cupy

    from ..runtime.gpu.allocator import allocating, device_allocator

    dev = pipe.device_id or 0
    with cupy.cuda.Device(dev), stream, allocating(device_allocator(dev)):
        yield


class DetaugIterator:
    """Iterate over detaug pipelines, yielding dicts of torch tensors.

    Args:
        pipelines: a Pipeline or a list of them (one per GPU); several are zipped and each
            step yields a list with one dict per pipeline.
        output_map: a name for each pipeline output, in order.
        boxes_format: how a BoxBatch output is handed over.
            ``"list"``: ``name -> list`` of B dicts ``{"boxes": float32 (n, 4), "labels":
            int64 (n,), <field>: (n,)}`` (torchvision detection models' targets); boxes
            carrying ``polygons`` (readers.coco(polygons=True)) also get ``masks`` uint8
            (n, H, W), the polygons rasterised on the output canvas as COCO does, and
            ``keypoints`` (n, K, 3) pass as the field they are (Mask / Keypoint R-CNN targets).
            ``"padded"``: ``name``: float32 (B, M, 4), ``name_labels``: int64 (B, M),
            ``name_counts``: int32 (B,), ``name_<field>``: (B, M); M is the batch's largest
            count; padding as ``fn.pad_boxes`` (boxes 0, labels and fields -1, bool False).
            A PaddedBoxes output (from ``fn.pad_boxes``) maps to the same names; under
            ``"list"`` it is cut to its counts (on the GPU this reads the counts on the host).
        last_batch_policy: None (the pipeline's), or 'fill' / 'drop' / 'partial'. A pipeline
            built with 'fill' can serve all three: the iterator drops or trims the wrapped
            samples of the last batch. A 'drop' or 'partial' pipeline serves only its own policy
            (and 'drop' from 'partial').
        auto_reset: start the next epoch by itself at the end of an epoch (after raising
            StopIteration), so that a ``for`` loop runs again.
        size: samples per epoch (per shard) to iterate over; default: the shard's size.
            Needed for a source without a size.
        label_offset: added to every real label (not to padding), for models that reserve 0
            for the background.
        check_ranks: under an initialised torch.distributed process group with several ranks,
            check once (one ``all_gather_object``, so every rank must make its iterator) that
            the ranks agree on what decides the steps and the shuffle; raises ValueError where
            they do not.

    Images: an ImageBatch whose samples share a size becomes one tensor (B, H, W, C) or
    (B, C, H, W) as the pipeline laid it out (zero copy when the batch is dense); ragged sizes
    give a list of B tensors. Other NumPy / cupy outputs become tensors.

    Lifetime: tensors share memory with the pipeline's outputs and stay valid as long as you
    hold them. Once you have dropped a batch's tensors, its memory goes back to the pool behind a
    wait, on the GPU, of the pipeline's streams for the work torch's current stream had queued by
    then, so a step the GPU has not finished still reads its own batch, whatever order the loop
    asks and drops in; no thread waits on the host for it (detaug/runtime/gpu/handout.py). Work on another
    stream must be registered (``Pipeline.consume_on``) or finished before the batch is dropped.
    """

    def __init__(self, pipelines, output_map=("images", "boxes"), *, boxes_format="padded",
                 last_batch_policy=None, auto_reset=False, size=None, label_offset=0,
                 check_ranks=True):
        self.pipes = list(pipelines) if isinstance(pipelines, (list, tuple)) else [pipelines]
        if not self.pipes:
            raise ValueError("DetaugIterator needs at least one pipeline")
        if boxes_format not in ("padded", "list"):
            raise ValueError(f"boxes_format must be 'padded' or 'list', not {boxes_format!r}")
        self.output_map = list(output_map)
        if len(set(self.output_map)) != len(self.output_map):
            raise ValueError(f"output_map has repeated names: {self.output_map}")
        self.boxes_format, self.auto_reset = boxes_format, bool(auto_reset)
        self.label_offset = int(label_offset)
        share = consumer_share(boxes_format)
        for p in self.pipes:
            p.build(consumer=share)  # planned within the budget less what this iterator takes
            if p.has_device_stage:  # its batches are held until torch's queued work ran
                p.consume_on("torch", functools.partial(_torch_stream_ptr, p))
        self.batch_size = self.pipes[0].batch_size
        if any(p.batch_size != self.batch_size for p in self.pipes):
            raise ValueError("zipped pipelines must have the same batch_size")
        self.policy = self._check_policy(last_batch_policy)
        self._check_shards()
        self.size = self._check_size(size)
        self._batch = self.pipes[0].state_dict()["batch"]
        self._ended = False
        if check_ranks:
            self._check_ranks_agree()

    # ---- set-up checks ------------------------------------------------------------------------
    def _check_policy(self, policy):
        base = self.pipes[0].last_batch_policy
        if any(p.last_batch_policy != base for p in self.pipes):
            raise ValueError("zipped pipelines must have the same last_batch_policy")
        policy = base if policy is None else policy
        if policy not in _POLICIES:
            raise ValueError(f"last_batch_policy must be one of {_POLICIES}")
        if policy != base and base != "fill" and not (base, policy) == ("partial", "drop"):
            raise ValueError(f"a pipeline built with last_batch_policy={base!r} cannot serve "
                             f"{policy!r}: build it with 'fill'")
        return policy

    def _check_size(self, size):
        sizes = {p: _shard_size(p) for p in self.pipes}
        sized = [p for p, n in sizes.items() if n is not None]
        if size is None:
            if not sized:
                return None
            sizes = {sizes[p] for p in sized}
            if len(sizes) > 1:
                warnings.warn(f"zipped pipelines have different shard sizes {sorted(sizes)}; "
                              f"iterating over the smallest ({min(sizes)} samples)")
            return min(sizes)
        size = int(size)
        for p in sized:
            if size > sizes[p]:
                raise ValueError(f"size={size} is more than the shard holds ({sizes[p]})")
        return size

    def _check_shards(self):
        shards = [_shard_of(p) for p in self.pipes]
        found = _world()
        if found is not None:
            rank, world = found[0], found[1] * len(self.pipes)
            if world > 1 and all(ns == 1 for _, ns in shards):
                # unsharded pipelines under torch.distributed: shard them by rank (one shard per
                # pipeline, ranks outermost), so that every rank reads its own part of each epoch
                for k, p in enumerate(self.pipes):
                    p.set_shard(rank * len(self.pipes) + k, world)
                shards = [_shard_of(p) for p in self.pipes]
            for (sid, ns) in shards:
                if ns != world:
                    warnings.warn(f"a pipeline has num_shards={ns} but torch.distributed runs "
                                  f"{world} pipeline(s) in all; create pipelines with shard_id, "
                                  "num_shards = shard_from_torch_distributed()")
        if len(self.pipes) > 1 and len({p.seed for p in self.pipes}) > 1 and \
                any(getattr(getattr(p, "_driver", None), "shuffle", False) for p in self.pipes):
            warnings.warn("zipped shards with different seeds shuffle differently: records may "
                          "repeat or be missed; give every shard the same seed")

    def _agreement(self) -> dict:
        """What every rank must have alike: it decides the steps per epoch and the shuffle."""
        out = {"steps per epoch": None if self.size is None else len(self),
               "batch_size": self.batch_size, "last_batch_policy": self.policy}
        for k, p in enumerate(self.pipes):
            drv = p._driver
            # the seed keys the shuffle; without one, seeds may differ (augmentations then do)
            out[f"pipeline {k}"] = {"seed": p.seed if drv.shuffle else None, "records": drv.size,
                                    "random_shuffle": bool(drv.shuffle),
                                    "num_shards": _shard_of(p)[1], "shard_policy": p.shard_policy}
        return out

    def _check_ranks_agree(self):
        """One all_gather of :meth:`_agreement` across the ranks; ValueError (on every rank, so
        none waits) naming what differs. A seed left to chance (seed=-1) differs by rank, which
        matters where the reader shuffles."""
        torch = _torch()
        dist = torch.distributed
        if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() < 2:
            return
        mine = self._agreement()
        got = [None] * dist.get_world_size()
        if dist.get_backend() == "nccl":  # its objects travel on the current CUDA device
            with torch.cuda.device(self.pipes[0].device_id or 0):
                dist.all_gather_object(got, mine)
        else:
            dist.all_gather_object(got, mine)
        diff = [k for k in mine if any(g[k] != got[0][k] for g in got)]
        if diff:
            per_rank = "; ".join(f"rank {r}: {g[diff[0]]}" for r, g in enumerate(got))
            raise ValueError(f"the ranks' pipelines disagree on {', '.join(diff)} ({per_rank}): "
                             "every rank needs the same seed (not -1), dataset, batch size and "
                             "policies, or their epochs differ in length or shuffle; "
                             "shard_policy='pad' or 'drop' gives every rank the same steps")

    # ---- iteration ----------------------------------------------------------------------------
    def __len__(self) -> int:
        """Batches per epoch."""
        if self.size is None:
            raise TypeError("the pipeline's source has no size: give DetaugIterator size=")
        n, b = self.size, self.batch_size
        return n // b if self.policy == "drop" else -(-n // b)

    def __iter__(self):
        return self

    def _real_count(self) -> int:
        """Samples of the current batch that belong to the epoch (the rest is wrap-around)."""
        if self.size is None:
            return self.batch_size
        return max(0, min(self.batch_size, self.size - self._batch * self.batch_size))

    def __next__(self):
        if self._ended or (self.size is not None and self._batch >= len(self)):
            self._end_epoch()
        outs = []
        for pipe in self.pipes:
            try:
                raw = tuple(map(detaug_value, pipe.run()))  # detaug's values, not DALI's
            except StopIteration:
                self._end_epoch()
            outs.append(self._convert(pipe, raw))
        n = self._real_count()
        if self.policy == "partial" and n < self.batch_size:
            outs = [_trim(d, n, self.batch_size) for d in outs]
        self._batch += 1
        return outs[0] if len(outs) == 1 else outs

    def _end_epoch(self):
        if self.auto_reset:
            self.reset()
        else:
            self._ended = True
        raise StopIteration

    def reset(self) -> None:
        """Move every pipeline to the next epoch (new shuffle). The next epoch's launches that
        a pipeline has in flight are kept, also where this iterator ends the epoch before the
        pipeline does (``Pipeline.end_epoch``)."""
        for p in self.pipes:
            if self.size is not None:
                p.end_epoch()
            else:
                p.reset()
        self._batch, self._ended = 0, False

    def state_dict(self) -> dict:
        """Where the iteration stands (every pipeline's state); resumes exactly. It holds no
        rank: under DDP every rank is at the same (epoch, batch), and one rank's state resumes
        all of them."""
        return {"pipelines": [p.state_dict() for p in self.pipes], "batch": self._batch,
                "num_shards": [_shard_of(p)[1] for p in self.pipes]}

    def load_state_dict(self, state: dict) -> None:
        """Resume at ``state``'s batch (from this rank's state or any other rank's). Resuming in
        the middle of an epoch needs the number of shards (ranks) the state was taken with."""
        if not isinstance(state, dict) or not isinstance(state.get("pipelines"), list) \
                or type(state.get("batch")) is not int or state["batch"] < 0:
            raise StateDictError("load_state_dict: not an iterator state (a dict from "
                                 "state_dict(): 'pipelines' a list, 'batch' an int >= 0), got "
                                 f"{state!r:.120}")
        states = state["pipelines"]
        if len(states) != len(self.pipes):
            raise ValueError(f"state holds {len(states)} pipelines, this iterator {len(self.pipes)}")
        shards = state.get("num_shards")
        now = [_shard_of(p)[1] for p in self.pipes]
        if shards is not None and list(shards) != now and int(state["batch"]) > 0:
            raise ValueError(f"the state was taken at batch {state['batch']} with num_shards "
                             f"{list(shards)}, this run has {now}: the shards of an epoch depend on "
                             "their number, so resume mid-epoch with the same world size (or at "
                             "an epoch's start)")
        for p, s in zip(self.pipes, states):
            p.load_state_dict(s, any_shard=True)  # another rank's state resumes this rank
        self._batch, self._ended = int(state["batch"]), False

    # ---- conversion ---------------------------------------------------------------------------
    def _convert(self, pipe, raw) -> dict:
        if len(raw) != len(self.output_map):
            raise ValueError(f"the pipeline has {len(raw)} outputs but output_map names "
                             f"{len(self.output_map)}: {self.output_map}")
        event = getattr(pipe, "last_event", None)
        _wait_for(pipe, event)
        out = {}
        may_move = None  # (box_lists.movable of this batch, worked out where a list needs it)
        for name, v in zip(self.output_map, raw):
            if isinstance(v, ImageBatch):
                out[name] = _images(v)
            elif isinstance(v, PaddedBoxes):
                out.update(self._padded_output(name, v, event))
            elif isinstance(v, BoxBatch):
                if may_move is None and self.boxes_format == "list" and v.device == "gpu":
                    may_move = box_lists.movable(raw)
                out.update(self._boxbatch_output(pipe, name, v, event, may_move))
            elif isinstance(v, np.ndarray) or backend.is_device_array(v):
                out[name] = _tensor(v)
            else:
                raise TypeError(f"output {name!r}: cannot hand a {type(v).__name__} to torch")
        return out

    def _boxbatch_output(self, pipe, name, bb, event, may_move=None) -> dict:
        if self.boxes_format == "list":
            return {name: _box_list(bb, self.label_offset, event, pipe, may_move or frozenset())}
        from ..kernels import boxes as kb

        valid, counts = _host_valid(bb, event)
        m = int(counts.max()) if len(counts) else 0
        fields = {"labels": bb.labels, **bb.fields}
        if bb.device == "gpu":
            stream = _torch_stream_for_cupy(pipe)
            with _on_device(pipe, stream):
                padded, fields, cnt = pad_fields(bb.boxes, fields, bb.valid, bb.offsets, m,
                                                 device="gpu", pad=kb.pad_boxes_cupy,
                                                 stream=stream)
        else:
            padded, fields, cnt = pad_fields(bb.boxes, fields, bb.valid, bb.offsets, m)
        return self._padded_output(name, PaddedBoxes(boxes=padded, counts=cnt, **fields), event)

    def _padded_output(self, name, pb, event) -> dict:
        torch = _torch()
        t = {k: _tensor(v) for k, v in pb.items()}
        counts = t["counts"]
        if "labels" in t:
            labels = t["labels"].to(torch.int64)
            if self.label_offset:
                real = torch.arange(labels.shape[1], device=labels.device)[None] < counts[:, None]
                labels = torch.where(real, labels + self.label_offset, labels)
            t["labels"] = labels
        if self.boxes_format == "list":
            host_counts = _to_host(pb["counts"], event).tolist()
            return {name: [{k: v[s, :c] for k, v in t.items() if k != "counts"}
                           for s, c in enumerate(host_counts)]}
        return {(name if k == "boxes" else f"{name}_{k}"): v for k, v in t.items()}


def _images(batch: ImageBatch):
    """One tensor when the samples share a size (zero copy for a dense batch), else a list."""
    torch = _torch()
    if batch.is_dense:
        return _tensor(batch.data)
    tensors = [_tensor(a) for a in batch.data]
    if tensors and all(x.shape == tensors[0].shape for x in tensors):
        return torch.stack(tensors)
    return tensors


def _shard_size(pipe):
    """Records in the pipeline's shard, or None for a source without a size."""
    try:
        return pipe.shard_size()
    except TypeError:
        return None


_copy_streams = {}  # device id -> the non-blocking stream of the iterator's small host copies


def _copy_stream(dev: int, event=None):
    """The non-blocking stream of the iterator's small host copies on device ``dev``, made to
    wait (on the device) for ``event``."""
    import cupy as cp

    s = _copy_streams.get(dev)
    if s is None:
        with cp.cuda.Device(dev):
            s = _copy_streams[dev] = cp.cuda.Stream(non_blocking=True)
    if event is not None:
        s.wait_event(event)  # on the device: the copy starts after the batch's kernels
    return s


def _to_host(a, event):
    """Host copy of an output array. A device array is copied on a non-blocking stream of its
    own, made to wait for the batch's event on the device, and the host waits once, for that
    stream (the copy and what it waits for). A copy on cupy's current stream (the legacy default
    stream) would wait for all the work the training loop has queued on torch's default stream,
    draining its queue at every step (measured: 27 ms per step of RetinaNet)."""
    if not backend.is_device_array(a):
        return np.asarray(a)
    s = _copy_stream(a.device.id, event)
    # get() copies on s and waits for s. Into an array of ours: with CUDA unified memory
    # (CUPY_ENABLE_UMP=1) a get() without out= hands back the device memory itself, unwaited
    return a.get(stream=s, out=np.empty(a.shape, a.dtype))


def _host_valid(bb: BoxBatch, event=None):
    """(valid (N,) bool, counts (B,) int64) on the host, from the host copy of the mask (the
    device mask is copied back only where a batch has no host copy)."""
    hv = bb.host_view()
    src = hv if hv is not None else bb
    valid = (np.ones(bb.num_boxes, bool) if src.valid is None
             else np.asarray(_to_host(src.valid, event), bool))
    sample = bb.sample_index()
    return valid, np.bincount(sample[valid], minlength=bb.batch_size)


def _box_list(bb: BoxBatch, label_offset: int, event=None, pipe=None,
              may_move=frozenset()) -> list:
    """B dicts of the valid boxes, labels (+offset) and fields of each sample (Mask R-CNN's
    ``masks`` made where the boxes carry polygons or bitmap masks and no masks), each a view of
    one column of the batch (box_lists.columns: the pipeline's own arrays where no box was
    dropped, else the valid rows, moved in place for the arrays ``may_move`` names, gathered
    for the others). A device batch's columns are made by cupy on torch's current stream from
    the pipeline's device pool (``pipe``'s), and cross to torch without a copy."""
    torch = _torch()
    valid, counts = _host_valid(bb, event)
    keep = None if valid.all() else np.flatnonzero(valid)
    dev = bb.device == "gpu"
    stream = _torch_stream_for_cupy(pipe) if dev else None
    with _on_device(pipe, stream) if dev else contextlib.nullcontext():
        width = (_copy_stream(pipe.device_id or 0, event) if dev and "polygons" in bb.fields
                 else None)
        cols = box_lists.columns(bb, keep, label_offset, stream, may_move, width)
        tensors = {k: _tensor(v) for k, v in cols.items()}
    split = {k: torch.split(v, counts.tolist()) for k, v in tensors.items()}
    out = [{k: split[k][s] for k in tensors} for s in range(bb.batch_size)]
    if "masks" in tensors:  # planes of the batch's largest canvas: each sample's own canvas
        for d, (h, w) in zip(out, bb.canvas.tolist()):
            d["masks"] = d["masks"][:, :h, :w]
    return out


def _trim(d: dict, n: int, batch_size: int) -> dict:
    """The first n samples of every output of a batch (last batch under 'partial')."""
    out = {}
    for k, v in d.items():
        if isinstance(v, list) or (hasattr(v, "shape") and v.dim() and v.shape[0] == batch_size):
            out[k] = v[:n]
        else:
            out[k] = v
    return out
