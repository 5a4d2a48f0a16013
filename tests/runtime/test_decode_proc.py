"""The decode processes (detaug/runtime/gpu/decode_proc.py) on the CPU: the ring's bookkeeping
(slots never overlap while alive, come back in any order, requests too large are refused), a
worker that cannot start, and the pipeline side's protocol with stand-in workers; the one test
that needs a GPU is marked gpu."""
import io

import numpy as np
import pytest
from PIL import Image

from detaug import Pipeline, fn
from detaug.runtime.gpu.decode_worker import ALIGN, SlotRing, packed_offsets
from helpers import close_pipelines, fresh_seed, to_np, track  # noqa: F401  (autouse fixture)
from helpers import has_gpu as _gpu


def test_packed_offsets_hand_computed():
    off, total = packed_offsets([(2, 3, 3), (1, 1, 1), (10, 30, 3)])
    # 18 -> 256, 1 -> 256, 900 -> 1024
    assert off.tolist() == [0, 256, 512] and total == 512 + 1024
    off, total = packed_offsets(np.zeros((0, 3)))
    assert len(off) == 0 and total == 0


def test_ring_slots_never_overlap_fresh_random(rng):
    for _ in range(5):
        cap, n = int(rng.integers(2000, 100_000)), int(rng.integers(1, 6))
        ring = SlotRing(cap, n)
        assert ring.slot_bytes % ALIGN == 0 and ring.slot_bytes * n <= cap
        live = {}
        for key in range(500):
            if live and (rng.random() < 0.5 or len(live) == n):
                k = list(live)[int(rng.integers(len(live)))]  # free in any order
                ring.free(k)
                del live[k]
                continue
            size = int(rng.integers(1, ring.slot_bytes + 1))
            start = ring.alloc(key, size)
            assert start is not None  # a free slot always takes any request that fits one
            assert start % ring.slot_bytes == 0 and start + size <= cap
            for a, b in live.values():
                assert start + size <= a or start >= b
            live[key] = (start, start + size)
        assert len(ring.live) == len(live)


def test_ring_slots_refuse_oversize_and_wait_when_full():
    ring = SlotRing(3000, 3)  # slots of 768 bytes (1000 rounded down to ALIGN)
    assert ring.slot_bytes == 768
    assert [ring.alloc(k, 700) for k in range(3)] == [0, 768, 1536]
    assert ring.alloc(3, 10) is None    # all taken: the caller waits for a free
    ring.free(1)
    assert ring.alloc(3, 10) == 768
    ring.free("never allocated")        # no effect
    with pytest.raises(ValueError, match="cannot fit"):
        ring.alloc(4, 769)


@pytest.mark.skipif(_gpu(), reason="a GPU is present: the worker would start (the gpu test "
                                    "below fails it on a missing device)")
def test_worker_that_cannot_start_is_a_clear_error():
    """Where a decode process cannot start (here: no GPU, or no cupy at all: the spawned child
    dies before its handshake), building the service fails with an error that says so and names
    the way out, instead of hanging."""
    from detaug.runtime.gpu.decode_proc import DecodeService

    with pytest.raises(RuntimeError, match="did not start.*decode_processes=0"):
        DecodeService(2, 0, 16)  # two started together: both are stopped


@pytest.mark.gpu
def test_worker_on_a_missing_device_is_a_clear_error():
    import cupy as cp

    from detaug.runtime.gpu.decode_proc import DecodeService

    with pytest.raises(RuntimeError, match="did not start.*decode_processes=0"):
        DecodeService(1, cp.cuda.runtime.getDeviceCount(), 16)


