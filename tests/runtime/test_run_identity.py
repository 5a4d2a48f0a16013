"""What a run is: which records an epoch holds, and what a saved state resumes.

5. An epoch that would have no batch is refused at ``build()`` with a message that says why
   (dataset size, shards, batch size, policy); before, ``run()`` gave a bare StopIteration and
   ``DetaugIterator`` yielded nothing: training silently ran on nothing.
6. ``state_dict()`` carries what identifies the run (the dataset's record count and a hash of
   its record keys, the shard and shard count, the shard policy, the batches per epoch), and
   ``load_state_dict`` refuses a state of another run, naming both values; before, it checked
   only the seed and the batch size.

Datasets are tiny file lists written here (``readers.file``, the label as output): batch b of an
unshuffled epoch of batch size 2 holds the labels of files 2b and 2b + 1.
"""
import json
import os
import warnings

import numpy as np
import pytest

import detaug
from detaug import fn

from helpers import close_pipelines, track  # noqa: F401  (autouse fixture)


def place_pipe(size, batch_size=4, **kw):
    """A per-sample source of ``size`` samples giving each sample's place in the epoch."""
    pipe = detaug.Pipeline(batch_size=batch_size, seed=0, **kw)
    with pipe:
        pipe.set_outputs(fn.external_source(source=lambda info: np.array([info.idx_in_epoch]),
                                            batch=False, size=size))
    return track(pipe)


# ---- 5: an epoch of no batch --------------------------------------------------------------------
def test_drop_with_a_batch_larger_than_the_dataset_is_refused_at_build():
    """``last_batch_policy="drop"``, batch_size 4, 3 records."""
    pipe = place_pipe(3, last_batch_policy="drop")
    with pytest.raises(ValueError, match=r"no batch.*3 records.*batch_size=4.*'drop'"):
        pipe.build()
    with pytest.raises(ValueError, match="fewer than batch_size=4"):
        pipe.run()  # (builds: never a bare StopIteration)
    assert len(place_pipe(3, last_batch_policy="partial")) == 1


@pytest.mark.parametrize("policy", ["drop", "uneven"])
def test_more_shards_than_records_is_refused_at_build(policy):
    """3 records, 4 shards; shard 0's part of the epoch order, records
    [0 * 3 // 4, 1 * 3 // 4) = none, stays empty under 'drop' and 'uneven'."""
    pipe = place_pipe(3, batch_size=1, shard_id=0, num_shards=4, shard_policy=policy)
    with pytest.raises(ValueError, match=rf"shard 0 of 4 holds none of the dataset's 3 records "
                                         rf"under shard_policy='{policy}' \(more shards"):
        pipe.build()


def test_more_shards_than_records_under_pad_repeats_a_record():
    """The control: under 'pad' the empty shard repeats the first record of the epoch order."""
    pipe = place_pipe(3, batch_size=1, shard_id=0, num_shards=4)
    assert len(pipe) == 1
    np.testing.assert_array_equal(np.asarray(pipe.run()[0]), [[0]])


def test_a_reader_left_with_no_records_is_refused_at_build(tmp_path):
    """A COCO file whose only image is missing, read with on_error='skip':
    the reader is left with 0 records; the message says so and points at what was skipped."""
    ann = tmp_path / "ann.json"
    ann.write_text(json.dumps({"images": [{"id": 1, "file_name": "gone.jpg", "width": 8,
                                           "height": 8}],
                               "annotations": [], "categories": [{"id": 1, "name": "a"}]}))
    pipe = track(detaug.Pipeline(batch_size=2, seed=0))
    with pipe:
        enc, boxes = fn.readers.coco(file_root=str(tmp_path), annotations_file=str(ann),
                                     on_error="skip")
        pipe.set_outputs(boxes)
    with pytest.raises(ValueError, match=r"no records \(1 entries were skipped"):
        pipe.build()


def test_the_torch_iterator_of_an_empty_epoch_raises_instead_of_yielding_nothing():
    pytest.importorskip("torch")
    from detaug.adapters.torch import DetaugIterator

    with pytest.raises(ValueError, match="no batch"):
        list(DetaugIterator(place_pipe(3, last_batch_policy="drop"), output_map=("x",)))


