"""GPU decode in worker processes: the files of a batch are read and decoded by nvImageCodec in
another process, into a device buffer that process shares with the pipeline through CUDA IPC.

Why processes: nvImageCodec's decode call takes the GIL back many times while it runs (about 150
times per call of 64 images, measured; benchmarks/RESULTS.md,
findings). In the pipeline's process every other thread holding the GIL (planning, reading,
kernel launches) stalls it for up to the interpreter's switch interval each time: in-process
decode ran at half its speed alone.
In a process of its own the decoder only competes with its own reading.

Protocol (one pipe per worker; a worker's decoder threads serve its requests in parallel and
reply in any order; the pipeline sends each request to the worker with the fewest in hand):

* start: the worker allocates its ring buffer (``cudaMalloc``) and a pool of interprocess
  "done" events and sends their IPC handles; the pipeline opens them once.
* ``("decode", req, paths, output_type, chunk)``: the worker reads the files and takes each
  image's size from its header (files the GPU must not or cannot take are decoded by Pillow
  first, as in the in-process path), takes a slot of its ring, and has nvImageCodec decode
  straight into it (each image a region of packed HWC rows, wrapped with ``as_image``), in
  calls of at most ``chunk`` images; no decoder-owned images, no copies (an image the GPU
  fails on is decoded by Pillow and uploaded into its region). It records its "done" event
  ``req % N`` on its stream and replies ``("done", req, shapes, offsets, errors)``. Nothing
  waits on the host for the device.
* the pipeline makes its stream wait for that event (device-side), wraps the region as a
  :class:`~detaug.core.batch.DeviceImages` whose owner is a :class:`_Lease`; when the last reference
  to the images goes, the lease records an event on the stream the images were used on; once
  that event has completed (a releaser thread waits for it, blocking, without the GIL) the
  pipeline sends ``("free", req)`` and
  the worker may write the region again. So the worker never depends on the pipeline's GPU work
  (a first version made the worker's stream wait for the pipeline's: a long kernel in the
  pipeline then stalled the worker, and through it the pipeline's host threads, for 1 s).
* ``("stop",)``: the worker frees its buffer and exits.

Each worker runs ``threads`` decoder threads (the memory plan's choice, 1-2): each has its own
nvImageCodec decoder and streams, so one thread's file reads and host work overlap another's
decode (one decoder per process was 10.7k img/s, two 12.8k, on an H100).

The ring is cut into equal slots, one request each (its images packed one after another, each
start 256-byte aligned). The pipeline sends each worker at most as many requests as it has slots
(in launch order, so the launch due next always finds one: detaug/runtime/executor.py), and a request larger
than a slot is an error that names ``decode_buffer_mb`` / ``device_memory_budget``.
"""
from __future__ import annotations

import itertools
import queue
import threading

import numpy as np

from ..startup import without_main
from .decode_worker import N_EVENTS, _worker


