"""The fused warp's compile-time settings (``warp.cu``'s tunables), timed on the warp-alone
workload of bench_gpu.py: 64 decoded COCO-like JPEGs, crop + flip + resize to 640 x 640,
normalize to float32 CHW, one launch per batch.

Each variant compiles ``detaug/kernels/warp.cu`` with its ``-D`` options and runs the production
launch plan (``warp.launch_plan``; the grid follows the variant's pixels per lane) with the
metadata uploaded once, so the time is the kernel's alone (queue pre-filled behind a spin
kernel). Every variant's output must equal the default's bit for bit (all of them compute the
same taps and sums). Bandwidth counts the source bytes inside the crop windows plus the output
bytes, as bench_gpu.py does, against a device-to-device copy measured in the same run.

Usage (GPU machine, repo root): python benchmarks/warp_sweep.py [--data DIR] [--calls 100]
"""
from __future__ import annotations

import argparse
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import bench_gpu as BG  # noqa: E402

VARIANTS = [
    ("default (4 blocks/SM, 64 regs, 16 px/lane)", ()),
    ("no axis-aligned path", ("DETAUG_WARP_AXIS=0",)),
    ("no axis path, 4 blocks/SM (session 2's kernel)", ("DETAUG_WARP_AXIS=0", "DETAUG_WARP_MINB=4")),
    ("5 blocks/SM (48 regs)", ("DETAUG_WARP_MINB=5",)),
    ("3 blocks/SM (80 regs)", ("DETAUG_WARP_MINB=3",)),
    ("8 px/lane", ("DETAUG_WARP_PPL=8",)),
    ("32 px/lane", ("DETAUG_WARP_PPL=32",)),
    ("streaming stores", ("DETAUG_WARP_STORE_CS=1",)),
]


def _define(defs, name, default):
    for d in defs:
        k, _, v = d.partition("=")
        if k == name:
            return int(v)
    return default


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", default="/tmp/bench_data")
    ap.add_argument("--batch-size", type=int, default=64)
    ap.add_argument("--calls", type=int, default=100, help="launches per timing")
    args = ap.parse_args(argv)

    import cupy as cp

    from detaug.kernels import warp as W

    if not os.path.exists(os.path.join(args.data, "annotations.json")):
        BG.make_dataset(args.data, max(args.batch_size, 64), min(16, os.cpu_count() or 1))
    _recs, blobs = BG.load_records(args.data)
    imgs, m, out_sizes, src_bytes, out_bytes, kw = BG.warp_case(blobs, args.batch_size, True)
    spec = W._prepare(imgs, m, out_sizes, kw["fill"], True, 8, kw["mean"], kw["std"],
                      kw["out_dtype"], kw["layout"])
    plan = W.launch_plan(spec)
    meta = (cp.asarray(np.array([x.data.ptr for x in imgs], np.uint64)),
            cp.asarray(plan["meta_i"]), cp.asarray(plan["inv"]), cp.asarray(plan["meta_f"]))
    npix_max = int((spec.out_sizes[:, 0] * spec.out_sizes[:, 1]).max())
    out = cp.empty(int(plan["offsets"][-1]), np.float32)
    with open(os.path.join(os.path.dirname(W.__file__), "warp.cu")) as f:
        source = f.read()
    s = cp.cuda.Stream(non_blocking=True)
    copy_bw = BG.d2d_copy_gb_s(cp, s)
    print(f"batch {args.batch_size}: source in windows {src_bytes / 1e6:.1f} MB + output "
          f"{out_bytes / 1e6:.1f} MB; device-to-device copy {copy_bw:.0f} GB/s")
    print("| variant | regs | local B | ms/batch | GB/s | of copy | same output |")
    print("|---|---:|---:|---:|---:|---:|---|")
    reference, rows = None, []
    for name, defs in VARIANTS:
        try:
            ppl = _define(defs, "DETAUG_WARP_PPL", W._PIX_PER_LANE)
            options = tuple(o for o in W._OPTIONS if not o.startswith("-DDETAUG_WARP_PPL="))
            options += (f"-DDETAUG_WARP_PPL={ppl}",) + tuple("-D" + d for d in defs
                                                           if not d.startswith("DETAUG_WARP_PPL="))
            k = cp.RawModule(code=source, options=options).get_function(plan["name"])
            grid = ((npix_max + W._BLOCK * ppl - 1) // (W._BLOCK * ppl), spec.B, 1)

            def call(k=k, grid=grid):
                with s:
                    k(grid, plan["block"], meta + (out,))

            out.fill(np.nan)
            call()
            s.synchronize()
            got = cp.asnumpy(out)
            if reference is None:
                reference = got
            same = bool(np.array_equal(got, reference))
            for _ in range(5):
                call()
            s.synchronize()
            ms = BG.prefilled_ms(cp, s, call, args.calls, 0.05)
            bw = (src_bytes + out_bytes) / (ms / 1e3) / 1e9
            rows.append((name, ms))
            print(f"| {name} | {k.num_regs} | {k.local_size_bytes} | {ms:.4f} | {bw:.0f} | "
                  f"{100 * bw / copy_bw:.1f}% | {'yes' if same else 'NO'} |", flush=True)
        except Exception as e:  # noqa: BLE001 - one broken variant must not hide the others
            print(f"| {name} | failed: {type(e).__name__}: {str(e)[:200]} |||||", flush=True)
    if rows:
        best = min(rows, key=lambda r: r[1])
        print(f"fastest: {best[0]} ({best[1]:.4f} ms/batch; default {rows[0][1]:.4f})")


if __name__ == "__main__":
    main()
