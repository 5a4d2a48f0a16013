"""The decode process's side of :mod:`detaug.runtime.gpu.decode_proc` (which documents the
protocol): the ring's bookkeeping, shared with the pipeline's side, and ``_worker``, the
process's main function: its CUDA context, its nvImageCodec decoders (made and warmed while the
pipeline indexes), its decoder threads and the receiving loop."""
from __future__ import annotations

import collections
import os
import queue
import sys
import threading
import time

import numpy as np


# "done" events of a worker, index req % N_EVENTS: an index is recorded again only N_EVENTS
# requests later, long after the pipeline queued its wait (a device worker has at most one
# request out). (Interprocess events are a scarce resource: 1,024 ran out of memory once a test
# process held a few dozen pipelines.)
N_EVENTS = 64
ALIGN = 256


class SlotRing:
    """A ring buffer of ``capacity`` bytes cut into ``slots`` equal slots, one request each.
    Fixed slots cannot fragment: the pipeline admits at most ``slots`` requests per worker at
    once (in launch order, sized from the annotated images), so a request always finds a free
    slot once the ones before it are given back. Pure bookkeeping (no device memory):
    unit-tested on the CPU."""

    def __init__(self, capacity: int, slots: int):
        self.slots = max(1, int(slots))
        self.slot_bytes = int(capacity) // self.slots // ALIGN * ALIGN
        self.free_slots = list(range(self.slots))
        self.live = {}  # key -> slot

    def alloc(self, key, size):
        """Start offset of a slot for a region of ``size`` bytes, or None while none is free."""
        if int(size) > self.slot_bytes:
            raise ValueError(f"a region of {int(size)} bytes cannot fit a slot of {self.slot_bytes}")
        if not self.free_slots:
            return None
        slot = self.free_slots.pop(0)
        self.live[key] = slot
        return slot * self.slot_bytes

    def free(self, key):
        slot = self.live.pop(key, None)
        if slot is not None:
            self.free_slots.append(slot)


