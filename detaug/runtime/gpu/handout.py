"""Batches handed to the caller, and the ordering that keeps their memory from being reused early.

A GPU pipeline hands its outputs out without a copy: a cupy array, or a torch tensor over it. When
the caller drops one, its block goes back to the pool the device threads allocate from
(detaug/runtime/gpu/allocator.py: CUDA's stream-ordered pool, or cupy's), freed in the order of
the stream it was allocated on, and a later launch's outputs may reuse it. A training loop whose CPU runs ahead of the
GPU (no sync in the step) still has kernels queued that read the batch: without an ordering, a
later launch could overwrite it before they run.

So the pipeline keeps the memory of each batch it hands out (:meth:`HeldOutputs.hold`: the
arrays' memory pointers, not the arrays) and watches the arrays themselves through weak
references. Once the caller has dropped every array of a batch (a torch tensor over one keeps it
alive, and so does a view of it), all the work it queued on the batch is queued: at the next
:meth:`HeldOutputs.poll`, an event is recorded on the streams the caller used when it got the batch
(cupy's current stream, and those adapters register through ``Pipeline.consume_on``: torch's
current stream), the stream the batch's outputs were made on waits for those events on the
device (``cudaStreamWaitEvent``), and only then does the memory go back to the pool. Either pool
frees a block in the order of the stream it was allocated on (the stream-ordered pool frees it on
that stream; cupy's default pool hands it out again only to allocations on that stream), so
whatever reuses it is queued behind that wait: it cannot run before the caller's work on the batch
has.
No host thread waits for the device (``close()`` aside), and the block serves the next launch at
once (the pool does not grow by a batch).

This holds whatever order the caller works in: a loop that fetches one batch ahead (as
Lightning's default fetcher does), another thread asking for batches, a batch kept for a while.
Not covered: work on a stream the caller did not register, and work through a view of the
launch's base array that outlives the batch's own arrays (batches split off a multi-batch
launch). ``poll`` runs in the caller's thread at each request and in the device workers before
they make a launch's outputs; neither waits.
"""
from __future__ import annotations

import collections
import threading
import weakref

from ...core.batch import BoxBatch, ImageBatch


def output_arrays(outs) -> list:
    """Every array of a launch's or a batch's outputs (images, boxes, padded boxes, arrays, the
    samples of a ragged tensor batch), once per place it appears: not de-duplicated."""
    found = []
    for v in outs:
        if isinstance(v, ImageBatch):
            found += v.data if isinstance(v.data, list) else [v.data]
        elif isinstance(v, BoxBatch):
            found += [v.boxes, v.labels, v.valid, *v.fields.values()]
        elif hasattr(v, "items"):
            found += list(v.values())
        elif isinstance(v, (list, tuple)):  # a ragged tensor batch: its samples
            found += list(v)
        else:
            found.append(v)
    return [a for a in found if a is not None]


def device_arrays(outs) -> list:
    """The device arrays of a launch's outputs (:func:`output_arrays`), each once."""
    seen, arrays = set(), []
    for a in output_arrays(outs):
        if hasattr(a, "__cuda_array_interface__") and id(a) not in seen:
            seen.add(id(a))
            arrays.append(a)
    return arrays


def _cupy_record(stream_ptr: int):
    """An event recorded now on the stream ``stream_ptr`` (of the current device)."""
    import cupy as cp

    ev = cp.cuda.Event(block=True, disable_timing=True)
    cp.cuda.runtime.eventRecord(ev.ptr, stream_ptr)
    return ev


def _cupy_wait(stream_ptr: int, event) -> None:
    """The stream ``stream_ptr`` waits for ``event`` on the device (the host does not wait)."""
    import cupy as cp

    cp.cuda.runtime.streamWaitEvent(stream_ptr, event.ptr, 0)


def _cupy_sync_all() -> None:
    """Every stream of the current device has finished its work (a host wait)."""
    import cupy as cp

    cp.cuda.runtime.deviceSynchronize()


class _Entry:
    __slots__ = ("memory", "watch", "dead", "streams", "made_on", "__weakref__")

    def __init__(self, memory, streams, made_on):
        self.memory = memory      # what keeps the blocks allocated (the arrays' memory pointers)
        self.watch = []           # weak references to the arrays handed out
        self.dead = []            # one item per array the caller has let go (list.append: atomic)
        self.streams = streams    # the caller's streams when it got the batch
        self.made_on = made_on    # the streams the outputs were allocated on (None: unknown)

    @property
    def dropped(self) -> bool:
        return len(self.dead) >= len(self.watch)


