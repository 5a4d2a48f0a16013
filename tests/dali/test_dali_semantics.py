"""DALI's defaults and reader semantics under the DALI names, or errors that name what
detaug does not do. Expected values are hand-computed from DALI's documented rules (cited beside
each case) or recomputed independently from the outputs (brute force in float64)."""
import functools
import os

import numpy as np
import pytest

import detaug.fn as fn
import detaug.ops as ops
import detaug.types as types
from detaug.pipeline import Pipeline
from detaug.dali.plugin.pytorch import DALIGenericIterator, LastBatchPolicy

from helpers import COCO, VOC
from helpers import close_pipelines, track  # noqa: F401  (fixture)


def _fed(outputs_fn, cols, batch_size=None, seed=0):
    """One run of ``outputs_fn(*sources)`` on per-sample columns (one batch)."""
    pipe = track(Pipeline(batch_size=batch_size or len(cols[0]), num_threads=1, seed=seed))
    with pipe:
        srcs = [fn.external_source(source=[col], name=f"in{k}") for k, col in enumerate(cols)]
        out = outputs_fn(*srcs)
        pipe.set_outputs(*(out if isinstance(out, tuple) else (out,)))
    return pipe.run()


def _draws(make, n=4000, seed=3):
    pipe = track(Pipeline(batch_size=n, num_threads=1, seed=seed))
    with pipe:
        pipe.set_outputs(fn.external_source(source=lambda i: np.zeros(1, np.uint8), batch=False,
                                            size=n), make())
    return pipe.run()[1]


# ---- random ops: DALI's defaults, dtype, per-sample arguments --------------------------------------
def test_uniform_default_range_is_dalis_minus_one_to_one():
    """DALI: range=[-1.0, 1.0] by default. 4000 draws: all in [-1, 1), both halves hit, mean ~ 0
    (sd of the mean 0.009), the variance of U(-1, 1) is 1/3."""
    u = _draws(lambda: fn.random.uniform())
    assert u.dtype == np.float32 and u.shape == (4000,)
    assert u.min() >= -1 and u.max() < 1 and u.min() < -0.99 and u.max() > 0.99
    assert abs(u.mean()) < 0.05 and abs(u.var() - 1 / 3) < 0.03
    np.testing.assert_array_equal(_draws(lambda: ops.Uniform()()), u)  # the old class: the same


def test_other_random_defaults_are_dalis():
    coin = _draws(lambda: fn.random.coin_flip())     # DALI: probability 0.5, int32
    assert coin.dtype == np.int32 and set(np.unique(coin)) == {0, 1} and abs(coin.mean() - 0.5) < 0.04
    nrm = _draws(lambda: fn.random.normal())         # DALI: mean 0, stddev 1, float32
    assert nrm.dtype == np.float32 and abs(nrm.mean()) < 0.06 and abs(nrm.std() - 1) < 0.05
    old = _draws(lambda: ops.NormalDistribution()())  # DALI's old class name
    np.testing.assert_array_equal(old, nrm)


def test_dtype_rounds_half_away_and_clamps():
    """DALI converts draws to dtype "rounding and clamping": values 0.5, 1.5, -2.5 (each drawn
    from values=[v]) give 1, 2, -3 as int32; 300 and -5 clamp to 255 and 0 as uint8."""
    for v, dt, want in ((0.5, types.INT32, 1), (1.5, types.INT32, 2), (-2.5, types.INT32, -3),
                        (300.0, types.UINT8, 255), (-5.0, types.UINT8, 0)):
        out = _draws(lambda: fn.random.uniform(values=[v], dtype=dt), n=3)
        assert out.dtype == types.to_numpy_type(dt) and (out == want).all(), (v, dt, out)
    b = _draws(lambda: fn.random.coin_flip(probability=1.0, dtype=types.BOOL), n=3)
    assert b.dtype == np.bool_ and b.all()
    with pytest.raises(ValueError, match="coin_flip gives int32, uint8 or bool"):
        _draws(lambda: fn.random.coin_flip(dtype=types.FLOAT), n=3)
    with pytest.raises(ValueError, match="mutually exclusive"):
        _draws(lambda: fn.random.uniform(range=(0, 2), values=[1.0]), n=3)


def test_random_arguments_per_sample():
    """DALI takes probability, mean, stddev and range per sample (TensorList arguments)."""
    p = np.array([0.0, 1.0, 1.0, 0.0], np.float32)
    mean = np.array([3.0, -2.0, 7.5, 0.25], np.float32)
    rng_ = np.array([[5, 5.5], [-3, -2], [10, 10.001], [0, 1]], np.float32)
    coin, nrm, uni = _fed(lambda pp, mm, rr: (fn.random.coin_flip(probability=pp, shape=3),
                                              fn.random.normal(mean=mm, stddev=0.0),
                                              fn.random.uniform(range=rr, shape=50)),
                          [list(p), list(mean), list(rng_)])
    np.testing.assert_array_equal(coin, np.repeat(p[:, None], 3, 1).astype(np.int32))
    np.testing.assert_array_equal(nrm, mean)  # stddev 0: exactly the mean
    assert (uni >= rng_[:, :1]).all() and (uni < rng_[:, 1:]).all()