def packed_offsets(shapes) -> tuple:
    """(start offsets (B,), total bytes) of images of ``shapes`` (B, 3) packed with ALIGN."""
    shapes = np.asarray(shapes, np.int64).reshape(-1, 3)
    sizes = -(-(shapes[:, 0] * shapes[:, 1] * shapes[:, 2]) // ALIGN) * ALIGN
    offsets = np.zeros(len(shapes), np.int64)
    if len(shapes):
        offsets[1:] = np.cumsum(sizes)[:-1]
    return offsets, int(sizes.sum())


class _Stopping(Exception):
    """The decode process is stopping: a decoder thread waiting for a ring slot leaves."""


class _Failed(Exception):
    """A request's files that cannot be decoded: [(position, message)]."""

    def __init__(self, errors):
        super().__init__(errors)
        self.errors = errors


class _Region:
    """A region of a decode process's ring as nvImageCodec's ``as_image`` takes it: packed
    (h, w, c) uint8 rows at a device address (the CUDA array interface, no stream to wait on)."""

    __slots__ = ("__cuda_array_interface__",)

    def __init__(self, ptr: int, shape: list):
        self.__cuda_array_interface__ = {"shape": tuple(shape), "typestr": "|u1", "data": (ptr, False),
                                         "strides": None, "version": 3}


class DecodeRequest:
    """A decode request's files read and sized before any decode, as a decode process and the
    pipeline's own early decoder (early_decode.py) both serve it: ``shapes`` (n, 3) of each
    image, from its header for the GPU decoder (EXIF orientation is not applied, so the
    header's size is the decoded size), from the CPU decoder's result for the files the GPU
    must not or cannot take (``host``: position -> decoded array); ``gpu``: the positions the
    GPU decodes; ``errors``: (position, message) of the files that cannot be decoded (a
    position of -1 or the read's own: the whole request); ``read_seconds``: the files' read."""

    def __init__(self, paths, output_type):
        from ...core.errors import SampleError
        from ...ops.decode import PixelLimitError, check_pixels
        from ...ops.gpu_decode import code_streams
        from ...ops.sources import EncodedBatch, read_files

        n = len(paths)
        self.paths, self.output_type = paths, output_type
        self.shapes = np.zeros((n, 3), np.int64)
        self.shapes[:, 2] = 1 if output_type == "GRAY" else 3
        self.host, self.errors, self.gpu, self.streams = {}, [], [], []
        t = time.perf_counter()
        try:
            data = read_files(paths)
        except SampleError as e:
            self.errors.append((e.position, str(e)))
            return
        finally:
            self.read_seconds = time.perf_counter() - t
        self.streams = code_streams(data)
        self._encoded = EncodedBatch(data, paths)
        for k, stream in enumerate(self.streams):
            if stream is None:
                self.on_host(k)
                continue
            try:  # the CPU decoder's pixel limit, on the header (its error, skippable)
                check_pixels((stream.width, stream.height))
            except PixelLimitError as e:
                self.errors.append((k, f"{paths[k]}: {e}"))
                continue
            self.shapes[k, :2] = stream.height, stream.width  # (its header parsed: code_streams)
            self.gpu.append(k)

    def on_host(self, k):
        """Decode file ``k`` on the CPU (a file the GPU must not or cannot take, or could not
        decode): into ``host`` with its shape, or its error into ``errors``."""
        from ...core.errors import SampleError
        from ...ops.decode import _decode_one

        try:
            a = self.host[k] = np.ascontiguousarray(_decode_one(self._encoded, k, self.output_type))
        except SampleError as e:
            self.errors.append((k, str(e)))
            return
        self.shapes[k] = (a.shape[0], a.shape[1], a.shape[2] if a.ndim == 3 else 1)


def _plan_waiting(conn):
    """The message a decode process started early has been sent already (``("ring", ...)`` or
    ``("stop",)``), or None: read before its CUDA context, so that a process the plan does not
    want exits without one (a context with its decoders is hundreds of MB, held until the
    process has exited: memory no plan counts)."""
    try:
        return conn.recv() if conn.poll() else None
    except (EOFError, OSError):  # the pipeline's process went away
        return ("stop",)


def _worker(conn, device_id, ring_bytes, threads=1, slots=3):  # pragma: no cover - runs in the child process (GPU)
    """A decode process: ``threads`` decoder threads (each with its own nvImageCodec decoder and
    streams: one decodes while another reads its files or waits for the device), a receiving
    thread (requests and frees), replies sent under a lock, in any order. ``ring_bytes`` None:
    started early, it waits for ``("ring", ring_bytes, threads, slots)`` after its imports and
    CUDA context (DecodeService.configure), and a ``("stop",)`` that came before them ends it
    without a context (:func:`_plan_waiting`)."""
    # started early (ring_bytes None), the plan may come while this process starts: a process
    # the plan stops leaves before its CUDA context where it can (before its imports, after
    # them: a second or two), else before its decoders
    planned = [None]

    def stopped() -> bool:
        if ring_bytes is None and planned[0] is None:
            planned[0] = _plan_waiting(conn)
        if planned[0] is not None and planned[0][0] != "ring":
            conn.close()
            return True
        return False

    if stopped():
        return
    import cupy as cp
    from nvidia import nvimgcodec

    from ...ops.gpu_decode import decode_chunks, warm_up

    if stopped():
        return
    rt = cp.cuda.runtime
    cp.cuda.Device(device_id).use()
    cp.cuda.runtime.free(0)  # the context
    # the context's local-memory reservation is stack size x resident threads (277 MB on an
    # H100 at the default 1 KiB); nothing here needs a stack up front (the driver grows it for a
    # kernel that does): 549 -> 272 MB per process, the same decode rate and pixels
    rt.deviceSetLimit(getattr(rt, "cudaLimitStackSize", 0), 0)
    if stopped():
        return
    # DETAUG_DECODE_CPU_THREADS: nvImageCodec's CPU threads per decoder (0 = one per core).
    # Default 4: one per core (16 threads for each of up to 6 decoders on 16 cores) took 35-70 MB
    # more device memory per process and ran no faster than 2; 4 ran faster than 2 in each of 4
    # pairs timed in one lease (defaults +4 %, +21 %; 8 GB +8 %, +28 %) for ~15 MB more per
    # process
    cpu_threads = int(os.environ.get("DETAUG_DECODE_CPU_THREADS", 4))
    # the decoders are made (and warmed up: warm_up) now, in threads, while the pipeline's
    # process indexes its readers and plans (about a second: it was the first launch's wait);
    # the decoder threads take them. The same decoders and first call as before: the same pixels
    made = queue.SimpleQueue()
    premade = {"left": max(1, int(threads))}
    premade_lock = threading.Lock()

    warm = threading.Semaphore(0)  # one release per decoder made ahead (or failed)

    def make_decoder():
        cp.cuda.Device(device_id).use()
        try:
            made.put(warm_up(nvimgcodec.Decoder(device_id=device_id, max_num_cpu_threads=cpu_threads),
                             device_id))
        except BaseException as e:  # (the decoder thread that takes it raises it)
            made.put(e)
        finally:
            warm.release()

    n_premade = premade["left"]
    for _ in range(n_premade):
        threading.Thread(target=make_decoder, daemon=True).start()

    def take_decoder():
        """A decoder made ahead, or a new one once they are all taken."""
        with premade_lock:
            mine = premade["left"] > 0
            premade["left"] -= mine
        if not mine:
            return warm_up(nvimgcodec.Decoder(device_id=device_id, max_num_cpu_threads=cpu_threads),
                           device_id)
        d = made.get()
        if isinstance(d, BaseException):
            raise d
        return d

    warm_first = False
    if ring_bytes is None:  # started early: the ring's size comes once the readers have indexed
        try:
            m = planned[0] if planned[0] is not None else conn.recv()
        except (EOFError, OSError):
            return
        if m[0] != "ring":
            conn.close()
            return
        _, ring_bytes, threads, slots, warm_first = m
    ring = rt.malloc(ring_bytes)
    done = [cp.cuda.Event(block=False, disable_timing=True, interprocess=True)
            for _ in range(N_EVENTS)]
    # warm_first (the pipeline decodes the first launches itself meanwhile: early_decode.py): the
    # handshake says "decodes now", one decoder is warm (a decoder thread can take the first
    # request). Without it the handshake comes first, and the first request waits here
    if warm_first and n_premade:
        warm.acquire()
    conn.send(("ready", rt.ipcGetMemHandle(ring), [rt.ipcGetEventHandle(e.ptr) for e in done]))
    alloc = SlotRing(ring_bytes, slots)
    room = threading.Condition()   # guards alloc; notified when a region comes back
    work = queue.SimpleQueue()     # decode requests; None stops a decoder thread
    send_lock = threading.Lock()
    state = {"stop": False}

    def reply(msg):
        with send_lock:
            conn.send(msg)

    def decoder_thread():
        cp.cuda.Device(device_id).use()
        decoder = take_decoder()
        stream = cp.cuda.Stream(non_blocking=True)  # decode, and the CPU-decoded images' uploads
        # nvImageCodec's wrappers of ring regions, dropped once the decode into them has run
        # (their event is done)
        keep = collections.deque()

        def serve(req, paths, output_type, chunk):
            while keep and keep[0][0].done:
                keep.popleft()
            t0 = time.perf_counter()
            request = DecodeRequest(paths, output_type)
            t1 = t0 + request.read_seconds
            shapes, host, errors, idx = request.shapes, request.host, request.errors, request.gpu
            if errors:
                return ("done", req, None, None, errors)
            offsets, total = packed_offsets(shapes)
            if total > alloc.slot_bytes:
                k = int(np.argmax(shapes[:, 0] * shapes[:, 1]))
                return ("done", req, None, None,
                        [(-1, f"a decode request of {total / 2**20:.0f} MiB (its largest image "
                              f"{paths[k]}, {shapes[k, 1]}x{shapes[k, 0]}) does not fit a slot of the "
                              f"decode process's buffer ({alloc.slot_bytes / 2**20:.0f} MiB, 1/{alloc.slots} "
                              f"of {ring_bytes / 2**20:.0f} MiB): raise decode_buffer_mb or "
                              "device_memory_budget")])
            t2 = time.perf_counter()
            with room:  # wait for a slot to come back (the receiving thread frees them)
                while (base := alloc.alloc(req, total)) is None:
                    if state["stop"]:
                        raise _Stopping
                    room.wait()
            t3 = time.perf_counter()
            try:
                # the decoder writes straight into the slot: no images of its own, no copies
                # (the same pixels as decoding into its own images). The wrappers are
                # made on the decode stream (a wrapper of another stream would make nvImageCodec
                # wait on the host)
                with stream:
                    images = [] if not idx else nvimgcodec.as_images(
                        [_Region(ring + base + o, shp) for o, shp in
                         zip(offsets[idx].tolist(), shapes[idx].tolist())], stream.ptr)
                t4 = time.perf_counter()
                results = decode_chunks(decoder, [request.streams[k] for k in idx], output_type,
                                        chunk, stream.ptr, images)
                t5 = time.perf_counter()
                tail = total  # the slot's free end: for a CPU-decoded image larger than its header
                for k, r in zip(idx, results):
                    # an image the GPU could not decode, or (never seen) not into its region:
                    # the CPU decoder decodes it or says why not
                    if r is None or r.__cuda_array_interface__["data"][0] != ring + base + int(offsets[k]):
                        header = int(np.prod(shapes[k]))
                        request.on_host(k)
                        if k in host and host[k].nbytes > header:  # placed at the slot's end
                            size = -(-host[k].nbytes // ALIGN) * ALIGN
                            if tail + size > alloc.slot_bytes:
                                errors.append((k, f"{paths[k]}: decoded on the CPU to {shapes[k, 1]}x"
                                                  f"{shapes[k, 0]}, larger than its header, and the "
                                                  "decode process's buffer has no room left for it"))
                                continue
                            offsets[k], tail = tail, tail + size
                if errors:
                    raise _Failed(errors)
                for k, a in host.items():  # (stream-ordered after the decode; the call stages the bytes)
                    rt.memcpyAsync(ring + base + int(offsets[k]), a.ctypes.data, a.nbytes,
                                   rt.memcpyHostToDevice, stream.ptr)
                done[req % N_EVENTS].record(stream)
                decoded = cp.cuda.Event(block=False, disable_timing=True)
                decoded.record(stream)
            except BaseException:  # the slot goes back once nothing more is written into it
                stream.synchronize()
                with room:
                    alloc.free(req)
                    room.notify_all()
                raise
            keep.append((decoded, images))  # the wrappers, until the decode into them has run
            if timing is not None:
                for name, a, b in (("read", t0, t1), ("parse", t1, t2), ("wait ring", t2, t3),
                                   ("wrap", t3, t4), ("decode", t4, t5),
                                   ("fallback", t5, time.perf_counter())):
                    timing[name] = timing.get(name, 0.0) + (b - a)
                timing["requests"] = timing.get("requests", 0) + 1
                timing["images"] = timing.get("images", 0) + len(paths)
            return ("done", req, shapes, (base + offsets).tolist(), [])

        # DETAUG_DECODE_PROFILE=1 (benchmarks): each decoder thread's time per phase, printed
        # to stderr when it stops
        timing = {} if os.environ.get("DETAUG_DECODE_PROFILE") == "1" else None
        born = time.perf_counter()
        try:
            while (m := work.get()) is not None:
                try:
                    msg = serve(*m[1:])
                except _Stopping:
                    return
                except _Failed as e:  # files that cannot be decoded, named
                    msg = ("done", m[1], None, None, e.errors)
                except Exception as e:  # never leave the pipeline waiting
                    msg = ("done", m[1], None, None, [(-1, f"decode worker: {type(e).__name__}: {e}")])
                try:
                    reply(msg)
                except (EOFError, OSError):
                    return
        finally:
            stream.synchronize()
            keep.clear()
            if timing:
                life = time.perf_counter() - born
                parts = ", ".join(f"{k} {v:.1f} s" if isinstance(v, float) else f"{k} {v}"
                                  for k, v in timing.items())
                print(f"detaug decode thread (pid {os.getpid()}): alive {life:.1f} s; {parts}",
                      file=sys.stderr, flush=True)

    n_threads = max(1, int(threads))
    with premade_lock:  # decoders made ahead for more threads than the plan gave: freed
        surplus = max(0, premade["left"] - n_threads)
        premade["left"] -= surplus
    if surplus:
        threading.Thread(target=lambda: [made.get() for _ in range(surplus)], daemon=True).start()
    pool = [threading.Thread(target=decoder_thread, daemon=True) for _ in range(n_threads)]
    for t in pool:
        t.start()
    # ("free", req) arrives only once the pipeline's work on the region has completed (its
    # releaser waits for an event): nothing here waits for the pipeline's GPU work
    while True:
        try:
            m = conn.recv()
        except (EOFError, OSError):  # the pipeline's process went away
            break
        if m[0] == "stop":
            break
        if m[0] == "free":
            with room:
                alloc.free(m[1])
                room.notify_all()
        elif m[0] == "decode":
            work.put(m)
    with room:
        state["stop"] = True
        room.notify_all()
    for _ in pool:
        work.put(None)
    for t in pool:
        t.join(timeout=10)
    rt.free(ring)
    conn.close()
