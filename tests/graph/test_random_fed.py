"""Random draws are per sample whatever feeds the graph: a reader, a per-sample
callable, a batch iterable or ``feed_input`` from ``iter_setup``. A fed batch's length sets the
batch's samples (one draw each); batch b with n samples uses the sample indices
b * batch_size + arange(n), the indices a per-sample callable gives the same positions."""

import numpy as np
import pytest

from detaug import Pipeline, fn
from detaug.core.batch import BoxBatch, ImageBatch
from helpers import VOC
from helpers import close_pipelines, images_of, track  # noqa: F401 (autouse fixture)

FIXED = (0, 7)
SEEDS = pytest.mark.parametrize("seed", FIXED + (20261123,), ids=lambda s: f"seed={s}")
BS = 32
LENS = (32, 32, 10)  # the batches fed: the last one shorter
N = sum(LENS)
FED_KINDS = ("iterable", "feed", "callable")

RANDOM = ("uniform", "uniform3", "values", "coin", "normal", "choice")


def kinds_with_seeds(kinds):
    """Each kind once, the seeds taken in turn: the kind picks the code path (how the batch is
    fed), the seed only which numbers are drawn, so every kind and every seed runs, without
    the product of the two (which ran each path three times)."""
    seeds = FIXED + (20261123,)
    cases = [(k, seeds[i % len(seeds)]) for i, k in enumerate(kinds)]
    return pytest.mark.parametrize("kind,seed", cases, ids=[f"{k}-seed={s}" for k, s in cases])


def random_graph(img, bx):
    """Every random op, and every op that draws inside (crops, zoom_out) or takes draws (flip,
    colour ops, crop_mirror_normalize), on the same inputs. Returns (names, outputs)."""
    outs = {
        "uniform": fn.random.uniform(range=(-1.0, 1.0)),
        "uniform3": fn.random.uniform(range=(0.0, 1.0), shape=3),
        "values": fn.random.uniform(values=[1.0, 2.0, 3.0, 4.0]),
        "coin": fn.random.coin_flip(),
        "normal": fn.random.normal(mean=1.0, stddev=2.0),
        "choice": fn.random.choice(values=list(range(10))),
    }
    outs["flip_img"], outs["flip_box"] = fn.flip(img, bx, horizontal=fn.random.coin_flip())
    outs["zoom_img"], outs["zoom_box"] = fn.zoom_out(img, bx, ratio=(1.0, 3.0), probability=1.0)
    outs["iou_img"], outs["iou_box"] = fn.random_iou_crop(img, bx)
    outs["rrc_img"], outs["rrc_box"] = fn.random_resized_crop(img, bx, size=(12, 12))
    outs["bc_img"] = fn.brightness_contrast(img, brightness=fn.random.uniform(range=(0.5, 1.5)),
                                            contrast=fn.random.uniform(range=(0.5, 1.5)))
    outs["hsv_img"] = fn.hsv(img, hue=fn.random.uniform(range=(-40.0, 40.0)),
                             saturation=fn.random.uniform(range=(0.3, 1.0)))
    outs["cmn_img"] = fn.crop_mirror_normalize(img, mirror=fn.random.coin_flip(), crop=(16, 16),
                                               crop_pos_x=fn.random.uniform(range=(0, 1)),
                                               output_layout="HWC")
    return tuple(outs), tuple(outs.values())


def flip_graph(img, bx):
    coin = fn.random.coin_flip()
    fimg, fbx = fn.flip(img, bx, horizontal=coin)
    return ("img", "box", "coin", "fimg", "fbox"), (img, bx, coin, fimg, fbx)


# ---- sources ---------------------------------------------------------------------------------
def identical_samples(n):
    """n copies of one image (asymmetric noise) with two boxes: any difference between the
    outputs of a batch comes from its per-sample draws."""
    img = np.random.default_rng(123).integers(0, 256, (24, 32, 3), dtype=np.uint8)
    box = {"boxes": np.array([[4, 4, 20, 16], [10, 2, 30, 22]], np.float32), "labels": np.array([1, 2])}
    return [img] * n, [box] * n


def fed_batches(images, boxes, lens):
    """The samples cut into batches of the given lengths: (images, box dicts) per batch."""
    ends = np.cumsum(lens)
    return [(images[e - n:e], boxes[e - n:e]) for n, e in zip(lens, ends)]


