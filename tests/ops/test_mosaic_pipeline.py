"""Multi-sample ops in whole pipelines: the same batches from random access in any order, after
a resume and with 1 or N host workers (partners drawn over the epoch, runtime/partners.py); the
graph rules; GPU parity (marked gpu)."""
import os

import numpy as np
import pytest

from detaug import Pipeline, fn, pipeline_def
from helpers import COCO, close_pipelines, track  # noqa: F401 (fixture)

ROOT = COCO


def yolo_pipe(device="cpu", partners="epoch", root=ROOT, **kw):
    kw.setdefault("batch_size", 4)

    @pipeline_def(seed=1234, **kw)
    def p():
        enc, boxes = fn.readers.coco(annotations_file=os.path.join(root, "annotations.json"),
                                     file_root=os.path.join(root, "images"), random_shuffle=True)
        img = fn.decoders.image(enc, device="mixed" if device == "gpu" else "cpu")
        img, boxes = fn.mosaic(img, boxes, size=48, partners=partners)
        img, boxes = fn.affine(img, boxes, rotate=fn.random.uniform(range=(-10, 10)),
                               scale=fn.random.uniform(range=(0.5, 1.5)), fill=114.0)
        img, boxes = fn.mixup(img, boxes, probability=0.5, partners=partners)
        img = fn.hsv(img, hue=fn.random.uniform(range=(-10, 10)))
        img, boxes = fn.flip(img, boxes, horizontal=fn.random.coin_flip())
        img, boxes = fn.letterbox(img, boxes, size=(64, 64))
        return img, fn.prune_boxes(boxes, min_size=1.0)
    return track(p())


def host(batch):
    img, bx = batch
    data = [np.asarray(a.get() if hasattr(a, "get") else a) for a in img.data]
    return data, bx.per_sample()


def same(a, b, atol=0.0, img_tol=0):
    for x, y in zip(a[0], b[0]):
        assert x.shape == y.shape
        assert np.abs(x.astype(int) - y.astype(int)).max() <= img_tol
    for x, y in zip(a[1], b[1]):
        assert x.keys() == y.keys()
        for k in x:
            np.testing.assert_allclose(x[k], y[k], atol=atol)


@pytest.mark.parametrize("partners", ["epoch", "batch"])
def test_random_access_any_order_and_resume(partners, coco_small):
    pipe = yolo_pipe(partners=partners, root=coco_small, host_processes=0)
    seq = [host(pipe.run()) for _ in range(3)]
    other = yolo_pipe(partners=partners, root=coco_small, host_processes=0)
    for i in (2, 0, 1):
        same(host(other.run_batch(i)), seq[i])
    pipe2 = yolo_pipe(partners=partners, root=coco_small, host_processes=0)
    pipe2.run()
    state_after_one = pipe2.state_dict()
    resumed = yolo_pipe(partners=partners, root=coco_small, host_processes=0)
    resumed.load_state_dict(state_after_one)
    same(host(resumed.run()), seq[1])
    same(host(resumed.run()), seq[2])
    # several batches run together give each its own pool: the same batches
    grouped = yolo_pipe(partners=partners, root=coco_small, host_processes=0, batches_per_launch=3)
    for i in range(3):
        same(host(grouped.run()), seq[i])
    # the partners really come from the epoch: more labels than the batch's own records hold
    assert any("mixup_weight" in d and len(d["labels"]) for d in seq[0][1])


@pytest.mark.parametrize("partners", ["epoch", "batch"])
def test_one_or_many_host_workers(partners, coco_small):
    one = yolo_pipe(partners=partners, root=coco_small, host_processes=0, num_threads=1)
    many = yolo_pipe(partners=partners, root=coco_small, host_processes=2, num_threads=2)
    for _ in range(3):
        same(host(one.run()), host(many.run()))


def test_decoded_images_per_batch():
    """Epoch partners: the batch, the 3 mosaic partners of each, and for each mixup the
    partner's record and its 3 (4 per mixup); batch partners: the batch alone."""
    from detaug.core.rng import SampleRNG
    from detaug.runtime.partners import decoded_per_batch

    pipe = yolo_pipe(host_processes=0)
    pipe.build()
    mixup = next(op for op in pipe.graph.ops if op.schema.name == "mixup")
    for b in range(3):
        idx = pipe.schedule.indices(0, b)[0]
        blended = int((SampleRNG(1234, mixup.rng_id, 0, idx).uniform(1)[:, 0] < 0.5).sum())
        assert decoded_per_batch(pipe, 0, b) == 4 * (len(idx) + blended)
    pool = yolo_pipe(partners="batch", host_processes=0)
    pool.build()
    assert [decoded_per_batch(pool, 0, b) for b in range(3)] == [4, 4, 4]


def test_an_op_used_on_both_sides_of_a_mosaic_is_refused():
    pipe = track(Pipeline(batch_size=2, seed=0))
    with pipe:
        enc, boxes = fn.readers.coco(annotations_file=os.path.join(ROOT, "annotations.json"),
                                     file_root=os.path.join(ROOT, "images"))
        img = fn.decoders.image(enc)
        m, mb = fn.mosaic(img, boxes, size=32)
        pipe.set_outputs(m, img)
    with pytest.raises(ValueError, match="decoders.image.*both by a multi-sample op"):
        pipe.build()