def test_set_shard_to_an_empty_shard_is_refused_and_keeps_the_shard():
    pipe = place_pipe(3, batch_size=1, shard_policy="drop")
    pipe.build()
    with pytest.raises(ValueError, match="shard 0 of 4 holds none"):
        pipe.set_shard(0, 4)
    assert pipe.shard_info["num_shards"] == 1 and len(pipe) == 3


# ---- 6: the state knows its run -----------------------------------------------------------------
def files(root, names):
    os.makedirs(root, exist_ok=True)
    for n in names:
        with open(os.path.join(root, n), "wb") as f:
            f.write(n.encode())  # (never decoded: the output is the label)
    return [str(n) for n in names]


def label_pipe(root, names, **kw):
    kw = {"batch_size": 2, "seed": 3, **kw}
    shard = {k: kw.pop(k) for k in ("shard_id", "num_shards") if k in kw}
    pipe = detaug.Pipeline(**kw)
    with pipe:
        _, labels = fn.readers.file(file_root=str(root), files=names,
                                    labels=list(range(len(names))), **shard)
        pipe.set_outputs(labels)
    pipe.dali_outputs = False  # detaug's own outputs: labels (B,) (readers.file turns on DALI mode)
    return track(pipe)


NAMES = [f"img{k}.jpg" for k in range(10)]


def saved_at(pipe, n):
    for _ in range(n):
        pipe.run()
    return pipe.state_dict()


def test_the_state_names_the_run(tmp_path):
    pipe = label_pipe(tmp_path, files(tmp_path, NAMES), last_batch_policy="drop")
    state = saved_at(pipe, 4)
    assert json.loads(json.dumps(state)) == state  # plain data, for any checkpoint
    assert (state["epoch"], state["batch"], state["batch_size"]) == (0, 4, 2)
    assert state["shard"] == [0, 1] and state["shard_policy"] == "pad"
    assert state["batches_per_epoch"] == 5 and state["dataset"]["records"] == 10
    keys = state["dataset"]["keys"]
    assert isinstance(keys, str) and len(keys) == 16


def test_a_state_of_a_larger_dataset_is_refused(tmp_path):
    """Saved at batch 4 of a 10-record dataset, loaded into a 5-record
    pipeline (it continued silently in epoch 1)."""
    state = saved_at(label_pipe(tmp_path, files(tmp_path, NAMES)), 4)
    small = label_pipe(tmp_path, NAMES[:5])
    with pytest.raises(ValueError, match=r"dataset of records 10, this pipeline has 5"):
        small.load_state_dict(state)
    assert small.state_dict()["batch"] == 0  # nothing moved


def test_a_state_of_other_records_of_the_same_count_is_refused(tmp_path):
    state = saved_at(label_pipe(tmp_path, files(tmp_path, NAMES)), 2)
    renamed = NAMES[:9] + ["other.jpg"]
    with pytest.raises(ValueError, match=r"dataset keys .* '[0-9a-f]{16}', this pipeline has "
                                         r"'[0-9a-f]{16}': the records differ"):
        label_pipe(tmp_path, files(tmp_path, renamed)).load_state_dict(state)
    with pytest.raises(ValueError, match="dataset keys"):  # the same files in another order
        label_pipe(tmp_path, NAMES[::-1]).load_state_dict(state)


def test_a_moved_dataset_resumes_exactly(tmp_path):
    """The keys are the records' ids and file names, not their folders: the same dataset under
    another root (another machine) resumes at exactly the next batch."""
    a = label_pipe(tmp_path / "a", files(tmp_path / "a", NAMES))
    state = saved_at(a, 3)
    b = label_pipe(tmp_path / "b", files(tmp_path / "b", NAMES))
    b.load_state_dict(state)
    for batch in range(3, 5):
        np.testing.assert_array_equal(np.asarray(b.run()[0]), [2 * batch, 2 * batch + 1])


