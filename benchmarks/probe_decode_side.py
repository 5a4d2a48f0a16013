"""Probe, on the GPU machine: the pipeline's decode side alone. ``readers.coco -> decoders.image
(device="mixed")`` and nothing after it (or only a resize to a small size, ``--resize N``): the
decode processes, their rings and the launches, without the detection pipeline's warps. Without
``--resize`` the queue's outputs hold their ring regions, so the rings, not the decoders, can
be what limits it. Its img/s beside bench_gpu's rows and P-process ceiling
of the same call tells whether the decode side or the rest of the pipeline keeps a row under the
ceiling. Prints one line: img/s, images, seconds, device memory (the drop of cudaMemGetInfo's free
bytes from before the build, all processes), the plan.

Usage: python benchmarks/probe_decode_side.py DATA [--pipe-kwargs JSON] [--seconds S] [--name N]
"""
import argparse
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_gpu  # noqa: E402


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("data")
    ap.add_argument("--pipe-kwargs", default="{}")
    ap.add_argument("--seconds", type=float, default=6.0)
    ap.add_argument("--batch-size", type=int, default=64)
    ap.add_argument("--name", default="decode only")
    ap.add_argument("--resize", type=int, default=0,
                    help="then resize to N x N on the GPU (a small output: the ring regions are "
                         "released once it has run, not held by the queue's outputs)")
    args = ap.parse_args(argv)
    if not os.path.exists(os.path.join(args.data, "annotations.json")):
        bench_gpu.make_dataset(args.data, 1024, os.cpu_count())
    import cupy as cp

    from detaug import fn, pipeline_def

    @pipeline_def
    def decode_only():
        enc, _ = fn.readers.coco(file_root=os.path.join(args.data, "images"),
                                 annotations_file=os.path.join(args.data, "annotations.json"),
                                 random_shuffle=True)
        img = fn.decoders.image(enc, device="mixed")
        return fn.resize(img, size=(args.resize, args.resize)) if args.resize else img

    bench_gpu.free_gpu_memory()
    before = bench_gpu.device_free_bytes()
    kwargs = dict(batch_size=args.batch_size, num_threads=4, device_id=0, seed=0)
    kwargs.update(json.loads(args.pipe_kwargs))
    pipe = decode_only(**kwargs)
    pipe.build()
    settings = bench_gpu.pipe_settings(pipe)

    def step():
        try:
            out = pipe.run()
        except StopIteration:
            pipe.reset()
            out = pipe.run()
        return len(out[0])

    try:
        n, secs, _ = bench_gpu.timed(step, warmup=20, min_s=args.seconds, max_s=2 * args.seconds,
                                     sync=cp.cuda.runtime.deviceSynchronize)
        mem = (before - bench_gpu.device_free_bytes()) / 1e6
    finally:
        pipe.close()
    print(f"| {args.name} | {n / secs:,.0f} img/s | {n} images in {secs:.2f} s | "
          f"device {mem:,.0f} MB | {json.dumps(settings)} |", flush=True)


if __name__ == "__main__":
    main()
