"""The checks of a two-machine run of examples/retinanet_ddp.py (benchmarks/device.sh part
multinode; tests/test_multinode.py makes the same ones on the CPU), from the ranks' ``--trace``
files: one line per rank, then the shards' disjointness and cover per epoch, and the resumed
steps against the uninterrupted run's. Exit status 1 when a check fails.

    python benchmarks/multinode_check.py DIR [DIR ...] --records 40 --resumed-from 5

Each DIR is one machine's working directory, holding ``full-<rank>.json`` (the uninterrupted
run) and ``resumed-<rank>.json`` (the run resumed at step ``--resumed-from``).
"""
from __future__ import annotations

import argparse
import glob
import json
import os
import sys


def load(dirs, stem):
    """global rank -> (machine directory, trace) of ``stem-<rank>.json`` files."""
    got = {}
    for d in dirs:
        for f in sorted(glob.glob(os.path.join(d, f"{stem}-*.json"))):
            t = json.load(open(f))
            got[t["rank"]] = (os.path.basename(os.path.normpath(d)), t)
    return got


def epoch_records(trace, epoch):
    """The distinct records a rank read in ``epoch`` (a filled last batch repeats some)."""
    return {r for s in trace if s["epoch"] == epoch for r in s["records"]}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("dirs", nargs="+")
    ap.add_argument("--records", type=int, required=True, help="records in the data set")
    ap.add_argument("--resumed-from", type=int, required=True, help="the checkpoint's step")
    args = ap.parse_args(argv)
    full, resumed = load(args.dirs, "full"), load(args.dirs, "resumed")
    ok = True

    def check(name, good, detail=""):
        nonlocal ok
        ok &= bool(good)
        print(f"{'ok  ' if good else 'FAIL'} {name}{': ' + detail if detail else ''}")

    print("| rank | machine | local rank | shard | steps/epoch | steps | first records "
          "| resumed steps = uninterrupted |")
    print("|---|---|---|---|---|---|---|---|")
    for r in sorted(full):
        machine, t = full[r]
        mine = resumed.get(r, (None, {"trace": None}))[1]["trace"]
        same = mine == t["trace"][args.resumed_from:]
        print(f"| {r} | {machine} | {t['local_rank']} | {t['shard']['shard_id']}/"
              f"{t['shard']['num_shards']} | {t['steps_per_epoch']} | {len(t['trace'])} | "
              f"{' '.join(t['trace'][0]['records'][:3]) if t['trace'] else '-'} | "
              f"{'yes' if same else 'NO'} ({len(mine or [])} steps) |")
    world = {t["world"] for _, t in full.values()}
    check("a trace from every rank", len(world) == 1 and sorted(full) == list(range(world.pop())),
          f"ranks {sorted(full)}")
    check("ranks on different machines", len({m for m, _ in full.values()}) == len(full))
    check("LOCAL_RANK 0 everywhere", all(t["local_rank"] == 0 for _, t in full.values()))
    check("shard = global rank", all(t["shard"]["shard_id"] == r for r, (_, t) in full.items()))
    steps = {(t["steps_per_epoch"], len(t["trace"])) for _, t in full.values()}
    check("equal steps per rank", len(steps) == 1, str(sorted(steps)))
    epochs = sorted({s["epoch"] for _, t in full.values() for s in t["trace"]})
    per_epoch = full[0][1]["steps_per_epoch"] if 0 in full else 0
    for e in epochs:
        parts = [epoch_records(t["trace"], e) for _, t in full.values()]
        whole = sum(1 for _, t in full.values() for s in t["trace"] if s["epoch"] == e) == \
            per_epoch * len(full)
        if not whole:
            continue  # the run stopped inside this epoch
        overlap = set.intersection(*parts) if len(parts) > 1 else set()
        check(f"epoch {e}: shards disjoint and covering the data set",
              not overlap and len(set.union(*parts)) == args.records,
              f"{[len(p) for p in parts]} records a rank, {len(overlap)} shared, "
              f"{len(set.union(*parts))} of {args.records} covered")
    check("resume: every rank's steps are the uninterrupted run's",
          sorted(resumed) == sorted(full) and all(
              resumed[r][1]["trace"] == full[r][1]["trace"][args.resumed_from:] for r in full),
          f"{sum(len(t['trace']) for _, t in resumed.values())} resumed steps in all")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