def test_a_state_of_another_shard_is_refused(tmp_path):
    """A state of the whole dataset loaded into shard 1 of 2 (the saved
    shard was ignored)."""
    names = files(tmp_path, NAMES)
    state = saved_at(label_pipe(tmp_path, names), 2)
    with pytest.raises(ValueError, match=r"\[shard_id, num_shards\] \[0, 1\], this pipeline has "
                                         r"\[1, 2\]"):
        label_pipe(tmp_path, names, shard_id=1, num_shards=2).load_state_dict(state)


def test_another_ranks_state_resumes_with_any_shard(tmp_path):
    """``any_shard=True`` (the torch iterator's): rank 0's mid-epoch state resumes rank 1 of the
    same world at its own next batch; another world size only at an epoch's start."""
    names = files(tmp_path, NAMES)
    rank0 = saved_at(label_pipe(tmp_path, names, shard_id=0, num_shards=2), 1)
    rank1 = label_pipe(tmp_path, names, shard_id=1, num_shards=2)
    rank1.load_state_dict(rank0, any_shard=True)
    np.testing.assert_array_equal(np.asarray(rank1.run()[0]), [7, 8])  # shard 1: records 5..9
    three = label_pipe(tmp_path, names, shard_id=1, num_shards=3)
    with pytest.raises(ValueError, match=r"shard count of \[2\], this pipeline has \[3\]"):
        three.load_state_dict(rank0, any_shard=True)
    start = label_pipe(tmp_path, names, shard_id=0, num_shards=2)
    start.reset()
    three.load_state_dict(start.state_dict(), any_shard=True)
    assert (three.epoch, three.state_dict()["batch"]) == (1, 0)


@pytest.mark.parametrize("change, what", [({"shard_policy": "drop"}, "shard_policy 'pad', this "
                                                                      "pipeline has 'drop'"),
                                          ({"last_batch_policy": "drop"},
                                           "last_batch_policy 'fill', this pipeline has 'drop'")])
def test_a_state_of_another_policy_is_refused(tmp_path, change, what):
    names = files(tmp_path, NAMES[:9])
    state = saved_at(label_pipe(tmp_path, names, num_shards=2), 1)
    with pytest.raises(ValueError, match=what):
        label_pipe(tmp_path, names, num_shards=2, **change).load_state_dict(state)


def test_a_state_of_the_previous_format_is_checked_for_what_it_holds(tmp_path):
    """States saved before fingerprints held epoch, batch, seed, batch_size and shard: such a
    state still resumes (with a warning that the dataset could not be checked); its shard and
    seed are checked."""
    names = files(tmp_path, NAMES)
    old = {"epoch": 0, "batch": 3, "seed": 3, "batch_size": 2, "shard": (0, 1)}
    pipe = label_pipe(tmp_path, names)
    with pytest.warns(UserWarning, match="older detaug"):
        pipe.load_state_dict(old)
    np.testing.assert_array_equal(np.asarray(pipe.run()[0]), [6, 7])
    # (the old "shard" was the Pipeline's shard_id / num_shards, and is compared with them)
    other = track(detaug.Pipeline(batch_size=2, seed=3, shard_id=1, num_shards=2))
    with other:
        other.set_outputs(fn.readers.file(file_root=str(tmp_path), files=names)[1])
    with warnings.catch_warnings(), pytest.raises(ValueError, match=r"\[0, 1\], this pipeline "
                                                                    r"has \[1, 2\]"):
        warnings.simplefilter("ignore")
        other.load_state_dict(old)
    with pytest.raises(ValueError, match="seed 4, this pipeline has 3"):
        pipe.load_state_dict({**old, "seed": 4})
    with pytest.raises(ValueError, match="past the 5 batches"):
        pipe.load_state_dict({**pipe.state_dict(), "batch": 6})


def test_set_shard_refused_before_anything_changes():
    pipe = place_pipe(6, batch_size=2, shard_policy="drop")
    assert np.asarray(pipe.run()[0]).ravel().tolist() == [0, 1]
    with pytest.raises(ValueError, match="shard 0 of 8 holds none"):
        pipe.set_shard(0, 8)
    # the cursor did not move back: the next batch is batch 1
    assert np.asarray(pipe.run()[0]).ravel().tolist() == [2, 3]
