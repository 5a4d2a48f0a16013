"""Issue 11's throughput targets from paired bench_gpu runs: each JSON (``bench_gpu.py --json``)
holds one detaug row and the ceiling it is compared with, measured in the same invocation, one
right after the other. Rates on the device machines move by 10-30 % between rows, so each pair
gives one ratio and the table reports every pair and their median:

* target 1c (``--only ceiling,detaug``, the defaults): detaug / the one-process (in-thread)
  decode ceiling, at least 1.2;
* target 2 (``--only ceiling_mp,detaug`` with a high-throughput budget): detaug / the best of
  the P-process ceilings, at least 0.90;
* the same against the P-process ceiling that also writes each batch's outputs
  (``--ceiling-outputs``): the least GPU work a pipeline making those outputs adds (a
  reference, not the issue's target).

Usage: python benchmarks/issue11_pairs.py NAME=FILE.json [NAME=FILE.json ...]
(pairs with the same NAME are one setting).
"""
import collections
import json
import statistics
import sys

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


def main(argv=None):
    args = sys.argv[1:] if argv is None else argv
    items = []
    for a in args:
        name, sep, path = a.partition("=")
        if not sep:
            raise SystemExit(f"{a!r}: expected NAME=FILE.json")
        items.append((name, path))
    print(table(items))


if __name__ == "__main__":
    main()
