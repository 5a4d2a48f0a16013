#!/usr/bin/env bash
# Which Python code holds the GIL while the GPU pipeline runs (py-spy --gil, all threads),
# aggregated by function (own samples) and by op. On the GPU machine, wheels installed.
source .ci/device_setup.sh >/dev/null 2>&1 || exit 1
/tmp/site/bin/py-spy record --gil --idle -r 200 --format raw -o "$OUT/gil.txt" -- \
  python3 benchmarks/bench_gpu.py --only detaug --min-seconds 8 > "$OUT/gil_bench.log" 2>&1
grep -E "^\| detaug" "$OUT/gil_bench.log"
python3 - "$OUT/gil.txt" <<'PY'
import collections, sys
own, incl, total = collections.Counter(), collections.Counter(), 0
for line in open(sys.argv[1]):
    stack, _, n = line.rstrip().rpartition(" ")
    n = int(n); total += n
    frames = stack.split(";")
    own[frames[-1][:110]] += n
    for f in set(fr.split(" (")[0] for fr in frames):
        incl[f] += n
print(f"total GIL samples {total}")
print("--- own")
for f, n in own.most_common(25):
    print(f"{100 * n / total:5.1f}%  {f}")
print("--- inclusive (detaug functions)")
for f, n in incl.most_common(200):
    if "detaug" in f or "gpu_decode" in f:
        print(f"{100 * n / total:5.1f}%  {f}")
PY
