"""bench_gpu's ceilings: nvImageCodec's batched decode alone, in one process and in P spawned
processes at once (the machine's decode ceiling, optionally with each batch's outputs written),
and detaug's fused warp alone against a device-to-device copy. Run as a script, it tabulates
paired runs (detaug and its ceiling from one bench_gpu invocation): see "paired runs" below."""
from __future__ import annotations

import collections
import contextlib
import json
import statistics
import sys
import time

import numpy as np

from gpu_common import (EXTRA, ROWS, SIZE, WARP_KW, decode_params, import_nvimgcodec,
    index_stream, log, timed)


OUTPUT_KINDS = {  # --ceiling-outputs KIND: (output dtype, whether the decoded bytes are read)
    "convert": ("float32", True), "write32": ("float32", False),
    "convert16": ("float16", True), "write16": ("float16", False),
    "warp": ("float32", "warp")}  # detaug's own fused warp of the decoded batch


def ceiling_work(blobs, batch_size, seed=1, with_asarray=False, outputs=0, out_kind="convert"):
    """The decode ceiling's work, one definition for the one-process and the P-process ceiling:
    nvImageCodec ``Decoder(device_id=0)`` (its defaults: one CPU thread per core), detaug's
    ``decode_params("RGB")``, batches of ``batch_size`` of the preloaded bytes (successive random
    permutations) on a non-blocking stream, results released 8 batches later (as detaug's decode
    op). Returns (step, sync, keep): ``step()`` decodes one batch and returns its image count.
    ``outputs`` (a side, e.g. SIZE): after each decode, on its stream, one kernel also writes the
    batch's outputs as the pipeline's are (batch x 3 x side x side float32, from as many uint8):
    the least GPU work a pipeline that makes those outputs adds to the decode. ``out_kind``
    (OUTPUT_KINDS): "convert" reads uint8 and writes float32 as above; "write32" only writes the
    float32 outputs (a fill: the bytes any pipeline making them writes, nothing read);
    "convert16" / "write16" the same with float16 outputs; "warp": detaug's fused warp kernel
    (``warp_cupy``: crop + flip + resize + normalize to float32 CHW, one launch, its metadata
    uploaded) of the decoded images themselves, with bench_warp's random windows: a pipeline's
    stage b run in the decode process, with no pipeline around it."""
    import cupy as cp

    nvimgcodec = import_nvimgcodec()
    dec = nvimgcodec.Decoder(device_id=0)
    params = decode_params("RGB")
    stream = cp.cuda.Stream(non_blocking=True)
    arrays = [np.frombuffer(b, np.uint8) for b in blobs]  # as detaug's reader hands them over
    idx = index_stream(len(arrays), batch_size, seed=seed)
    keep = collections.deque(maxlen=8)  # as detaug's decode op: release a few batches later
    if outputs:
        out_dtype, reads = OUTPUT_KINDS[out_kind]
        if reads == "warp":
            from detaug.kernels import warp as W

            rng = np.random.default_rng(seed)
        else:
            with stream:
                src = cp.zeros((batch_size, outputs, outputs, 3), cp.uint8)
                out = cp.empty((batch_size, 3, outputs, outputs), out_dtype)
        scale = np.float32(1 / 255)

    def step():
        ids = next(idx)
        res = dec.decode([arrays[i] for i in ids], params=params, cuda_stream=stream.ptr)
        bad = sum(r is None for r in res)
        if bad:
            raise RuntimeError(f"nvImageCodec returned None for {bad} images")
        if outputs and reads == "warp":  # (its output goes back to the pool, stream-ordered)
            imgs = [cp.asarray(r) for r in res]
            sizes = np.array([im.shape[:2] for im in imgs], np.int64)
            m, _, _ = crop_flip_resize_matrices(sizes, rng)
            W.warp_cupy(imgs, m, np.tile([outputs, outputs], (len(imgs), 1)), stream=stream,
                        **WARP_KW)
        elif outputs:
            with stream:
                if reads:
                    cp.multiply(src.transpose(0, 3, 1, 2), scale, out=out, casting="unsafe")
                else:
                    out.fill(0)
        if with_asarray:
            with stream:
                keep.append([cp.asarray(r) for r in res])
        keep.append(res)
        return len(ids)

    def sync():
        stream.synchronize()
        cp.cuda.runtime.deviceSynchronize()

    return step, sync, keep


