"""Data-parallel input in one process: shard policies over the VOC sample, pipeline_def's
graph parameters, device_id from LOCAL_RANK, shards from torchrun's variables, the epoch-end
turnover of the torch iterator, and resume across ranks. The multi-process checks (gloo) are in
tests/runtime/test_ddp_spawn.py; the ``gpu``-marked tests at the end run a GPU pipeline's epoch
end and examples/retinanet_ddp.py on two GPUs under torchrun (NCCL)."""
from __future__ import annotations

import os
import re
import subprocess
import sys

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from detaug import Pipeline, fn, pipeline_def  # noqa: E402
from detaug.adapters.torch import DetaugIterator, shard_from_torch_distributed  # noqa: E402
from detaug.core.rng import epoch_permutation  # noqa: E402

from helpers import REPO, VOC  # noqa: E402

N = 40  # records of the VOC sample
SEED = 11


@pipeline_def(batch_size=8, num_threads=1, seed=SEED)
def boxes_only(root, shuffle=True):
    """The reader's boxes as they are (no decode, no geometry): each sample names its record."""
    _, boxes = fn.readers.voc(root=root, random_shuffle=shuffle)
    return boxes


@pytest.fixture(scope="module")
def record_of():
    """Box-and-label signature -> record index in the dataset."""
    from readers.voc import read_voc

    recs = read_voc(VOC).records
    table = {_sig(r.boxes, r.labels): k for k, r in enumerate(recs)}
    assert len(table) == N
    return lambda t: table[_sig(t["boxes"].numpy(), t["labels"].numpy())]


def _sig(boxes, labels):
    return tuple(np.round(np.asarray(boxes, np.float64).ravel(), 3)) + tuple(np.asarray(labels).tolist())


def _epoch_records(it, record_of):
    """Records of the real samples of one epoch, in order, and the number of steps."""
    got, steps = [], 0
    for batch in it:
        got.extend(record_of(t) for t in batch["boxes"])
        steps += 1
    return got, steps


# ---- shard policies -----------------------------------------------------------------------------
PARTS = [list(range(0, 13)), list(range(13, 26)), list(range(26, 40))]  # 40 records, 3 shards
POSITIONS = {"pad": [PARTS[0] + [0], PARTS[1] + [13], PARTS[2]],
             "drop": [PARTS[0], PARTS[1], PARTS[2][:13]],
             "uneven": PARTS}


@pytest.mark.parametrize("policy", ["pad", "drop", "uneven"])
def test_shard_policy_reads_the_hand_computed_part_of_the_shared_shuffle(policy, record_of):
    """40 records on 3 shards, every shard its own pipeline: shard k reads the positions of
    POSITIONS[policy][k] of the epoch's permutation, a function of (seed, epoch) alone."""
    pipes = [boxes_only(VOC, shard_id=k, num_shards=3, shard_policy=policy) for k in range(3)]
    its = [DetaugIterator(p, output_map=("boxes",), boxes_format="list",
                          last_batch_policy="partial") for p in pipes]
    orders = []
    for epoch in range(2):
        perm = epoch_permutation(SEED, epoch, N)
        orders.append(perm.tolist())
        steps = set()
        for k, it in enumerate(its):
            got, n = _epoch_records(it, record_of)
            assert got == perm[POSITIONS[policy][k]].tolist(), (policy, epoch, k)
            steps.add(n)
            it.reset()
        assert len(steps) == 1  # 14, 13 or 13/14 records in batches of 8: 2 steps each
    assert orders[0] != orders[1]  # a new shuffle every epoch
    for p in pipes:
        p.close()


# ---- pipeline_def -------------------------------------------------------------------------------
@pipeline_def(batch_size=8, num_threads=1, seed=SEED)
def declares_shards(root, shard_id=0, num_shards=1):
    _, boxes = fn.readers.voc(root=root, shard_id=shard_id, num_shards=num_shards)
    return boxes


