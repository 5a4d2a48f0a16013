"""The first launches decoded in the pipeline's own process while its decode processes come up,
so that the first batch does not wait for them.

A decode process needs about 3 s from its spawn to its first decode (interpreter, detaug's
import, cupy, its CUDA context, nvImageCodec's import at ~1 s, its decoders' first call at
~0.75 s: benchmarks/RESULTS.md, "Time to first batch"), so a GPU pipeline's first batch waited for them.
This process already has cupy and makes its CUDA context in the background during the build
(startup.warm_gpu). :class:`EarlyDecoder` adds, in its own background thread started as soon as
the decode processes are spawned (before the readers index): nvImageCodec's import and ONE
decoder made and warmed exactly as a decode process makes its own (``max_num_cpu_threads`` from
``DETAUG_DECODE_CPU_THREADS``, default 4, then ``gpu_decode.warm_up``). Until the decode
processes have answered their handshake (sent once their decoders are warm: decode_worker.py),
a launch's decode request goes to this decoder instead (:meth:`EarlyDecoder.take`); from the
first launch they are ready for, the processes take every request, and the decoder is dropped.

Same batches: a request is served as a decode process serves it (decode_worker.py): the files
read, their headers parsed, the pixel limit checked, the images decoded by the same
nvImageCodec call into packed regions of one buffer (the same layout: each image's rows packed,
each start 256-byte aligned), the files the GPU must not or cannot take decoded on the CPU and
copied in. The buffer comes from CUDA's stream-ordered allocator (``cudaMallocAsync``) and goes
back (``cudaFreeAsync``, behind a device-side wait for the batch's event) when the launch's lease
is retired, as a ring region goes back to a decode process. At most ``MAX_IN_FLIGHT`` requests
hold a buffer at once: the extra device memory while the processes come up is the decoder and
at most two launches' images. The phase ``build.early_decoder`` of the start-up timeline is
the decoder's making (its import, context, first call).

``DETAUG_EARLY_DECODE=0`` turns it off (the first launch then waits for the decode processes);
it is off too with the start-up order (``DETAUG_EARLY_START=0``).
"""
from __future__ import annotations

import collections
import os
import threading

import numpy as np

from .decode_proc import _Lease
from .decode_worker import ALIGN, DecodeRequest, _Region, packed_offsets

MAX_IN_FLIGHT = 2  # requests holding a buffer at once (each one launch's images)


def enabled() -> bool:
    """The first launches decoded in this process (on unless ``DETAUG_EARLY_DECODE=0``)."""
    return os.environ.get("DETAUG_EARLY_DECODE", "1") != "0"


class EarlyLease(_Lease):
    """The buffer of one request decoded here, owned until it is retired (the batch's event:
    its images' last use), as a decode process's ring region is (so a graph that outputs the
    decoded images hands out copies, as with the decode processes: DeviceStage.collect). A
    lease dropped without being retired makes no CUDA call (the garbage collector may drop it
    anywhere): its buffer is freed at the next request or at close."""

    def __init__(self, owner, ptr, done):
        self.owner, self.ptr, self.done = owner, ptr, done

    def _give_back(self, event):
        self.owner._give_back(self, event)

    def _dropped(self):
        self.retired = True
        self.owner._orphaned(self)