def _outputs_label(kind):
    """The rows' name for a ceiling with outputs: " + outputs" (convert, as before), else with
    the kind."""
    if not kind:
        return ""
    return " + outputs" if kind == "convert" else f" + outputs ({kind})"


def bench_decode_ceiling(args, blobs, with_asarray=False):
    step, sync, keep = ceiling_work(blobs, args.batch_size, seed=1, with_asarray=with_asarray)
    n, secs, k = timed(step, warmup=args.warmup, min_s=args.ceiling_seconds,
                       max_s=args.ceiling_seconds * 2, sync=sync,
                       min_items=min(len(blobs), 16 * args.batch_size))
    keep.clear()
    if with_asarray:
        return {"name": "nvImageCodec decode + cupy.asarray (diag.)", "img_s": n / secs,
                "images": n, "seconds": round(secs, 2),
                "notes": "as (a), plus cupy.asarray of each decoded image, as detaug's decode op does"}
    return {"name": "nvImageCodec batched decode (ceiling)", "img_s": n / secs, "images": n,
            "seconds": round(secs, 2),
            "notes": f"Decoder().decode(batch of {args.batch_size} preloaded bytes, cuda_stream), "
                     "sync at the end; no augmentation; one thread of this process"}


def _ceiling_proc(k, paths, batch_size, warmup, window, rounds, barriers, conn, wait_s, outputs=0,
                  out_kind="convert"):
    """One process of the P-process ceiling (spawned): reads its own copy of the files, makes its
    decoder and decodes one batch, waits on the "ready" barrier (every process and the parent);
    then for each round P it takes part in (k < P): the round's "warm" barrier (its P processes
    and the parent: the previous round is over), ``warmup`` batches, the round's "go" barrier,
    ``window`` seconds of batches, a sync; sends ("ok", P, k, images, seconds, t0, t1)
    (perf_counter: CLOCK_MONOTONIC, one clock for all processes on Linux), or
    ("error", k, message) after aborting every barrier."""
    keep = None
    try:
        blobs = []
        for p in paths:
            with open(p, "rb") as f:
                blobs.append(f.read())
        step, sync, keep = ceiling_work(blobs, batch_size, seed=1 + k, outputs=outputs,
                                        out_kind=out_kind)
        step()  # first-call set-up of the decoder, before any round
        sync()
        barriers["ready"].wait(timeout=wait_s)
        for P in rounds:
            if k >= P:
                continue
            barriers["warm", P].wait(timeout=wait_s)
            for _ in range(warmup):
                step()
            sync()
            barriers["go", P].wait(timeout=wait_s)
            n, t0 = 0, time.perf_counter()
            while True:
                n += step()
                if time.perf_counter() - t0 >= window:
                    break
            sync()
            t1 = time.perf_counter()
            conn.send(("ok", P, k, n, t1 - t0, t0, t1))
    except BaseException as e:  # noqa: BLE001 -- report (first: the parent reads it when a
        with contextlib.suppress(BaseException):  # barrier breaks), then free the others
            conn.send(("error", k, f"{type(e).__name__}: {e}"[:300]))
        for b in barriers.values():
            with contextlib.suppress(BaseException):
                b.abort()
    finally:
        if keep is not None:  # images before their decoder (see detaug.ops.gpu_decode)
            keep.clear()
        with contextlib.suppress(BaseException):
            conn.close()


