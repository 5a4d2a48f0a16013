"""Probe, on the GPU machine: nvImageCodec decoding straight into caller buffers (slots of one
ring allocation, wrapped with ``nvimgcodec.as_image``) against today's decode-process path
(decode into the decoder's own images, then a 2-D copy of each into the ring).

    python benchmarks/probe_into.py DATA            # API facts, pixels, then both modes timed
    python benchmarks/probe_into.py DATA MODE T     # one mode ('copy' or 'into'), T threads

Reports: whether decoding into views gives the same pixels as the plain decode; what a slot too
small / too big, a gray JPEG into 3 channels and a corrupt file do; each mode's img/s and the
device memory it took (cudaMemGetInfo's drop from after the context to the end, in a process of
its own)."""
import glob
import os
import subprocess
import sys
import threading
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from detaug.runtime.gpu.decode_proc import packed_offsets  # noqa: E402 (the ring's packing)
SLOT = 96 << 20  # one request of 64 images of up to 640 x 640 x 3 (78.6 MB)


def setup(root):
    import cupy as cp

    files = sorted(glob.glob(os.path.join(root, "images", "*.jpg")))
    cp.cuda.Device(0).use()
    cp.cuda.runtime.free(0)
    rt = cp.cuda.runtime
    rt.deviceSetLimit(getattr(rt, "cudaLimitStackSize", 0), 0)
    return files, [np.fromfile(f, np.uint8) for f in files]


def views(cp, ring, base, streams):
    shapes = np.array([(s.height, s.width, 3) for s in streams], np.int64)
    off, total = packed_offsets(shapes)
    return [ring[base + o: base + o + h * w * c].reshape(h, w, c)
            for o, (h, w, c) in zip(off.tolist(), shapes.tolist())], total