class FeedPipe(Pipeline):
    """DALI's tutorial pattern: a Pipeline subclass whose iter_setup feeds the next batch."""

    def __init__(self, batches, graph, size=None, **kw):
        super().__init__(**kw)
        self.batches, self.graph_fn, self.size, self.fed = batches, graph, size, 0

    def define_graph(self):
        self.src = fn.external_source(num_outputs=2, size=self.size)
        self.names, outs = self.graph_fn(*self.src)
        return outs

    def iter_setup(self):
        # prefetching asks ahead of what a test runs: cycle
        self.feed_input(self.src[0], self.batches[self.fed % len(self.batches)])
        self.fed += 1


def make_pipe(kind, graph, seed, images, boxes, lens=LENS, batch_size=BS, size=None, shrink=False,
              root=VOC, **kw):
    """A CPU pipeline running ``graph`` on the samples, fed as ``kind``; returns (pipe, names).
    The reader reads the VOC tree ``root``; its images are resized to 48 x 64 first with
    ``shrink``."""
    if kind == "feed":
        pipe = FeedPipe(fed_batches(images, boxes, lens), graph, size, batch_size=batch_size,
                        seed=seed, num_threads=2, **kw)
        pipe.build()
        return track(pipe), pipe.names
    pipe = Pipeline(batch_size=batch_size, seed=seed, num_threads=2, **kw)
    with pipe:
        if kind == "iterable":
            src = fn.external_source(source=fed_batches(images, boxes, lens), num_outputs=2, size=size)
        elif kind == "callable":
            src = fn.external_source(source=lambda info: (images[info.idx_in_epoch], boxes[info.idx_in_epoch]),
                                     batch=False, num_outputs=2, size=len(images))
        else:
            assert kind == "reader"
            enc, bx = fn.readers.voc(root=root)
            src = (fn.decoders.image(enc), bx)
            src = fn.resize(*src, size=(48, 64)) if shrink else src
        names, outs = graph(*src)
        pipe.set_outputs(*outs)
    return track(pipe), names


def plain(v):
    """An output as plain host values (for equality across runs)."""
    if isinstance(v, BoxBatch):
        return [(d["boxes"], d["labels"]) for d in v.per_sample()]
    if isinstance(v, ImageBatch):
        return images_of(v)
    return np.asarray(v)


def run_batches(pipe, names, k):
    return [dict(zip(names, map(plain, pipe.run()))) for _ in range(k)]


def assert_same(a, b, what=""):
    for x, y in zip(a, b):
        assert x.keys() == y.keys()
        for k in x:
            xs, ys = x[k], y[k]
            if isinstance(xs, list):
                assert len(xs) == len(ys), (what, k)
                for u, v in zip(xs, ys):
                    for s, t in zip(u if isinstance(u, tuple) else (u,), v if isinstance(v, tuple) else (v,)):
                        np.testing.assert_array_equal(s, t, err_msg=f"{what} {k}")
            else:
                np.testing.assert_array_equal(xs, ys, err_msg=f"{what} {k}")


def n_distinct(items):
    """Distinct entries of a list of arrays (or tuples of arrays)."""
    key = lambda x: tuple(np.asarray(a).tobytes() + str(np.shape(a)).encode()
                          for a in (x if isinstance(x, tuple) else (x,)))
    return len({key(x) for x in items})


# ---- one draw per sample ---------------------------------------------------------------------
def check_per_sample_draws(out, n):
    """Random ops: shape (n, *shape), draws that differ across the samples of the batch."""
    assert out["uniform"].shape == (n,) and out["normal"].shape == (n,)
    assert out["uniform3"].shape == (n, 3) and out["values"].shape == (n,)
    assert out["coin"].shape == (n,) and out["choice"].shape == (n,)
    # distinct float32 draws (one coincidence allowed: 2^-24 resolution)
    assert len(np.unique(out["uniform"])) >= n - 1 and len(np.unique(out["normal"])) >= n - 1
    assert len(np.unique(out["uniform3"])) >= 3 * n - 1
    assert len(np.unique(out["coin"])) == 2 and len(np.unique(out["choice"])) > 1
    assert len(np.unique(out["values"])) > 1
    assert -1 <= out["uniform"].min() and out["uniform"].max() < 1


def check_ops_batch(out, n):
    """Ops that draw inside or take draws: one output per sample."""
    for k in ("flip", "zoom", "iou", "rrc"):
        assert len(out[f"{k}_img"]) == n and len(out[f"{k}_box"]) == n, k
    for k in ("bc_img", "hsv_img", "cmn_img"):
        assert len(out[k]) == n, k
    assert all(a.shape == (12, 12, 3) for a in out["rrc_img"])