def bench_decode_ceiling_mp(args, recs):
    """The machine's decode ceiling: ``ceiling_work`` in P processes at once, for each P of
    ``--ceiling-processes``. max(P) processes are spawned once (each reads the files into its own
    memory, makes its decoder and decodes a batch: all are ready before the first measurement);
    the measurement of P runs processes 0..P-1 (the others idle, blocked on a later
    measurement's barrier): they warm up once the previous round is over,
    then start together on a barrier of P + 1 (the parent too). Appends
    one row per P (img/s summed over the processes); details in EXTRA["decode_ceiling_mp"]."""
    import multiprocessing as mp
    from multiprocessing.connection import wait as mp_wait

    rounds = sorted({int(p) for p in args.ceiling_processes if int(p) > 0})
    if not rounds:
        return None
    ctx = mp.get_context("spawn")
    barriers = {"ready": ctx.Barrier(max(rounds) + 1)}
    for P in rounds:
        barriers["warm", P] = ctx.Barrier(P + 1)
        barriers["go", P] = ctx.Barrier(P + 1)
    paths = [r[0] for r in recs]
    start_s = 180.0  # spawn, imports, CUDA context, decoder, reading the files, warm-up
    window = args.ceiling_window
    procs, conns = [], []
    for k in range(max(rounds)):
        parent, child = ctx.Pipe(duplex=False)
        pr = ctx.Process(target=_ceiling_proc, name=f"decode-ceiling-{k}", daemon=True,
                         args=(k, paths, args.batch_size, args.warmup, window, rounds, barriers,
                               child, start_s + 2 * window * len(rounds),
                               SIZE if args.ceiling_outputs else 0,
                               args.ceiling_outputs or "convert"))
        pr.start()
        child.close()
        procs.append(pr)
        conns.append(parent)
    detail = {"window_s": window, "batch": args.batch_size, "rounds": {}}
    EXTRA["decode_ceiling_mp"] = detail
    plus = _outputs_label(args.ceiling_outputs)
    too = f" (each batch's outputs written too: {args.ceiling_outputs})" if args.ceiling_outputs else ""
    t_start = time.perf_counter()

    def meet(key, timeout):
        try:
            barriers[key].wait(timeout=timeout)
        except Exception as e:  # noqa: BLE001 -- a process failed or never came
            errs = []
            for c in conns:
                with contextlib.suppress(BaseException):
                    if c.poll(0.2):
                        errs.append(c.recv())
            raise RuntimeError(f"barrier {key}: the processes did not meet ({type(e).__name__}); "
                               f"{[m for m in errs if m[0] == 'error'] or 'no process reported an error'}"
                               ) from None

    try:
        meet("ready", start_s)
        log(f"decode ceiling, P processes: {len(procs)} spawned and ready in "
            f"{time.perf_counter() - t_start:.1f} s")
        for P in rounds:
            meet(("warm", P), 60.0)
            meet(("go", P), 60.0)
            got, deadline = {}, time.perf_counter() + window * 3 + 60
            while len(got) < P:  # one message from each of processes 0..P-1
                left = deadline - time.perf_counter()
                waiting = {conns[k]: k for k in range(P) if k not in got}
                ready = mp_wait(list(waiting), timeout=max(0.0, left))
                if not ready:
                    raise RuntimeError(f"round P={P}: {P - len(got)} process(es) did not report "
                                       f"within {window * 3 + 60:.0f} s")
                for c in ready:
                    try:
                        m = c.recv()
                    except EOFError:
                        raise RuntimeError(f"round P={P}: decode process {waiting[c]} ended "
                                           "without a result") from None
                    if m[0] == "error":
                        raise RuntimeError(f"round P={P}: process {m[1]}: {m[2]}")
                    got[m[2]] = m
            per = [got[k][3] / got[k][4] for k in range(P)]
            n_all = sum(got[k][3] for k in range(P))
            span = max(got[k][6] for k in range(P)) - min(got[k][5] for k in range(P))
            summed = sum(per)
            skew = max(got[k][5] for k in range(P)) - min(got[k][5] for k in range(P))
            detail["rounds"][P] = {"img_s_summed": summed, "img_s_per_process": per,
                                   "images": n_all, "img_s_over_span": n_all / span,
                                   "span_s": span, "start_skew_ms": 1e3 * skew}
            row = {"name": f"decode ceiling{plus}, P={P} process{'es' if P > 1 else ''}",
                   "img_s": summed, "images": n_all, "seconds": round(span, 2), "processes": P,
                   "outputs": args.ceiling_outputs or False,
                   "img_s_per_process": per, "img_s_over_span": n_all / span,
                   "notes": f"the one-process ceiling's work{too} in {P} spawned process(es) at once, "
                            f"each on its own copy of the bytes, {window:g} s window, summed; "
                            f"per process {', '.join(f'{r:,.0f}' for r in per)}; all images / "
                            f"span {n_all / span:,.0f}; start skew {1e3 * skew:.1f} ms"}
            ROWS.append(row)
            log(f"{row['name']}: {summed:.1f} img/s summed ({row['notes']})")
    finally:
        for b in barriers.values():  # a process still waiting (after a failure) ends now
            with contextlib.suppress(BaseException):
                b.abort()
        for c in conns:
            with contextlib.suppress(BaseException):
                c.close()
        for pr in procs:
            pr.join(timeout=15)
        for pr in procs:
            if pr.is_alive():
                pr.terminate()
                pr.join(timeout=5)
    best = max(detail["rounds"].items(), key=lambda kv: kv[1]["img_s_summed"], default=None)
    if best:
        detail["best"] = {"processes": best[0], "img_s": best[1]["img_s_summed"]}
    return None


