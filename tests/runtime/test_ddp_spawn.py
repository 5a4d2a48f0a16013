"""Data-parallel input in 3 processes (torch.multiprocessing, gloo): every rank builds its own
unsharded pipeline and DetaugIterator, which shards it by rank. Checked on 40 records, which 3
ranks do not divide: equal step counts (each step is an all-reduce, as DDP's, which would wait
out the timeout were a rank to stop early), disjoint parts of one shared shuffle covering the
epoch (up to the padding), resume of every rank from rank 0's mid-epoch state, and the ranks'
agreement check. One spawn for all of it: starting torch in 3 processes is the cost."""
from __future__ import annotations

import datetime
import os
import pickle
import time

import numpy as np
import pytest

torch = pytest.importorskip("torch")
dist = pytest.importorskip("torch.distributed")

from helpers import VOC  # noqa: E402

# one pytest-xdist worker runs this module, so the ranks are spawned once (the module fixture
# of a module split over two workers is made in each: 3 processes starting torch, twice)
pytestmark = pytest.mark.xdist_group("ddp_spawn")

WORLD = 3
N = 40
SEED = 11
# name -> (pipeline's shard_policy, iterator's last_batch_policy, batch size)
CASES = {"pad-partial": ("pad", "partial", 8), "pad-drop": ("pad", "drop", 8),
         "drop-fill": ("drop", "fill", 8), "pad-fill-4": ("pad", "fill", 4),
         # shards of 13, 13 and 14 records would take 1, 1 and 2 steps of 13: 'pad' takes 2 each
         "pad-fill-13": ("pad", "fill", 13)}
EPOCHS = 2
RESUME_CASE, RESUME_AT, RESUME_STEPS = "pad-fill-4", 6, 5  # 4 steps an epoch: epoch 1, batch 2


def _pipe(batch_size, shard_policy, seed=SEED, shuffle=True):
    from detaug import fn, pipeline_def

    @pipeline_def
    def boxes_only():
        _, boxes = fn.readers.voc(root=VOC, random_shuffle=shuffle)
        return boxes

    return boxes_only(batch_size=batch_size, num_threads=1, seed=seed, shard_policy=shard_policy)


def _rank_main(rank, store, out_dir):
    """One rank: every case for EPOCHS epochs, the resume, the disagreement; results pickled."""
    from detaug.adapters.torch import DetaugIterator
    from readers.voc import read_voc

    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=WORLD,
                            timeout=datetime.timedelta(seconds=60))
    recs = read_voc(VOC).records
    table = {_sig(r.boxes, r.labels): k for k, r in enumerate(recs)}
    record = lambda t: table[_sig(t["boxes"].numpy(), t["labels"].numpy())]

    def make(case):
        shard_policy, policy, batch = CASES[case]
        pipe = _pipe(batch, shard_policy)
        return pipe, DetaugIterator(pipe, output_map=("boxes",), boxes_format="list",
                                    last_batch_policy=policy)

    def step(it):
        """One training step: the batch's records, then an all-reduce as DDP's backward."""
        batch = next(it)
        dist.all_reduce(torch.ones(1))
        return [record(t) for t in batch["boxes"]]

    out = {"shard": None, "cases": {}}
    for case in CASES:
        pipe, it = make(case)
        epochs = []
        for _ in range(EPOCHS):
            batches = []
            for _ in range(len(it)):
                batches.append(step(it))
            with_stop = False
            try:
                next(it)
            except StopIteration:
                with_stop = True
            epochs.append({"batches": batches, "stopped": with_stop})
            it.reset()
        out["cases"][case] = {"len": len(it), "epochs": epochs, "shard": pipe.shard_info}
        pipe.close()

    # resume: RESUME_AT steps, rank 0's state to every rank, fresh pipelines continue
    pipe, it = make(RESUME_CASE)
    for _ in range(RESUME_AT):
        try:
            step(it)
        except StopIteration:
            it.reset()
            step(it)
    box = [it.state_dict() if rank == 0 else None]
    dist.broadcast_object_list(box, src=0)
    pipe.close()
    pipe, it = make(RESUME_CASE)
    it.load_state_dict(box[0])
    resumed = []
    for _ in range(RESUME_STEPS):
        try:
            resumed.append(step(it))
        except StopIteration:
            it.reset()
            resumed.append(step(it))
    out["resumed"] = resumed
    pipe.close()

    # seeds left to chance differ by rank: every rank refuses (none is left waiting)
    pipe = _pipe(8, "pad", seed=100 + rank)
    try:
        DetaugIterator(pipe, output_map=("boxes",), boxes_format="list")
        out["disagree"] = None
    except ValueError as e:
        out["disagree"] = str(e)
    pipe.close()
    # DALI's uneven shards (13, 13, 14 records) in batches of 13: 1, 1, 2 steps, refused
    pipe = _pipe(13, "uneven")
    try:
        DetaugIterator(pipe, output_map=("boxes",), boxes_format="list")
        out["uneven"] = None
    except ValueError as e:
        out["uneven"] = str(e)
    pipe.close()
    # ... which matters only where the reader shuffles: seed + rank without a shuffle is allowed
    pipe = _pipe(8, "pad", seed=100 + rank, shuffle=False)
    out["unshuffled_len"] = len(DetaugIterator(pipe, output_map=("boxes",), boxes_format="list"))
    pipe.close()
    dist.barrier()
    dist.destroy_process_group()
    with open(os.path.join(out_dir, f"rank{rank}.pkl"), "wb") as f:
        pickle.dump(out, f)


