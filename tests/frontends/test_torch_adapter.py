"""DetaugIterator (detaug.adapters.torch) on the VOC sample, CPU only."""
from __future__ import annotations

import collections
import subprocess
import sys
import warnings

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from detaug import fn, pipeline_def  # noqa: E402
from detaug.adapters.torch import DetaugIterator, shard_from_torch_distributed  # noqa: E402

from helpers import REPO, VOC  # noqa: E402
N_RECORDS = 40
ROOT = {"voc": VOC}


@pytest.fixture(scope="module", autouse=True)
def _small_images(voc_small):
    """The VOC sample at 1/8 size (conftest.voc_small: the same records, labels and fields,
    boxes scaled with the images): these tests compare the iterator with run_batch and with the
    records, at 256 x 256 or the decoded size, which full-size photographs only made slower."""
    ROOT["voc"] = voc_small
    yield
    ROOT["voc"] = VOC


def _augment(root, size):
    enc, boxes = fn.readers.voc(root=root, random_shuffle=True)
    img = fn.decoders.image(enc)
    img, boxes = fn.random_iou_crop(img, boxes)
    img, boxes = fn.flip(img, boxes, horizontal=fn.random.coin_flip())
    img, boxes = fn.rotate(img, boxes, angle=fn.random.uniform(range=(-10, 10)))
    img, boxes = fn.resize(img, boxes, size=size)
    return img, fn.prune_boxes(boxes, min_size=2)


@pipeline_def(batch_size=8, num_threads=2, seed=7)
def augmented(root, size=(256, 256)):
    return _augment(root, size)


@pipeline_def(batch_size=8, num_threads=2, seed=7)
def augmented_padded(root, size=(256, 256)):
    img, boxes = _augment(root, size)
    return img, fn.pad_boxes(boxes)


@pipeline_def(batch_size=8, num_threads=2, seed=7)
def plain(root, shuffle=True):
    """No geometry: every sample's boxes are its record's boxes (an annotation signature).
    Shards come from the pipeline's shard_id / num_shards."""
    enc, boxes = fn.readers.voc(root=root, random_shuffle=shuffle)
    return fn.decoders.image(enc), boxes


def _pair(factory=augmented, **kw):
    """Two identical pipelines: one for the iterator, one to recompute batches on its own."""
    return factory(ROOT["voc"], **kw), factory(ROOT["voc"], **kw)


def _signature(boxes, labels) -> tuple:
    b = np.asarray(boxes, np.float64).reshape(-1, 4)
    return tuple(np.round(b, 3).ravel().tolist()) + ("|",) + tuple(np.asarray(labels).tolist())


@pytest.fixture(scope="module")
def voc_signatures():
    from readers.voc import read_voc

    ds = read_voc(ROOT["voc"])
    sigs = [_signature(r.boxes, r.labels) for r in ds.records]
    assert len(ds.records) == N_RECORDS and len(set(sigs)) == N_RECORDS  # identifies a record
    return collections.Counter(sigs)


# ---- forms ----------------------------------------------------------------------------------------
def test_list_form_equals_per_sample_of_the_same_batch():
    pipe, ref = _pair()
    it = DetaugIterator(pipe, boxes_format="list")
    n_dropped = 0
    for i, d in enumerate(it):
        images, boxes = ref.run_batch(i)
        assert isinstance(d["images"], torch.Tensor)
        assert d["images"].shape == (8, 256, 256, 3) and d["images"].dtype == torch.uint8
        np.testing.assert_array_equal(d["images"].numpy(), images.data)
        expected = boxes.per_sample()
        assert len(d["boxes"]) == len(expected) == 8
        for got, exp in zip(d["boxes"], expected, strict=True):
            assert got["boxes"].dtype == torch.float32 and got["boxes"].shape[1:] == (4,)
            assert got["labels"].dtype == torch.int64
            assert set(got) == set(exp)  # boxes, labels and every per-box field
            for k in exp:
                np.testing.assert_array_equal(got[k].numpy(), exp[k])
        n_dropped += int(boxes.num_boxes - sum(len(e["boxes"]) for e in expected))
    assert i + 1 == len(it) == 5
    assert n_dropped > 0, "the crop/prune should drop some boxes: the mask path is untested"


