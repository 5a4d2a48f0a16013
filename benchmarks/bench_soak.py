"""Soak of the GPU pipeline: the bench_gpu pipeline run for --batches
batches across epochs; the device memory of the pipeline and its decode processes (the drop of
``cudaMemGetInfo``'s free bytes from before the build, whole device) sampled at batch 1,000 and
at the last batch, and cupy's pool in this process at both; img/s over the batches after 1,000.

    python benchmarks/bench_soak.py --data DIR [--batches 20000] [--pipe-kwargs JSON]

Prints one markdown row; writes $OUT/bench_soak.json when OUT is set.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_gpu as bg  # noqa: E402


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--data", required=True)
    ap.add_argument("--batches", type=int, default=20000)
    ap.add_argument("--mark", type=int, default=1000)
    ap.add_argument("--batch-size", type=int, default=64)
    ap.add_argument("--max-seconds", type=float, default=240.0)
    ap.add_argument("--pipe-kwargs", default="{}")
    args = ap.parse_args(argv)
    import cupy as cp

    cp.cuda.Device(0).use()
    bg.free_gpu_memory()
    before = bg.device_free_bytes()
    pool = cp.get_default_memory_pool()
    pipe = bg.make_det_pipe(args.data, "mixed", batch_size=args.batch_size,
                            num_threads=os.cpu_count(), device_id=0, seed=0,
                            **json.loads(args.pipe_kwargs))
    pipe.build()
    marks, k, t_mark = {}, 0, None
    t0 = time.perf_counter()
    while k < args.batches and time.perf_counter() - t0 < args.max_seconds:
        out = pipe.run()  # a reader's run() goes round into the next epoch
        k += 1
        if k == args.mark:
            cp.cuda.runtime.deviceSynchronize()
            t_mark = time.perf_counter()
            marks["mark"] = (before - bg.device_free_bytes(), pool.total_bytes(), pool.used_bytes())
    cp.cuda.runtime.deviceSynchronize()
    t_end = time.perf_counter()
    marks["end"] = (before - bg.device_free_bytes(), pool.total_bytes(), pool.used_bytes())
    del out
    rate = (k - args.mark) * args.batch_size / (t_end - t_mark) if t_mark else float("nan")
    slots = getattr(pipe._executor, "slots", None)
    res = {"batches": k, "img_s_after_mark": rate, "settings": bg.pipe_settings(pipe),
           "memory_plan": pipe.memory_plan.describe() if pipe.memory_plan else None,
           "output_slots": pipe.output_slots, "slots_peak": getattr(slots, "peak", None),
           "launch_output_MB": (pipe._launch_out_bytes or 0) / 1e6,
           "device_MB": {m: v[0] / 1e6 for m, v in marks.items()},
           "pool_total_MB": {m: v[1] / 1e6 for m, v in marks.items()},
           "pipe_kwargs": json.loads(args.pipe_kwargs)}
    pipe.close()
    mk, end = res["device_MB"].get("mark", float("nan")), res["device_MB"]["end"]
    print("| soak | batches | img/s after batch %d | device MB at %d | device MB at end | growth MB "
          "| pool MB (mark / end) | plan |" % (args.mark, args.mark))
    print("|---|---:|---:|---:|---:|---:|---|---|")
    print(f"| {args.pipe_kwargs} | {k} | {rate:,.0f} | {mk:,.0f} | {end:,.0f} | {end - mk:+,.0f} "
          f"| {res['pool_total_MB'].get('mark', 0):,.0f} / {res['pool_total_MB']['end']:,.0f} "
          f"| {res['memory_plan']}; output slots {res['output_slots']} (peak {res['slots_peak']}), "
          f"launch output {res['launch_output_MB']:,.0f} MB |")
    bg.write_json(res, None, "bench_soak.json")


if __name__ == "__main__":
    main()