# ---- pipe.run() goes on into the next epoch (DALI's readers wrap around) ---------------------------
def _voc_reader(**kw):
    pipe = track(Pipeline(batch_size=kw.pop("batch_size", 16), num_threads=1, seed=5, **kw))
    with pipe:
        enc, boxes = fn.readers.voc(root=VOC, random_shuffle=True)
        pipe.set_outputs(enc, fn.random.uniform(range=(0, 1000)))
    return pipe


def _key(out):
    return list(out[0].paths), out[1].tolist()


def test_run_wraps_around_epochs_in_the_keyed_order():
    """40 records, batch 16, 'fill': 3 batches an epoch. Eight run() calls go through epochs 0,
    1 and into 2 with no StopIteration; each batch equals run_batch(i, epoch=e) (the keyed
    order); state_dict after the wrap says (epoch 2, batch 2); a new pipeline resumed from it
    gives the next batch."""
    pipe = _voc_reader()
    pipe.build()
    assert len(pipe) == 3
    got = [_key(pipe.run()) for _ in range(8)]
    want = [_key(pipe.run_batch(i, epoch=e)) for e in range(3) for i in range(3)][:8]
    assert got == want
    assert got[0][0] != got[3][0]  # a new shuffle every epoch
    state = pipe.state_dict()
    assert (state["epoch"], state["batch"]) == (2, 2)
    other = _voc_reader()
    other.load_state_dict(state)
    assert _key(other.run()) == _key(pipe.run()) == _key(pipe.run_batch(2, epoch=2))


def test_iteration_still_ends_with_the_epoch_and_external_sources_still_end():
    pipe = _voc_reader()
    assert len([b for b in pipe]) == 3  # `for` over the pipeline: one epoch
    with pytest.raises(StopIteration):
        next(pipe)
    pipe.reset()
    assert _key(next(pipe)) == _key(pipe.run_batch(0, epoch=1))
    ext = track(Pipeline(batch_size=2, num_threads=1, seed=0))
    with ext:
        ext.set_outputs(fn.external_source(source=[[np.zeros((2, 2, 3), np.uint8)] * 2]))
    ext.run()
    with pytest.raises(StopIteration):  # DALI: an exhausted external source raises
        ext.run()


# ---- reader arguments: pad_last_batch, stick_to_shard --------------------------------------------
@pytest.fixture
def seven_files(tmp_path):
    """7 files whose label is their index (the reader does not decode them)."""
    names = []
    for k in range(7):
        (tmp_path / f"f{k}.bin").write_bytes(bytes([k]) * 5)
        names.append(f"f{k}.bin")
    return str(tmp_path), names


def _labels_of(root, names, batches, **reader):
    pipe = track(Pipeline(batch_size=3, num_threads=1, seed=0))
    with pipe:
        _, labels = fn.readers.file(file_root=root, files=names, labels=list(range(7)), **reader)
        pipe.set_outputs(labels)
    return pipe, [pipe.run()[0].as_array().ravel().tolist() for _ in range(batches)]


def test_pad_last_batch_repeats_the_shards_last_sample(seven_files):
    """DALI's loader, 7 records in 2 shards (3 and 4) of batch 3, pad_last_batch: each shard is
    padded to ceil(7 / 2) = 4 samples and then to a full batch with its last sample, so both
    give 2 batches: shard 0 [0 1 2] [2 2 2], shard 1 [3 4 5] [6 6 6]. stick_to_shard=True keeps
    the shard in epoch 1."""
    root, names = seven_files
    p0, got0 = _labels_of(root, names, 4, shard_id=0, num_shards=2, pad_last_batch=True,
                          stick_to_shard=True)
    p1, got1 = _labels_of(root, names, 2, shard_id=1, num_shards=2, pad_last_batch=True,
                          stick_to_shard=True)
    assert len(p0) == len(p1) == 2
    assert got0 == [[0, 1, 2], [2, 2, 2]] * 2 and got1 == [[3, 4, 5], [6, 6, 6]]
    _, plain = _labels_of(root, names, 2, shard_id=0, num_shards=2, stick_to_shard=True)
    assert plain == [[0, 1, 2], [0, 1, 2]]  # without: 'fill' wraps around the shard's order


