"""detaug.core.sharding (the Pipeline's epochs, batches and shards) on a reader of ten records,
against hand-computed parts: shard k of 3 owns positions [k * 10 // 3, (k + 1) * 10 // 3) of
the epoch order, evened out by the shard policy ('pad' repeats the part's first records, 'drop'
cuts to 10 // 3, 'uneven' keeps the part); DALI's reader arguments (pad_last_batch repeats the
shard's last record, stick_to_shard=False moves to the next shard each epoch); set_shard and its
refusals; the default device of a distributed process (LOCAL_RANK)."""
import numpy as np
import pytest

from detaug import Pipeline, fn
from detaug.core.rng import epoch_permutation
from detaug.core.sharding import _local_rank
from helpers import close_pipelines, track  # noqa: F401  (autouse fixture)

N = 10


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    d = tmp_path_factory.mktemp("ten")
    for k in range(N):
        (d / f"{k}.bin").write_bytes(bytes([k]))
    return str(d)


def pipe(folder, shuffle=False, seed=3, policy="pad", **reader):
    p = track(Pipeline(batch_size=4, num_threads=1, seed=seed, shard_policy=policy,
                       last_batch_policy="partial"))
    with p:
        _, label = fn.readers.file(file_root=folder, files=[f"{k}.bin" for k in range(N)],
                                   labels=list(range(N)), random_shuffle=shuffle, name="Reader",
                                   **reader)
        p.set_outputs(label)
    return p


def epoch(p):
    """The records of one epoch (the labels are the record indices), batch by batch."""
    out = []
    for _ in range(len(p)):
        (labels,) = p.run()
        out.append([int(np.asarray(labels.at(i))[0]) for i in range(len(labels))])
    return out


PARTS = {  # shard -> records of its epoch, no shuffle (positions are records)
    "pad": [[0, 1, 2, 0], [3, 4, 5, 3], [6, 7, 8, 9]],
    "drop": [[0, 1, 2], [3, 4, 5], [6, 7, 8]],
    "uneven": [[0, 1, 2], [3, 4, 5], [6, 7, 8, 9]],
}


@pytest.mark.parametrize("policy", sorted(PARTS))
def test_each_shard_reads_its_part_evened_by_the_policy(folder, policy):
    for k, want in enumerate(PARTS[policy]):
        p = pipe(folder, policy=policy)
        p.set_shard(k, 3)
        assert p.shard_info == {"shard_id": k, "num_shards": 3, "random_shuffle": False}
        assert p.epoch_size() == N and p.epoch_size("Reader") == N
        assert p.shard_size() == len(want)
        assert len(p) == -(-len(want) // 4)  # batches of 4, the last partial
        batches = epoch(p)
        assert [len(b) for b in batches] == [4] * (len(want) // 4) + ([len(want) % 4] if len(want) % 4 else [])
        assert sum(batches, []) == want


def test_shuffled_shards_cut_the_same_epoch_order(folder):
    for e in range(2):
        order = epoch_permutation(3, e, N).tolist()
        got = []
        for k in range(3):
            p = pipe(folder, shuffle=True, policy="uneven")
            p.set_shard(k, 3)
            for _ in range(e):  # to epoch e
                epoch(p)
                p.reset()
            got.append(sum(epoch(p), []))
        assert got == [order[0:3], order[3:6], order[6:10]]
    assert epoch_permutation(3, 0, N).tolist() != epoch_permutation(3, 1, N).tolist()


def test_dali_pad_last_batch_repeats_the_shards_last_record(folder):
    # DALI's sharding: the parts as they are ('uneven'); with pad_last_batch every shard has the
    # largest part's size (4), a shorter one repeating its last record
    p = pipe(folder, shard_id=0, num_shards=3, pad_last_batch=True)
    assert p.shard_size() == 3 and len(p) == 1
    assert sum(epoch(p), []) == [0, 1, 2, 2]
    p = pipe(folder, shard_id=2, num_shards=3, pad_last_batch=True)
    assert sum(epoch(p), []) == [6, 7, 8, 9]


def test_dali_stick_to_shard_false_moves_to_the_next_shard_each_epoch(folder):
    p = pipe(folder, shard_id=0, num_shards=2, stick_to_shard=False)
    first = sum(epoch(p), [])
    p.reset()
    second = sum(epoch(p), [])
    assert first == [0, 1, 2, 3, 4] and second == [5, 6, 7, 8, 9]


def test_set_shard_refuses_a_shard_outside_the_count_and_an_unknown_policy(folder):
    p = pipe(folder)
    with pytest.raises(ValueError, match=r"shard_id 3 not in \[0, 3\)"):
        p.set_shard(3, 3)
    with pytest.raises(ValueError, match="shard_policy must be one of"):
        p.set_shard(0, 2, "evenly")
    with pytest.raises(KeyError, match="no reader named 'nope'"):
        p.epoch_size("nope")
    p.set_shard(1, 2, "drop")  # a policy given with the shard is kept
    assert p.shard_policy == "drop" and p.shard_size() == 5


def test_local_rank_is_torchruns_local_rank_else_none(monkeypatch):
    monkeypatch.setenv("LOCAL_RANK", "3")
    assert _local_rank() == 3
    monkeypatch.setenv("LOCAL_RANK", " ")
    import sys

    torch = sys.modules.get("torch")
    dist = getattr(torch, "distributed", None)
    if dist is not None and dist.is_available() and dist.is_initialized():
        pytest.skip("torch.distributed is initialised in this process")
    assert _local_rank() is None