def test_pipeline_def_hands_the_graph_its_own_shard_parameters(record_of):
    """A graph function with shard_id / num_shards of its own gets them (they used to go to the
    Pipeline, and the reader read the whole dataset on every rank)."""
    pipe = declares_shards(VOC, shard_id=1, num_shards=2)
    assert pipe.shard_info == {"shard_id": 1, "num_shards": 2, "random_shuffle": False}
    assert (pipe.shard_id, pipe.num_shards) == (0, 1)  # the Pipeline's own are untouched
    it = DetaugIterator(pipe, output_map=("boxes",), boxes_format="list", last_batch_policy="partial")
    assert _epoch_records(it, record_of)[0] == list(range(20, 40))
    # the graph's defaults when not given; Pipeline arguments in the decorator still reach it
    assert declares_shards(VOC).shard_info["num_shards"] == 1
    deco = pipeline_def(shard_id=1, num_shards=4, batch_size=8)(declares_shards.__wrapped__)
    p = deco(VOC)
    assert (p.shard_id, p.num_shards) == (1, 4) and p.shard_info["num_shards"] == 1
    # a graph function without them leaves them to the Pipeline, as before
    plain = boxes_only(VOC, shuffle=False, shard_id=1, num_shards=2)
    assert plain.shard_info["shard_id"] == 1 and plain.shard_info["num_shards"] == 2
    for q in (pipe, p, plain):
        q.close()


# ---- device_id and ranks from the environment ---------------------------------------------------
def test_device_id_defaults_to_local_rank(monkeypatch):
    import torch.distributed as dist

    monkeypatch.delenv("LOCAL_RANK", raising=False)
    assert Pipeline().device_id is None
    monkeypatch.setenv("LOCAL_RANK", "3")
    assert Pipeline().device_id == 3 and Pipeline(device_id=0).device_id == 0
    data = boxes_only(VOC, shard_policy="drop").serialize()
    monkeypatch.setenv("LOCAL_RANK", "1")  # the bytes keep no device: each process its own
    back = Pipeline.deserialize(data)
    assert back.device_id == 1 and back.shard_policy == "drop"
    # torch.distributed initialised without torchrun (mp.spawn): the rank modulo the GPUs
    monkeypatch.delenv("LOCAL_RANK")
    monkeypatch.setattr(dist, "is_initialized", lambda: True)
    monkeypatch.setattr(dist, "get_rank", lambda: 5)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 4)
    assert Pipeline().device_id == 1


def test_torchrun_variables_shard_an_unsharded_pipeline(monkeypatch, record_of):
    """RANK / WORLD_SIZE set (torchrun, before init_process_group): rank 2 of 3 reads the last
    part of the shuffled epoch."""
    monkeypatch.setenv("RANK", "2")
    monkeypatch.setenv("WORLD_SIZE", "3")
    assert shard_from_torch_distributed() == (2, 3)
    pipe = boxes_only(VOC)
    it = DetaugIterator(pipe, output_map=("boxes",), boxes_format="list", last_batch_policy="partial")
    assert pipe.shard_info["shard_id"] == 2 and pipe.shard_info["num_shards"] == 3
    assert len(it) == 2
    assert _epoch_records(it, record_of)[0] == epoch_permutation(SEED, 0, N)[26:40].tolist()
    pipe.close()
    monkeypatch.delenv("RANK")
    assert shard_from_torch_distributed() == (0, 1)


# ---- epoch-end turnover -------------------------------------------------------------------------
@pytest.fixture
def submissions(monkeypatch):
    """Every launch key the executors are given, in order."""
    from detaug.runtime import executor

    keys, submit = [], executor.Executor.submit

    def spy(self, key):
        keys.append(key)
        return submit(self, key)

    monkeypatch.setattr(executor.Executor, "submit", spy)
    return keys


def _same(a, b):
    assert len(a) == len(b)
    for x, y in zip(a, b):
        assert set(x) == set(y)
        for k in x:
            np.testing.assert_array_equal(x[k].numpy(), y[k].numpy())