def test_padded_form_counts_and_rows_match_the_list_form():
    p_list, p_pad = _pair()
    it_list = DetaugIterator(p_list, boxes_format="list")
    it_pad = DetaugIterator(p_pad, boxes_format="padded")
    steps = 0
    for dl, dp in zip(it_list, it_pad, strict=True):
        steps += 1
        assert torch.equal(dl["images"], dp["images"])
        assert set(dp) == {"images", "boxes", "boxes_labels", "boxes_counts", "boxes_difficult",
                           "boxes_truncated"}
        b, m = dp["boxes"].shape[:2]
        assert dp["boxes"].shape == (8, m, 4) and dp["boxes"].dtype == torch.float32
        assert dp["boxes_labels"].shape == (8, m) and dp["boxes_labels"].dtype == torch.int64
        counts = dp["boxes_counts"].tolist()
        assert counts == [len(t["boxes"]) for t in dl["boxes"]]
        assert m == max(counts)
        for s, t in enumerate(dl["boxes"]):
            c = counts[s]
            assert torch.equal(dp["boxes"][s, :c], t["boxes"])
            assert torch.equal(dp["boxes_labels"][s, :c], t["labels"])
            assert torch.equal(dp["boxes_truncated"][s, :c], t["truncated"])
            assert torch.all(dp["boxes"][s, c:] == 0) and torch.all(dp["boxes_labels"][s, c:] == -1)
    assert steps == len(it_list) == len(it_pad) == 5


def test_pad_boxes_output_maps_to_the_same_names():
    """A PaddedBoxes output (fn.pad_boxes) gives what the iterator makes of a BoxBatch."""
    a = DetaugIterator(augmented(ROOT["voc"]), boxes_format="padded", label_offset=1)
    b = DetaugIterator(augmented_padded(ROOT["voc"]), boxes_format="padded", label_offset=1)
    c = DetaugIterator(augmented_padded(ROOT["voc"]), boxes_format="list", label_offset=1)
    d = DetaugIterator(augmented(ROOT["voc"]), boxes_format="list", label_offset=1)
    steps = 0
    for da, db, dc, dd in zip(a, b, c, d, strict=True):
        steps += 1
        assert set(da) == set(db)
        for k in da:
            assert torch.equal(da[k], db[k]), k
        assert len(dc["boxes"]) == len(dd["boxes"]) == 8
        for tc, td in zip(dc["boxes"], dd["boxes"], strict=True):
            assert set(tc) == set(td)
            for k in tc:
                assert torch.equal(tc[k], td[k]), k
    assert steps == len(a) == 5


def test_label_offset_shifts_real_labels_only():
    p0, p1 = _pair()
    q0, q1 = _pair()
    d0 = next(iter(DetaugIterator(p0, boxes_format="list")))
    d1 = next(iter(DetaugIterator(p1, boxes_format="list", label_offset=1)))
    assert len(d0["boxes"]) == len(d1["boxes"]) == 8
    for a, b in zip(d0["boxes"], d1["boxes"], strict=True):
        assert torch.equal(b["labels"], a["labels"] + 1)
        assert torch.equal(b["boxes"], a["boxes"])
    e0 = next(iter(DetaugIterator(q0, boxes_format="padded")))
    e1 = next(iter(DetaugIterator(q1, boxes_format="padded", label_offset=1)))
    real = torch.arange(e0["boxes_labels"].shape[1])[None] < e0["boxes_counts"][:, None]
    assert torch.equal(e1["boxes_labels"][real], e0["boxes_labels"][real] + 1)
    assert torch.all(e1["boxes_labels"][~real] == -1)
    assert e1["boxes_labels"][real].min() >= 1  # 0 is left for the background