def _sig(boxes, labels):
    return tuple(np.round(np.asarray(boxes, np.float64).ravel(), 3)) + tuple(np.asarray(labels).tolist())


@pytest.fixture(scope="module")
def ranks(tmp_path_factory):
    """The 3 ranks' results (spawned once for the module)."""
    import torch.multiprocessing as mp

    tmp = tmp_path_factory.mktemp("ddp")
    ctx = mp.start_processes(_rank_main, args=(str(tmp / "store"), str(tmp)), nprocs=WORLD,
                             join=False, start_method="spawn")
    deadline = time.monotonic() + 240
    try:
        while not ctx.join(timeout=5):
            if time.monotonic() > deadline:
                pytest.fail("the ranks did not finish in 240 s (a collective waited for a rank "
                            "that had stopped?)")
    finally:
        for p in ctx.processes:  # only where the deadline was passed
            if p.is_alive():
                p.kill()
    out = []
    for r in range(WORLD):
        with open(tmp / f"rank{r}.pkl", "rb") as f:
            out.append(pickle.load(f))
    return out


# 40 records, 3 ranks: parts [0, 13), [13, 26), [26, 40) of each epoch's permutation
PARTS = [list(range(0, 13)), list(range(13, 26)), list(range(26, 40))]
POSITIONS = {"pad": [PARTS[0] + [0], PARTS[1] + [13], PARTS[2]],
             "drop": [PARTS[0], PARTS[1], PARTS[2][:13]]}


@pytest.mark.parametrize("case", list(CASES))
def test_every_rank_takes_the_same_steps(ranks, case):
    shard_policy, policy, batch = CASES[case]
    per_shard = -(-N // WORLD) if shard_policy == "pad" else N // WORLD  # 14 or 13
    steps = per_shard // batch if policy == "drop" else -(-per_shard // batch)
    for r, out in enumerate(ranks):
        res = out["cases"][case]
        assert res["shard"]["shard_id"] == r and res["shard"]["num_shards"] == WORLD
        assert res["len"] == steps
        for ep in res["epochs"]:
            assert len(ep["batches"]) == steps and ep["stopped"]


@pytest.mark.parametrize("case", list(CASES))
def test_ranks_read_their_parts_of_one_shuffle(ranks, case):
    """Rank r reads positions POSITIONS[policy][r] of the permutation keyed by (seed, epoch):
    the ranks agree on the shuffle without communicating; their parts are disjoint and cover
    the epoch (pad: 2 records twice; drop: 1 record left out)."""
    from detaug.core.rng import epoch_permutation

    shard_policy, policy, batch = CASES[case]
    for epoch in range(EPOCHS):
        perm = epoch_permutation(SEED, epoch, N)
        real = []
        for r, out in enumerate(ranks):
            flat = [x for b in out["cases"][case]["epochs"][epoch]["batches"] for x in b]
            want = perm[POSITIONS[shard_policy][r]].tolist()
            if policy == "fill":  # the last batch wraps around the rank's own order
                want = (want * 2)[:len(flat)]
            elif policy == "drop":
                want = want[:len(flat)]
            assert flat == want, (case, epoch, r)
            real.append(want[:len(POSITIONS[shard_policy][r])])
        if policy != "drop":
            seen = [x for part in real for x in part]
            if shard_policy == "pad":
                assert sorted(seen) == sorted(list(range(N)) + [perm[0], perm[13]])
            else:
                assert sorted(seen) == sorted(set(range(N)) - {perm[39]})


def test_every_rank_resumes_from_rank_zeros_state(ranks):
    """A checkpoint at step 6 (epoch 1, batch 2), taken on rank 0 only: every rank resumes at
    exactly the batches it would have read next, into the next epoch."""
    for out in ranks:
        epochs = [ep["batches"] for ep in out["cases"][RESUME_CASE]["epochs"]]
        uninterrupted = [b for ep in epochs for b in ep]
        assert out["resumed"][:2] == uninterrupted[RESUME_AT:RESUME_AT + 2]
        assert len(out["resumed"]) == RESUME_STEPS
    # beyond the epochs recorded above: the resumed runs still read disjoint parts
    from detaug.core.rng import epoch_permutation

    perm = epoch_permutation(SEED, 2, N)
    for r, out in enumerate(ranks):
        flat = [x for b in out["resumed"][2:] for x in b]
        assert flat == perm[POSITIONS["pad"][r]].tolist()[:len(flat)]


def test_ranks_that_would_diverge_are_refused_on_every_rank(ranks):
    """Different seeds with a shuffle, or uneven shards with different step counts: a
    ValueError on every rank when the iterators are made, not a hang in the first all-reduce
    that one rank does not reach."""
    for out in ranks:
        msg = out["disagree"]
        assert msg is not None and "disagree on pipeline 0" in msg
        assert "rank 0: {'seed': 100" in msg and "rank 2: {'seed': 102" in msg
        assert out["unshuffled_len"] == 2
        assert "disagree on steps per epoch (rank 0: 1; rank 1: 1; rank 2: 2)" in out["uneven"]
