"""Engine: determinism, resume, epochs, shards, last batch, bad files, DALI styles, export."""
import collections
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest

from detaug import Pipeline, fn, ops, pipeline_def
from detaug.core.errors import SampleError
from detaug.ops.registry import REGISTRY
from helpers import REPO, TESTS, COCO, VOC


@pipeline_def
def det_pipe(root, shuffle=True, on_error="raise"):
    enc, boxes = fn.readers.voc(root=root, random_shuffle=shuffle, on_error=on_error)
    img = fn.decoders.image(enc)
    img, boxes = fn.random_iou_crop(img, boxes)
    img, boxes = fn.flip(img, boxes, horizontal=fn.random.coin_flip())
    img, boxes = fn.rotate(img, boxes, angle=fn.random.uniform(range=(-10, 10)))
    img, boxes = fn.resize(img, boxes, size=(64, 64))
    boxes = fn.prune_boxes(boxes, min_size=1)
    img = fn.normalize(img, mean=[124, 116, 104], std=[58, 57, 57], output_layout="CHW")
    return img, fn.pad_boxes(boxes, max_boxes=20)


def batches(pipe, n):
    out = []
    for _ in range(n):
        img, pb = pipe.run()
        out.append((np.array(img.data), {k: np.array(v) for k, v in pb.items()}))
    return out


def same(a, b):
    for (ia, ba), (ib, bb) in zip(a, b):
        np.testing.assert_array_equal(ia, ib)
        for k in ba:
            np.testing.assert_array_equal(ba[k], bb[k])


# Tests that compare pipelines with each other (threads, depth, resume, random access, launches
# of several batches) read conftest.voc_small, the VOC sample at 1/8 size: their outputs are 64 or
# 48 px either way, and full-size photographs only cost decode and warp time.
def test_same_seed_same_batches_whatever_threads_or_depth(voc_small):
    p1 = det_pipe(voc_small, batch_size=4, num_threads=1, prefetch_queue_depth=1, seed=7)
    p4 = det_pipe(voc_small, batch_size=4, num_threads=4, prefetch_queue_depth=3, seed=7)
    same(batches(p1, 4), batches(p4, 4))
    p_other = det_pipe(voc_small, batch_size=4, num_threads=2, seed=8)
    assert not np.array_equal(batches(p_other, 1)[0][0], batches(det_pipe(voc_small, batch_size=4, seed=7), 1)[0][0])


def test_state_dict_resumes_at_exactly_the_next_batch(voc_small):
    p = det_pipe(voc_small, batch_size=4, num_threads=2, seed=3)
    batches(p, 3)
    state = p.state_dict()
    expected = batches(p, 2)
    q = det_pipe(voc_small, batch_size=4, num_threads=2, seed=3)
    q.load_state_dict(state)
    same(batches(q, 2), expected)
    # across an epoch boundary too
    p.reset()
    state = p.state_dict()
    first = batches(p, 1)
    q.load_state_dict(state)
    same(batches(q, 1), first)


def test_run_batch_random_access_matches_iteration(voc_small):
    p = det_pipe(voc_small, batch_size=8, num_threads=2, seed=5)
    seq = batches(p, 5)
    q = det_pipe(voc_small, batch_size=8, num_threads=2, seed=5)
    for i in (3, 0, 4):
        img, pb = q.run_batch(i)
        np.testing.assert_array_equal(np.array(img.data), seq[i][0])
        np.testing.assert_array_equal(np.array(pb["boxes"]), seq[i][1]["boxes"])


def _reader_only(root, **kw):
    pipe = Pipeline(batch_size=kw.pop("batch_size"), num_threads=1, seed=kw.pop("seed", 0),
                    last_batch_policy=kw.pop("last_batch_policy", "fill"))
    with pipe:
        enc, boxes = fn.readers.voc(root=root, **kw)
        pipe.set_outputs(enc, boxes)
    return pipe


def _paths(pipe):
    out = []
    for enc, _ in pipe:
        out.append([os.path.basename(p) for p in enc.paths])
    return out


@pytest.mark.parametrize("policy,sizes", [("fill", [16, 16, 16]), ("drop", [16, 16]), ("partial", [16, 16, 8])])
def test_last_batch_policy(policy, sizes):
    p = _reader_only(VOC, batch_size=16, last_batch_policy=policy)
    got = _paths(p)
    assert [len(b) for b in got] == sizes
    assert len(p) == len(sizes)
    flat = [x for b in got for x in b]
    assert len(set(flat)) == (32 if policy == "drop" else 40)
    if policy == "fill":
        assert got[-1][8:] == got[0][:8]  # wraps around the shard's order