def test_stick_to_shard_false_moves_the_shard_every_epoch(seven_files):
    """DALI's default: the reader reads on into the next shard, so with 6 records in 2 shards
    shard 1 reads shard 0's records in epoch 1 and its own again in epoch 2. Shards of different
    lengths (7 records) cannot move without changing the shard's length between epochs: refused
    naming stick_to_shard when it is given as False; not given, the shard stays."""
    root, names = seven_files

    def six(**kw):
        pipe = track(Pipeline(batch_size=2, num_threads=1, seed=0))
        with pipe:
            _, labels = fn.readers.file(file_root=root, files=names[:6], labels=list(range(6)),
                                        shard_id=1, num_shards=2, **kw)
            pipe.set_outputs(labels)
        return [pipe.run()[0].as_array().ravel().tolist() for _ in range(6)]

    assert six() == six(stick_to_shard=False) == [[3, 4], [5, 3], [0, 1], [2, 0], [3, 4], [5, 3]]
    assert six(stick_to_shard=True) == [[3, 4], [5, 3]] * 3
    for kw in ({}, {"pad_last_batch": True}):
        with pytest.raises(NotImplementedError, match="stick_to_shard"):
            _labels_of(root, names, 1, shard_id=0, num_shards=2, stick_to_shard=False, **kw)
    _, stays = _labels_of(root, names, 4, shard_id=0, num_shards=2, pad_last_batch=True)
    assert stays == [[0, 1, 2], [2, 2, 2]] * 2
    with pytest.raises(ValueError, match="stick_to_shard and shuffle_after_epoch"):
        _labels_of(root, names, 1, stick_to_shard=True, shuffle_after_epoch=True)


@pytest.mark.parametrize("shard_policy", ["pad", "drop", "uneven"])
def test_dali_sharding_arguments_as_documented(seven_files, shard_policy):
    """What ops/arg_docs.py says of pad_last_batch and stick_to_shard, on 7 records in 2 shards
    (3 and 4) of batch 3: pad_last_batch=True repeats the shard's last record to the largest
    shard's length (4), and under 'fill' to a full batch; either argument given makes the shards
    DALI's (3 and 4 records) whatever the pipeline's shard_policy, which alone evens them out."""
    root, names = seven_files

    def epoch(sid, last="fill", **reader):
        pipe = track(Pipeline(batch_size=3, num_threads=1, seed=0, last_batch_policy=last,
                              shard_policy=shard_policy))
        with pipe:
            _, labels = fn.readers.file(file_root=root, files=names, labels=list(range(7)),
                                        shard_id=sid, num_shards=2, **reader)
            pipe.set_outputs(labels)
        return [pipe.run_batch(b)[0].tolist() for b in range(len(pipe))]

    padded = {"fill": ([[0, 1, 2], [2, 2, 2]], [[3, 4, 5], [6, 6, 6]]),
              "partial": ([[0, 1, 2], [2]], [[3, 4, 5], [6]]),
              "drop": ([[0, 1, 2]], [[3, 4, 5]])}
    for last, want in padded.items():
        for stick in ({}, {"stick_to_shard": True}):
            assert (epoch(0, last, pad_last_batch=True, **stick),
                    epoch(1, last, pad_last_batch=True, **stick)) == want
    dali = ([[0, 1, 2]], [[3, 4, 5], [6, 3, 4]])  # 'fill' wraps round the shard's own order
    assert (epoch(0, stick_to_shard=True), epoch(1, stick_to_shard=True)) == dali
    own = {"pad": ([[0, 1, 2], [0, 0, 1]], [[3, 4, 5], [6, 3, 4]]),  # shard 0 repeats record 0
           "drop": ([[0, 1, 2]], [[3, 4, 5]]), "uneven": dali}[shard_policy]
    assert (epoch(0), epoch(1)) == (epoch(0, pad_last_batch=False), epoch(1)) == own


def _padded_reader_pipe(root, names, sid):
    """Shard ``sid`` of 2 of the seven files, batch 3, pad_last_batch, named 'Reader'."""
    pipe = track(Pipeline(batch_size=3, num_threads=1, seed=0))
    with pipe:
        _, labels = ops.FileReader(file_root=root, files=names, labels=list(range(7)),
                                   shard_id=sid, num_shards=2, pad_last_batch=True,
                                   stick_to_shard=True, name="Reader")()
        pipe.set_outputs(labels)
    return pipe


def test_dali_iterator_with_pad_last_batch_fill(seven_files):
    """DALIGenericIterator(reader_name=...) under FILL hands over the padding: both shards give
    2 batches, the last of shard 0 is its last sample three times; PARTIAL leaves it out."""
    root, names = seven_files
    make = functools.partial(_padded_reader_pipe, root, names)
    for sid, want in ((0, [[0, 1, 2], [2, 2, 2]]), (1, [[3, 4, 5], [6, 6, 6]])):
        it = DALIGenericIterator([make(sid)], ["label"], reader_name="Reader")
        assert len(it) == 2
        assert [d[0]["label"].reshape(-1).tolist() for d in it] == want
    it = DALIGenericIterator([make(0)], ["label"], reader_name="Reader",
                             last_batch_policy=LastBatchPolicy.PARTIAL)
    assert [d[0]["label"].reshape(-1).tolist() for d in it] == [[0, 1, 2]]