# ---------------------------------------------------------------------------- 3b/c. torchvision
def crop_flip_resize_matrices(sizes_hw, rng):
    """Matrices of an IoU-crop-like window (each side 0.3-1 of the image), a coin-flip mirror
    and a resize to SIZE x SIZE, composed with detaug.core.geometry; and the window sizes."""
    from detaug.core import geometry as G

    h, w = sizes_hw[:, 0].astype(np.float64), sizes_hw[:, 1].astype(np.float64)
    b = len(sizes_hw)
    cw = np.maximum(np.round(w * rng.uniform(0.3, 1.0, b)), 1)
    ch = np.maximum(np.round(h * rng.uniform(0.3, 1.0, b)), 1)
    x0 = np.floor(rng.uniform(0, 1, b) * (w - cw + 1))
    y0 = np.floor(rng.uniform(0, 1, b) * (h - ch + 1))
    flip = (rng.uniform(0, 1, b) < 0.5).astype(np.int32)
    m = (G.scale(SIZE / cw, SIZE / ch) @ G.flip(cw, ch, flip, np.zeros(b))
         @ G.translate(-x0, -y0))
    return m, cw, ch


def _decoded_batch(blobs, bs, gpu):
    """One batch of decoded images, uint8 HWC: cupy arrays (own memory) or numpy."""
    if gpu:
        import cupy as cp

        nvimgcodec = import_nvimgcodec()
        dec = nvimgcodec.Decoder(device_id=0)
        params = decode_params("RGB")
        res = dec.decode([np.frombuffer(b, np.uint8) for b in blobs[:bs]], params=params)
        imgs = [cp.array(cp.asarray(r), copy=True) for r in res]
        cp.cuda.runtime.deviceSynchronize()
        del res
        return imgs
    import io as _io

    from PIL import Image

    out = []
    for b in blobs[:bs]:
        with Image.open(_io.BytesIO(b)) as im:
            out.append(np.asarray(im.convert("RGB")))
    return out