def test_images_normalized_chw_and_ragged_list():
    @pipeline_def(batch_size=8, num_threads=2, seed=3)
    def chw(root):
        enc, boxes = fn.readers.voc(root=root)
        img = fn.decoders.image(enc)
        img, boxes = fn.resize(img, boxes, size=(128, 160))
        return fn.normalize(img, mean=[124, 116, 104], std=[58, 57, 57], output_layout="CHW"), boxes

    d = next(iter(DetaugIterator(chw(ROOT["voc"]))))
    assert d["images"].shape == (8, 3, 128, 160) and d["images"].dtype == torch.float32

    pipe, ref = _pair(plain, shuffle=False)
    d = next(iter(DetaugIterator(pipe, boxes_format="list")))
    images, boxes = ref.run_batch(0)
    shapes = {tuple(a.shape) for a in images.data}
    assert len(shapes) > 1, "the first 8 VOC images should have several sizes"
    assert isinstance(d["images"], list) and len(d["images"]) == 8
    for t, a in zip(d["images"], images.data, strict=True):
        np.testing.assert_array_equal(t.numpy(), a)


def test_numpy_output_becomes_a_tensor():
    @pipeline_def(batch_size=4, num_threads=1, seed=3)
    def extra(root):
        enc, boxes = fn.readers.voc(root=root)
        return fn.decoders.image(enc), boxes, fn.random.uniform(range=(0, 1), shape=2)

    d = next(iter(DetaugIterator(extra(ROOT["voc"]), ("images", "boxes", "u"))))
    assert isinstance(d["u"], torch.Tensor) and d["u"].shape == (4, 2)
    with pytest.raises(ValueError, match="output_map"):
        next(iter(DetaugIterator(extra(ROOT["voc"]), ("images", "boxes"))))


# ---- epochs ---------------------------------------------------------------------------------------
def test_len_epoch_end_and_reset():
    pipe = plain(ROOT["voc"])
    it = DetaugIterator(pipe, boxes_format="list")
    assert len(it) == len(pipe) == 5
    first = [[_signature(t["boxes"], t["labels"]) for t in d["boxes"]] for d in it]
    assert len(first) == 5
    with pytest.raises(StopIteration):
        next(it)  # stays ended until reset
    it.reset()
    assert pipe.epoch == 1
    second = [[_signature(t["boxes"], t["labels"]) for t in d["boxes"]] for d in it]
    assert len(second) == 5
    assert sorted(sum(first, [])) == sorted(sum(second, []))
    assert first != second, "a new epoch should reshuffle"


def test_auto_reset_runs_every_epoch():
    it = DetaugIterator(plain(ROOT["voc"]), auto_reset=True)
    assert [sum(1 for _ in it) for _ in range(3)] == [5, 5, 5]
    assert it.pipes[0].epoch == 3


@pytest.mark.parametrize("policy, sizes", [("fill", [16, 16, 16]), ("partial", [16, 16, 8]),
                                           ("drop", [16, 16])])
def test_last_batch_policy_over_a_fill_pipeline(policy, sizes, voc_signatures):
    pipe = plain(ROOT["voc"], batch_size=16)
    it = DetaugIterator(pipe, boxes_format="list", last_batch_policy=policy)
    got = [len(d["boxes"]) for d in it]
    assert got == sizes and len(it) == len(sizes)
    if policy == "partial":
        pipe2 = plain(ROOT["voc"], batch_size=16)
        sigs = collections.Counter(_signature(t["boxes"], t["labels"])
                                   for d in DetaugIterator(pipe2, boxes_format="list",
                                                           last_batch_policy="partial")
                                   for t in d["boxes"])
        assert sigs == voc_signatures


def test_policy_a_pipeline_cannot_serve_is_refused():
    with pytest.raises(ValueError, match="cannot serve"):
        DetaugIterator(plain(ROOT["voc"], last_batch_policy="drop"), last_batch_policy="partial")


def test_size_limits_the_epoch():
    it = DetaugIterator(plain(ROOT["voc"]), size=20, boxes_format="list")
    assert len(it) == 3 and sum(len(d["boxes"]) for d in it) == 24  # last batch filled
    with pytest.raises(ValueError, match="more than the shard holds"):
        DetaugIterator(plain(ROOT["voc"]), size=41)