def test_shuffle_changes_per_epoch_and_shards_agree():
    shards = [_reader_only(VOC, batch_size=5, random_shuffle=True, shard_id=s, num_shards=2, seed=9)
              for s in range(2)]
    for epoch in range(2):
        seen = [x for p in shards for b in _paths(p) for x in b]
        assert sorted(seen) == sorted(set(seen)) and len(seen) == 40
        if epoch == 0:
            first = seen
        for p in shards:
            p.reset()
    assert seen != first
    assert shards[0].epoch_size() == 40 and shards[0].shard_size() == 20


def test_epoch_end_and_reset():
    p = _reader_only(VOC, batch_size=16)
    assert len(_paths(p)) == 3
    with pytest.raises(StopIteration):  # iterating ends with the epoch (run() wraps around)
        next(p)
    p.reset()
    assert p.run()[0].paths


def _epoch_probe(seed):
    """Reader and one random draw a sample, no decode (cheap): a batch names its records (the
    epoch's keyed shuffle) and the draws keyed by (seed, epoch, sample). 40 records in 7 batches
    of 6, launches of 2 batches, 2 launches in flight: the next epoch's first launch is made while
    this epoch's last batches are handed out."""
    pipe = Pipeline(batch_size=6, num_threads=1, seed=seed, batches_per_launch=2,
                    prefetch_queue_depth=2)
    with pipe:
        enc, boxes = fn.readers.voc(root=VOC, random_shuffle=True)
        pipe.set_outputs(enc, boxes, fn.random.uniform(range=(0, 1)))
    return pipe


def _probe(out):
    enc, boxes, draw = out
    return ([os.path.basename(p) for p in enc.paths], np.array(boxes.boxes), np.array(boxes.labels),
            np.array(draw))


def _same_probes(got, want):
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert g[0] == w[0]
        for a, b in zip(g[1:], w[1:]):
            np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("seed", [5, "fresh"])
def test_end_epoch_mid_way_starts_the_next_epoch_at_its_first_batch(seed, monkeypatch):
    """``end_epoch()`` after k of the 7 batches (k = 0, at a launch's split, at a launch's edge,
    the last but one, all 7): the pipeline is at batch 0 of the next epoch, and its batches are
    those of a fresh pipeline reset to that epoch. The next epoch's launches made before the end
    are kept: no launch is made twice."""
    from detaug.runtime import executor

    if seed == "fresh":
        seed = int.from_bytes(os.urandom(4), "little")
        print(f"seed {seed}")
    made, submit = [], executor.Executor.submit

    def spy(self, key):
        if self.p is pipe:
            made.append(key)
        return submit(self, key)

    monkeypatch.setattr(executor.Executor, "submit", spy)

    def fresh(epoch, k):
        ref = _epoch_probe(seed)
        for _ in range(epoch):
            ref.reset()
        out = [_probe(ref.run()) for _ in range(k)]
        ref.close()
        return out

    pipe = _epoch_probe(seed)
    ends = [3, 0, 1, 2, 6, 7, 5]
    assert len(pipe) == 7
    for epoch, k in enumerate(ends):
        assert (pipe.epoch, pipe.state_dict()["batch"]) == (epoch, 0)
        _same_probes([_probe(pipe.run()) for _ in range(k)], fresh(epoch, k))
        if k == 6:  # the next epoch's first launch is already made: end_epoch keeps it
            assert any(key[:2] == (epoch + 1, 0) for key in made)
        pipe.end_epoch()
    assert (pipe.epoch, pipe.state_dict()["batch"]) == (len(ends), 0)
    _same_probes([_probe(pipe.run()) for _ in range(3)], fresh(len(ends), 3))
    assert len(made) == len(set(made)), made
    assert made[0] == (0, 0, 2) and (len(ends), 0, 2) in made
    pipe.close()


def test_end_epoch_before_the_first_run_and_under_iteration():
    """Before anything ran (no launch in flight) end_epoch() moves to epoch 1; iterating the
    pipeline then ends with epoch 1's 7 batches, the batches of random access."""
    pipe, ref = _epoch_probe(3), _epoch_probe(3)
    pipe.end_epoch()
    assert pipe.epoch == 1
    got = [_probe(b) for b in pipe]
    _same_probes(got, [_probe(ref.run_batch(b, epoch=1)) for b in range(7)])
    pipe.close()
    ref.close()