def prefilled_ms(cp, s, call, n, host_ms):
    """GPU milliseconds per ``call()`` without host gaps: a spin kernel holds ``s`` while the
    host queues ``n`` calls between two events; None if the GPU caught up with the host (three
    tries with a longer spin each)."""
    spin = cp.RawKernel(r'''
extern "C" __global__ void spin(long long cycles) {
    long long t0 = clock64();
    while (clock64() - t0 < cycles) { }
}''', "spin")
    clock_khz = cp.cuda.runtime.getDeviceProperties(0).get("clockRate", 2_000_000) or 2_000_000
    e0, e1 = cp.cuda.Event(), cp.cuda.Event()
    spin_s = max(0.2, 3.0 * n * host_ms / 1e3)
    for _attempt in range(3):
        with s:
            spin((1,), (1,), (np.int64(spin_s * clock_khz * 1e3),))
        e0.record(s)
        for _ in range(n):
            call()
        e1.record(s)
        prefilled = not e0.done  # the GPU had not reached e0 when all calls were queued
        e1.synchronize()
        if prefilled:
            return cp.cuda.get_elapsed_time(e0, e1) / n
        spin_s *= 4
    return None


def d2d_copy_gb_s(cp, s, nbytes=1 << 30, reps=10):
    """Device-to-device copy bandwidth (bytes read + written per second, GB/s) on stream ``s``."""
    a = cp.empty(nbytes, cp.uint8)
    b = cp.empty(nbytes, cp.uint8)
    with s:
        a.fill(1)
        b.fill(0)
        b.data.copy_from_device_async(a.data, nbytes, s)
    s.synchronize()
    e0, e1 = cp.cuda.Event(), cp.cuda.Event()
    e0.record(s)
    for _ in range(reps):
        b.data.copy_from_device_async(a.data, nbytes, s)
    e1.record(s)
    e1.synchronize()
    return 2 * nbytes / (cp.cuda.get_elapsed_time(e0, e1) / reps / 1e3) / 1e9


def warp_case(blobs, bs, gpu):
    """The warp-alone workload: ``bs`` decoded images, their crop + flip + resize matrices, the
    output sizes, the bytes counted (source inside the windows, output) and the warp's keywords
    (normalize to float32 CHW)."""
    imgs = _decoded_batch(blobs, bs, gpu)
    sizes = np.array([im.shape[:2] for im in imgs], np.int64)
    m, cw, ch = crop_flip_resize_matrices(sizes, np.random.default_rng(4))
    out_sizes = np.tile([SIZE, SIZE], (bs, 1))
    src_bytes = float(np.sum(cw * ch * 3))
    out_bytes = float(bs * 3 * SIZE * SIZE * 4)
    return imgs, m, out_sizes, src_bytes, out_bytes, dict(WARP_KW)