def test_decode_chunks_splits_sources_and_their_images_alike(monkeypatch):
    """gpu_decode.decode_chunks (the in-thread decode, and the decode processes' decode into
    their rings): calls of at most ``chunk`` sources, each with the same slice of ``images``
    where given and without the argument where not; the results in order. A stand-in decoder
    (nvImageCodec is not needed)."""
    from detaug.ops import gpu_decode

    monkeypatch.setattr(gpu_decode, "decode_params", lambda t: ("params", t))

    class Decoder:
        def __init__(self):
            self.calls = []

        def decode(self, srcs, **kw):
            self.calls.append((list(srcs), kw))
            return [f"r{s}" for s in srcs]

    srcs, images = list(range(7)), [f"i{k}" for k in range(7)]
    dec = Decoder()
    assert gpu_decode.decode_chunks(dec, srcs, "RGB", 3, 42, images) == [f"r{k}" for k in range(7)]
    assert [c[0] for c in dec.calls] == [[0, 1, 2], [3, 4, 5], [6]]
    assert [c[1]["images"] for c in dec.calls] == [["i0", "i1", "i2"], ["i3", "i4", "i5"], ["i6"]]
    assert all(c[1]["params"] == ("params", "RGB") and c[1]["cuda_stream"] == 42 for c in dec.calls)
    dec = Decoder()
    assert gpu_decode.decode_chunks(dec, srcs, "GRAY", 4, 7) == [f"r{k}" for k in range(7)]
    assert [c[0] for c in dec.calls] == [[0, 1, 2, 3], [4, 5, 6]]
    assert all("images" not in c[1] for c in dec.calls)