def _corrupt_voc(tmp_path):
    root = tmp_path / "voc"
    shutil.copytree(VOC, root)
    victim = sorted(os.listdir(root / "JPEGImages"))[3]
    data = (root / "JPEGImages" / victim).read_bytes()
    (root / "JPEGImages" / victim).write_bytes(data[:len(data) // 3])
    return str(root), victim


def test_corrupt_jpeg_error_names_the_file(tmp_path):
    root, victim = _corrupt_voc(tmp_path)
    p = det_pipe(root, shuffle=False, batch_size=8, seed=0)
    with pytest.raises(SampleError, match=victim):
        for _ in p:
            pass


def test_corrupt_jpeg_skipped_and_counted(tmp_path):
    root, victim = _corrupt_voc(tmp_path)
    pipe = Pipeline(batch_size=8, num_threads=2, seed=0, on_error="skip")
    with pipe:
        enc, boxes = fn.readers.voc(root=root)
        img = fn.decoders.image(enc)
        pipe.set_outputs(img, boxes, enc)
    n = 0
    with pytest.warns(UserWarning, match=victim):
        for img, boxes, enc in pipe:
            assert img.batch_size == 8
            assert victim not in [os.path.basename(p) for p in enc.paths]
            n += 1
    assert n == 5
    assert pipe.stats["skipped"] == 1 and victim in pipe.stats["skipped_files"][0][0]


def test_worker_exception_reaches_caller_without_hang():
    def src(info):
        if info.idx_in_epoch == 5:
            raise RuntimeError("boom in sample 5")
        return (np.zeros((4, 4, 3), np.uint8),)

    pipe = Pipeline(batch_size=4, num_threads=2, seed=0, prefetch_queue_depth=3)
    with pipe:
        pipe.set_outputs(fn.flip(fn.external_source(source=src, batch=False, size=12)))
    pipe.run()
    with pytest.raises(RuntimeError, match="boom in sample 5"):
        pipe.run()


class OldStyle(Pipeline):
    def __init__(self, root, **kw):
        super().__init__(**kw)
        self.reader = ops.readers.VOC(root=root)
        self.decode = ops.decoders.Image(output_type="RGB")
        self.coin = ops.random.CoinFlip(probability=0.5)
        self.flip = ops.Flip()
        self.resize = ops.Resize(size=(32, 32))

    def define_graph(self):
        enc, boxes = self.reader()
        img = self.decode(enc)
        img, boxes = self.flip(img, boxes, horizontal=self.coin())
        return self.resize(img, boxes)


def test_old_style_equals_functional():
    old = OldStyle(VOC, batch_size=4, seed=2)
    old.build()

    @pipeline_def(batch_size=4, seed=2)
    def new(root):
        enc, boxes = fn.readers.voc(root=root)
        img = fn.decoders.image(enc, output_type="RGB")
        img, boxes = fn.flip(img, boxes, horizontal=fn.random.coin_flip(probability=0.5))
        return fn.resize(img, boxes, size=(32, 32))

    a, b = old.run(), new(VOC).run()
    np.testing.assert_array_equal(np.array(a[0].data), np.array(b[0].data))
    for x, y in zip(a[1].per_sample(), b[1].per_sample()):
        np.testing.assert_array_equal(x["boxes"], y["boxes"])


class FeedPipe(Pipeline):
    def __init__(self, data, **kw):
        super().__init__(**kw)
        self.data = data
        self.src = ops.ExternalSource()
        self.flip = ops.Flip(horizontal=1)

    def define_graph(self):
        self.images = self.src()
        return self.flip(self.images)

    def iter_setup(self):
        self.feed_input(self.images, self.data)


def test_feed_input_iter_setup():
    imgs = [np.arange(24, dtype=np.uint8).reshape(2, 4, 3) + k for k in range(3)]
    p = FeedPipe(imgs, batch_size=3)
    out = p.run()[0]
    for k in range(3):
        np.testing.assert_array_equal(out.data[k], imgs[k][:, ::-1])


def test_external_source_iterable():
    batches_in = [[np.full((2, 3, 3), v, np.uint8)] * 2 for v in (1, 2, 3)]
    pipe = Pipeline(batch_size=2, seed=0)
    with pipe:
        pipe.set_outputs(fn.external_source(source=iter(batches_in)))
    vals = [int(np.array(pipe.run()[0].data).max()) for _ in range(3)]
    assert vals == [1, 2, 3]


def test_dot_file_and_serialize_roundtrip_in_another_process(tmp_path):
    p = det_pipe(VOC, batch_size=4, seed=11)
    dot = tmp_path / "g.dot"
    p.save_graph_to_dot_file(str(dot))
    text = dot.read_text()
    assert "readers.voc (cpu)" in text and "random_iou_crop" in text and "->" in text
    blob = tmp_path / "pipe.bin"
    blob.write_bytes(p.serialize())
    expected = np.array(p.run()[0].data)
    script = (f"import numpy as np, detaug; p = detaug.Pipeline.deserialize(open({str(blob)!r}, 'rb').read()); "
              f"np.save({str(tmp_path / 'out.npy')!r}, np.array(p.run()[0].data))")
    subprocess.run([sys.executable, "-c", script], check=True, cwd=tmp_path)
    np.testing.assert_array_equal(np.load(tmp_path / "out.npy"), expected)


def test_coco_reader_pipeline_keeps_fields_aligned():
    import json

    with open(os.path.join(COCO, "annotations.json")) as f:
        ann = json.load(f)
    by_id = {a["id"]: a for a in ann["annotations"]}
    pipe = Pipeline(batch_size=8, seed=4, num_threads=2)
    with pipe:
        enc, boxes = fn.readers.coco(file_root=os.path.join(COCO, "images"),
                                     annotations_file=os.path.join(COCO, "annotations.json"))
        img = fn.decoders.image(enc)
        img, boxes = fn.random_iou_crop(img, boxes)
        img, boxes = fn.flip(img, boxes, horizontal=1)
        boxes = fn.prune_boxes(boxes, min_size=4)
        pipe.set_outputs(img, boxes)
    cats = sorted(c["id"] for c in ann["categories"])
    for _ in range(3):
        img, boxes = pipe.run()
        for s in boxes.per_sample():
            for lab, aid, bx in zip(s["labels"], s["annotation_id"], s["boxes"]):
                assert cats[lab] == by_id[int(aid)]["category_id"]
                assert bx[2] - bx[0] >= 4 and bx[3] - bx[1] >= 4


def test_every_registered_op_is_covered_by_a_test():
    """STYLE 6: a new op without a test entry fails here."""
    text = "".join(open(os.path.join(d, f)).read() for d, _, files in os.walk(TESTS)
                   for f in files if f.endswith(".py"))
    missing = [n for n in REGISTRY if not n.startswith("_")
               and f"fn.{n}(" not in text and f'"{n}"' not in text]
    assert not missing, f"ops without a test: {missing}"


def test_readme_op_table_matches_registry():
    import re

    from detaug.ops.registry import op_table_markdown

    readme = open(os.path.join(REPO, "README.md")).read()
    table = re.search(r"<!-- op-table -->\n(.*)\n<!-- /op-table -->", readme, re.S).group(1)
    assert table == op_table_markdown(), "README's op table is stale: python -m detaug.ops.registry"


def test_readme_example_runs_on_the_cpu():
    """The README's example, as written, with its two GPU settings turned to the CPU (its decoder
    takes device="auto"; tests/frontends/test_readme_examples.py runs it exactly as printed)."""
    import re

    readme = open(os.path.join(REPO, "README.md")).read()
    code = re.search(r"## Example\n\n```python\n(.*?)```", readme, re.S).group(1)
    assert 'device="auto"' in code and "device_id=0" in code
    code = code.replace(', device="auto"', "").replace(" device_id=0,", "")
    code = code.replace('"examples/data/voc-mini"', repr(VOC)).replace("batch_size=64", "batch_size=8")
    ns = {"__name__": "__main__"}
    exec(compile(code, "README.md", "exec"), ns)
    images, boxes = ns["images"], ns["boxes"]
    assert images.data.shape == (8, 3, 640, 640) and images.data.dtype == np.float32
    assert boxes["boxes"].shape == (8, 100, 4) and boxes["counts"].shape == (8,)


def test_import_detaug_needs_only_core_dependencies():
    """`import detaug` (and building a CPU pipeline) imports neither cupy, torch nor keras."""
    code = ("import sys, detaug\n"
            "from detaug import fn, Pipeline\n"
            f"p = Pipeline(batch_size=2, seed=0)\n"
            "with p:\n"
            f"    e, b = fn.readers.voc(root={VOC!r})\n"
            "    p.set_outputs(*fn.flip(fn.decoders.image(e), b))\n"
            "p.run()\n"
            "bad = [m for m in ('cupy', 'torch', 'keras', 'nvidia') if m in sys.modules]\n"
            "assert not bad, bad\n")
    subprocess.run([sys.executable, "-c", code], check=True)


@pytest.mark.parametrize("policy", ["fill", "partial", "drop"])
def test_batches_per_launch_gives_the_same_batches(policy, voc_small):
    """Running 3 batches through the graph together and splitting them gives exactly the batches
    of the one-at-a-time pipeline: images, padded boxes (at a fixed width, and each batch as
    wide as its own most boxes), boxes, labels, fields, epochs."""
    def make(k):
        pipe = Pipeline(batch_size=6, num_threads=2, seed=21, batches_per_launch=k,
                        last_batch_policy=policy)
        with pipe:
            enc, boxes = fn.readers.voc(root=voc_small, random_shuffle=True)
            img = fn.decoders.image(enc)
            img, boxes = fn.random_iou_crop(img, boxes)
            img, boxes = fn.flip(img, boxes, horizontal=fn.random.coin_flip())
            img, boxes = fn.resize(img, boxes, size=(48, 48))
            boxes = fn.prune_boxes(boxes, min_size=1)
            pipe.set_outputs(fn.normalize(img, mean=100, std=50, output_layout="CHW"), boxes,
                             fn.pad_boxes(boxes, max_boxes=12), fn.random.uniform(), enc,
                             fn.pad_boxes(boxes))  # as wide as the batch's own most boxes
        return pipe

    one, three = make(1), make(3)
    for epoch in range(2):
        got = 0
        for a, b in zip(one, three):
            np.testing.assert_array_equal(np.asarray(a[0].data), np.asarray(b[0].data))
            for x, y in zip(a[1].per_sample(), b[1].per_sample()):
                for k in x:
                    np.testing.assert_array_equal(x[k], y[k])
            for k in a[2]:
                np.testing.assert_array_equal(a[2][k], b[2][k])
            np.testing.assert_array_equal(a[3], b[3])
            assert a[4].paths == b[4].paths
            assert a[5]["boxes"].shape == b[5]["boxes"].shape
            for k in a[5]:
                np.testing.assert_array_equal(a[5][k], b[5][k])
            got += 1
        assert got == len(one) and three.state_dict()["batch"] == len(one)
        with pytest.raises(StopIteration):
            next(three)
        one.reset()
        three.reset()


def test_prefetch_and_device_worker_defaults_and_serialized_arguments():
    """CPU pipelines keep 2 launches in flight; device_workers follows the prefetch depth up to 6;
    serialize() keeps the arguments as given (None stays None: the defaults are resolved again
    where the pipeline is rebuilt)."""
    import json

    p = det_pipe(VOC, batch_size=4, seed=11)
    p.build()
    assert (p.prefetch_queue_depth, p.device_workers) == (2, 2)
    params = json.loads(p.serialize())["params"]
    assert params["prefetch_queue_depth"] is None and params["device_workers"] is None
    assert [Pipeline(prefetch_queue_depth=d).device_workers for d in (1, 5, 9)] == [1, 5, 6]
    assert Pipeline(prefetch_queue_depth=9, device_workers=2).device_workers == 2
    q = det_pipe(VOC, batch_size=4, seed=1, prefetch_queue_depth=3)
    assert q.prefetch_queue_depth == 3
    assert json.loads(q.serialize())["params"]["prefetch_queue_depth"] == 3


def test_an_interrupt_while_the_queue_is_cleared_is_raised_not_swallowed():
    """Executor.clear (reset(), close()) waits for every queued launch. A Ctrl-C during that
    wait (here: a launch whose wait raises KeyboardInterrupt) is raised once the queue is
    cleared. It was swallowed with the launches' own failures, and a training loop that called
    reset() ran on (seen: tests/runtime/test_host_workers.py's Ctrl-C case timed out in CI). Every launch
    is still waited for, and failures of launches nobody will see stay quiet."""
    from detaug.runtime.executor import Executor

    class Fut:
        def __init__(self, exc):
            self.exc, self.waited = exc, False

        def cancel(self):
            return False

        def result(self):
            self.waited = True
            if self.exc is not None:
                raise self.exc

    ex = Executor.__new__(Executor)
    ex.device_pool = None
    futs = [Fut(RuntimeError("a failed launch")), Fut(KeyboardInterrupt()), Fut(None),
            Fut(KeyboardInterrupt())]
    ex.queue = collections.deque(((0, k, 1), f, None) for k, f in enumerate(futs))
    with pytest.raises(KeyboardInterrupt):
        ex.clear()
    assert all(f.waited for f in futs) and not ex.queue
    futs = [Fut(RuntimeError("a failed launch")), Fut(None)]
    ex.queue = collections.deque(((0, k, 1), f, None) for k, f in enumerate(futs))
    ex.clear()  # no interrupt: nothing raised
    assert all(f.waited for f in futs) and not ex.queue