class EarlyDecoder:
    """One nvImageCodec decoder in this process, made in a background thread, serving decode
    requests as :class:`~detaug.runtime.gpu.decode_proc.DecodeService` does until the decode
    processes are ready."""

    def __init__(self, device_id: int, timeline=None, start: bool = True):
        self.device_id = int(device_id)
        self.decoder = None      # set once made and warmed
        self.error = None        # why it could not be made (the processes serve everything)
        self.made = False        # made or failed
        self.taken_over = False  # the decode processes serve from now on
        self.served = 0          # requests decoded here
        self._cond = threading.Condition(threading.RLock())  # (a lease's __del__ may re-enter)
        self._in_flight = 0      # requests holding a buffer (take() -> their lease retired)
        self._pending = 0        # requests between take() and the end of their decode()
        self._waiting = []       # the launch order of the requests in take()
        self._serial = threading.Lock()  # one decode call at a time (a Decoder is not thread-safe)
        self._orphans = []       # buffers of leases dropped unretired: freed at the next request
        self._keep = collections.deque()  # (event, nvImageCodec wrappers) until the decode ran
        self._free_stream = None
        self._timeline = timeline
        if start:
            threading.Thread(target=self._make, daemon=True, name="detaug-early-decoder").start()

    # ---- making the decoder (background) ------------------------------------------------------
    def _make(self):
        tl = self._timeline
        if tl is not None:
            tl.begin("build.early_decoder")
        try:
            import cupy as cp

            rt = cp.cuda.runtime
            with cp.cuda.Device(self.device_id):
                rt.free(0)  # the context (startup.warm_gpu's, whoever comes first)
                if not rt.deviceGetAttribute(getattr(rt, "cudaDevAttrMemoryPoolsSupported", 115),
                                             self.device_id):
                    raise RuntimeError("no stream-ordered allocator on this device")
                from nvidia import nvimgcodec

                from ...ops.gpu_decode import warm_up

                threads = int(os.environ.get("DETAUG_DECODE_CPU_THREADS", 4))  # as decode_worker
                d = warm_up(nvimgcodec.Decoder(device_id=self.device_id, max_num_cpu_threads=threads),
                            self.device_id)
                self._free_stream = cp.cuda.Stream(non_blocking=True)
            with self._cond:
                if not self.taken_over:
                    self.decoder = d
        except Exception as e:  # noqa: BLE001 -- the decode processes serve every request
            self.error = e
        finally:
            with self._cond:
                self.made = True
                self._cond.notify_all()
            if tl is not None:
                tl.end("build.early_decoder")

    # ---- routing --------------------------------------------------------------------------------
    def wake(self):
        """The decode processes' handshakes are in (or failed): waiting requests choose again."""
        with self._cond:
            self._cond.notify_all()

    def take(self, service, key=None) -> bool:
        """Whether the next request is decoded here (then :meth:`decode` must follow): while the
        decode processes (``service``) are not ready and this decoder is, with room for one more
        request in flight; False once they are ready (from then on, always), where this decoder
        could not be made, or where it has no room (the request then waits for the processes:
        a wait for room could outlast the launches holding it, cancelled ones included). Waits
        for the decoder or the processes, whichever comes first; the requests waiting are then
        decided in their launches' order (``key``: (epoch, batch index)), so the first launch is
        the one decoded here."""
        order = tuple(key) if key is not None else (float("inf"),)
        retire = False
        with self._cond:
            self._waiting.append(order)
            try:
                while True:
                    if self.taken_over or service.settled():
                        self.taken_over = True
                        retire = self._pending == 0 and self.decoder is not None
                        break
                    if self.made and self.decoder is None:
                        return False  # (no decoder here: wait for the processes)
                    if self.decoder is not None and order <= min(self._waiting):
                        if self._in_flight >= MAX_IN_FLIGHT:
                            return False
                        self._in_flight += 1
                        self._pending += 1
                        return True
                    self._cond.wait()
            finally:
                self._waiting.remove(order)
                self._cond.notify_all()
        if retire:
            self._retire_decoder()
        return False

    def _retire_decoder(self):
        """The processes serve from now on: the decoder goes once its last decode has run
        (called with no request between :meth:`take` and the end of its :meth:`decode`)."""
        with self._serial:
            d, self.decoder = self.decoder, None
            if d is None:
                return
            if self._keep:
                self._keep[-1][0].synchronize()
            self._keep.clear()
            del d

    # ---- a request ------------------------------------------------------------------------------
    def decode(self, paths, output_type, chunk, stream):
        """Decode the files ``paths`` here, as a decode process would: (DeviceImages, errors),
        the images ready in ``stream``'s order; errors a list of (position, message). After
        :meth:`take` returned True."""
        made = []  # the request's lease, once it holds a buffer (its room then goes with it)
        try:
            return self._decode(paths, output_type, chunk, stream, made)
        finally:
            if not made:
                self._release_room()
            with self._cond:
                self.served += 1
                self._pending -= 1
                retire = self.taken_over and self._pending == 0 and self.decoder is not None
            if retire:
                self._retire_decoder()

    def _decode(self, paths, output_type, chunk, stream, made):
        import cupy as cp
        from nvidia import nvimgcodec

        from ...core.backend import upload
        from ...core.batch import DeviceImages
        from ...ops.gpu_decode import decode_chunks

        rt = cp.cuda.runtime
        self._free_orphans()
        request = DecodeRequest(paths, output_type)  # (decode_worker's reads and checks)
        shapes, host, errors, idx = request.shapes, request.host, request.errors, request.gpu
        if errors:
            return None, errors
        offsets, total = packed_offsets(shapes)
        with self._serial:
            decoder = self.decoder
            if decoder is None:  # (never: a request between take() and here keeps it)
                raise RuntimeError("the in-process decoder is gone")
            ptr = rt.mallocAsync(max(total, ALIGN), stream.ptr)
            lease = EarlyLease(self, ptr, None)
            made.append(lease)
            try:
                with stream:
                    images = [] if not idx else nvimgcodec.as_images(
                        [_Region(ptr + o, shp) for o, shp in
                         zip(offsets[idx].tolist(), shapes[idx].tolist())], stream.ptr)
                results = decode_chunks(decoder, [request.streams[k] for k in idx], output_type,
                                        chunk, stream.ptr, images)
                decoded = cp.cuda.Event(block=True, disable_timing=True)
                decoded.record(stream)
                self._keep.append((decoded, images))
                while self._keep and self._keep[0][0].done:
                    self._keep.popleft()
            except BaseException:
                stream.synchronize()
                lease.retire(None)
                raise
        lease.done = decoded
        ptrs = np.uint64(ptr) + offsets.astype(np.uint64)
        extra = []  # CPU-decoded images larger than their header: in buffers of their own
        for k, r in zip(idx, results):
            # an image the GPU could not decode, or (never seen) not into its region: the CPU
            # decoder decodes it or says why not (decode_worker's fallback)
            if r is None or r.__cuda_array_interface__["data"][0] != ptr + int(offsets[k]):
                header = int(np.prod(shapes[k]))
                request.on_host(k)
                if k in host and host[k].nbytes > header:
                    a = upload(host.pop(k), stream)
                    extra.append((k, a))
                    ptrs[k] = a.data.ptr
        if errors:
            stream.synchronize()
            lease.extra = extra
            lease.retire(None)
            return None, errors
        for k, a in host.items():  # stream-ordered after the decode (the call stages the bytes)
            rt.memcpyAsync(int(ptrs[k]), a.ctypes.data, a.nbytes, rt.memcpyHostToDevice, stream.ptr)
        lease.extra = extra
        pitches = shapes[:, 1] * shapes[:, 2]
        for k, a in extra:  # (their own row pitch)
            pitches[k] = a.strides[0]
        return DeviceImages(ptrs, shapes, pitches, lease, self.device_id), []

    # ---- buffers going back ---------------------------------------------------------------------
    def _release_room(self):
        with self._cond:
            self._in_flight -= 1
            self._cond.notify_all()

    def _give_back(self, lease, event):
        """A lease retired: its buffer freed behind a device-side wait for ``event`` (None: its
        own decode), on a stream of this decoder's; its room goes to the next request."""
        import cupy as cp

        rt = cp.cuda.runtime
        with cp.cuda.Device(self.device_id):
            s = self._free_stream
            ev = event if event is not None else lease.done
            if ev is not None:
                rt.streamWaitEvent(s.ptr, ev.ptr, 0)
            else:  # (nothing queued on it yet: a request that failed before its decode)
                s.synchronize()
            if getattr(lease, "extra", None):
                s.synchronize()  # (rare: pool buffers, dropped only once no work reads them)
                lease.extra = None
            rt.freeAsync(lease.ptr, s.ptr)
        self._release_room()

    def _orphaned(self, lease):
        """A lease dropped unretired (no CUDA call here): freed at the next request or close."""
        with self._cond:
            self._orphans.append(lease)
        self._release_room()

    def _free_orphans(self):
        with self._cond:
            orphans, self._orphans = self._orphans, []
        if not orphans:
            return
        import cupy as cp

        with cp.cuda.Device(self.device_id):
            cp.cuda.runtime.deviceSynchronize()  # (whatever read them has run)
            for lease in orphans:
                cp.cuda.runtime.freeAsync(lease.ptr, self._free_stream.ptr)
                lease.extra = None

    def close(self):
        """At the pipeline's close (its streams still there): the decoder and what it holds go."""
        with self._cond:
            self.taken_over = True
            self._cond.notify_all()
            retire = self._pending == 0
        if retire:
            self._retire_decoder()
        self._free_orphans()