def test_epoch_end_keeps_the_next_epochs_launches(submissions):
    """The iterator ('drop') ends each epoch a batch before its 'fill' pipeline (40 records in
    batches of 6: 6 of 7 batches). The next epoch's first launch is in flight before this epoch's
    last batch is handed out, and it is used: no launch is made twice (before the fix, reset()
    cleared the queue and made (e + 1, 0) again). The batches are those of random access."""
    pipe, ref = boxes_only(VOC, batch_size=6), boxes_only(VOC, batch_size=6)
    it = DetaugIterator(pipe, output_map=("boxes",), boxes_format="list", last_batch_policy="drop",
                        auto_reset=True)
    ref_it = DetaugIterator(ref, output_map=("boxes",), boxes_format="list")
    assert len(it) == 6 and len(pipe) == 7
    for epoch in range(3):
        for b in range(6):
            got = next(it)["boxes"]
            if b == 5:  # the last batch of the epoch is out: the next epoch is already queued
                assert any(entry[0][0] == epoch + 1 for entry in pipe._executor.queue)
            want = ref_it._convert(ref, ref.run_batch(b, epoch=epoch))["boxes"]
            _same(got, want)
        with pytest.raises(StopIteration):
            next(it)
    assert len(submissions) == len(set(submissions)), submissions
    assert (1, 0, 1) in submissions and (2, 0, 1) in submissions
    pipe.close()
    ref.close()


def test_epoch_end_before_the_pipeline_with_split_launches(record_of):
    """size= half the epoch and launches of 3 batches: the iterator leaves batches of a launch
    unread at each epoch end; the next epoch still starts at its first batch."""
    pipe = boxes_only(VOC, batch_size=5, batches_per_launch=3)
    it = DetaugIterator(pipe, output_map=("boxes",), boxes_format="list", size=20)
    for epoch in range(3):
        got, steps = _epoch_records(it, record_of)
        assert steps == 4 and got == epoch_permutation(SEED, epoch, N)[:20].tolist()
        it.reset()
    pipe.close()


# ---- resume across ranks ------------------------------------------------------------------------
def _ranks(**kw):
    pipes = [boxes_only(VOC, batch_size=4, shard_id=k, num_shards=2, **kw) for k in range(2)]
    return pipes, [DetaugIterator(p, output_map=("boxes",), boxes_format="list") for p in pipes]


def test_rank_zeros_state_resumes_every_rank(record_of):
    """Two ranks (shards) run 7 steps (epoch 1, batch 2 of 5); rank 0's state resumes both,
    fresh, at exactly their next batches (through the next epoch)."""
    pipes, its = _ranks()

    def take(it, n):
        out = []
        for _ in range(n):
            try:
                out.append([record_of(t) for t in next(it)["boxes"]])
            except StopIteration:
                it.reset()
                out.append([record_of(t) for t in next(it)["boxes"]])
        return out

    for it in its:
        take(it, 7)
    state = its[0].state_dict()
    where = lambda st: (st["batch"], [(s["epoch"], s["batch"]) for s in st["pipelines"]])
    assert where(state) == where(its[1].state_dict()) == (2, [(1, 2)])
    want = [take(it, 8) for it in its]
    fresh_pipes, fresh = _ranks()
    for it in fresh:
        it.load_state_dict(state)
    assert [take(it, 8) for it in fresh] == want
    for p in pipes + fresh_pipes:
        p.close()


def test_resume_mid_epoch_needs_the_same_world_size():
    pipes, its = _ranks()
    next(its[0])
    state = its[0].state_dict()
    three = boxes_only(VOC, batch_size=4, shard_id=0, num_shards=3)
    it3 = DetaugIterator(three, output_map=("boxes",), boxes_format="list")
    with pytest.raises(ValueError, match=r"num_shards \[2\], this run has \[3\]"):
        it3.load_state_dict(state)
    its[0].reset()  # at an epoch's start the shards can be cut anew
    it3.load_state_dict(its[0].state_dict())
    assert three.epoch == 1 and len(list(it3)) == len(it3)
    for p in pipes + [three]:
        p.close()


def test_set_shard_can_change_the_policy(record_of):
    pipe = boxes_only(VOC)
    pipe.set_shard(2, 3, shard_policy="drop")
    assert (pipe.shard_size(), pipe.shard_policy) == (13, "drop")
    it = DetaugIterator(pipe, output_map=("boxes",), boxes_format="list", last_batch_policy="partial")
    assert _epoch_records(it, record_of)[0] == epoch_permutation(SEED, 0, N)[26:39].tolist()
    with pytest.raises(ValueError, match="shard_policy must be one of"):
        pipe.set_shard(0, 3, shard_policy="even")
    pipe.close()


