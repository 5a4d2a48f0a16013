"""detaug.kernels.warp_spec (the warp's arguments validated into one spec the twin, OpenCV and the
CUDA launch read): supersampling taps from the inverse matrix's column norms (capped, 1 without
antialiasing; a homography by its most shrunk point), the inverse normalised for a homography,
per-sample channel arguments broadcast, output shapes and dense buffers, and each refusal."""
import numpy as np
import pytest

from detaug.kernels import warp_spec as S


def prepare(images, matrices, out_sizes, **kw):
    args = dict(fill=0.0, antialias=True, max_taps=8, mean=None, std=None, out_dtype=np.uint8,
                layout="HWC")
    args.update(kw)
    return S._prepare(images, matrices, out_sizes, **args)


def scale(sx, sy):
    return np.diag([sx, sy, 1.0])


def test_taps_are_the_ceiling_of_the_shrink_per_axis_capped():
    # output = scale * input: the inverse's columns have norms 1 / scale
    inv = np.linalg.inv(np.stack([scale(0.5, 0.25), scale(2.0, 1.0), scale(1 / 3.5, 1 / 40)]))
    np.testing.assert_array_equal(S.taps_for(inv, True, 8), [[2, 4], [1, 1], [4, 8]])
    np.testing.assert_array_equal(S.taps_for(inv, False, 8), [[1, 1]] * 3)
    np.testing.assert_array_equal(S.taps_for(inv, True, 3), [[2, 3], [1, 1], [3, 3]])
    # a turn by 90 degrees after a shrink: forward [[0, -1], [1/3, 0]], inverse [[0, 3], [-1, 0]],
    # whose columns (output x, output y) have norms 1 and 3
    rot = np.array([[0.0, -1 / 3, 0], [1 / 3, 0, 0], [0, 0, 1]]) @ scale(1.0, 3.0)
    np.testing.assert_array_equal(S.taps_for(np.linalg.inv(rot)[None], True, 8), [[1, 3]])


def test_a_homography_takes_the_taps_of_its_most_shrunk_corner(rng):
    h = np.array([[1.0, 0.1, 0.0], [0.0, 1.0, 0.0], [0.004, 0.0, 1.0]])  # shrinks towards +x
    out = np.array([[40, 100]])
    taps = S.taps_for(np.linalg.inv(h)[None], True, 8, out)
    # the inverse's local scale, by finite differences over the canvas (corners and centre)
    inv = np.linalg.inv(h)

    def apply(x, y):
        p = inv @ [x, y, 1.0]
        return p[:2] / p[2]

    worst = np.zeros(2)
    for x, y in ((0, 0), (100, 0), (0, 40), (100, 40), (50, 20)):
        for k, (dx, dy) in enumerate(((1e-4, 0), (0, 1e-4))):
            worst[k] = max(worst[k], np.hypot(*(apply(x + dx, y + dy) - apply(x, y))) / 1e-4)
    np.testing.assert_array_equal(taps[0], np.clip(np.ceil(worst - 1e-3), 1, 8))


def test_prepare_inverts_broadcasts_and_shapes(rng):
    imgs = [rng.integers(0, 256, (10, 12, 3), dtype=np.uint8), rng.integers(0, 256, (5, 7, 3), dtype=np.uint8)]
    h = np.array([[2.0, 0, 1], [0, 2.0, 0], [0.01, 0, 2.0]])
    spec = prepare(imgs, np.stack([scale(0.5, 0.5), h]), [[4, 6], [4, 6]], fill=[1, 2, 3],
                   mean=[10.0, 20.0, 30.0], std=2.0, out_dtype=np.float32, layout="CHW")
    assert spec.B == 2 and spec.C == 3 and spec.proj.tolist() == [False, True]
    np.testing.assert_allclose(spec.inv[0], scale(2.0, 2.0))
    np.testing.assert_allclose(spec.inv[1], np.linalg.inv(h) / np.linalg.inv(h)[2, 2])
    assert spec.inv[1, 2, 2] == 1.0
    np.testing.assert_array_equal(spec.fill, [[1, 2, 3]] * 2)
    np.testing.assert_array_equal(spec.std, [[2, 2, 2]] * 2)
    np.testing.assert_array_equal(spec.in_pitches, [36, 21])
    assert S._out_shape(spec, 1) == (3, 4, 6) and S._is_dense(spec)
    assert S._allocate_numpy(spec).shape == (2, 3, 4, 6)
    ragged = prepare(imgs, np.stack([scale(1, 1)] * 2), [[4, 6], [5, 6]])
    assert not S._is_dense(ragged) and [a.shape for a in S._allocate_numpy(ragged)] == [(4, 6, 3), (5, 6, 3)]
    dense = prepare(np.zeros((3, 4, 4, 1), np.uint8), np.stack([scale(1, 1)] * 3), [[2, 2]] * 3)
    assert dense.B == 3 and dense.C == 1


@pytest.mark.parametrize("kw,err,match", [
    ({"images": [np.zeros((4, 4, 2), np.uint8)]}, ValueError, r"image 0 must be HxWxC with C in \(1, 3\)"),
    ({"images": [np.zeros((4, 4, 3), np.float64)]}, TypeError, "image 0 must be uint8 or float32"),
    ({"images": [np.zeros((4, 4, 3), np.float32)]}, ValueError, "float32 images warp to float32, not uint8"),
    ({"images": [np.zeros((4, 4, 3), np.uint8), np.zeros((4, 4, 3), np.float32)]}, TypeError,
     "all images must have one dtype; image 1 is float32"),
    ({"images": [np.zeros((4, 4, 3), np.uint8), np.zeros((4, 4, 1), np.uint8)]}, ValueError,
     "all images must have the same channel count; image 1 has 1, image 0 has 3"),
    ({"images": np.zeros((4, 4, 3), np.uint8)}, ValueError, r"a dense image batch must be \(B, H, W, C\)"),
    ({"matrices": np.zeros((2, 3, 3))}, ValueError, r"matrices must be \(1, 3, 3\)"),
    ({"matrices": np.array([[[1.0, 2, 0], [2, 4, 0], [0, 0, 1]]])}, ValueError, r"singular matrix for samples \[0\]"),
    ({"matrices": np.full((1, 3, 3), np.nan)}, ValueError, "matrices must be finite"),
    ({"out_sizes": [[0, 4]]}, ValueError, r"out_sizes must be \(1, 2\) positive"),
    ({"max_taps": 0}, ValueError, "max_taps must be >= 1"),
    ({"out_dtype": np.int16}, TypeError, "out_dtype must be uint8, float32 or float16; got int16"),
    ({"layout": "NCHW"}, ValueError, "layout must be 'HWC' or 'CHW'; got 'NCHW'"),
    ({"mean": 1.0}, ValueError, r"normalize \(mean/std\) needs a float out_dtype, not uint8"),
    ({"std": [1.0, 0.0, 1.0], "out_dtype": np.float32}, ValueError, "std must be non-zero"),
    ({"fill": [1.0, 2.0]}, ValueError, r"fill must be a scalar, shape \(3,\) or \(1, 3\); got \(2,\)"),
])
def test_refusals(kw, err, match):
    args = {"images": [np.zeros((4, 4, 3), np.uint8)], "matrices": np.eye(3)[None], "out_sizes": [[2, 2]]}
    args.update(kw)
    with pytest.raises(err, match=match):
        prepare(**args)