def test_decode_chunks_hands_a_failed_call_to_the_cpu_per_image(monkeypatch):
    """A call nvImageCodec raises on does not fail the batch unnamed: its images come back None
    (the callers decode each on the CPU, which names the file it cannot decode), with a warning
    naming the error; the other calls' results are kept, in order. Random chunk sizes and failing
    calls. An error that is not nvImageCodec's (RuntimeError, ValueError) propagates."""
    from detaug.ops import gpu_decode

    monkeypatch.setattr(gpu_decode, "decode_params", lambda t: ("params", t))
    rng = np.random.default_rng()
    for _ in range(20):
        n, chunk = int(rng.integers(1, 30)), int(rng.integers(1, 9))
        calls = -(-n // chunk)
        bad = set(rng.choice(calls, size=int(rng.integers(1, calls + 1)), replace=False).tolist())

        class Decoder:
            k = 0

            def decode(self, srcs, **kw):
                k, self.k = self.k, self.k + 1
                if k in bad:
                    raise ValueError(f"call {k} broke")
                return [f"r{s}" for s in srcs]

        with pytest.warns(RuntimeWarning, match="ValueError: call .* broke.*decoded on the CPU"):
            got = gpu_decode.decode_chunks(Decoder(), list(range(n)), "RGB", chunk, 0)
        want = [None if s // chunk in bad else f"r{s}" for s in range(n)]
        assert got == want

    class Broken:  # not one of nvImageCodec's errors (an API change, a bug): it propagates
        def decode(self, srcs, **kw):
            raise TypeError("decode() got an unexpected keyword argument")

    with pytest.raises(TypeError, match="unexpected keyword"):
        gpu_decode.decode_chunks(Broken(), list(range(5)), "RGB", 2, 0)


@pytest.mark.parametrize("where", ["send", "wait"])
def test_a_request_to_a_dead_worker_leaves_no_ring_slot_counted(where):
    """DecodeService counts the ring slots each worker's requests hold, and sends the next
    request to the worker with the fewest: a request that fails because its worker is gone (on
    send or while waiting for the reply) must not stay counted. Stand-in workers, no processes."""
    import itertools
    import threading

    from detaug.runtime.gpu.decode_proc import DecodeService

    class Worker:
        held = outstanding = 0

        def send(self, msg):
            if where == "send":
                raise BrokenPipeError

        def wait(self, req):
            raise RuntimeError(f"decode process died (request {req})")

        def death(self, req):
            return RuntimeError(f"decode process died (request {req})")

    svc = DecodeService.__new__(DecodeService)
    svc.workers, svc._ids, svc._lock, svc.device_id = [Worker(), Worker()], itertools.count(), threading.RLock(), 0
    for k in range(5):
        with pytest.raises(RuntimeError, match=f"died \\(request {k}\\)"):
            svc.decode(["a.jpg"], "RGB", 64, None)
    assert [(w.held, w.outstanding) for w in svc.workers] == [(0, 0), (0, 0)]


def _piped_worker():
    """A real _Worker's pipeline side (receiving and releasing threads) over an in-process pipe,
    with no process behind it: the test plays the decode process on the other end."""
    import multiprocessing
    import queue
    import threading

    from detaug.runtime.gpu.decode_proc import N_EVENTS, _Worker

    w = _Worker.__new__(_Worker)
    w.conn, child = multiprocessing.Pipe()
    w.held = w.outstanding = 0
    w.ring, w.done = 0, [1000 + k for k in range(N_EVENTS)]  # stand-ins for the IPC event handles
    w.retired, w.send_lock = queue.SimpleQueue(), threading.Lock()
    w.replies, w.cond, w.abandoned, w.alive = {}, threading.Condition(), {}, True
    w.reader = threading.Thread(target=w._receive, daemon=True)
    w.releaser = threading.Thread(target=w._release, daemon=True)
    w.reader.start()
    w.releaser.start()
    return w, child


def _service(workers):
    import itertools
    import threading

    from detaug.runtime.gpu.decode_proc import DecodeService

    svc = DecodeService.__new__(DecodeService)
    svc.workers, svc._ids, svc._lock, svc.device_id = workers, itertools.count(), threading.RLock(), 0
    return svc


def _eventually(cond, what, seconds=10.0):
    import time

    end = time.monotonic() + seconds
    while not cond():
        assert time.monotonic() < end, what
        time.sleep(0.005)


@pytest.mark.parametrize("reply", ["decoded", "failed", "before the interrupt", "worker dies"])
def test_an_interrupted_wait_gives_the_slot_back_when_the_worker_replies(reply, monkeypatch):
    """Ctrl-C while DecodeService.decode waits for a live worker: the worker still decodes into
    a ring slot, so the slot stays counted until its reply comes; then a region it decoded into
    is freed (("free", req) to the worker), a failed request's (no region) is not, and nothing
    is left in the replies. Before, the slot was uncounted at once and never freed: the
    worker's ring lost a slot for good, and a later request waited for it forever."""
    import threading

    from detaug.runtime.gpu import decode_proc

    waited = []  # the worker replies before its device is done: the free waits for its event
    monkeypatch.setattr(decode_proc._IpcDone, "synchronize", lambda self: waited.append(self.handle))
    w, child = _piped_worker()
    svc = _service([w])
    real_wait = w.wait

    def interrupted(req):
        if reply == "before the interrupt":  # the reply is already in when Ctrl-C lands
            _eventually(lambda: req in w.replies, "the reply did not arrive")
        raise KeyboardInterrupt

    def answer():  # the decode process: takes the request and replies
        m = child.recv()
        child.send(("done", m[1], np.zeros((1, 3), np.int64), [0], []))

    w.wait = interrupted
    if reply == "before the interrupt":
        threading.Thread(target=answer, daemon=True).start()
    with pytest.raises(KeyboardInterrupt):
        svc.decode(["a.jpg"], "RGB", 64, None)
    w.wait = real_wait
    if reply != "before the interrupt":
        msg = child.recv()
        assert msg[0] == "decode" and msg[2] == ["a.jpg"]
        req = msg[1]
        assert (w.held, w.outstanding) == (1, 0)  # the worker has the slot until it replies
        if reply == "decoded":
            child.send(("done", req, np.zeros((1, 3), np.int64), [0], []))
        elif reply == "failed":
            child.send(("done", req, None, None, [(0, "a.jpg: not a JPEG")]))
        else:
            child.close()
    else:
        req = 0
    _eventually(lambda: w.held == 0, f"the slot stayed counted ({w.held})")
    if reply in ("decoded", "before the interrupt"):
        assert child.poll(10), "the decoded region was never freed"
        assert child.recv() == ("free", req)
        assert waited == [w.done[req % decode_proc.N_EVENTS]]  # after the decode's "done" event
    elif reply == "failed":
        assert not child.poll(0.3) and waited == []  # no region to free
    assert w.replies == {} and w.abandoned == {}
    if reply != "worker dies":
        child.close()


def test_a_lease_dropped_unused_frees_its_region_after_the_workers_decode(monkeypatch):
    """A lease whose images were never used by the pipeline (dropped before its batch was made)
    retires with no event of this process: the region goes back only after the worker's own
    "done" event for it (the worker replies before its decode has run on the device; freed at
    once, its other decoder thread could decode into the region while the first still writes)."""
    from detaug.runtime.gpu import decode_proc

    waited = []
    monkeypatch.setattr(decode_proc._IpcDone, "synchronize", lambda self: waited.append(self.handle))
    w, child = _piped_worker()
    svc = _service([w])
    w.held = 1
    lease = decode_proc._Lease(w, 70, svc)
    del lease  # (CPython: the last reference; retire(None) from __del__)
    assert child.poll(10), "the region was never freed"
    assert child.recv() == ("free", 70)
    assert waited == [w.done[70 % decode_proc.N_EVENTS]] and w.held == 0
    child.close()


# ------------------------------------------------------------------ GPU: decoding into the ring
def _files(tmp_path, seed):
    """12 files: colour JPEGs, gray JPEGs, colour and gray PNGs, random sizes; their names."""
    rng = np.random.default_rng(seed)
    names = []
    for k in range(12):
        h, w = int(rng.integers(17, 300)), int(rng.integers(17, 300))
        kind = ("rgb.jpg", "gray.jpg", "rgb.png", "gray.png")[k % 4]
        # smooth pixels (JPEG keeps them close), with noise so no two files are alike
        yy, xx = np.mgrid[0:h, 0:w]
        base = (np.stack([xx * 255 / w, yy * 255 / h, (xx + yy) * 127 / (h + w)], -1)
                + rng.normal(0, 4, (h, w, 3)))
        a = np.clip(base, 0, 255).astype(np.uint8)
        img = Image.fromarray(a[:, :, 0] if "gray" in kind else a)
        buf = io.BytesIO()
        img.save(buf, "JPEG" if kind.endswith("jpg") else "PNG", **({"quality": 92} if kind.endswith("jpg") else {}))
        name = f"{k:02d}_{kind}"
        (tmp_path / name).write_bytes(buf.getvalue())
        names.append(name)
    return names


def _pipe(tmp_path, names, device, output_type, decode_processes=None):
    pipe = track(Pipeline(batch_size=6, num_threads=2, seed=0, device_id=0, prefetch_queue_depth=2,
                          decode_processes=decode_processes))
    with pipe:
        enc, _ = fn.readers.file(files=names, file_root=str(tmp_path))
        # (the encoded batch is not an output: the decode processes then read the files)
        pipe.set_outputs(fn.decoders.image(enc, device=device, output_type=output_type))
    return pipe


@pytest.mark.gpu
@pytest.mark.parametrize("output_type", ["RGB", "GRAY"])
@pytest.mark.parametrize("seed", [0, fresh_seed()])
def test_decode_into_the_ring_matches_the_cpu_and_the_in_thread_decode(tmp_path, output_type, seed):
    pytest.importorskip("nvidia.nvimgcodec")
    names = _files(tmp_path, seed)
    cpu = _pipe(tmp_path, names, "cpu", output_type)
    here = _pipe(tmp_path, names, "mixed", output_type, decode_processes=0)
    procs = _pipe(tmp_path, names, "mixed", output_type, decode_processes=2)
    procs.build()
    assert procs._decode_service is not None and procs._paths_only
    seen = 0
    for i in range(2):  # 12 files in batches of 6, in order
        (a,), (b,), (c,) = cpu.run(), here.run(), procs.run()
        for x, y, z, path in zip(a.data, b.data, c.data, names[6 * i:6 * i + 6], strict=True):
            y, z = to_np(y), to_np(z)
            assert x.shape == y.shape == z.shape, path
            assert x.shape[2] == (1 if output_type == "GRAY" else 3)
            # the processes' decode is the in-thread decode, pixel for pixel
            np.testing.assert_array_equal(z, y, err_msg=path)
            if path.endswith(".png"):  # lossless: exactly Pillow's pixels, but for the
                # colour-to-gray conversion (nvImageCodec's rounding differs from Pillow's by 1)
                if output_type == "GRAY" and "rgb" in path:
                    assert np.abs(z.astype(int) - x.astype(int)).max() <= 1, path
                else:
                    np.testing.assert_array_equal(z, x, err_msg=path)
            else:  # JPEG: nvJPEG's IDCT and colour conversion differ from libjpeg's by a few levels
                d = np.abs(z.astype(int) - x.astype(int))
                assert d.mean() < 1.5 and d.max() <= 12, (path, d.mean(), d.max())
            if output_type == "RGB" and "gray" in path:  # a gray file in RGB: equal channels
                assert (z[:, :, 0] == z[:, :, 1]).all() and (z[:, :, 1] == z[:, :, 2]).all()
            seen += 1
    assert seen == 12
