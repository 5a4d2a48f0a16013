"""The decode cache (runtime/decode_cache.py): decoded images kept in each process making
launches, so that a pool of partners (partners='pool') decodes each image about once. It changes
no batch (cache on and off, threads and 1 or 2 host workers, random access, resume), it removes
exactly the repeated decodes (counted against the keyed draws), and it stays within its bound
(a reference LRU on fresh random images)."""
import collections
import os
import time

import numpy as np
import pytest

from detaug import fn, pipeline_def
from detaug.core.batch import EncodedBatch
from detaug.core.errors import SampleError
from detaug.ops import decode
from detaug.runtime import decode_cache, host_workers
from detaug.runtime.partners import LaunchLevels
from helpers import close_pipelines, fresh_seed, load_benchmark, track  # noqa: F401 (fixture)
from helpers.cases import assert_same_host_batch, host_batch


def yolo_pipe(root, partners="pool", **kw):
    kw.setdefault("batch_size", 4)

    @pipeline_def(seed=31, **kw)
    def p():
        enc, boxes = fn.readers.coco(annotations_file=os.path.join(root, "annotations.json"),
                                     file_root=os.path.join(root, "images"), random_shuffle=True)
        img = fn.decoders.image(enc, device="cpu")
        img, boxes = fn.mosaic(img, boxes, size=32, partners=partners)
        img, boxes = fn.mixup(img, boxes, probability=0.5, partners=partners)
        img, boxes = fn.letterbox(img, boxes, size=(32, 32))
        return img, fn.prune_boxes(boxes, min_size=1.0)
    return track(p())


def test_same_batches_with_the_cache_on_and_off(coco_small):
    off = yolo_pipe(coco_small, host_processes=0, decode_cache_mb=0)
    ref = [host_batch(off.run()) for _ in range(5)]
    assert not off.build_plan.decode_cache
    on = yolo_pipe(coco_small, host_processes=0, num_threads=2)  # the default: on for a pool
    assert on.build().build_plan.decode_cache and on.build_plan.host_cache_bytes > 0
    for i in range(5):
        assert_same_host_batch(host_batch(on.run()), ref[i])
    for i in (4, 0, 3, 1, 2):  # random access on a warm cache
        assert_same_host_batch(host_batch(on.run_batch(i)), ref[i])
    first = yolo_pipe(coco_small, host_processes=0)
    first.run()
    first.run()
    resumed = yolo_pipe(coco_small, host_processes=0)
    resumed.load_state_dict(first.state_dict())
    assert_same_host_batch(host_batch(resumed.run()), ref[2])
    for workers in (1, 2):
        many = yolo_pipe(coco_small, host_processes=workers, num_threads=workers)
        plan = many.build().build_plan
        assert (plan.worker_run, plan.prefetch_queue_depth) == ((2, 3) if workers > 1 else (1, 2))
        assert many.build_plan.host_cache_bytes == workers * sum(many.build_plan.decode_cache.values())
        for i in range(5):
            assert_same_host_batch(host_batch(many.run()), ref[i])
        # the workers make every launch after the first: this process keeps no cache beside
        # theirs (host_cache_bytes counts the workers' alone)
        assert decode_cache.caches_of(many) == {}
        assert_same_host_batch(host_batch(many.run_batch(1)), ref[1])


def decoder_records(pipe, epoch, b):
    """The records the decoder of batch ``b`` decodes without a cache (its level's samples)."""
    idx, pos, sizes = pipe.schedule.batches(epoch, b, 1)
    dec = next(op for op in pipe._needed_ops() if op.schema.has("decoder"))
    lv = LaunchLevels(pipe.graph, pipe.schedule, epoch, idx, pos, sizes)
    return lv.get(pipe.build_plan.levels.get(dec.id, ())).sample_index


def _run_drawn(pipe, n):
    """Builds ``pipe``, takes the records its decoder reads in each of batches 0..n-1
    (``decoder_records``), then runs those batches by random access in order; the records."""
    pipe.build()
    drawn = [decoder_records(pipe, 0, b) for b in range(n)]
    for b in range(n):
        pipe.run_batch(b)
    return drawn


def counting(monkeypatch):
    """The count of CPU decodes that benchmarks/bench_yolo.py reports (``counted_decodes``: a
    value the forked workers share), undone at the test's end."""
    counter, undo = load_benchmark("bench_yolo").counted_decodes()
    counted = decode._decode_one
    undo()
    monkeypatch.setattr(decode, "_decode_one", counted)  # the original back at the test's end
    return counter


@pytest.mark.parametrize("mb", [64, None])
def test_each_image_is_decoded_once_with_a_cache_that_holds_them(coco_small, monkeypatch, mb):
    """Launches made in order in one process: each drawn image decoded once, with a large
    cache and with the default (one launch's pool: the next launch's earlier positions are all
    among the last launch's decodes, partners.py)."""
    n = 6
    counter = counting(monkeypatch)
    off = yolo_pipe(coco_small, host_processes=0, decode_cache_mb=0)
    drawn = _run_drawn(off, n)
    assert counter.value == sum(len(d) for d in drawn)  # every drawn image, every launch
    counter.value = 0
    on = yolo_pipe(coco_small, host_processes=0, decode_cache_mb=mb)
    for b in range(n):
        on.run_batch(b)
    distinct = len(set(np.concatenate(drawn).tolist()))
    assert counter.value == distinct < sum(len(d) for d in drawn)
    cache, = decode_cache.caches_of(on).values()
    assert cache.misses == distinct and cache.hits == sum(len(d) for d in drawn) - distinct