class HeldOutputs:
    """The memory of handed-out batches, each let go once the caller has dropped the batch, behind
    a device-side wait of the stream it was made on for the work the caller had queued on its
    streams by then. ``record(stream_ptr)`` returns an event (``.synchronize()``; a cupy Event by
    default), ``wait(stream_ptr, event)`` queues a wait for it on a stream, ``memory_of(array)``
    is what keeps an array's memory allocated without keeping the array (its ``.data``),
    ``sync_all()`` waits on the host for the whole device (where a fence cannot be made)."""

    def __init__(self, record=_cupy_record, wait=_cupy_wait, memory_of=lambda a: a.data,
                 sync_all=_cupy_sync_all):
        self._record = record
        self._wait = wait
        self._sync_all = sync_all
        self._memory_of = memory_of
        self._lock = threading.Lock()
        self._held = collections.deque()   # _Entry, oldest first
        self._seen = {}                    # every caller stream of a batch held (ordered set)
        self.peak = 0                      # the most batches held at once (a diagnostic)

    def __len__(self) -> int:
        return len(self._held)

    def hold(self, outs, stream_ptrs, made_on) -> None:
        """Keep the memory of ``outs`` (a batch allocated on the streams ``made_on``, None where
        unknown, about to be handed out to a caller working on ``stream_ptrs``) until the caller
        has dropped its arrays."""
        arrays = device_arrays(outs)
        if not arrays:
            return
        entry = _Entry([self._memory_of(a) for a in arrays], list(dict.fromkeys(stream_ptrs)),
                       made_on)
        dead = entry.dead
        entry.watch = [weakref.ref(a, lambda _, dead=dead: dead.append(1)) for a in arrays]
        with self._lock:
            self._held.append(entry)
            self._seen.update(dict.fromkeys(entry.streams))
            self.peak = max(self.peak, len(self._held))

    def _fence(self, entry) -> list:
        """Events recorded now on the caller's streams of ``entry``, each stream its outputs were
        allocated on waiting for them on the device; returns the events."""
        fences = [self._record(p) for p in entry.streams]
        for s in entry.made_on or ():
            for f in fences:
                self._wait(s, f)
        return fences

    def poll(self) -> int:
        """Let go of the batches the caller has dropped: the streams each one's outputs were
        allocated on first wait (on the device) for the work queued by now on the streams the
        caller used, then its memory goes back to the pool. Never waits on the host (a batch whose
        streams are unknown aside: its fences are waited for). Returns how many batches were let
        go."""
        with self._lock:
            gone, keep = [], collections.deque()
            for e in self._held:  # (``dropped`` read once: a drop may land during this loop)
                (gone if e.dropped else keep).append(e)
            if not gone:
                return 0
            self._held = keep
            # under the lock: one poll fences a batch, each before its memory goes
            unknown, failed = [], False
            for e in gone:
                try:
                    fences = self._fence(e)
                except Exception:  # noqa: BLE001 -- e.g. a caller's stream already destroyed:
                    failed = True   # no fence, so the device finishes first (below)
                    continue
                if e.made_on is None:
                    unknown += fences
        if failed:
            self._sync_all()
        for f in unknown:
            f.synchronize()
        n = len(gone)
        gone.clear()  # (the memory goes back here, after the waits are queued)
        return n

    def drain(self, stream_ptrs=()) -> None:
        """Let go of every batch, dropped or not, after the work queued on ``stream_ptrs`` and on
        every caller stream of a batch ever held has completed (a host wait: for close; batches
        let go before are covered too, their blocks having only device-side waits behind them)."""
        with self._lock:
            held, self._held = self._held, collections.deque()
            fences = [self._record(p) for p in dict.fromkeys([*stream_ptrs, *self._seen])]
        for f in fences:
            f.synchronize()
        held.clear()


class HandOut:
    """The hand-out of a pipeline's batches on device ``device_id`` (a part the pipeline holds):
    ``held`` (the :class:`HeldOutputs` of the batches handed out), ``consumers`` (the streams the
    caller registered: ``consume_on``) and ``last_event`` (the event of the last batch handed
    out)."""

    def __init__(self, device_id, held: HeldOutputs | None = None):
        self.device_id = device_id
        self.held = HeldOutputs() if held is None else held
        self.consumers = {}  # name -> () -> a stream the caller queues work on (see consume_on)
        self.last_event = None  # cupy Event recorded after the last batch's device work

    def hand_out(self, outs, event, made_on):
        """A batch goes to the caller: ``last_event`` is its event, and the caller's current
        stream (cupy's, in this thread) waits for it on the device, so that cupy work on the
        outputs, a .get() included, is ordered after the kernels that made them (output slots
        hand batches out as soon as they are queued). Its memory (allocated on the streams
        ``made_on``) is held until the caller has dropped it; batches it dropped are let go
        behind a device-side wait for the caller's work on them."""
        self.last_event = event
        if event is not None:
            import cupy as cp

            with cp.cuda.Device(self.device_id or 0):
                self.held.poll()
                self.held.hold(outs, self.caller_streams(), made_on)
                cp.cuda.get_current_stream().wait_event(event)

    def consume_on(self, name: str, stream_of) -> None:
        """Register a stream the caller queues work on handed-out batches on (besides cupy's
        current stream): ``stream_of()``, called in the caller's thread at each request, returns
        its handle (an int). A batch's memory goes back to the pool only after the work queued
        there before the caller dropped the batch has run. The torch adapter registers torch's
        current stream under the name "torch"; registering a name again replaces it."""
        self.consumers[name] = stream_of

    def caller_streams(self) -> list:
        import cupy as cp

        return [cp.cuda.get_current_stream().ptr, *(f() for f in list(self.consumers.values()))]

    def let_go(self):
        """At close: every batch held goes, after the work the caller queued on them has run.
        Also once every batch was let go already: their blocks are in the pool behind waits of
        this pipeline's streams, which close destroys, so the caller's work is waited for here."""
        if self.held.peak:
            import cupy as cp

            with cp.cuda.Device(self.device_id or 0):
                try:
                    self.held.drain(self.caller_streams())
                except cp.cuda.runtime.CUDARuntimeError:  # a stream of the caller's is gone
                    cp.cuda.runtime.deviceSynchronize()  # (the workers are stopped: nothing reuses)