# ------------------------------------------------------------------------------ pipeline side
class _Worker:
    exited = None  # (pid, exit code) once its process object is closed (close_ends)

    def __init__(self, mp, device_id, ring_bytes, threads=1, slots=3):
        """Start the process; :meth:`connect` waits for its handshake (so several start at once).
        ``ring_bytes`` None: :meth:`configure` sends the ring's size later."""
        self.conn, child = mp.Pipe()
        self.send_lock, self.alive = threading.Lock(), False  # (alive: once connected)
        self.held = 0  # ring slots of this worker taken by requests not yet retired
        self.proc = mp.Process(target=_worker, args=(child, device_id, ring_bytes, threads, slots), daemon=True,
                               name="detaug-decode")
        with without_main():  # (spawn would run the main script again: startup.py)
            self.proc.start()
        child.close()
        self.outstanding = 0  # decode requests sent and not yet answered (DecodeService._lock)

    def configure(self, ring_bytes, threads, slots, warm_first=False):
        """The ring of a worker started early (one that died says so at :meth:`connect`); None:
        it stops (not needed). ``warm_first``: its handshake waits for a warm decoder."""
        try:
            self.conn.send(("stop",) if ring_bytes is None else
                           ("ring", int(ring_bytes), int(threads), int(slots), bool(warm_first)))
        except (OSError, ValueError):
            pass
        if ring_bytes is None:  # stopped: it answers a stop with nothing (decode_worker.py), so
            self.conn.close()  # its pipe closes now (the stop stays readable on its end)

    def connect(self):
        try:  # before importing cupy here: a worker that cannot start says so wherever it is
            kind, mem, events = self.conn.recv()
        except (EOFError, OSError):
            self.proc.join(timeout=10)
            raise RuntimeError(
                f"the GPU decode worker process did not start (exit code {self.proc.exitcode}; its "
                "error is printed above; a script that builds GPU pipelines needs the "
                "`if __name__ == \"__main__\":` guard, as workers start with spawn). "
                "Pipeline(decode_processes=0) decodes in the pipeline's own threads instead") from None
        import cupy as cp

        rt = cp.cuda.runtime
        self.ring = rt.ipcOpenMemHandle(mem)
        self.done = [rt.ipcOpenEventHandle(h) for h in events]
        # (event, req) of regions whose images are gone: the releaser thread waits for each
        # event (a blocking wait, without the GIL) and then frees the region. No polling: a
        # pipeline whose queue is full costs the training loop nothing
        self.retired = queue.SimpleQueue()
        self.replies, self.cond = {}, threading.Condition()
        self.abandoned = {}  # req -> what to do with its reply (its waiter was interrupted)
        self.alive = True
        self.reader = threading.Thread(target=self._receive, daemon=True, name="detaug-decode-rx")
        self.reader.start()
        self.releaser = threading.Thread(target=self._release, daemon=True, name="detaug-decode-free")
        self.releaser.start()

    def _receive(self):
        while True:
            try:
                m = self.conn.recv()
            except (EOFError, OSError):
                break
            with self.cond:
                then = self.abandoned.pop(m[1], None)
                if then is None:
                    self.replies[m[1]] = m
                    self.cond.notify_all()
            if then is not None:
                then(m)
        with self.cond:
            self.alive = False
            left, self.abandoned = list(self.abandoned.values()), {}
            self.cond.notify_all()
        for then in left:  # no reply will come
            then(None)
        self.retired.put(None)

    def _release(self):
        """Free each retired region once the work queued on it has completed, in retirement
        order (the ring frees in any order)."""
        while True:
            item = self.retired.get()
            if item is None or not self.alive:
                return
            ev, req = item
            try:
                if ev is None:  # no work of this process used the region (a lease dropped
                    # unused, an abandoned request): the worker's own decode into it may still
                    # run (it replies before the device is done), so wait for its "done" event
                    ev = _IpcDone(self.done[req % N_EVENTS])
                ev.synchronize()  # (a blocking-sync event sleeps in the driver, GIL released)
                self.send(("free", req))
            except Exception:  # the worker is gone, or the interpreter is shutting down
                return

    def unmap(self):
        """Close this process's mapping of the worker's ring (once; none before a handshake)."""
        ring, self.ring = getattr(self, "ring", None), None
        if ring is not None:
            import cupy as cp

            try:
                cp.cuda.runtime.ipcCloseMemHandle(ring)
            except Exception:
                pass

    def close_ends(self):
        """Close what this process holds of a stopped or joined worker: its end of the pipe,
        and the process's sentinel once it has exited (its exit status kept: :meth:`death`)."""
        reader = getattr(self, "reader", None)
        if reader is not None and self.proc.exitcode is not None:
            reader.join(timeout=2)  # (it has met the pipe's end: no recv is left on it)
        self.conn.close()
        if self.exited is None and self.proc.exitcode is not None:
            self.exited = (self.proc.pid, self.proc.exitcode)
            self.proc.close()

    def join(self, timeout):
        """Wait at most ``timeout`` s for the process to exit (it has, once :meth:`close_ends`
        closed the process object)."""
        if self.exited is None:
            self.proc.join(timeout=timeout)

    def send(self, msg):
        with self.send_lock:
            self.conn.send(msg)

    def death(self, req) -> RuntimeError:
        """The error of a request this worker can no longer answer: it died."""
        # its pipe closed: it is exiting. A killed process whose ring this process still maps
        # may not be reaped until the mapping is closed (seen on an H100: not reaped after 8 s;
        # close() closes it), so its exit status may not be known yet
        self.join(2)
        pid, code = self.exited or (self.proc.pid, self.proc.exitcode)
        how = (f"killed by signal {-code}" if code is not None and code < 0
               else "exit status not known yet" if code is None else f"exit code {code}")
        return RuntimeError(f"the GPU decode worker process {self.proc.name} (pid {pid}) "
                            f"died ({how}) with request {req} in hand")

    def wait(self, req):
        with self.cond:
            while req not in self.replies:
                if not self.alive:
                    raise self.death(req)
                self.cond.wait()
            return self.replies.pop(req)

    def abandon(self, req, then):
        """Nobody waits for ``req`` any more (its wait was interrupted, the worker still has it):
        ``then(reply)`` runs when the reply comes (in the receiving thread), or ``then(None)``
        once the worker is gone without one."""
        with self.cond:
            m = self.replies.pop(req, None)
            if m is None and self.alive:
                self.abandoned[req] = then
                return
        then(m)


