"""Batches handed to the caller, held until the work the caller queued on them has run.

A GPU pipeline hands its outputs out without a copy: a cupy array, or a torch tensor over it. When
the caller drops one, its block goes back to cupy's pool at once, and the pool gives it to a later
launch's outputs on the pipeline's own stream, with no ordering against the caller's stream. A
training loop whose CPU runs ahead of the GPU (no sync in the step) still has kernels queued that
read the batch: a later launch could overwrite it before they run.

So the pipeline keeps a reference to each batch it hands out (:meth:`HeldOutputs.hold`). When the
caller asks for a later batch, an event is recorded on the caller's streams (cupy's current
stream, and the streams adapters register: torch's current stream), after all the work it queued
so far (:meth:`HeldOutputs.fence`); the earlier batches are let go once that event has completed on
the device (:meth:`HeldOutputs.poll`: a query, never a host wait). The caller's own references
keep a batch alive as long as it likes. What is not covered: work the caller queues on a batch
*after* asking for a later one (a loop that fetches a batch ahead, as Lightning's default fetcher
does), or on a stream it has not registered, once it has dropped its references: such a caller
must hold the batch until that work has run on the GPU, or clone it. (Fencing a batch only once
the caller's references to it are gone would cover both; not built.)

``poll`` is also called by the device workers before a launch's outputs are made, so a batch the
GPU is done with goes back to the pool before the memory is wanted, not at the next request.
"""
from __future__ import annotations

import collections
import threading


def _cupy_record(stream_ptr: int):
    """An event recorded now on the stream ``stream_ptr`` (of the current device)."""
    import cupy as cp

    ev = cp.cuda.Event(block=True, disable_timing=True)
    cp.cuda.runtime.eventRecord(ev.ptr, stream_ptr)
    return ev


class HeldOutputs:
    """References to handed-out batches, each with the events (one per caller stream) after which
    it may be let go; ``record(stream_ptr)`` returns an object with ``.done`` and
    ``.synchronize()`` (a cupy Event by default)."""

    def __init__(self, record=_cupy_record):
        self._record = record
        self._lock = threading.Lock()
        self._held = collections.deque()   # [outs, fences or None], oldest first
        self.peak = 0                      # the most batches held at once (a diagnostic)

    def __len__(self) -> int:
        return len(self._held)

    def hold(self, outs) -> None:
        """Keep ``outs`` (a batch just handed out) until a later fence has completed."""
        with self._lock:
            self._held.append([outs, None])
            self.peak = max(self.peak, len(self._held))

    def fence(self, stream_ptrs) -> None:
        """The caller asks for a later batch: every batch held without a fence gets events
        recorded now on ``stream_ptrs`` (repeats counted once)."""
        with self._lock:
            if not self._held or self._held[-1][1] is not None:
                return
            fences = [self._record(p) for p in dict.fromkeys(stream_ptrs)]
            for entry in reversed(self._held):
                if entry[1] is not None:
                    break
                entry[1] = fences

    def poll(self) -> int:
        """Let go of the fenced batches whose events have all completed; returns how many.
        Fences are recorded in hand-out order, so the oldest go first."""
        gone = 0
        with self._lock:
            while self._held:
                fences = self._held[0][1]
                if fences is None or not all(f.done for f in fences):
                    break
                self._held.popleft()
                gone += 1
        return gone

    def drain(self, stream_ptrs=()) -> None:
        """Let go of every batch after the work queued on ``stream_ptrs`` and the fences already
        recorded have completed (a host wait: for close)."""
        self.fence(stream_ptrs)
        with self._lock:
            held, self._held = self._held, collections.deque()
        for _, fences in held:
            for f in fences or ():
                f.synchronize()
        held.clear()


class HandOut:
    """The hand-out methods of Pipeline (which holds ``_handed``, ``_consumers``,
    ``device_id`` and ``last_event``)."""

    def _hand_out(self, outs, event):
        """A batch goes to the caller: ``last_event`` is its event, and the caller's current
        stream (cupy's, in this thread) waits for it on the device, so that cupy work on the
        outputs, a .get() included, is ordered after the kernels that made them (output slots
        hand batches out as soon as they are queued). The batches handed out before are fenced
        by an event on the caller's streams and let go once it has run; this one is held."""
        self.last_event = event
        if event is not None:
            import cupy as cp

            with cp.cuda.Device(self.device_id or 0):
                self._handed.fence(self._caller_streams())
                self._handed.poll()
                self._handed.hold(outs)
                cp.cuda.get_current_stream().wait_event(event)

    def consume_on(self, name: str, stream_of) -> None:
        """Register a stream the caller queues work on handed-out batches on (besides cupy's
        current stream): ``stream_of()``, called in the caller's thread at each request, returns
        its handle (an int). A batch's memory goes back to the pool only after the work queued
        there before a later request has run. The torch adapter registers torch's current
        stream under the name "torch"; registering a name again replaces it."""
        self._consumers[name] = stream_of

    def _caller_streams(self) -> list:
        import cupy as cp

        return [cp.cuda.get_current_stream().ptr, *(f() for f in list(self._consumers.values()))]

    def _let_go_handed(self):
        """At close: every batch held goes, after the work the caller queued on them has run."""
        if len(self._handed):
            import cupy as cp

            with cp.cuda.Device(self.device_id or 0):
                self._handed.drain(self._caller_streams())