@kinds_with_seeds(FED_KINDS)
def test_fed_batches_draw_per_sample(kind, seed):
    """The same image in every sample: random ops have one draw per sample, and the ops that draw
    inside (zoom_out, random_iou_crop, random_resized_crop) or take per-sample draws (flip,
    brightness_contrast, hsv, crop_mirror_normalize) give samples of the batch different
    outputs; the last, shorter batch has its own length."""
    images, boxes = identical_samples(N)
    pipe, names = make_pipe(kind, random_graph, seed, images, boxes,
                            last_batch_policy="partial")
    got = run_batches(pipe, names, len(LENS))
    for out, n in zip(got, LENS):
        check_per_sample_draws(out, n)
        check_ops_batch(out, n)
    full = got[0]
    assert n_distinct(full["flip_img"]) == 2  # flipped or not
    assert n_distinct([a.shape for a in full["zoom_img"]]) > 1
    assert n_distinct(full["zoom_box"]) > 1
    assert n_distinct([a.shape for a in full["iou_img"]]) > 1
    assert n_distinct(full["rrc_img"]) > BS // 2 and n_distinct(full["rrc_box"]) > BS // 2
    assert n_distinct(full["bc_img"]) > BS // 2 and n_distinct(full["hsv_img"]) > BS // 2
    assert n_distinct(full["cmn_img"]) > 2
    # batches draw differently (keys b * batch_size + arange(n))
    assert not np.array_equal(got[0]["uniform"], got[1]["uniform"])


@SEEDS
def test_reader_draws_per_sample(seed, voc_small):
    """For comparison, the reader: the same shapes and per-sample draws. One batch is read, so
    nothing is prefetched beyond it (worker processes would make launches nobody reads; the same
    batches for any settings is tested on its own). The VOC sample at 1/8 of its size
    (conftest.voc_small): the ops' outputs are checked for shapes and draws, not pixels, and the
    full-size images cost a supersampled warp of the whole photograph per op and sample."""
    quiet = dict(host_processes=0, prefetch_queue_depth=1)
    pipe, names = make_pipe("reader", random_graph, seed, None, None, shrink=True, root=voc_small,
                            **quiet)
    out = run_batches(pipe, names, 1)[0]
    check_per_sample_draws(out, BS)
    check_ops_batch(out, BS)
    again, names = make_pipe("reader", random_graph, seed, None, None, shrink=True,
                             root=voc_small, **quiet)
    assert_same([out], run_batches(again, names, 1), "reader rerun")


@kinds_with_seeds(FED_KINDS)
def test_fed_draws_are_deterministic(kind, seed):
    """Two runs of the same pipeline over the same data give identical draws and outputs."""
    images, boxes = identical_samples(N)
    runs = [run_batches(*make_pipe(kind, random_graph, seed, images, boxes,
                                   last_batch_policy="partial"), len(LENS)) for _ in range(2)]
    assert_same(runs[0], runs[1], f"{kind} rerun")
    other = run_batches(*make_pipe(kind, random_graph, seed + 1, images, boxes,
                                   last_batch_policy="partial"), 1)
    assert not np.array_equal(other[0]["uniform"], runs[0][0]["uniform"])


@SEEDS
def test_fed_draws_equal_per_sample_callable(seed):
    """The designed equivalence: with the same seed and graph, a fed batch's sample k of batch b
    draws what a per-sample callable gives position b * batch_size + k (unshuffled, one shard),
    the last, shorter batch included: all outputs are equal, for an iterable, feed_input and a
    sized iterable."""
    images, boxes = identical_samples(N)
    ref = run_batches(*make_pipe("callable", random_graph, seed, images, boxes,
                                 last_batch_policy="partial"), len(LENS))
    for kind, size in (("iterable", None), ("feed", None), ("iterable", N), ("feed", N)):
        got = run_batches(*make_pipe(kind, random_graph, seed, images, boxes, size=size,
                                     last_batch_policy="partial"), len(LENS))
        assert_same(ref, got, f"{kind} size={size} vs callable")