# ---- shards ---------------------------------------------------------------------------------------
def test_two_shards_cover_every_record_once_per_epoch(voc_signatures):
    shards = [plain(ROOT["voc"], shard_id=k, num_shards=2) for k in (0, 1)]
    it = DetaugIterator(shards, boxes_format="list", last_batch_policy="partial")
    assert len(it) == 3  # 20 records a shard: 8 + 8 + 4
    for epoch in range(2):
        seen, per_shard = collections.Counter(), [set(), set()]
        for step in it:
            assert isinstance(step, list) and len(step) == 2
            for k, d in enumerate(step):
                for t in d["boxes"]:
                    sig = _signature(t["boxes"], t["labels"])
                    seen[sig] += 1
                    per_shard[k].add(sig)
        assert seen == voc_signatures, f"epoch {epoch}"
        assert len(per_shard[0]) == len(per_shard[1]) == 20
        it.reset()


def test_padded_counts_equal_list_lengths_on_shards():
    shards_l = [plain(ROOT["voc"], shard_id=k, num_shards=2) for k in (0, 1)]
    shards_p = [plain(ROOT["voc"], shard_id=k, num_shards=2) for k in (0, 1)]
    it_l = DetaugIterator(shards_l, boxes_format="list")
    it_p = DetaugIterator(shards_p, boxes_format="padded")
    steps = 0
    for sl, sp in zip(it_l, it_p, strict=True):
        steps += 1
        assert len(sl) == len(sp) == 2  # one dict per shard
        for dl, dp in zip(sl, sp, strict=True):
            assert dp["boxes_counts"].tolist() == [len(t["labels"]) for t in dl["boxes"]]
    assert steps == len(it_l) == 3  # 20 records a shard, batches of 8


def test_shard_helper_and_world_size_warning(tmp_path):
    import torch.distributed as dist

    assert shard_from_torch_distributed() == (0, 1)
    if not dist.is_available():
        pytest.skip("torch.distributed is not available")
    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1)
    try:
        assert shard_from_torch_distributed() == (0, 1)
        with pytest.warns(UserWarning, match="num_shards=2"):
            DetaugIterator(plain(ROOT["voc"], shard_id=0, num_shards=2))
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            sid, ns = shard_from_torch_distributed()
            DetaugIterator(plain(ROOT["voc"], shard_id=sid, num_shards=ns))
    finally:
        dist.destroy_process_group()


def test_state_dict_resumes_exactly():
    a = DetaugIterator(augmented(ROOT["voc"]), boxes_format="padded")
    next(a), next(a)
    state = a.state_dict()
    want = next(a)
    b = DetaugIterator(augmented(ROOT["voc"]), boxes_format="padded")
    b.load_state_dict(state)
    got = next(b)
    assert set(got) == set(want)
    for k in want:
        assert torch.equal(want[k], got[k]), k
    assert len(list(b)) == 2  # batches 3 and 4 are left in the epoch


def test_import_detaug_does_not_import_torch():
    code = ("import sys, detaug, detaug.adapters.torch; "
            "assert 'torch' not in sys.modules, 'torch imported'")
    subprocess.run([sys.executable, "-c", code], check=True, cwd=REPO)


# ---- training input -------------------------------------------------------------------------------
def _check_targets_like_torchvision(images, targets):
    """The checks torchvision's GeneralizedRCNN.forward makes of its training input."""
    assert len(images) == len(targets)
    for t in targets:
        boxes = t["boxes"]
        assert isinstance(boxes, torch.Tensor) and boxes.dim() == 2 and boxes.shape[-1] == 4
        assert boxes.dtype.is_floating_point and t["labels"].dtype == torch.int64
        assert not (boxes[:, 2:] <= boxes[:, :2]).any(), "degenerate box"