class _IpcDone:
    """A worker's interprocess "done" event (a raw handle), waited on as a cupy Event is."""

    __slots__ = ("handle",)

    def __init__(self, handle):
        self.handle = handle

    def synchronize(self):
        import cupy as cp

        cp.cuda.runtime.eventSynchronize(self.handle)


class _Lease:
    """Owns one region of a worker's ring until it is retired: by the pipeline once the batch
    is made (:meth:`retire` with the batch's event, the images' last use), or when the last view
    of the images goes, whichever comes first. The region goes back to the worker once the
    event has completed (a failed batch has none: at once). Nothing here makes a CUDA call: it
    may run in the garbage collector, in any thread, after the pipeline's streams are gone
    (recording an event there crashed a test process)."""

    retired = False

    def __init__(self, worker, req, service):
        self.worker, self.req, self.service = worker, req, service

    def retire(self, event=None):
        if self.retired:
            return
        self.retired = True
        self._give_back(event)

    def _give_back(self, event):
        self.service._retired(self.worker)
        self.worker.retired.put((event, self.req))  # freed by the releaser

    def _dropped(self):
        """The last reference went before the lease was retired (no CUDA call here)."""
        self.retire(None)

    def __del__(self):
        try:
            if not self.retired:
                self._dropped()
        except Exception:  # interpreter shutdown: nothing left to give back to
            pass


