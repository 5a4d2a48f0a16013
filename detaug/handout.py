"""Batches handed to the caller, held until the work the caller queued on them has run.

A GPU pipeline hands its outputs out without a copy: a cupy array, or a torch tensor over it. When
the caller drops one, its block goes back to cupy's pool at once, and the pool gives it to a later
launch's outputs on the pipeline's own stream, with no ordering against the caller's stream. A
training loop whose CPU runs ahead of the GPU (no sync in the step) still has kernels queued that
read the batch: a later launch could overwrite it before they run.

So the pipeline keeps the memory of each batch it hands out (:meth:`HeldOutputs.hold`: the
arrays' memory pointers, not the arrays) and watches the arrays themselves through weak
references. Once the caller has dropped every array of a batch (a torch tensor over one keeps it
alive, and so does a view of it), all the work it queued on the batch is queued: an event is then
recorded on the streams the caller used when it got the batch (cupy's current stream, and those
adapters register through ``Pipeline.consume_on``: torch's current stream), and the memory goes
back to the pool once that event has completed on the device (:meth:`HeldOutputs.poll`). This
holds whatever order the caller works in: a loop that fetches one batch ahead (as Lightning's
default fetcher does), another thread asking for batches, a batch kept for a while. Not covered:
work on a stream the caller did not register, and work through a view of the launch's base array
that outlives the batch's own arrays (batches split off a multi-batch launch).

``poll`` runs in the caller's thread at each request (never waits) and in the device workers
before they make a launch's outputs: there it waits for the fences of the batches the caller has
dropped, so a dropped batch's block is reused by the next launch, as it was before the hold (the
pool does not grow by a batch), and the loader waits at most for the caller's work already queued.
"""
from __future__ import annotations

import collections
import threading
import weakref

from .batch import BoxBatch, ImageBatch


def device_arrays(outs) -> list:
    """The device arrays of a launch's outputs (images, boxes, padded boxes, arrays), each once."""
    seen, arrays = set(), []

    def add(a):
        if hasattr(a, "__cuda_array_interface__") and id(a) not in seen:
            seen.add(id(a))
            arrays.append(a)

    for v in outs:
        if isinstance(v, ImageBatch):
            for a in (v.data if isinstance(v.data, list) else [v.data]):
                add(a)
        elif isinstance(v, BoxBatch):
            for a in (v.boxes, v.labels, v.valid, *v.fields.values()):
                add(a)
        elif isinstance(v, dict) or hasattr(v, "items"):
            for a in v.values():
                add(a)
        else:
            add(v)
    return arrays


def _cupy_record(stream_ptr: int):
    """An event recorded now on the stream ``stream_ptr`` (of the current device)."""
    import cupy as cp

    ev = cp.cuda.Event(block=True, disable_timing=True)
    cp.cuda.runtime.eventRecord(ev.ptr, stream_ptr)
    return ev


class _Entry:
    __slots__ = ("memory", "watch", "dead", "streams", "fences", "__weakref__")

    def __init__(self, memory, streams):
        self.memory = memory      # what keeps the blocks allocated (the arrays' memory pointers)
        self.watch = []           # weak references to the arrays handed out
        self.dead = []            # one item per array the caller has let go (list.append: atomic)
        self.streams = streams    # the caller's streams when it got the batch
        self.fences = None        # events recorded on them once every array was let go

    @property
    def dropped(self) -> bool:
        return len(self.dead) >= len(self.watch)