# ---- pixels and boxes follow each sample's own coin -------------------------------------------
@kinds_with_seeds(FED_KINDS + ("reader",))
def test_flip_follows_each_samples_coin(kind, seed):
    """16 asymmetric images: each output image is its own input flipped exactly when ITS coin is
    1, and its boxes are x -> W - x exactly there (unchanged elsewhere)."""
    rng = np.random.default_rng(seed)
    b = 16
    shapes = [(int(rng.integers(8, 20)), int(rng.integers(8, 20)), 3) for _ in range(b)]
    images = [rng.integers(0, 256, s, dtype=np.uint8) for s in shapes]
    boxes = []
    for h, w, _ in shapes:
        x = np.sort(rng.uniform(0, w, (3, 2)), 1)
        y = np.sort(rng.uniform(0, h, (3, 2)), 1)
        boxes.append({"boxes": np.stack([x[:, 0], y[:, 0], x[:, 1], y[:, 1]], -1).astype(np.float32),
                      "labels": np.arange(3)})
    pipe, names = make_pipe(kind, flip_graph, seed, images, boxes, lens=(b,), batch_size=b)
    out = run_batches(pipe, names, 1)[0]
    coin = out["coin"]
    assert coin.shape == (b,) and set(np.unique(coin)) <= {0, 1}
    if seed in FIXED:
        assert 0 < coin.sum() < b, "both outcomes in a batch of 16"
    for k in range(b):
        src, got = out["img"][k], out["fimg"][k]
        assert not np.array_equal(src, src[:, ::-1]), "asymmetric input"
        np.testing.assert_array_equal(got, src[:, ::-1] if coin[k] else src, err_msg=f"sample {k}")
        (bx, lab), (fbx, flab) = out["box"][k], out["fbox"][k]
        w = np.float32(src.shape[1])
        exp = np.stack([w - bx[:, 2], bx[:, 1], w - bx[:, 0], bx[:, 3]], -1) if coin[k] else bx
        np.testing.assert_array_equal(fbx, exp, err_msg=f"boxes of sample {k}")
        np.testing.assert_array_equal(flab, lab)


# ---- the fed batch size rule -----------------------------------------------------------------
def random_only(img, bx):
    return ("uniform", "coin"), (fn.random.uniform(), fn.random.coin_flip())


@pytest.mark.parametrize("policy", ["fill", "partial"])
def test_sized_iterable_last_batch_sets_its_size(policy):
    """An iterable given size=: a shorter last batch than the schedule's (fill pads to
    batch_size) has its own length and the indices of its positions."""
    images, boxes = identical_samples(N)
    got = run_batches(*make_pipe("iterable", random_only, 3, images, boxes, size=N,
                                 last_batch_policy=policy), 3)
    ref = run_batches(*make_pipe("callable", random_only, 3, images, boxes,
                                 last_batch_policy="partial"), 3)
    assert [len(o["uniform"]) for o in got] == list(LENS)
    assert_same(ref, got, policy)


def test_sized_iterable_drop_policy():
    images, boxes = identical_samples(N)
    pipe, names = make_pipe("iterable", random_only, 3, images, boxes, size=N, last_batch_policy="drop")
    assert len(pipe) == 2 and [len(o["uniform"]) for o in run_batches(pipe, names, 2)] == [BS, BS]
    with pytest.raises(StopIteration):
        pipe.run()


@pytest.mark.parametrize("kind", ["iterable", "feed"])
def test_fed_batch_larger_than_batch_size_raises(kind):
    """batch_size is the most a fed batch may hold: batch b's sample indices are
    b * batch_size + arange(n), so a longer batch would draw what batch b + 1 draws."""
    images, boxes = identical_samples(40)
    pipe, names = make_pipe(kind, random_only, 0, images, boxes, lens=(40,))
    with pytest.raises(ValueError, match="batch 0 of epoch 0 was fed 40 samples, more than the 32"):
        pipe.run()


def test_fed_batch_larger_than_sized_schedule_raises():
    """size=74, batch_size=32, partial: the last batch has room for 10; 12 fed raise."""
    images, boxes = identical_samples(N + 2)
    pipe, names = make_pipe("iterable", random_only, 0, images, boxes, lens=(32, 32, 12), size=N,
                            last_batch_policy="partial")
    run_batches(pipe, names, 2)
    with pytest.raises(ValueError, match=r"batch 2 of epoch 0 was fed 12 samples, more than the 10 .*"
                                         r"size=74, last_batch_policy='partial'"):
        pipe.run()


def test_outputs_of_different_lengths_raise_naming_the_source():
    images, boxes = identical_samples(8)
    pipe = track(Pipeline(batch_size=8, seed=0))
    with pipe:
        img, bx = fn.external_source(source=[(images, boxes[:7])], num_outputs=2, name="pairs")
        pipe.set_outputs(img, bx, fn.random.uniform())
    with pytest.raises(ValueError, match=r"pairs: its outputs were fed batches of different sizes \[8, 7\]"):
        pipe.run()