class DecodeService:
    """The pipeline's decode worker processes (started with 'spawn': CUDA cannot fork)."""

    connected = False
    early = None  # the pipeline's own decoder for the first launches (early_decode.py)
    _connecting = _connect_error = None  # (connect_in_background)

    def __init__(self, processes: int, device_id: int, ring_bytes: int | None, threads: int = 1,
                 slots: int = 3):
        """``ring_bytes`` None: the processes start and wait for :meth:`configure`, then
        :meth:`connect` (a pipeline starts them before its readers index: their seconds of start
        overlap the index, the plan and this process's CUDA); else ready on return."""
        import multiprocessing

        self._mp = multiprocessing.get_context("spawn")
        self.device_id = device_id
        self.stopped = []  # processes started early that the plan did not want (configure)
        self.threads, self.slots = int(threads), int(slots)
        self.connected = ring_bytes is not None  # (else connect() once configured)
        self.workers = [_Worker(self._mp, device_id, int(ring_bytes) if self.connected else None,
                                self.threads, self.slots)
                        for _ in range(int(processes))]
        self._ids = itertools.count()
        # reentrant: a lease dropped by the garbage collector inside a locked section retires
        # itself through this lock, in the same thread
        self._lock = threading.RLock()
        if self.connected:
            self.connect()

    def configure(self, processes: int, ring_bytes: int, threads: int, slots: int,
                  warm_first: bool = False) -> None:
        """For processes started early: the plan's number of processes (extra ones are stopped,
        missing ones started now), ring size, decoder threads and ring slots; ``warm_first``:
        their handshakes wait for a warm decoder (the pipeline's own decoder serves until then:
        early_decode.py; without it the first request waits in the process instead, sooner)."""
        self.threads, self.slots, n = int(threads), int(slots), int(processes)
        for k, w in enumerate(self.workers):
            w.configure(*((ring_bytes, threads, slots, warm_first) if k < n else (None, 0, 0)))
        self.stopped += self.workers[n:]  # (joined at close: decode_worker._plan_waiting)
        self.workers = self.workers[:n] + [_Worker(self._mp, self.device_id, int(ring_bytes), self.threads,
                                                   self.slots) for _ in range(n - len(self.workers))]

    def connect(self) -> None:
        """Wait for every process's handshake."""
        try:
            for w in self.workers:
                w.connect()
        except BaseException:
            for w in self.workers:
                w.proc.terminate()
            for w in self.workers:
                w.join(10)
                w.close_ends()  # (close() later skips what is closed here)
            raise
        self.connected = True

    def connect_in_background(self, timeline, on_done) -> None:
        """:meth:`connect` in a thread (phase ``build.decode_processes.ready``), ``on_done()``
        after: requests wait for it (:meth:`wait_connected`), or go to the pipeline's own decoder
        meanwhile (early_decode.py). A failure is raised by the requests that wait."""
        def work():
            timeline.begin("build.decode_processes.ready")
            try:
                import cupy as cp

                with cp.cuda.Device(self.device_id):  # (the rings are mapped in this thread)
                    self.connect()
            except BaseException as e:  # noqa: BLE001 -- raised where a request waits
                self._connect_error = e
            finally:
                timeline.end("build.decode_processes.ready")
                self._connecting.set()
                on_done()

        self._connecting = threading.Event()
        threading.Thread(target=work, daemon=True, name="detaug-decode-connect").start()

    def settled(self) -> bool:
        """Every process has answered its handshake, or one could not start."""
        return self.connected or self._connect_error is not None

    def wait_connected(self) -> None:
        if self.connected:
            return
        if self._connecting is not None:
            self._connecting.wait()
        if self._connect_error is not None:
            raise RuntimeError(str(self._connect_error)) from self._connect_error

    def decode(self, paths, output_type, chunk, stream):
        """Decode the files ``paths`` in a worker: (DeviceImages, errors). The images are ready
        in ``stream``'s order (a device-side wait); errors is a list of (position, message)."""
        from ...core.batch import DeviceImages

        self.wait_connected()

        with self._lock:  # to the worker with the fewest ring slots taken, then requests in hand
            req = next(self._ids)
            w = min(self.workers, key=lambda x: (x.held, x.outstanding))
            w.outstanding += 1
            w.held += 1
        # (set before the send: an interrupt inside it may land after the bytes went out; a
        # request counted as sent that never was only keeps its count until the worker goes)
        sent, reply = True, None
        try:
            try:
                w.send(("decode", req, list(paths), output_type, int(chunk)))
            except (EOFError, OSError):  # (BrokenPipeError) the worker is gone
                sent = False
                raise w.death(req) from None
            reply = w.wait(req)
        except BaseException:  # no lease will own the slot counted for this request
            if reply is not None:  # interrupted once the reply was in
                self._unclaimed(w, req, reply)
            elif sent and getattr(w, "alive", False):
                # the wait was interrupted (Ctrl-C) while the worker decodes: the slot is its
                # until it replies; then the region goes back (a later request would otherwise
                # wait for that slot forever)
                w.abandon(req, lambda m: self._unclaimed(w, req, m))
            else:  # the worker is gone
                self._retired(w)
            raise
        finally:
            with self._lock:
                w.outstanding -= 1
        _, _, shapes, starts, errors = reply
        if errors:
            self._retired(w)  # (the worker took no slot)
            return None, errors
        import cupy as cp

        lease = _Lease(w, req, self)  # first: if what follows raises, the lease frees the slot
        cp.cuda.runtime.streamWaitEvent(stream.ptr, w.done[req % N_EVENTS], 0)
        ptrs = np.asarray(starts, np.uint64) + np.uint64(w.ring)
        pitches = shapes[:, 1] * shapes[:, 2]
        return DeviceImages(ptrs, shapes, pitches, lease, self.device_id), []

    def _retired(self, worker):
        with self._lock:
            worker.held -= 1

    def _unclaimed(self, worker, req, reply):
        """The reply to a request whose waiter was interrupted (None: the worker died first): a
        region it decoded into goes back to the worker as an unused lease's does."""
        if reply is not None and not reply[4]:
            _Lease(worker, req, self).retire()
        else:  # (no region)
            self._retired(worker)

    def stop(self):
        """Ask the workers to stop (they are daemons); do not wait for them."""
        for w in self.workers:
            try:
                w.send(("stop",))
            except Exception:
                pass

    def close(self):
        if self.early is not None:
            self.early.close()
        self.stop()
        if self._connecting is not None:
            self._connecting.wait(30)  # (a worker stopping answers its handshake, or its pipe closes)
        for w in self.workers:
            # a worker that died first: its ring is unmapped before the wait (a killed process
            # whose memory is still mapped here may not be torn down until it is)
            wait = lambda: w.join(10)  # noqa: E731
            for step in ((wait, w.unmap) if w.alive else (w.unmap, wait)):
                step()
            w.close_ends()
        for w in self.stopped:  # (long gone, as a rule: stopped at build)
            w.join(10)
            if w.exited is None and w.proc.exitcode is None:
                w.proc.terminate()  # it holds nothing the pipeline needs
            w.close_ends()
        self.workers, self.stopped = [], []

    def pids(self) -> dict:
        """``{pid: role}`` of the processes started (decode processes, and those started early
        that the plan stopped, while they live): diagnostics."""
        out = {w.proc.pid: "decode process" for w in self.workers
               if w.exited is None and w.proc.pid is not None}
        out.update({w.proc.pid: "decode process stopped by the plan" for w in self.stopped
                    if w.exited is None and w.proc.pid is not None and w.proc.exitcode is None})
        return out