def bench_warp(args, blobs, gpu):
    from detaug.kernels import warp as W

    bs = min(args.batch_size, len(blobs))
    imgs, m, out_sizes, src_bytes, out_bytes, kw = warp_case(blobs, bs, gpu)
    res = {"name": "detaug fused warp alone", "batch": bs, "src_bytes": src_bytes,
           "out_bytes": out_bytes}
    iters = args.warp_iters
    if not gpu:  # smoke: the OpenCV path, a few calls
        t0 = time.perf_counter()
        for _ in range(3):
            out = W.warp_cv2(imgs, m, out_sizes, **kw)
        ms = (time.perf_counter() - t0) / 3 * 1e3
        assert out.shape == (bs, 3, SIZE, SIZE), out.shape
        a = np.empty(2**28, np.uint8)
        b = np.empty_like(a)
        a.fill(1)
        b.fill(0)
        t0 = time.perf_counter()
        np.copyto(b, a)
        copy_bw = 2 * a.nbytes / (time.perf_counter() - t0) / 1e9
        bw = (src_bytes + out_bytes) / (ms / 1e3) / 1e9
        res.update(ms_per_batch=ms, gb_s=bw, copy_gb_s=copy_bw, ratio=bw / copy_bw,
                   img_s=bs / (ms / 1e3),
                   notes=f"CPU smoke: warp_cv2, 1 thread, {ms:.1f} ms/batch, {bw:.2f} GB/s vs "
                         f"memcpy {copy_bw:.1f} GB/s")
        return res

    import cupy as cp

    s = cp.cuda.Stream(non_blocking=True)

    def call():
        return W.warp_cupy(imgs, m, out_sizes, stream=s, **kw)

    out = call()
    s.synchronize()
    assert tuple(out.shape) == (bs, 3, SIZE, SIZE) and out.dtype == np.float32, out.shape
    if args.warp_check:  # one sample against the NumPy twin (slow: float64 reference)
        ref = W.warp_numpy([cp.asnumpy(imgs[0])], m[:1], out_sizes[:1], **kw)
        err = float(np.abs(ref[0] - cp.asnumpy(out[0])).max())
        res["max_abs_err_vs_twin"] = err
        log(f"warp: max |cupy - numpy twin| on sample 0 = {err:.4g} (normalised units)")
    for _ in range(5):
        out = call()
    s.synchronize()
    # (i) back to back, events on the stream: includes any gap while the host prepares a call
    e0, e1 = cp.cuda.Event(), cp.cuda.Event()
    t0 = time.perf_counter()
    e0.record(s)
    for _ in range(iters):
        out = call()
    e1.record(s)
    host_ms = (time.perf_counter() - t0) / iters * 1e3
    e1.synchronize()
    stream_ms = cp.cuda.get_elapsed_time(e0, e1) / iters
    res.update(stream_ms_per_batch=stream_ms, host_ms_per_call=host_ms)
    # (ii) the queue pre-filled behind a spin kernel: GPU time of the calls without host gaps
    n2 = max(10, min(iters, 100))
    kern_ms, prefilled = None, False
    try:
        kern_ms = prefilled_ms(cp, s, call, n2, host_ms)
        prefilled = kern_ms is not None
        res["prefilled_calls"] = n2
    except Exception as e:  # noqa: BLE001
        log(f"warp: pre-filled measurement failed: {type(e).__name__}: {e}")
    res["kernel_ms_per_batch"] = kern_ms
    ms = kern_ms if kern_ms is not None else stream_ms
    bw = (src_bytes + out_bytes) / (ms / 1e3) / 1e9
    del out
    copy_bw = None
    try:
        copy_bw = d2d_copy_gb_s(cp, s)
    except Exception as e:  # noqa: BLE001
        log(f"warp: copy bandwidth failed: {type(e).__name__}: {e}")
    ratio = bw / copy_bw if copy_bw else None
    res.update(ms_per_batch=ms, gb_s=bw, copy_gb_s=copy_bw, ratio=ratio, img_s=bs / (ms / 1e3),
               notes=(f"{ms:.3f} ms/batch {'(kernel, queue pre-filled)' if kern_ms else '(stream)'}; "
                      f"stream back-to-back {stream_ms:.3f} ms, host {host_ms:.3f} ms/call; "
                      f"{bw:.0f} GB/s vs D2D copy {copy_bw or 0:.0f} GB/s = "
                      f"{100 * (ratio or 0):.1f}% (target >= 50%)"))
    log(f"warp: src {src_bytes / 1e6:.1f} MB + out {out_bytes / 1e6:.1f} MB per batch; "
        f"kernel {kern_ms if kern_ms is not None else float('nan'):.3f} ms (pre-filled: {prefilled}), "
        f"stream {stream_ms:.3f} ms, host {host_ms:.3f} ms/call; {bw:.0f} GB/s; "
        f"copy {copy_bw or 0:.0f} GB/s; ratio {100 * (ratio or 0):.1f}%")
    return res


# ---------------------------------------------------------------------------- 5. report