def facts(root):
    import cupy as cp
    from nvidia import nvimgcodec

    from detaug.ops.gpu_decode import decode_params, warm_up

    print("nvimgcodec", nvimgcodec.__version__)
    files, arrays = setup(root)
    p = decode_params("RGB")
    dec = warm_up(nvimgcodec.Decoder(device_id=0, max_num_cpu_threads=2), 0)
    s = cp.cuda.Stream(non_blocking=True)
    ring = cp.zeros(SLOT, cp.uint8)
    srcs = [nvimgcodec.CodeStream(a) for a in arrays[:64]]
    ref = [cp.asnumpy(cp.asarray(r)) for r in dec.decode(srcs, params=p, cuda_stream=s.ptr)]
    vs, total = views(cp, ring, 0, srcs)
    with s:
        imgs = [nvimgcodec.as_image(v, s.ptr) for v in vs]
    t = time.perf_counter()
    out = dec.decode(srcs, images=imgs, params=p, cuda_stream=s.ptr)
    t1 = time.perf_counter()
    s.synchronize()
    same = [np.array_equal(cp.asnumpy(v), r) for v, r in zip(vs, ref)]
    diff = max(int(np.abs(cp.asnumpy(v).astype(int) - r).max()) for v, r in zip(vs, ref))
    print(f"into views: {sum(same)}/64 equal to the plain decode (max diff {diff}); returned "
          f"{sum(o is not None for o in out)} images, same objects {sum(o is i for o, i in zip(out, imgs))}; "
          f"decode call {1e3 * (t1 - t):.1f} ms host, bytes {total}")
    # slot checks
    cs = srcs[0]
    h, w = cs.height, cs.width
    for name, shape in (("too small", (h - 1, w, 3)), ("too big", (h + 3, w + 5, 3)),
                        ("one channel", (h, w, 1))):
        v = cp.zeros(shape, cp.uint8)
        try:
            with s:
                o = dec.decode([cs], images=[nvimgcodec.as_image(v, s.ptr)], params=p, cuda_stream=s.ptr)
            s.synchronize()
            ok = o[0] is not None
            eq = ok and shape[2] == 3 and np.array_equal(cp.asnumpy(v[:h, :w]), ref[0])
            print(f"slot {name} {shape}: returned {'an image' if ok else 'None'}"
                  f"{'; pixels equal' if eq else ''}; shape out {o[0].shape if ok else None}")
        except Exception as e:
            print(f"slot {name} {shape}: raises {type(e).__name__}: {str(e)[:200]}")
    # gray JPEG decoded into 3 channels, and a corrupt one
    import io

    from PIL import Image

    g = io.BytesIO()
    Image.fromarray(ref[1][:, :, 0]).save(g, "JPEG", quality=95)
    gcs = nvimgcodec.CodeStream(g.getvalue())
    v = cp.zeros((gcs.height, gcs.width, 3), cp.uint8)
    with s:
        o = dec.decode([gcs], images=[nvimgcodec.as_image(v, s.ptr)], params=p, cuda_stream=s.ptr)
    s.synchronize()
    gp = dec.decode([gcs], params=p, cuda_stream=s.ptr)[0]
    s.synchronize()
    print(f"gray JPEG (num_channels {gcs.num_channels}) into 3 channels: {o[0] is not None}, equal to "
          f"the plain decode {np.array_equal(cp.asnumpy(v), cp.asnumpy(cp.asarray(gp)))}")
    bad = bytearray(arrays[2].tobytes())
    bad[len(bad) // 3: len(bad) // 3 + 400] = b"\x00" * 400
    try:
        bcs = nvimgcodec.CodeStream(bytes(bad))
        v = cp.zeros((bcs.height, bcs.width, 3), cp.uint8)
        with s:
            o = dec.decode([bcs, srcs[3]], images=[nvimgcodec.as_image(v, s.ptr),
                                                   nvimgcodec.as_image(cp.zeros_like(cp.asarray(ref[3])), s.ptr)],
                           params=p, cuda_stream=s.ptr)
        s.synchronize()
        print(f"corrupt middle: {['None' if x is None else 'image' for x in o]}")
    except Exception as e:
        print(f"corrupt middle: raises {type(e).__name__}: {str(e)[:200]}")


def run_mode(root, mode, threads, seconds=8.0):
    import cupy as cp
    from nvidia import nvimgcodec

    from detaug.ops.gpu_decode import decode_params, warm_up

    files, arrays = setup(root)
    rt = cp.cuda.runtime
    free0 = rt.memGetInfo()[0]
    p = decode_params("RGB")
    ring = cp.zeros(SLOT * threads * 3, cp.uint8)  # three slots per thread
    slot = SLOT
    counts = [0] * threads
    peak = [0]
    stop = threading.Event()

    def work(k):
        cp.cuda.Device(0).use()
        dec = warm_up(nvimgcodec.Decoder(device_id=0, max_num_cpu_threads=2), 0)
        s = cp.cuda.Stream(non_blocking=True)
        cs = cp.cuda.Stream(non_blocking=True)
        ev = cp.cuda.Event(block=False, disable_timing=True)
        keep = []
        i = k * 5
        while not stop.is_set():
            lo = (i % 16) * 64
            i += 1
            base = (k * 3 + i % 3) * slot
            srcs = [nvimgcodec.CodeStream(a) for a in arrays[lo:lo + 64]]
            if mode == "into":
                vs, _ = views(cp, ring, base, srcs)
                with s:
                    imgs = [nvimgcodec.as_image(v, s.ptr) for v in vs]
                dec.decode(srcs, images=imgs, params=p, cuda_stream=s.ptr)
            else:
                out = dec.decode(srcs, params=p, cuda_stream=s.ptr)
                ev.record(s)
                rt.streamWaitEvent(cs.ptr, ev.ptr, 0)
                shapes = np.array([(o.shape[0], o.shape[1], 3) for o in out], np.int64)
                off, _ = packed_offsets(shapes)
                for o, (h, w, c), d in zip(out, shapes.tolist(), off.tolist()):
                    cai = o.__cuda_array_interface__
                    pitch = cai["strides"][0] if cai.get("strides") else w * c
                    rt.memcpy2DAsync(ring.data.ptr + base + d, w * c, cai["data"][0], pitch, w * c, h,
                                     rt.memcpyDeviceToDevice, cs.ptr)
                done = cp.cuda.Event(block=False, disable_timing=True)
                done.record(cs)
                keep.append((done, out))
                while keep and keep[0][0].done:
                    keep.pop(0)
            s.synchronize() if i % 3 == 0 else None
            counts[k] += 64
            peak[0] = max(peak[0], free0 - rt.memGetInfo()[0])

    ts = [threading.Thread(target=work, args=(k,)) for k in range(threads)]
    for t in ts:
        t.start()
    time.sleep(3.0)  # warm
    c0, t0 = sum(counts), time.perf_counter()
    time.sleep(seconds)
    rate = (sum(counts) - c0) / (time.perf_counter() - t0)
    used = free0 - rt.memGetInfo()[0]
    stop.set()
    for t in ts:
        t.join()
    ring_mb = ring.nbytes / 2**20
    print(f"RESULT mode={mode} threads={threads}: {rate:,.0f} img/s; device memory {used / 2**20:,.0f} MB "
          f"(peak {peak[0] / 2**20:,.0f} MB), of which the ring {ring_mb:,.0f} MB: decoders "
          f"{(used / 2**20 - ring_mb) / threads:,.0f} MB each")


if __name__ == "__main__":
    root = sys.argv[1]
    if len(sys.argv) > 2:
        run_mode(root, sys.argv[2], int(sys.argv[3]))
    else:
        facts(root)
        for threads in (1, 2):
            for mode in ("copy", "into"):
                subprocess.run([sys.executable, __file__, root, mode, str(threads)], timeout=60)
