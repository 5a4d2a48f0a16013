"""Keypoints and oriented boxes through mosaic and mixup on the CPU (core/instances.py through
the tile's chain): each tile's keypoints land where a float64 reference of Ultralytics' mosaic
placement puts them (after a horizontal flip of every sample, swapped by flip_index), points
that leave the flipped image or their tile become (0, 0, 0); oriented boxes take their exact
corners; mixup keeps both samples' keypoints and oriented boxes beside their boxes."""
import numpy as np
import pytest

from detaug import Pipeline, fn
from helpers import run_graph
from helpers.geometry import mosaic4_placement, mosaic_batch_draws

FI = np.array([0, 2, 1, 4, 3])


def _instances(rng, h, w, rotated):
    """3 instances: keypoints (3, 5, 3) spread a little past the image (some unlabelled), and
    oriented boxes with integer corners (right angles exact in float32), turned when
    ``rotated`` (else axis-aligned: a rectangle stays one under unequal x and y scales)."""
    kp = np.concatenate([rng.uniform([-3, -3], [w + 3, h + 3], (3, 5, 2)),
                         rng.integers(0, 3, (3, 5, 1))], -1).astype(np.float32)
    kp[kp[..., 2] == 0] = 0
    a = rng.integers(1, 5, (3, 2)) if rotated else np.c_[rng.integers(2, 8, 3), np.zeros(3)]
    b = np.stack([-a[:, 1], a[:, 0]], 1) * rng.integers(1, 3, (3, 1))
    p0 = rng.integers(0, [w, h], (3, 2))
    obb = np.stack([p0, p0 + a, p0 + a + b, p0 + b], 1).astype(np.float32)
    return kp, obb


@pytest.mark.parametrize("flip,resize,p", [(False, True, 1.0), (True, True, 0.5),
                                           (True, False, 1.0)])
def test_mosaic_keypoints_and_obb_against_reference(flip, resize, p, rng):
    n, s = 4, 24
    sizes = [(int(rng.integers(12, 40)), int(rng.integers(12, 40))) for _ in range(n)]
    data = [_instances(rng, h, w, rotated=not resize) for h, w in sizes]

    def src(info):
        i = info.idx_in_epoch
        h, w = sizes[i]
        kp, obb = data[i]
        # whole-image boxes: never dropped, so the rows are the group's members' in order
        return (np.zeros((h, w, 3), np.uint8),
                {"boxes": np.tile(np.float32([0, 0, w, h]), (3, 1)),
                 "labels": 10 * i + np.arange(3), "keypoints": kp, "obb": obb,
                 "keypoint_flip": np.tile(FI, (3, 1))})
    pipe = Pipeline(batch_size=n, num_threads=1, seed=int(rng.integers(1 << 30)))
    with pipe:
        img, bx = fn.external_source(source=src, batch=False, num_outputs=2, size=n)
        if flip:
            img, bx = fn.flip(img, bx, horizontal=1)
        pipe.set_outputs(*fn.mosaic(img, bx, size=s, resize=resize, partners="batch",
                                    probability=p))
    _, out = pipe.run()
    draws = mosaic_batch_draws(pipe, n, s, p)
    pipe.close()
    live = dropped = 0
    for k, (got, members, (xc, yc)) in enumerate(zip(out.per_sample(), *draws)):
        assert list(got["labels"]) == [10 * r + i for r in members for i in range(3)]
        row = 0
        for q, r in enumerate(members):
            h0, w0 = sizes[r]
            if resize:
                ratio = s / max(h0, w0)
                w, h = min(int(np.ceil(w0 * ratio)), s), min(int(np.ceil(h0 * ratio)), s)
            else:
                w, h = w0, h0
            x1a, y1a, x2a, y2a, x1b, y1b = mosaic4_placement(q, len(members) == 1, xc, yc, w, h, s)
            kp, obb = (d.astype(np.float64) for d in data[r])

            def place(xy):
                x = (w0 - xy[..., 0]) if flip else xy[..., 0]
                return np.stack([x * w / w0 - x1b, xy[..., 1] * h / h0 - y1b], -1)
            ref_kp = np.zeros_like(kp)
            x0 = (w0 - kp[..., 0]) if flip else kp[..., 0]
            on_image = (x0 >= 0) & (x0 < w0) & (kp[..., 1] >= 0) & (kp[..., 1] < h0)
            t = place(kp[..., :2])
            on_tile = ((t[..., 0] >= 0) & (t[..., 0] < x2a - x1a) & (t[..., 1] >= 0)
                       & (t[..., 1] < y2a - y1a))
            keep = (kp[..., 2] > 0) & on_image & on_tile
            ref_kp[keep] = np.concatenate([t + [x1a, y1a], kp[..., 2:]], -1)[keep]
            if flip:
                ref_kp = ref_kp[:, FI]
            ref_obb = place(obb) + [x1a, y1a]
            for i in range(3):
                np.testing.assert_allclose(got["keypoints"][row], ref_kp[i], atol=1e-4)
                np.testing.assert_allclose(got["obb"][row], ref_obb[i], atol=1e-4)
                row += 1
            live += int(keep.sum())
            dropped += int(((kp[..., 2] > 0) & ~keep).sum())
    assert live >= 4 and dropped >= 1


def test_mixup_keeps_both_samples_keypoints_and_obb(rng):
    """Mixup places both images top-left, unscaled, on the larger canvas: each row's keypoints
    and oriented box are its own instance's, unmoved, for the sample's and the partner's."""
    sizes = [(30, 40), (44, 26), (36, 36), (28, 32)]
    imgs, boxes, labels, fields = [], [], [], []
    for k, (h, w) in enumerate(sizes):
        kp, obb = _instances(rng, h, w, rotated=True)
        kp[kp[..., 0] >= w] = 0  # on the image: nothing for a canvas to cut
        kp[(kp[..., 0] < 0) | (kp[..., 1] < 0) | (kp[..., 1] >= h)] = 0
        imgs.append(np.zeros((h, w, 3), np.uint8))
        boxes.append(np.tile(np.float32([1, 1, w - 1, h - 1]), (3, 1)))
        labels.append(10 * k + np.arange(3))
        fields.append({"keypoints": kp, "obb": obb, "keypoint_flip": np.tile(FI, (3, 1))})
    (out,) = run_graph(imgs, boxes, lambda i, b: fn.mixup(i, b, partners="batch")[1:],
                       labels=labels, fields=fields, seed=int(rng.integers(1 << 30)))
    partners = 0
    for s, got in enumerate(out.per_sample()):
        owners = got["labels"] // 10
        assert list(got["labels"][:3]) == [10 * s, 10 * s + 1, 10 * s + 2]
        partners += len(owners) > 3
        assert len(got["keypoints"]) == len(got["obb"]) == len(got["boxes"])
        for kp, obb, label in zip(got["keypoints"], got["obb"], got["labels"]):
            k, i = divmod(int(label), 10)
            assert np.array_equal(kp, fields[k]["keypoints"][i])
            assert np.array_equal(obb, fields[k]["obb"][i])
    assert partners