def test_two_fed_sources_of_different_sizes_raise():
    images, boxes = identical_samples(8)
    pipe = track(Pipeline(batch_size=8, seed=0))
    with pipe:
        img = fn.external_source(source=[images], name="imgs")
        bx = fn.external_source(source=[boxes[:6]], name="boxes")
        pipe.set_outputs(img, bx, fn.random.uniform())
    with pytest.raises(ValueError, match="'imgs' and 'boxes' were fed batches of different sizes"):
        pipe.run()


@pytest.mark.parametrize("kind", ["iterable", "feed"])
def test_batches_per_launch_with_fed_batches(kind):
    """A sized fed source run two batches per launch: each batch of the launch takes its own fed
    batch (iter_setup runs once per batch) and the batches equal the one-at-a-time ones."""
    images, boxes = identical_samples(N)
    one = run_batches(*make_pipe(kind, random_graph, 5, images, boxes, size=N,
                                 last_batch_policy="partial"), 3)
    two = run_batches(*make_pipe(kind, random_graph, 5, images, boxes, size=N,
                                 last_batch_policy="partial", batches_per_launch=2), 3)
    assert_same(one, two, f"{kind} batches_per_launch=2")


def test_iterable_epochs_draw_anew_and_replay():
    """A re-iterated iterable's next epoch draws new values (the epoch is in the key), and
    another pipeline with the same seed replays both epochs."""
    images, boxes = identical_samples(N)

    def two_epochs():
        pipe, names = make_pipe("iterable", random_only, 9, images, boxes)
        first = run_batches(pipe, names, 3)
        with pytest.raises(StopIteration):
            pipe.run()
        pipe.reset()
        return first, run_batches(pipe, names, 3)

    a, b = two_epochs(), two_epochs()
    assert not np.array_equal(a[0][0]["uniform"], a[1][0]["uniform"])
    assert_same(a[0] + a[1], b[0] + b[1], "epochs replay")


def test_iterable_ending_inside_a_launch_keeps_its_batches():
    """size= overstating the iterable (4 batches announced, 3 given) with two batches per
    launch: the launch the iterable ends in keeps the batch it got, then the epoch ends."""
    images, boxes = identical_samples(3 * BS)
    pipe, names = make_pipe("iterable", random_only, 4, images, boxes, lens=(BS,) * 3, size=4 * BS,
                            batches_per_launch=2)
    got = run_batches(pipe, names, 3)
    with pytest.raises(StopIteration):
        pipe.run()
    ref = run_batches(*make_pipe("callable", random_only, 4, images, boxes), 3)
    assert_same(ref, got, "iterable ending inside a launch")


def test_array_batches_set_the_batch_size():
    """A fed batch may be one array, its samples along axis 0."""
    arrays = [np.random.default_rng(k).integers(0, 256, (n, 6, 8, 3), dtype=np.uint8)
              for k, n in enumerate((8, 5))]
    pipe = track(Pipeline(batch_size=8, seed=2))
    with pipe:
        img = fn.external_source(source=arrays)
        pipe.set_outputs(img, fn.random.uniform(shape=2))
    for a in arrays:
        out, u = pipe.run()
        np.testing.assert_array_equal(np.asarray(out.data), a)
        assert u.shape == (len(a), 2) and len(np.unique(u)) == 2 * len(a)


def test_load_state_dict_mid_epoch_refused_for_an_iterable_source():
    """An iterable cannot be rewound: resuming mid-epoch raises (it used to restart at the
    iterable's first batch with batch k's keys, silently); at an epoch start it resumes."""
    import numpy as np

    from detaug import Pipeline, fn

    data = [[np.full((4, 4, 3), k, np.uint8) for _ in range(2)] for k in range(3)]

    def make():
        pipe = Pipeline(batch_size=2, num_threads=1, seed=1)
        with pipe:
            pipe.set_outputs(fn.external_source(source=data, name="it"))
        pipe.build()
        return pipe

    pipe = make()
    pipe.run()
    state = pipe.state_dict()
    assert state["batch"] == 1
    other = make()
    with pytest.raises(ValueError, match="'it' is fed whole batches"):
        other.load_state_dict(state)
    other.load_state_dict({**state, "batch": 0})
    (out,) = other.run()
    assert (np.asarray(out.data[0]) == 0).all()
    pipe.close()
    other.close()