def test_a_host_worker_decodes_each_image_once(coco_small, monkeypatch):
    """In a host worker process (its cache its own, made after the fork): random access sends
    every launch to the one worker, in order; each drawn image is decoded once there."""
    n = 6
    counter = counting(monkeypatch)
    pipe = yolo_pipe(coco_small, host_processes=1, decode_cache_mb=64)
    drawn = _run_drawn(pipe, n)
    assert counter.value == len(set(np.concatenate(drawn).tolist())) < sum(len(d) for d in drawn)
    assert not decode_cache.caches_of(pipe)  # (in the worker, not here)


def _pid(key, prepared):
    time.sleep(0.01)  # (the launches overlap: each worker owes some while more are given)
    return {"pid": np.array([os.getpid()])}


@pytest.mark.skipif(host_workers.unavailable() is not None, reason="no host workers here")
def test_a_group_of_launches_goes_to_one_worker():
    w = host_workers.HostWorkers(3, _pid)
    try:
        futs = [(k // 2, w.submit((0, k, 1), None, group=(0, k // 2))) for k in range(12)]
        pids = collections.defaultdict(set)
        for g, f in futs:
            pids[g].add(int(f.result(timeout=60)["pid"][0]))
        assert all(len(p) == 1 for p in pids.values())
    finally:
        w.close()


def test_the_cache_stays_within_its_bound_least_recently_used_out():
    rng = np.random.default_rng(fresh_seed())
    cap = int(rng.integers(2000, 6000))
    cache, model = decode_cache.DecodeCache(cap), collections.OrderedDict()
    keys = [cache.key(rng.integers(0, 256, int(rng.integers(1, 50)), np.uint8).tobytes(), "RGB", 1)
            for _ in range(12)]
    for _ in range(300):
        key = keys[int(rng.integers(len(keys)))]
        got = cache.get(key)
        if key in model:
            assert got is model[key]
            model.move_to_end(key)
            continue
        assert got is None
        h, w = (int(v) for v in rng.integers(1, 30, 2))
        arr = cache.put(key, rng.integers(0, 256, (h, w, 3), np.uint8))
        assert not arr.flags.writeable
        if arr.nbytes <= cap:
            model[key] = arr
            while sum(a.nbytes for a in model.values()) > cap:
                model.popitem(last=False)
        assert cache.bytes == sum(a.nbytes for a in model.values()) <= cap
        assert list(cache._entries) == list(model)


def test_a_pipeline_cache_is_bounded_by_its_setting(coco_small):
    pipe = yolo_pipe(coco_small, host_processes=0, decode_cache_mb=1)
    for _ in range(6):
        pipe.run()
    cache, = decode_cache.caches_of(pipe).values()
    assert cache.capacity == 1 << 20 and 0 < cache.bytes <= 1 << 20 and cache.hits > 0
    pipe.close()
    assert not decode_cache.caches_of(pipe)  # a closed pipeline holds no decoded image


def test_a_hit_checks_its_own_records_annotated_size():
    """Two records with the same bytes: a hit is checked against its own annotated size."""
    from PIL import Image
    import io

    buf = io.BytesIO()
    Image.fromarray(np.full((6, 8, 3), 90, np.uint8)).save(buf, format="PNG")
    data = np.frombuffer(buf.getvalue(), np.uint8)
    enc = EncodedBatch([data, data], ["a.png", "b.png"], np.array([[6, 8], [7, 8]]))
    cache = decode_cache.DecodeCache(1 << 20)
    first = decode._decode_kept(cache, enc, 0, "RGB")
    assert first.shape == (6, 8, 3) and cache.misses == 1
    with pytest.raises(SampleError, match="b.png: decoded size 8x6 differs"):
        decode._decode_kept(cache, enc, 1, "RGB")
    assert cache.hits == 1
    with pytest.raises(ValueError, match="read-only"):
        first[0, 0] = 0


def test_the_plan_default_and_refusal(coco_small):
    batch = yolo_pipe(coco_small, partners="batch", host_processes=0)
    assert not batch.build().build_plan.decode_cache  # launches share no decoded image
    assert batch.build_plan.host_cache_bytes == 0
    pool = yolo_pipe(coco_small, host_processes=0)
    (op_id, size), = pool.build().build_plan.decode_cache.items()
    # the pool's samples per output (1 + 1 + 1 batches) x 4 x the largest annotated image
    op = pool.graph.ops[op_id]
    sizes = pool._sources[op.inputs[0].op.id].sizes
    assert size == 3 * 4 * int((sizes[:, 0] * sizes[:, 1]).max()) * 3
    with pytest.raises(ValueError, match="decode_cache_mb must be >= 0"):
        yolo_pipe(coco_small, host_processes=0, decode_cache_mb=-1).build()