# ---------------------------------------------------------------------------- paired runs
# Rates on the device machines move by 10-30 % between rows, so detaug is compared with a ceiling
# measured in the same bench_gpu invocation, right after it (one pair, one ratio), and several
# pairs give their median. Each JSON (``bench_gpu.py --json``) holds one detaug row and its ceiling:
# * ``--only detaug,ceiling`` at the defaults: detaug / the one-process (in-thread) decode
#   ceiling; the project's target is at least 1.2;
# * ``--only detaug,ceiling_mp`` with a high-throughput budget: detaug / the best of the P-process
#   ceilings; target at least 0.90;
# * the same against the P-process ceiling that also writes each batch's outputs
#   (``--ceiling-outputs``): the least GPU work a pipeline making those outputs adds (a reference).
# Usage: python benchmarks/gpu_ceilings.py NAME=FILE.json [NAME=FILE.json ...]
# (pairs with the same NAME are one setting).
TARGETS = {"one": 1.2, "multi": 0.90}  # (the ceiling with outputs is a reference: no target)
CEILINGS = {"one": "one-process", "multi": "best P-process",
            "multi+outputs": "best P-process + outputs"}


def pair(path):
    """(kind, detaug img/s, ceiling img/s, device MB) of one bench_gpu JSON: kind
    'multi+outputs' or 'multi' where it holds P-process ceilings (with outputs or not), else
    'one'."""
    with open(path) as f:
        d = json.load(f)
    det = d.get("detaug_img_s")
    multi = {int(k): v for k, v in (d.get("decode_ceiling_processes_img_s") or {}).items()}
    plus = {int(k): v for k, v in (d.get("decode_ceiling_outputs_processes_img_s") or {}).items()}
    if det is None:
        raise ValueError(f"{path}: no detaug row")
    if plus:  # (bench_gpu --ceiling-outputs: each batch's outputs written too)
        return "multi+outputs", det, max(plus.values()), d.get("detaug_device_mem_mb")
    if multi:
        return "multi", det, max(multi.values()), d.get("detaug_device_mem_mb")
    one = d.get("decode_ceiling_one_process_img_s")
    if one is None:
        raise ValueError(f"{path}: no decode ceiling")
    return "one", det, one, d.get("detaug_device_mem_mb")


def table(items):
    """Markdown rows (one per setting) from (name, path) pairs."""
    by = collections.defaultdict(list)
    for name, path in items:
        by[name].append(pair(path))
    lines = ["| setting | ceiling | pairs: detaug / ceiling img/s (ratio) | median ratio | target | device MB |",
             "|---|---|---|---:|---:|---:|"]
    for name, rows in by.items():
        kinds = {r[0] for r in rows}
        if len(kinds) != 1:
            raise ValueError(f"{name}: pairs against different ceilings {sorted(kinds)}")
        kind = kinds.pop()
        ratios = [det / ceil for _, det, ceil, _ in rows]
        med = statistics.median(ratios)
        mem = [m for *_, m in rows if m is not None]
        lines.append(
            f"| {name} | {CEILINGS[kind]} | "
            + "; ".join(f"{det:,.0f} / {ceil:,.0f} ({det / ceil:.2f}x)" for _, det, ceil, _ in rows)
            + f" | {med:.2f}x | "
            + (f"{TARGETS[kind]:.2f}x {'met' if med >= TARGETS[kind] else 'NOT met'}" if kind in TARGETS
               else "reference")
            + " | "
            + (f"{min(mem):,.0f}-{max(mem):,.0f}" if mem else "-") + " |")
    return "\n".join(lines)


def pairs_main(argv=None):
    import argparse

    ap = argparse.ArgumentParser(description="The table of paired bench_gpu runs: each detaug row "
                                 "against the ceiling measured right after it, and their median.")
    ap.add_argument("pairs", nargs="+", metavar="NAME=FILE.json",
                    help="one bench_gpu --json file; files with the same NAME are one setting")
    args = ap.parse_args(sys.argv[1:] if argv is None else argv)
    items = []
    for a in args.pairs:
        name, sep, path = a.partition("=")
        if not sep:
            ap.error(f"{a!r}: expected NAME=FILE.json")
        items.append((name, path))
    print(table(items))


if __name__ == "__main__":  # the table of paired runs (benchmarks/device.sh pairs)
    pairs_main()