class TinyDetector(torch.nn.Module):
    """A box and a class per image from a pooled conv feature: enough to back-propagate a
    loss built from list-form targets."""

    def __init__(self, num_classes=21):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 8, 3, stride=4)
        self.box = torch.nn.Linear(8, 4)
        self.cls = torch.nn.Linear(8, num_classes)

    def forward(self, x):
        f = torch.relu(self.conv(x)).mean((2, 3))
        return torch.sigmoid(self.box(f)), self.cls(f)


def _loss(model, images, targets, size):
    """Per image: L1 from the predicted (normalised) box to the nearest target box, plus cross
    entropy against that box's label (1-based: 0 is the background, images without boxes)."""
    boxes, logits = model(images)
    total = images.new_zeros(())
    for b, t in enumerate(targets):
        if len(t["boxes"]) == 0:
            total = total + torch.nn.functional.cross_entropy(logits[b:b + 1], torch.zeros(1, dtype=torch.int64))
            continue
        tb = t["boxes"] / size
        d = (tb - boxes[b]).abs().sum(1)
        j = int(d.argmin())
        total = total + d[j] + torch.nn.functional.cross_entropy(logits[b:b + 1], t["labels"][j:j + 1])
    return total / len(targets)


def test_list_targets_train_a_tiny_model():
    torch.manual_seed(0)
    it = DetaugIterator(augmented(ROOT["voc"], size=(128, 128)), boxes_format="list", label_offset=1)
    model = TinyDetector()
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    d = next(it)
    images = d["images"].permute(0, 3, 1, 2).float() / 255  # HWC uint8 -> CHW float
    _check_targets_like_torchvision(images, d["boxes"])
    assert all(int(t["labels"].min()) >= 1 for t in d["boxes"] if len(t["labels"]))
    losses = []
    for _ in range(20):
        opt.zero_grad()
        loss = _loss(model, images, d["boxes"], 128.0)
        loss.backward()
        assert all(p.grad is not None and torch.isfinite(p.grad).all() for p in model.parameters())
        opt.step()
        losses.append(float(loss.detach()))
    assert losses[-1] < losses[0]
    for d in it:  # the rest of the epoch feeds the model too
        _check_targets_like_torchvision(d["images"], d["boxes"])
        loss = _loss(model, d["images"].permute(0, 3, 1, 2).float() / 255, d["boxes"], 128.0)
        assert torch.isfinite(loss)


def test_unsharded_pipeline_is_sharded_from_torch_distributed(monkeypatch):
    """Under torch.distributed (rank 1 of 2 here, faked), an unsharded pipeline reads rank 1's
    half of each epoch, and the two ranks together read every record once."""
    import torch.distributed as dist

    from detaug import Pipeline, fn
    from detaug.adapters.torch import DetaugIterator

    def make():
        pipe = Pipeline(batch_size=5, seed=3)
        with pipe:
            enc, boxes = fn.readers.voc(root=ROOT["voc"], random_shuffle=True)
            pipe.set_outputs(fn.decoders.image(enc), boxes)
        return pipe

    seen = []
    for rank in (0, 1):
        monkeypatch.setattr(dist, "is_available", lambda: True)
        monkeypatch.setattr(dist, "is_initialized", lambda: True)
        monkeypatch.setattr(dist, "get_world_size", lambda: 2)
        monkeypatch.setattr(dist, "get_rank", lambda r=rank: r)
        pipe = make()
        # check_ranks=False: the process group is faked, there is no one to gather from
        it = DetaugIterator(pipe, output_map=("images", "boxes"), boxes_format="list",
                            check_ranks=False)
        assert pipe.shard_info["num_shards"] == 2 and pipe.shard_info["shard_id"] == rank
        assert len(it) == 4  # 20 records of 40, batches of 5
        for batch in it:
            seen.extend(tuple(np.round(t["boxes"].numpy().ravel(), 3)) for t in batch["boxes"])
        pipe.close()
    from readers import read_voc

    ds = read_voc(ROOT["voc"])
    expected = sorted(tuple(np.round(r.boxes.ravel(), 3)) for r in ds.records)
    assert sorted(seen) == expected