class _SimulatedRanks:
    """A process group of ``world`` ranks simulated in one process, one thread a rank:
    torch.distributed's calls the iterator makes answer for the calling thread's rank, and
    ``all_gather_object`` exchanges the ranks' objects through a barrier (copied, as gloo pickles
    them)."""

    def __init__(self, monkeypatch, world):
        import copy
        import threading

        import torch.distributed as dist

        self.world, self.local = world, threading.local()
        self.slots, self.barrier = [None] * world, threading.Barrier(world, timeout=60)

        def all_gather_object(out, obj):
            self.slots[self.local.rank] = copy.deepcopy(obj)
            self.barrier.wait()
            out[:] = copy.deepcopy(self.slots)
            self.barrier.wait()

        for name, fake in {"is_available": lambda: True, "is_initialized": lambda: True,
                           "get_world_size": lambda: world, "get_backend": lambda: "gloo",
                           "get_rank": lambda: self.local.rank,
                           "all_gather_object": all_gather_object}.items():
            monkeypatch.setattr(dist, name, fake)

    def run(self, work):
        """``work(rank)`` on every rank at once; the results (or the exceptions) by rank."""
        import threading

        out = [None] * self.world

        def main(rank):
            self.local.rank = rank
            try:
                out[rank] = work(rank)
            except Exception as e:  # noqa: BLE001 - handed to the test
                out[rank] = e

        threads = [threading.Thread(target=main, args=(r,)) for r in range(self.world)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(120)
        return out


def test_dali_iterator_pad_last_batch_under_ddp_ranks_agree(seven_files, monkeypatch):
    """Two DDP ranks (simulated), 7 records in shards of 3 and 4, batch 3, pad_last_batch: under
    FILL both iterators count the largest shard (4 samples, 2 steps), so the ranks agree and each
    gives its padded batches. The check compares the padded steps, not the shards' own (1 and 2
    steps: before the fix every rank raised 'disagree on steps per epoch'). PARTIAL leaves the
    padding out: 1 and 2 steps is a real disagreement (a rank would stop early), still raised on
    both ranks."""
    pytest.importorskip("torch.distributed")
    root, names = seven_files
    ranks = _SimulatedRanks(monkeypatch, 2)
    make = functools.partial(_padded_reader_pipe, root, names)

    def fill(rank):
        it = DALIGenericIterator([make(rank)], ["label"], reader_name="Reader")
        return len(it), [d[0]["label"].reshape(-1).tolist() for d in it]

    got = ranks.run(fill)
    assert got == [(2, [[0, 1, 2], [2, 2, 2]]), (2, [[3, 4, 5], [6, 6, 6]])]

    def partial(rank):
        DALIGenericIterator([make(rank)], ["label"], reader_name="Reader",
                            last_batch_policy=LastBatchPolicy.PARTIAL)

    for err in ranks.run(partial):
        assert isinstance(err, ValueError) and "disagree on steps per epoch" in str(err), err


# ---- random_bbox_crop: fixed-size windows, pruning --------------------------------------------------

def _boxes(rng, n_samples=6):
    out = []
    for _ in range(n_samples):
        xy = rng.uniform(0, 0.8, (5, 2))
        out.append(np.concatenate([xy, xy + rng.uniform(0.02, 0.3, (5, 2))], 1).astype(np.float32))
    return out


def _mapped(bx, lo, ext):
    return np.clip((bx - np.tile(lo, 2)) / np.tile(ext, 2), 0, 1)


@pytest.mark.parametrize("crop,layout", [((100, 50), None), ((50, 100), "HW"), ((600, 400), None)])
def test_random_bbox_crop_fixed_shape(rng, crop, layout):
    """DALI's crop_shape + input_shape (x, y order unless shape_layout='HW'): the window has
    exactly that absolute size, its absolute anchor lies between 0 and input - crop (negative
    when the window is larger than the image), and the boxes are remapped to the relative
    window; the kept boxes are those whose centre is inside."""
    boxes = _boxes(rng)
    ins = (400, 300) if layout is None else (300, 400)
    anchor, shape, out, idx = _fed(
        lambda b: fn.random_bbox_crop(b, crop_shape=crop, input_shape=ins, shape_layout=layout,
                                      thresholds=[0.0], allow_no_crop=False,
                                      output_bbox_indices=True),
        [boxes], seed=int(rng.integers(1 << 30)))
    cw, ch = (crop if layout is None else crop[::-1])
    for s in range(len(boxes)):
        np.testing.assert_array_equal(shape[s], [cw, ch])
        lo_x, hi_x = sorted((0, 400 - cw))
        lo_y, hi_y = sorted((0, 300 - ch))
        assert lo_x <= anchor[s][0] <= hi_x and lo_y <= anchor[s][1] <= hi_y
        lo, ext = anchor[s] / np.array([400, 300.0]), shape[s] / np.array([400, 300.0])
        bx = boxes[s].astype(np.float64)
        c = (bx[:, :2] + bx[:, 2:]) / 2
        keep = np.nonzero(((c >= lo) & (c <= lo + ext)).all(1))[0]
        np.testing.assert_array_equal(idx[s], keep)
        np.testing.assert_allclose(out[s], _mapped(bx[keep], lo, ext), atol=1e-5)


def test_random_bbox_crop_prune_threshold(rng):
    """bbox_prune_threshold t: a box is kept when it overlaps the window by more than nothing and
    by at least t of its own area (DALI), whatever its centre."""
    boxes = _boxes(rng)
    for t in (0.0, 0.3, 0.7):
        anchor, shape, out, idx = _fed(
            lambda b: fn.random_bbox_crop(b, bbox_prune_threshold=t, scaling=[0.3, 0.6],
                                          aspect_ratio=[0.5, 2.0], thresholds=[0.0],
                                          allow_no_crop=False, num_attempts=10,
                                          output_bbox_indices=True),
            [boxes], seed=int(rng.integers(1 << 30)))
        for s in range(len(boxes)):
            lo, ext = anchor[s].astype(np.float64), shape[s].astype(np.float64)
            bx = boxes[s].astype(np.float64)
            iw = np.clip(np.minimum(lo[0] + ext[0], bx[:, 2]) - np.maximum(lo[0], bx[:, 0]), 0, None)
            ih = np.clip(np.minimum(lo[1] + ext[1], bx[:, 3]) - np.maximum(lo[1], bx[:, 1]), 0, None)
            frac = iw * ih / ((bx[:, 2] - bx[:, 0]) * (bx[:, 3] - bx[:, 1]))
            keep = np.nonzero((frac > 0) & (frac >= t))[0]
            np.testing.assert_array_equal(idx[s], keep)
            np.testing.assert_allclose(out[s], _mapped(bx[keep], lo, ext), atol=1e-5)


def test_random_bbox_crop_fixed_shape_errors():
    b = [[np.array([[0.1, 0.1, 0.5, 0.5]], np.float32)]]
    with pytest.raises(ValueError, match="crop_shape and input_shape go together"):
        _fed(lambda x: fn.random_bbox_crop(x, crop_shape=[10, 10]), b)
    with pytest.raises(ValueError, match="scaling and aspect_ratio cannot be given"):
        _fed(lambda x: fn.random_bbox_crop(x, crop_shape=[10, 10], input_shape=[20, 20],
                                           scaling=[0.3, 1.0]), b)
    with pytest.raises(ValueError, match="bbox_prune_threshold must be in|bbox_prune_threshold=1.5"):
        _fed(lambda x: fn.random_bbox_crop(x, bbox_prune_threshold=1.5), b)


# ---- readers.coco: DALI's outputs --------------------------------------------------------------------
def test_coco_reader_takes_dalis_outputs_with_any_dali_argument():
    """Any argument only DALI's reader has selects DALI's (images, boxes, labels), with DALI's
    defaults for the rest (xywh pixels, labels from 1); image_ids adds the ids; masks are refused
    when traced, before a wrong unpacking could hide it."""
    root, ann = os.path.join(COCO, "images"), os.path.join(COCO, "annotations.json")
    for extra in ({"pad_last_batch": True}, {"initial_fill": 64}, {"shuffle_after_epoch": True},
                  {"skip_cached_images": False}):
        pipe = track(Pipeline(batch_size=2, num_threads=1, seed=0))
        with pipe:
            out = fn.readers.coco(file_root=root, annotations_file=ann, **extra)
            assert len(out) == 3, extra
            pipe.set_outputs(*out)
        enc, b, lab = pipe.run()
        assert b[0].dtype == np.float32 and lab[0].dtype == np.int32 and lab[0].min() >= 1
    with Pipeline(batch_size=1):
        assert len(fn.readers.coco(file_root=root, annotations_file=ann, image_ids=True)) == 4
        assert len(fn.coco_reader(file_root=root, annotations_file=ann, image_ids=True)) == 4
        # DALI's masks: tests/dali/test_coco_masks.py; both at once are refused, as in DALI
        with pytest.raises(ValueError, match="polygon_masks and pixelwise_masks"):
            fn.readers.coco(file_root=root, annotations_file=ann, polygon_masks=True,
                            pixelwise_masks=True)


def test_random_bbox_crop_per_sample_input_shape_then_slice(rng):
    """DALI's EfficientDet example: crop_shape = the output size, input_shape per sample (the
    resized images' sizes), then fn.slice with absolute anchor and shape and
    out_of_bounds_policy='pad'. Each output is the window [round(a), round(a + s)) of its image
    (halves away from zero), zeros where it reaches outside."""
    imgs = [rng.integers(1, 256, (int(rng.integers(20, 50)), int(rng.integers(20, 50)), 3), np.uint8)
            for _ in range(5)]
    sizes = [np.array(im.shape[1::-1], np.int32) for im in imgs]  # (w, h), DALI's WH order
    boxes = _boxes(rng, 5)

    def graph(i, b, s):
        a, sh, bb, idx = fn.random_bbox_crop(b, crop_shape=(32, 24), input_shape=s,
                                             bbox_layout="xyXY", allow_no_crop=False,
                                             total_num_attempts=64, output_bbox_indices=True)
        return (fn.slice(i, a, sh, normalized_anchor=False, normalized_shape=False,
                         out_of_bounds_policy="pad"), a, sh, bb, idx)

    images, anchor, shape, out, idx = _fed(graph, [imgs, boxes, sizes],
                                           seed=int(rng.integers(1 << 30)))
    for k, im in enumerate(imgs):
        h, w = im.shape[:2]
        np.testing.assert_array_equal(shape[k], [32, 24])
        assert min(0, w - 32) <= anchor[k][0] <= max(0, w - 32)
        assert min(0, h - 24) <= anchor[k][1] <= max(0, h - 24)
        x0, y0 = (np.sign(anchor[k]) * np.floor(np.abs(anchor[k].astype(np.float64)) + 0.5)).astype(int)
        ref = np.zeros((24, 32, 3), np.uint8)
        ys, xs = slice(max(y0, 0), min(y0 + 24, h)), slice(max(x0, 0), min(x0 + 32, w))
        ref[ys.start - y0:ys.stop - y0, xs.start - x0:xs.stop - x0] = im[ys, xs]
        np.testing.assert_array_equal(np.asarray(images.data[k]), ref)
        lo = anchor[k].astype(np.float64) / np.array([w, h])
        ext = shape[k].astype(np.float64) / np.array([w, h])
        np.testing.assert_allclose(out[k], _mapped(boxes[k][idx[k]].astype(np.float64), lo, ext),
                                   atol=1e-5)


# ---- DALI's SSD example (DALI's docs/examples/use_cases/pytorch/single_stage_detector), ported -----
class SSDPipeline(Pipeline):
    """The example's class-API pipeline with its arguments, on the CPU; left out: BoxEncoder (not
    in detaug), Hsv's / BrightnessContrast's dtype= (refused by name, below)."""

    def __init__(self, shard_id, num_shards):
        super().__init__(batch_size=4, device_id=0, num_threads=1, seed=7)
        self.input = ops.COCOReader(file_root=os.path.join(COCO, "images"),
                                    annotations_file=os.path.join(COCO, "annotations.json"),
                                    skip_empty=True, shard_id=shard_id, num_shards=num_shards,
                                    ratio=True, ltrb=True, random_shuffle=False,
                                    shuffle_after_epoch=True, pad_last_batch=True)
        self.decode = ops.ImageDecoder(device="cpu", output_type=types.RGB)
        self.crop = ops.RandomBBoxCrop(device="cpu", aspect_ratio=[0.5, 2.0],
                                       thresholds=[0, 0.1, 0.3, 0.5, 0.7, 0.9], scaling=[0.3, 1.0],
                                       ltrb=True, allow_no_crop=True, num_attempts=1)
        self.slice = ops.Slice(device="cpu")
        self.hsv = ops.Hsv(device="cpu")
        self.bc = ops.BrightnessContrast(device="cpu", contrast_center=128)
        self.resize = ops.Resize(device="cpu", resize_x=300, resize_y=300,
                                 min_filter=types.DALIInterpType.INTERP_TRIANGULAR)
        self.normalize = ops.CropMirrorNormalize(device="cpu", crop=(300, 300),
                                                 mean=[0.485 * 255, 0.456 * 255, 0.406 * 255],
                                                 std=[0.229 * 255, 0.224 * 255, 0.225 * 255],
                                                 mirror=0, output_dtype=types.FLOAT,
                                                 output_layout=types.NCHW, pad_output=False)
        self.rng1 = ops.Uniform(range=[0.5, 1.5])
        self.rng2 = ops.Uniform(range=[0.875, 1.125])
        self.rng3 = ops.Uniform(range=[-0.5, 0.5])
        self.flip = ops.Flip(device="cpu")
        self.bbflip = ops.BbFlip(device="cpu", ltrb=True)
        self.flip_coin = ops.CoinFlip(probability=0.5)

    def define_graph(self):
        saturation, contrast = self.rng1(), self.rng1()
        brightness, hue, coin_rnd = self.rng2(), self.rng3(), self.flip_coin()
        inputs, bboxes, labels = self.input(name="Reader")
        images = self.decode(inputs)
        crop_begin, crop_size, bboxes, labels = self.crop(bboxes, labels)
        images = self.slice(images, crop_begin, crop_size)
        images = self.flip(images, horizontal=coin_rnd)
        bboxes = self.bbflip(bboxes, horizontal=coin_rnd)
        images = self.resize(images)
        images = self.hsv(images, hue=hue, saturation=saturation)
        images = self.bc(images, brightness=brightness, contrast=contrast)
        return self.normalize(images), bboxes, labels, inputs


def test_dali_ssd_example_runs_ported():
    """Three shards of the example's pipeline: pad_last_batch gives both as many batches (the
    shorter one repeats its last image), run() goes on into the next epoch, outputs have DALI's
    forms: (4, 3, 300, 300) float32, ltrb boxes in [0, 1], labels from 1."""
    pipes = [track(SSDPipeline(s, 3)) for s in range(3)]
    for p in pipes:
        p.build()
    n = pipes[0].epoch_size("Reader")  # 68 images: shards of 22, 23, 23, padded to 23
    assert {len(p) for p in pipes} == {-(-(-(-n // 3)) // 4)} and pipes[0].max_batch_size == 4
    for s, p in enumerate(pipes):
        real = (s + 1) * n // 3 - s * n // 3
        for b in range(len(p) + 1):
            img, bb, lab, enc = p.run()
            if b == len(p) - 1:  # the shard's last batch: its last image, repeated
                k = real - b * 4
                assert enc.paths[k:] == [enc.paths[k - 1]] * (4 - k)
            assert img.data.shape == (4, 3, 300, 300) and img.data.dtype == np.float32
            for b, lb in zip(bb, lab):
                assert b.shape == (len(lb), 4) and ((b >= 0) & (b <= 1)).all()
                assert (b[:, 2:] >= b[:, :2]).all() and (lb >= 1).all()
        assert p.epoch == 1
    # (Hsv / BrightnessContrast take dtype= and BoxEncoder exists: the SSD
    # example itself runs in tests/dali/test_dali_examples.py)
    assert hasattr(ops, "BoxEncoder") and hasattr(ops, "Hsv")


def test_file_reader_filters_as_dali(tmp_path):
    """DALI's file_filters (glob patterns on file names, its default list of image and audio
    endings) and case_sensitive_filter; the class labels stay those of the sorted folders."""
    files = {"a": ["x.jpg", "y.JPG", "z.pnm", "notes.txt", ".hidden"], "b": ["w.jp2", "v.png"]}
    for cls, names in files.items():
        os.makedirs(tmp_path / cls)
        for n in names:
            (tmp_path / cls / n).write_bytes(b"\\0")

    def read(**kw):
        pipe = track(Pipeline(batch_size=1, num_threads=1, seed=0))
        with pipe:
            enc, lab = fn.readers.file(file_root=str(tmp_path), **kw)
            pipe.set_outputs(enc, lab)
        return [(os.path.basename(e.paths[0]), int(lab[0])) for e, lab in pipe]  # one epoch

    assert read() == [("x.jpg", 0), ("y.JPG", 0), ("z.pnm", 0), ("v.png", 1), ("w.jp2", 1)]
    assert read(file_filters=["*.jpg"]) == [("x.jpg", 0), ("y.JPG", 0)]
    assert read(file_filters="*.jpg", case_sensitive_filter=True) == [("x.jpg", 0)]
    assert read(file_filters=["*.txt", "v.*"]) == [("notes.txt", 0), ("v.png", 1)]


def test_dali_iterator_does_not_shard_by_rank(tmp_path):
    """Under torch.distributed, DetaugIterator shards unsharded pipelines by rank; DALI's
    iterator does not: a DALI program without shard_id reads every record on every pipeline."""
    import torch.distributed as dist

    from detaug.adapters.torch import DetaugIterator

    if not dist.is_available():
        pytest.skip("torch.distributed is not available")

    def labels_pipe():
        pipe = track(Pipeline(batch_size=8, num_threads=1, seed=0))
        with pipe:
            enc, boxes = fn.readers.voc(root=VOC, name="Reader")
            pipe.set_outputs(enc, fn.pad_boxes(boxes, max_boxes=64))
        return pipe

    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1)
    try:
        pipes = [labels_pipe(), labels_pipe()]  # two pipelines of one rank: world of 2
        it = DALIGenericIterator(pipes, ["enc", "boxes"], reader_name="Reader")
        assert [p.shard_info["num_shards"] for p in pipes] == [1, 1] and len(it) == 5
        other = [labels_pipe(), labels_pipe()]
        DetaugIterator(other, ("enc", "boxes"))
        assert [p.shard_info["shard_id"] for p in other] == [0, 1]  # detaug's own: sharded
    finally:
        dist.destroy_process_group()


def test_random_bbox_crop_keeps_drawing_without_total_num_attempts():
    """One 0.04-wide box, windows 0.03..0.06 wide, IoU >= 0.2: a round succeeds about once in
    430 (Monte Carlo), so 64 rounds crop about one sample in seven, 1024 rounds nine in ten.
    Without total_num_attempts DALI keeps drawing: detaug draws further chunks of each sample's
    stream (up to 1024 rounds), so most samples get a crop, every crop meets the threshold, and a
    sample's result does not depend on the batch it is in (batches of 40 and of 8 agree)."""
    n = 40
    box = np.array([[0.48, 0.48, 0.52, 0.52]], np.float32)

    def run(batch_size, **kw):
        pipe = track(Pipeline(batch_size=batch_size, num_threads=1, seed=11))
        with pipe:
            b = fn.external_source(source=lambda info: box, batch=False, size=n)
            pipe.set_outputs(*fn.random_bbox_crop(b, thresholds=[0.2], scaling=[0.03, 0.06],
                                                  aspect_ratio=[0.5, 2.0], allow_no_crop=False,
                                                  **kw)[:2])
        outs = [pipe.run() for _ in range(n // batch_size)]
        return np.concatenate([o[0] for o in outs]), np.concatenate([o[1] for o in outs])

    anchor, shape = run(n)
    cropped = (shape < 1).all(1)
    assert cropped.sum() >= 0.7 * n
    for lo, ext in zip(anchor[cropped], shape[cropped]):
        assert _iou(np.concatenate([lo, lo + ext]).astype(np.float64), box[0].astype(np.float64)) >= 0.2 - 1e-6
    a8, s8 = run(8)
    np.testing.assert_array_equal(anchor, a8)
    np.testing.assert_array_equal(shape, s8)
    _, limited = run(n, total_num_attempts=64)  # the first chunk only: a subset of the crops
    few = (limited < 1).all(1)
    assert few.sum() < 0.4 * n and not (few & ~cropped).any()


def _iou(a, b):
    iw = max(0.0, min(a[2], b[2]) - max(a[0], b[0]))
    ih = max(0.0, min(a[3], b[3]) - max(a[1], b[1]))
    inter = iw * ih
    return inter / ((a[2] - a[0]) * (a[3] - a[1]) + (b[2] - b[0]) * (b[3] - b[1]) - inter)


def test_coco_shards_move_in_dalis_mode_only():
    """68 images in 2 shards of 34, batch 34, unshuffled: DALI's mode (ratio=True) reads shard 1's
    images in epoch 1; detaug's own readers.coco keeps its shard."""
    root, ann = os.path.join(COCO, "images"), os.path.join(COCO, "annotations.json")

    def two_epochs(**kw):
        pipe = track(Pipeline(batch_size=34, num_threads=1, seed=0))
        with pipe:
            out = fn.readers.coco(file_root=root, annotations_file=ann, shard_id=0, num_shards=2, **kw)
            pipe.set_outputs(out[0])
        return [sorted(pipe.run()[0].paths) for _ in range(2)]

    own = two_epochs()
    dali = two_epochs(ratio=True)
    assert own[0] == own[1] == dali[0] and not set(dali[1]) & set(dali[0])


@pytest.mark.parametrize("kind,all_above", [("overlap", True), ("overlap", False), ("iou", False)])
def test_random_bbox_crop_threshold_type_and_any_box(rng, kind, all_above):
    """threshold_type='overlap' measures intersection / box area, 'iou' intersection / union;
    all_boxes_above_threshold=False needs one box to reach the threshold, True every box
    (recomputed in float64 from the outputs for every cropped sample)."""
    boxes = _boxes(rng, 8)
    t = 0.5 if kind == "overlap" else 0.1
    anchor, shape, out, idx = _fed(
        lambda b: fn.random_bbox_crop(b, thresholds=[t], threshold_type=kind,
                                      all_boxes_above_threshold=all_above, scaling=[0.3, 1.0],
                                      aspect_ratio=[0.5, 2.0], allow_no_crop=False,
                                      num_attempts=20, output_bbox_indices=True),
        [boxes], seed=int(rng.integers(1 << 30)))
    crops = below = 0
    for s in range(len(boxes)):
        lo, ext = anchor[s].astype(np.float64), shape[s].astype(np.float64)
        if (ext == 1).all():
            continue
        crops += 1
        bx = boxes[s].astype(np.float64)
        iw = np.clip(np.minimum(lo[0] + ext[0], bx[:, 2]) - np.maximum(lo[0], bx[:, 0]), 0, None)
        ih = np.clip(np.minimum(lo[1] + ext[1], bx[:, 3]) - np.maximum(lo[1], bx[:, 1]), 0, None)
        inter, area = iw * ih, (bx[:, 2] - bx[:, 0]) * (bx[:, 3] - bx[:, 1])
        m = inter / area if kind == "overlap" else inter / (ext.prod() + area - inter)
        ok = (m >= t - 1e-6).all() if all_above else (m >= t - 1e-6).any()
        assert ok, (s, m)
        iou = inter / (ext.prod() + area - inter)
        below += kind == "overlap" and bool((iou < t).all())  # passed on overlap, not on IoU
        c = (bx[:, :2] + bx[:, 2:]) / 2
        np.testing.assert_array_equal(idx[s], np.nonzero(((c >= lo) & (c <= lo + ext)).all(1))[0])
    assert crops >= 4
    assert below >= 1 or kind == "iou"