@pytest.mark.parametrize("policy, sizes", [("pad", [23, 23, 23]), ("drop", [22, 22, 22]),
                                           ("uneven", [22, 23, 23])])
def test_coco_reader_follows_the_shard_policy(policy, sizes):
    """readers.coco (68 records) on 3 shards: its shards follow the pipeline's shard_policy, as
    the other readers' do (it keeps its shard every epoch; that is not DALI's stick_to_shard
    given by the user, which alone shards as DALI does)."""
    import os

    from helpers import COCO

    def pipe(k, **reader):
        p = Pipeline(batch_size=4, seed=SEED, shard_id=k, num_shards=3, shard_policy=policy)
        with p:
            outs = fn.readers.coco(file_root=os.path.join(COCO, "images"),
                                   annotations_file=os.path.join(COCO, "annotations.json"),
                                   **reader)
            p.set_outputs(outs[1])  # boxes (DALI's outputs: bboxes)
        return p

    assert [pipe(k).shard_size() for k in range(3)] == sizes
    # DALI's own sharding argument given: DALI's uneven shards, whatever the policy
    assert [pipe(k, stick_to_shard=True).shard_size() for k in range(3)] == [22, 23, 23]


# ------------------------------------------------------------------------------------------ GPU
def _gpus() -> int:
    try:
        import cupy

        return cupy.cuda.runtime.getDeviceCount()
    except Exception:
        return 0


def _gpu_pipe(batch_size):
    from detaug import fn, pipeline_def

    @pipeline_def
    def det():
        enc, boxes = fn.readers.voc(root=VOC, random_shuffle=True)
        img = fn.decoders.image(enc, device="mixed")
        img, boxes = fn.flip(img, boxes, horizontal=fn.random.coin_flip())
        img, boxes = fn.resize(img, boxes, size=(128, 128))
        return img, boxes

    return det(batch_size=batch_size, num_threads=2, seed=5, device_id=0)


@pytest.mark.gpu
def test_gpu_pipeline_epoch_end_keeps_the_next_epochs_launches(monkeypatch):
    """As tests/runtime/test_ddp_pipeline.py's CPU check, on a GPU pipeline (4 batches a launch): the
    iterator ('drop') ends each epoch before its 'fill' pipeline; no launch is made twice and
    the batches are those of random access."""
    from detaug.runtime import executor
    from detaug.adapters.torch import DetaugIterator

    keys, submit = [], executor.Executor.submit
    monkeypatch.setattr(executor.Executor, "submit", lambda self, k: (keys.append(k), submit(self, k))[1])
    pipe, ref = _gpu_pipe(6), _gpu_pipe(6)
    it = DetaugIterator(pipe, boxes_format="padded", last_batch_policy="drop", auto_reset=True)
    ref_it = DetaugIterator(ref, boxes_format="padded")
    assert len(it) == 6 and len(pipe) == 7
    try:
        for epoch in range(3):
            for b in range(6):
                got = next(it)
                want = ref_it._convert(ref, ref.run_batch(b, epoch=epoch))
                assert set(got) == set(want)
                for k in got:
                    np.testing.assert_array_equal(got[k].cpu().numpy(), want[k].cpu().numpy())
            with pytest.raises(StopIteration):
                next(it)
        assert len(keys) == len(set(keys)), keys
        assert any(k[:2] == (1, 0) for k in keys) and any(k[:2] == (2, 0) for k in keys)
    finally:
        pipe.close()
        ref.close()


@pytest.mark.gpu
@pytest.mark.skipif(_gpus() < 2, reason="needs two GPUs")
def test_ddp_example_on_two_gpus():
    env = dict(os.environ, PYTHONWARNINGS="ignore")
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2",
           os.path.join(REPO, "examples", "retinanet_ddp.py"), "--dry-run", "--iters", "40",
           "--size", "256", "--batch-size", "8", "--report", "10"]
    proc = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out
    for r in (0, 1):
        assert re.search(rf"rank {r}/2: pipeline on cuda:{r}, shard {r} of 2, 20 of 40 images", out), out
    steps = re.findall(r"rank (\d): steps per epoch \{([^}]*)\}", out)
    assert len(steps) == 2 and steps[0][1] == steps[1][1], out
    assert len(re.findall(r"img/s \(2 ranks\)", out)) == 4, out