def test_a_source_without_random_access_is_refused():
    pipe = track(Pipeline(batch_size=2, seed=0))
    imgs = [np.zeros((4, 4, 3), np.uint8)] * 2
    with pipe:
        img = fn.external_source(source=[imgs])
        pipe.set_outputs(fn.mosaic(img, size=4))
    with pytest.raises(ValueError, match="random access"):
        pipe.build()
    pipe = track(Pipeline(batch_size=2, seed=0))  # from the batch: no random access needed
    with pipe:
        img = fn.external_source(source=[imgs])
        pipe.set_outputs(fn.mosaic(img, size=4, partners="batch"))
    assert pipe.run()[0].data.shape == (2, 8, 8, 3)
    pipe = track(Pipeline(batch_size=2, seed=0))
    with pipe:
        img = fn.external_source(source=[imgs])
        pipe.set_outputs(fn.mosaic(img, size=4, partners="launch"))
    with pytest.raises(ValueError, match="partners must be 'epoch' or 'batch'"):
        pipe.build()


def test_a_bad_partner_file_replaces_its_owner(tmp_path, coco_small):
    """on_error='skip': a corrupt file met as a partner is charged to the sample whose group
    drew it; every batch keeps its size and the file is counted."""
    import json
    import shutil

    root = tmp_path / "coco"
    shutil.copytree(coco_small, root)
    ann = json.loads((root / "annotations.json").read_text())
    bad = ann["images"][3]["file_name"]
    (root / "images" / bad).write_bytes(b"not a jpeg")
    pipe = track(Pipeline(batch_size=8, seed=3, on_error="skip", host_processes=0))
    with pipe:
        enc, boxes = fn.readers.coco(annotations_file=str(root / "annotations.json"),
                                     file_root=str(root / "images"))
        img, boxes = fn.mosaic(fn.decoders.image(enc), boxes, size=32)
        pipe.set_outputs(img, boxes)
    with pytest.warns(UserWarning, match="skipping"):
        for _ in range(len(pipe)):
            img, _ = pipe.run()
            assert len(img) == 8
    assert pipe.stats["skipped"] == 1


@pytest.mark.gpu
def test_compose_cupy_matches_twin():
    import cupy as cp

    from detaug.core.batch import DeviceImages
    from detaug.kernels import compose as K
    from detaug.kernels.launch import reset_launch_counts, total_launches
    from helpers.cases import random_compose_case

    from helpers import fresh_seed

    for seed in (0, fresh_seed()):
        rng = np.random.default_rng(seed)
        for mode in ("first", "weighted"):
            tiles, origins, groups, canvas, fill, weights = random_compose_case(rng)
            ref = K.compose_numpy(tiles, origins, groups, canvas, fill, weights=weights, mode=mode)
            for as_pointers in (False, True):  # cupy arrays, or a DeviceImages (the decoder's)
                dev = [cp.asarray(t) for t in tiles]
                dev = DeviceImages.from_arrays(dev) if as_pointers else dev
                reset_launch_counts()
                got = K.compose_cupy(dev, origins, groups, canvas, fill, weights=weights, mode=mode)
                assert total_launches() == 1
                for g, r in zip(got, ref):
                    np.testing.assert_array_equal(cp.asnumpy(g), r)


@pytest.mark.gpu
@pytest.mark.parametrize("partners", ["epoch", "batch"])
def test_cpu_equals_gpu(partners):
    """The same groups, centres, weights and boxes on both devices; pixels within the warp's
    tolerance (OpenCV on the CPU, warp.cu on the GPU: a few grey levels at edges)."""
    cpu = yolo_pipe("cpu", partners, host_processes=0)
    gpu_pipe = yolo_pipe("gpu", partners, device_id=0)
    for i in (0, 2):
        a, b = host(cpu.run_batch(i)), host(gpu_pipe.run_batch(i))
        for x, y in zip(a[0], b[0]):
            d = np.abs(x.astype(int) - y.astype(int))
            assert d.mean() < 1.0
        for x, y in zip(a[1], b[1]):
            assert x["labels"].tolist() == y["labels"].tolist()
            np.testing.assert_allclose(x["boxes"], y["boxes"], atol=2e-3)
            np.testing.assert_allclose(x["mixup_weight"], y["mixup_weight"])


@pytest.mark.gpu
@pytest.mark.parametrize("partners", ["epoch", "batch"])
def test_launches_do_not_grow_with_the_batch(partners):
    """Each kernel is launched the same number of times for a batch of 1 and of 16."""
    from detaug.kernels import launch as L

    counts = {}
    for bs in (1, 16):
        pipe = yolo_pipe("gpu", partners, device_id=0, batch_size=bs)
        pipe.run_batch(0)  # compile
        L.reset_launch_counts()
        pipe.run_batch(1)
        counts[bs] = L.launch_counts()
    assert counts[1] == counts[16], counts
    # the mosaic: its tiles warped straight into the canvases (one pitched warp, no compose);
    # the mixup: one compose
    assert counts[1].get("warp_u8_hwc_c3_pitched") == 1, counts[1]
    assert counts[1].get("compose_u8") == 1, counts[1]


@pytest.mark.gpu
def test_yolo_example_trains_on_the_gpu():
    pytest.importorskip("torch")
    from helpers.cases import run_example

    rc, out = run_example("yolo_style.py", "--device", "gpu", "--size", "128", "--iters", "3",
                          "--batch-size", "8", timeout=600)
    assert rc == 0, out
    assert "pipeline on gpu" in out and out.count("step ") == 3, out