class HeldOutputs:
    """The memory of handed-out batches, each let go after the caller has dropped the batch and
    the work it had queued on its streams by then has run. ``record(stream_ptr)`` returns an
    object with ``.done`` and ``.synchronize()`` (a cupy Event by default); ``memory_of(array)``
    what keeps an array's memory allocated without keeping the array (its ``.data``)."""

    def __init__(self, record=_cupy_record, memory_of=lambda a: a.data):
        self._record = record
        self._memory_of = memory_of
        self._lock = threading.Lock()
        self._held = collections.deque()   # _Entry, oldest first
        self.peak = 0                      # the most batches held at once (a diagnostic)

    def __len__(self) -> int:
        return len(self._held)

    def hold(self, outs, stream_ptrs) -> None:
        """Keep the memory of ``outs`` (a batch about to be handed out to a caller working on
        ``stream_ptrs``) until the caller has dropped its arrays and that work has run."""
        arrays = device_arrays(outs)
        if not arrays:
            return
        entry = _Entry([self._memory_of(a) for a in arrays], list(dict.fromkeys(stream_ptrs)))
        dead = entry.dead
        entry.watch = [weakref.ref(a, lambda _, dead=dead: dead.append(1)) for a in arrays]
        with self._lock:
            self._held.append(entry)
            self.peak = max(self.peak, len(self._held))

    def poll(self, wait: bool = False) -> int:
        """Fence the batches the caller has dropped since the last poll, and let go of those
        whose fences have completed; ``wait``: first wait (on the host) for the fences of every
        dropped batch. Returns how many batches were let go."""
        with self._lock:
            for e in self._held:
                if e.fences is None and e.dropped:
                    e.fences = [self._record(p) for p in e.streams]
            pending = [f for e in self._held if e.fences is not None for f in e.fences] if wait else ()
        for f in pending:  # (outside the lock: the caller's thread never waits for a worker's wait)
            f.synchronize()
        with self._lock:
            keep = collections.deque(e for e in self._held
                                     if e.fences is None or not all(f.done for f in e.fences))
            gone = len(self._held) - len(keep)
            self._held = keep
        return gone

    def drain(self, stream_ptrs=()) -> None:
        """Let go of every batch, dropped or not, after the work queued on its streams and on
        ``stream_ptrs`` has completed (a host wait: for close)."""
        with self._lock:
            held, self._held = self._held, collections.deque()
            fences = [f for e in held for f in (e.fences or [])]
            fences += [self._record(p) for p in dict.fromkeys(
                [*stream_ptrs, *(p for e in held if e.fences is None for p in e.streams)])]
        for f in fences:
            f.synchronize()
        held.clear()


class HandOut:
    """The hand-out methods of Pipeline (which holds ``_handed``, ``_consumers``,
    ``device_id`` and ``last_event``)."""

    def _hand_out(self, outs, event):
        """A batch goes to the caller: ``last_event`` is its event, and the caller's current
        stream (cupy's, in this thread) waits for it on the device, so that cupy work on the
        outputs, a .get() included, is ordered after the kernels that made them (output slots
        hand batches out as soon as they are queued). Its memory is held until the caller has
        dropped it and the work it queued by then has run; batches it dropped are fenced."""
        self.last_event = event
        if event is not None:
            import cupy as cp

            with cp.cuda.Device(self.device_id or 0):
                self._handed.poll()
                self._handed.hold(outs, self._caller_streams())
                cp.cuda.get_current_stream().wait_event(event)

    def consume_on(self, name: str, stream_of) -> None:
        """Register a stream the caller queues work on handed-out batches on (besides cupy's
        current stream): ``stream_of()``, called in the caller's thread at each request, returns
        its handle (an int). A batch's memory goes back to the pool only after the work queued
        there before the caller dropped the batch has run. The torch adapter registers torch's
        current stream under the name "torch"; registering a name again replaces it."""
        self._consumers[name] = stream_of

    def _caller_streams(self) -> list:
        import cupy as cp

        return [cp.cuda.get_current_stream().ptr, *(f() for f in list(self._consumers.values()))]

    def _let_go_handed(self):
        """At close: every batch held goes, after the work the caller queued on them has run."""
        if len(self._handed):
            import cupy as cp

            with cp.cuda.Device(self.device_id or 0):
                try:
                    self._handed.drain(self._caller_streams())
                except cp.cuda.runtime.CUDARuntimeError:  # a stream of the caller's is gone
                    cp.cuda.runtime.deviceSynchronize()  # (the workers are stopped: nothing reuses)
