"""Two machines simulated on one: the multi-machine torchrun lines of docs/training.md, run as
written there (HOST0 -> localhost, a free port, 1 process a node instead of 8), as two separate
launches of torchrun (process groups), each "machine" in a working directory of its own. Both
ranks then have LOCAL_RANK 0 and the global ranks 0 and 1 come from the c10d rendezvous (in its
own order: ``--node_rank`` is ignored by it). examples/retinanet_ddp.py (stand-in model, gloo)
trains 7 steps on the VOC sample, 3 steps an epoch a rank, and writes a checkpoint at step 5
(mid-epoch) on each machine; a second launch resumes from each machine's own copy. Checked from
the ranks' traces (the records of every batch, named by the reader's own boxes): equal steps
per rank, shards by global rank, disjoint and covering each epoch, and the resumed steps
reading exactly the batches of the uninterrupted run."""
from __future__ import annotations

import json
import os
import re
import shlex
import signal
import socket
import subprocess
import sys

import pytest

from helpers import REPO, VOC

pytest.importorskip("torch")
pytestmark = pytest.mark.slow  # two launches of two torchrun "machines": 8 processes start torch
SCRIPT = os.path.join(REPO, "examples", "retinanet_ddp.py")
DOCS = os.path.join(REPO, "docs", "training.md")
TEARDOWN_ABORT = "terminate called without an active exception"  # see test_ddp_example.py
COMMON = ["--dry-run", "--cpu", "--size", "64", "--batch-size", "8", "--threads", "1",
          "--report", "7", "--iters", "7"]


def documented_lines() -> list:
    """The docs' two multi-machine torchrun commands (continuation lines joined), as argv."""
    text = open(DOCS, encoding="utf-8").read().replace("\\\n", " ")
    lines = [ln.split("#")[0] for ln in text.splitlines() if ln.startswith("torchrun --nnodes=2")]
    assert len(lines) == 2, f"{DOCS}: expected two 'torchrun --nnodes=2' lines, found {lines}"
    return [shlex.split(ln) for ln in lines]


def node_commands(port: int) -> list:
    """The documented commands for this machine: localhost for HOST0, ``port`` for its port,
    1 process a node, the example by its full path, torchrun as this interpreter's."""
    out = []
    for argv in documented_lines():
        cmd = [sys.executable, "-m", "torch.distributed.run"]  # what the torchrun script runs
        for a in argv[1:]:
            a = re.sub(r"^--nproc_per_node=\d+$", "--nproc_per_node=1", a)
            a = re.sub(r"^--rdzv_endpoint=HOST0:\d+$", f"--rdzv_endpoint=localhost:{port}", a)
            cmd.append(SCRIPT if a == "examples/retinanet_ddp.py" else a)
        assert f"--rdzv_endpoint=localhost:{port}" in cmd and SCRIPT in cmd, argv
        out.append(cmd)
    assert [c[c.index("--nnodes=2") + 1] for c in out] == ["--node_rank=0", "--node_rank=1"]
    return out


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("localhost", 0))
        return s.getsockname()[1]


def _teardown_abort(outs) -> bool:
    """Both ranks got through the whole script ("rank N: done") and one then aborted in torch's
    teardown (TEARDOWN_ABORT)."""
    joined = "\n".join(outs)
    return len(set(re.findall(r"rank (\d): done", joined))) == 2 and TEARDOWN_ABORT in joined


def launch(dirs, args, timeout=150, grace=15):
    """Both machines' torchrun at once, each in its directory and session; their outputs.
    A launch in which every rank finished and one aborted in torch's teardown runs once more;
    the other machine's torchrun, left waiting for its aborted peer, is stopped ``grace`` s
    after the abort rather than at ``timeout``."""
    import tempfile
    import time

    env = dict(os.environ, PYTHONWARNINGS="ignore", OMP_NUM_THREADS="1", PYTHONPATH=REPO)
    for k in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "GROUP_RANK", "MASTER_ADDR", "MASTER_PORT"):
        env.pop(k, None)
    for attempt in range(2):
        cmds = node_commands(free_port())
        logs = [tempfile.TemporaryFile("w+") for _ in cmds]
        procs = [subprocess.Popen(cmd + list(args), cwd=d, env=env, stdout=f,
                                  stderr=subprocess.STDOUT, text=True, start_new_session=True)
                 for cmd, d, f in zip(cmds, dirs, logs)]

        def outputs():
            got = []
            for f in logs:
                f.seek(0)
                got.append(f.read())
            return got

        t0, aborted_at = time.monotonic(), None
        while any(p.poll() is None for p in procs):
            now = time.monotonic()
            if aborted_at is None and any(p.poll() not in (None, 0) for p in procs) \
                    and _teardown_abort(outputs()):
                aborted_at = now
            if now - t0 > timeout or (aborted_at is not None and now - aborted_at > grace):
                for p in procs:
                    if p.poll() is None:
                        os.killpg(p.pid, signal.SIGKILL)  # this launch's own session
                for p in procs:
                    p.wait()
                if aborted_at is None:
                    pytest.fail("the two-node launch timed out:\n" + "\n----\n".join(outputs()))
                break
            time.sleep(0.2)
        outs = outputs()
        for f in logs:
            f.close()
        rcs = [p.returncode for p in procs]
        if not any(rcs) or attempt or not _teardown_abort(outs):
            return rcs, outs


def traces(dirs, name):
    """global rank -> the rank's trace file (each machine wrote its own ranks')."""
    got = {}
    for d in dirs:
        for f in os.listdir(d):
            if re.fullmatch(name.format(rank=r"\d+"), f):
                t = json.load(open(os.path.join(d, f)))
                got[t["rank"]] = t
    return got


def test_two_nodes_shard_by_global_rank_and_resume(tmp_path, voc_small):
    dirs = [str(tmp_path / f"machine{n}") for n in (0, 1)]
    for d in dirs:
        os.makedirs(d)
    all_records = sorted(f[:-4] for f in os.listdir(os.path.join(VOC, "Annotations")))
    assert len(all_records) == 40
    # the VOC sample at 1/8 size (the same 40 records; the example resizes to 64 x 64 either way)
    common = COMMON + ["--root", voc_small]
    assert sorted(f[:-4] for f in os.listdir(os.path.join(voc_small, "Annotations"))) == all_records

    # the uninterrupted run; each machine's first process writes a checkpoint at step 5
    rcs, outs = launch(dirs, common + ["--save", "ck-{step}.pt", "--save-every", "5",
                                       "--trace", "full-{rank}.json"])
    assert rcs == [0, 0], "\n----\n".join(outs)
    ranks = []
    for out in outs:
        mine = re.findall(r"rank (\d)/2: node (\d) \(\S+\), local rank 0, device cpu", out)
        assert len(mine) == 1, out  # one process a machine, LOCAL_RANK 0
        ranks.append(int(mine[0][0]))
        assert re.search(rf"rank {ranks[-1]}/2: pipeline on cpu, shard {ranks[-1]} of 2, 20 of 40 "
                         r"images a shard \(shard_policy 'pad'\), 3 steps per epoch", out), out
        assert re.search(rf"rank {ranks[-1]}: steps per epoch \{{epoch 0: 3, epoch 1: 3, "
                         r"epoch 2: 1\}", out), out
    assert sorted(ranks) == [0, 1], outs
    for d in dirs:  # no shared storage needed: every machine has its own copy
        assert os.path.exists(os.path.join(d, "ck-5.pt")), os.listdir(d)
    full = traces(dirs, "full-{rank}.json")
    assert sorted(full) == [0, 1]
    for r, t in full.items():
        assert (t["world"], t["local_rank"], t["steps_per_epoch"]) == (2, 0, 3), t
        assert (t["shard"]["shard_id"], t["shard"]["num_shards"]) == (r, 2), t  # by global rank
        assert [(s["step"], s["epoch"], s["batch"]) for s in t["trace"]] == \
            [(1, 0, 0), (2, 0, 1), (3, 0, 2), (4, 1, 0), (5, 1, 1), (6, 1, 2), (7, 2, 0)], t
        assert [len(s["records"]) for s in t["trace"]] == [8] * 7, t
    for epoch in (0, 1):
        parts = []
        for r in (0, 1):
            batches = [s["records"] for s in full[r]["trace"] if s["epoch"] == epoch]
            # 20 records a shard in batches of 8; the last batch is filled ('fill', the
            # pipeline's default) by wrapping around to the start of the shard's order
            assert batches[2][4:] == batches[0][:4], batches
            parts.append(batches[0] + batches[1] + batches[2][:4])
        assert [len(set(p)) for p in parts] == [20, 20], parts
        assert not set(parts[0]) & set(parts[1]), parts  # disjoint shards
        assert sorted(parts[0] + parts[1]) == all_records  # together the epoch, once
    # the epochs are shuffled anew, and the two ranks' batches differ at every step
    assert full[0]["trace"][0]["records"] != full[0]["trace"][3]["records"]

    # resume on each machine from its own copy of the step-5 checkpoint (epoch 1, batch 2)
    rcs, outs = launch(dirs, common + ["--resume", "ck-5.pt", "--trace", "resumed-{rank}.json"])
    assert rcs == [0, 0], "\n----\n".join(outs)
    joined = "\n".join(outs)
    assert len(re.findall(r"rank \d: resumed at step 5 \(epoch 1, batch 2\)", joined)) == 2, joined
    resumed = traces(dirs, "resumed-{rank}.json")
    assert sorted(resumed) == [0, 1]
    for r in (0, 1):  # the uninterrupted run's steps 6 and 7 of the same global rank
        assert resumed[r]["trace"] == full[r]["trace"][5:], (resumed[r], full[r])
