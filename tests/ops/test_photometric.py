"""Photometric ops: photometric_distort and grayscale against float64 ports
of torchvision v2's functional colour kernels, color_twist & co. against DALI's own reference
formula, hand-computed boundary cases, keyed draws, and photometric.cu run on the CPU (g++)
against its NumPy twin (tests/kernels/test_photometric_kernels.py).

The references below are written from the definitions, not from detaug's module:
torchvision/transforms/v2/functional/_color.py (pytorch/vision): ``_rgb_to_grayscale_image``
(0.2989 R + 0.587 G + 0.114 B), ``_blend`` (``image1 * ratio + image2 * (1 - ratio)``, clamped
to [0, bound], cast back to the image's dtype: truncation for uint8), ``adjust_brightness``
(``image * factor``, clamped, cast), ``adjust_contrast`` (blend with the mean of the grayscale,
floored for integer images), ``adjust_saturation`` (blend with the pixel's grayscale, floored
for integer images), ``adjust_hue`` (to float by ``/ 255``, HSV hexcone model, hue added modulo
1, back, ``to_dtype(scale=True)``: ``trunc(x * 255.999)``); the HSV conversion here is Python's
``colorsys``. ``permute_channels``: ``out = image[perm]``. The order of
``RandomPhotometricDistort._transform``: brightness, contrast if before, saturation, hue,
contrast if after, channel permutation. DALI: ``ref_color_twist`` of its color twist test
(dali/test/python/operator_1/ in NVIDIA's repository): ``((yiq2rgb @ H(hue) S(sat) @ rgb2yiq @
rgb - grey) * contrast + grey) * brightness``, grey 128 (integer) or 0.5 (float), rounded and
clipped.
"""
from __future__ import annotations

import colorsys

import numpy as np
import pytest

from detaug import Pipeline, fn
from detaug.kernels import color as KC
from detaug.kernels import photometric as KP
from helpers import close_pipelines, random_images, track  # noqa: F401 (fixture)
from helpers.cases import SEEDS, close, fresh

# ----------------------------------------------------------------------------- float64 references


def tv_gray(x):
    return x[..., 0] * 0.2989 + x[..., 1] * 0.587 + x[..., 2] * 0.114


def tv_cast(x, u8):
    x = np.clip(x, 0.0, 255.0 if u8 else 1.0)
    return np.trunc(x) if u8 else x


def ref_brightness(x, f, u8):
    return tv_cast(x * f, u8)


def ref_contrast(x, f, u8):
    g = tv_gray(x)
    mean = (np.floor(g) if u8 else g).mean()
    return tv_cast(x * f + mean * (1.0 - f), u8)


def ref_saturation(x, f, u8):
    g = tv_gray(x)
    g = np.floor(g) if u8 else g
    return tv_cast(x * f + g[..., None] * (1.0 - f), u8)


def ref_hue(x, f, u8):
    flat = (x / 255.0 if u8 else x).reshape(-1, 3)
    out = np.empty_like(flat)
    for k, (r, g, b) in enumerate(flat):
        h, s, v = colorsys.rgb_to_hsv(r, g, b)
        out[k] = colorsys.hsv_to_rgb((h + f) % 1.0, s, v)
    out = out.reshape(x.shape)
    return np.trunc(out * 255.999) if u8 else out


def ref_gray(x, u8, channels=3):
    g = tv_gray(x)
    g = np.trunc(g) if u8 else g
    return np.repeat(g[..., None], channels, -1)


def ref_distort(img, b=None, c=None, s=None, h=None, contrast_first=True, perm=None):
    u8 = img.dtype == np.uint8
    x = img.astype(np.float64)
    if b is not None:
        x = ref_brightness(x, b, u8)
    if c is not None and contrast_first:
        x = ref_contrast(x, c, u8)
    if s is not None:
        x = ref_saturation(x, s, u8)
    if h is not None:
        x = ref_hue(x, h, u8)
    if c is not None and not contrast_first:
        x = ref_contrast(x, c, u8)
    if perm is not None:
        x = x[..., list(perm)]
    return x


RGB2YIQ = np.array([[0.299, 0.587, 0.114], [0.596, -0.274, -0.321], [0.211, -0.523, 0.311]])


def ref_color_twist(img, hue, sat, brightness, contrast):
    a = np.radians(hue)
    hmat = np.array([[1, 0, 0], [0, np.cos(a) * sat, np.sin(a) * sat],
                     [0, -np.sin(a) * sat, np.cos(a) * sat]])
    m = np.linalg.inv(RGB2YIQ) @ hmat @ RGB2YIQ
    grey = 128.0 if img.dtype == np.uint8 else 0.5
    px = img.reshape(-1, 3).astype(np.float64) @ m.T
    out = (((px - grey) * contrast + grey) * brightness).reshape(img.shape)
    return np.clip(np.round(out), 0, 255) if img.dtype == np.uint8 else out


# ----------------------------------------------------------------------------- helpers


def staged(images, flags, **kw):
    ip, fp = KP.photometric_params(len(images), flags, **kw)
    return KP.photometric_numpy(images, ip, fp)


# ----------------------------------------------------------------------------- single steps


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("dtype", [np.uint8, np.float32])
def test_each_step_matches_torchvision_formula(seed, dtype):
    rng, imgs = fresh(seed, [(17, 23, 3), (8, 5, 3), (1, 1, 3)], dtype)
    u8 = dtype == np.uint8
    tol = 1 if u8 else 2e-5
    for img in imgs:
        x = img.astype(np.float64)
        f = float(rng.uniform(0.4, 1.6))
        h = float(rng.uniform(-0.5, 0.5))
        close(staged([img], KP.BRIGHTNESS, brightness=f)[0], ref_brightness(x, f, u8), tol)
        close(staged([img], KP.CONTRAST, contrast=f)[0], ref_contrast(x, f, u8), tol)
        close(staged([img], KP.SATURATION, saturation=f)[0], ref_saturation(x, f, u8), tol)
        close(staged([img], KP.HUE, hue=h)[0], ref_hue(x, h, u8), tol)
        close(staged([img], KP.GRAY)[0], ref_gray(x, u8), tol)
        for k, perm in enumerate(KP.PERMS):
            np.testing.assert_array_equal(staged([img], KP.PERMUTE, perm=k)[0], img[..., perm])


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("first", [True, False])
def test_whole_chain_matches_torchvision_order(seed, first):
    rng, imgs = fresh(seed, [(19, 13, 3), (6, 9, 3)])
    for img in imgs:
        b, c, s = rng.uniform(0.875, 1.125), rng.uniform(0.5, 1.5), rng.uniform(0.5, 1.5)
        h, k = rng.uniform(-0.05, 0.05), int(rng.integers(6))
        flags = (KP.BRIGHTNESS | KP.CONTRAST | KP.SATURATION | KP.HUE | KP.PERMUTE
                 | (KP.CONTRAST_FIRST if first else 0))
        got = staged([img], flags, brightness=b, contrast=c, saturation=s, hue=h, perm=k)[0]
        ref = ref_distort(img, b, c, s, h, first, KP.PERMS[k])
        # each step truncates, as torchvision's does; float32 against float64 can move one step
        # by a level, which a later contrast or saturation above 1 may carry: one level at most
        # on nearly every value, two at most anywhere
        d = np.abs(got.astype(float) - ref)
        assert d.max() <= 2 and (d > 1).mean() < 0.01, (d.max(), (d > 1).mean())


# ----------------------------------------------------------------------------- hand-computed


def test_brightness_clips_at_255_and_truncates():
    img = np.array([[[250, 100, 0], [255, 255, 255]]], np.uint8)
    np.testing.assert_array_equal(staged([img], KP.BRIGHTNESS, brightness=1.125)[0],
                                  [[[255, 112, 0], [255, 255, 255]]])           # 112.5 -> 112
    np.testing.assert_array_equal(staged([img], KP.BRIGHTNESS, brightness=0.5)[0],
                                  [[[125, 50, 0], [127, 127, 127]]])            # 127.5 -> 127


def test_contrast_uses_floored_gray_mean_and_clips_at_0_and_255():
    img = np.array([[[0, 0, 0], [255, 255, 255]]], np.uint8)
    # gray of white: 255 * 0.9999 = 254.97 -> 254; mean (0 + 254) / 2 = 127
    np.testing.assert_array_equal(staged([img], KP.CONTRAST, contrast=0.5)[0],
                                  [[[63, 63, 63], [191, 191, 191]]])            # 63.5, 191
    np.testing.assert_array_equal(staged([img], KP.CONTRAST, contrast=1.5)[0],
                                  [[[0, 0, 0], [255, 255, 255]]])               # -63.5, 319
    np.testing.assert_array_equal(staged([img], KP.CONTRAST, contrast=0.0)[0],
                                  [[[127, 127, 127]] * 2])


def test_saturation_hand_values():
    img = np.array([[[255, 0, 0], [200, 100, 50]]], np.uint8)
    # gray(255, 0, 0) = 76.2 -> 76; gray(200, 100, 50) = 124.18 -> 124
    np.testing.assert_array_equal(staged([img], KP.SATURATION, saturation=0.0)[0],
                                  [[[76, 76, 76], [124, 124, 124]]])
    np.testing.assert_array_equal(staged([img], KP.SATURATION, saturation=2.0)[0],
                                  [[[255, 0, 0], [255, 76, 0]]])                 # 2x - g


def test_hue_hand_values_and_wrap_around():
    red = np.array([[[255, 0, 0]]], np.uint8)
    # red is hue 0: +1/4 turn -> (q, v, p) = (0.5, 1, 0); -1/4 -> hue 3/4 -> (t, p, v) = (0.5, 0, 1)
    np.testing.assert_array_equal(staged([red], KP.HUE, hue=0.25)[0], [[[127, 255, 0]]])
    np.testing.assert_array_equal(staged([red], KP.HUE, hue=-0.25)[0], [[[127, 0, 255]]])
    np.testing.assert_array_equal(staged([red], KP.HUE, hue=0.5)[0], [[[0, 255, 255]]])
    np.testing.assert_array_equal(staged([red], KP.HUE, hue=-0.5)[0], [[[0, 255, 255]]])
    # (255, 0, 10) has hue 1 - 10/255/6 = 0.99346; + 0.05 wraps to 0.04346: G = 6 * 0.04346 * 255.999
    np.testing.assert_array_equal(staged([np.array([[[255, 0, 10]]], np.uint8)], KP.HUE, hue=0.05)[0],
                                  [[[255, 66, 0]]])
    # grey has no hue: unchanged by any shift; white stays 255 (v * 255.999 -> 255)
    grey = np.array([[[90, 90, 90], [255, 255, 255], [0, 0, 0]]], np.uint8)
    np.testing.assert_array_equal(staged([grey], KP.HUE, hue=0.3)[0], grey)


def test_grayscale_hand_values():
    img = np.array([[[255, 255, 255], [255, 0, 0], [0, 255, 0], [0, 0, 255]]], np.uint8)
    want = [254, 76, 149, 29]  # 254.97, 76.22, 149.69, 29.07 truncated (torchvision's tensor path)
    np.testing.assert_array_equal(staged([img], KP.GRAY)[0], np.repeat(np.array(want)[None, :, None], 3, -1))
    np.testing.assert_array_equal(staged([img], KP.GRAY, out_channels=1)[0][..., 0], [want])
    f = staged([img.astype(np.float32) / 255], KP.GRAY)[0]
    np.testing.assert_allclose(f[0, :, 0], [0.9999, 0.2989, 0.587, 0.114], rtol=1e-6)


def test_float_images_clip_to_one():
    img = np.array([[[0.9, 0.5, 0.0]]], np.float32)
    np.testing.assert_allclose(staged([img], KP.BRIGHTNESS, brightness=1.2)[0], [[[1.0, 0.6, 0.0]]],
                               rtol=1e-6)
    assert staged([img], KP.BRIGHTNESS, brightness=1.2)[0].dtype == np.float32


def test_no_flags_is_identity_and_inputs_untouched():
    _, imgs = fresh(3, [(7, 9, 3), (4, 4, 3)])
    copies = [i.copy() for i in imgs]
    out = staged(imgs, 0, brightness=3.0, contrast=0.0, saturation=0.0, hue=0.4, perm=5)
    for o, i, c in zip(out, imgs, copies):
        np.testing.assert_array_equal(o, i)
        np.testing.assert_array_equal(i, c)
        assert o is not i


def test_params_are_checked():
    with pytest.raises(ValueError, match="permutation"):
        KP.photometric_params(2, 0, perm=6)
    with pytest.raises(ValueError, match="1-channel"):
        KP.photometric_params(2, [KP.GRAY, 0], out_channels=1)
    with pytest.raises(ValueError, match="sample 1"):
        KP.photometric_numpy([np.zeros((2, 2, 3), np.uint8), np.zeros((2, 2, 4), np.uint8)],
                             *KP.photometric_params(2, 0))
    with pytest.raises(ValueError, match="uint8 or float32"):
        KP.photometric_numpy([np.zeros((2, 2, 3), np.int16)], *KP.photometric_params(1, 0))


def test_dense_and_ragged_batches():
    rng, imgs = fresh(4, [(5, 6, 3)] * 3)
    ip, fp = KP.photometric_params(3, KP.SATURATION | KP.HUE, saturation=[0.5, 1, 1.5], hue=[0.1, 0, -0.1])
    dense = KP.photometric_numpy(np.stack(imgs), ip, fp)
    assert isinstance(dense, np.ndarray) and dense.shape == (3, 5, 6, 3)
    np.testing.assert_array_equal(dense, np.stack(KP.photometric_numpy(imgs, ip, fp)))
    empty = KP.photometric_numpy(np.zeros((0, 4, 4, 3), np.uint8), *KP.photometric_params(0, 0))
    assert empty.shape == (0, 4, 4, 3)


# ----------------------------------------------------------------------------- DALI's colour twist


@pytest.mark.parametrize("seed", SEEDS)
def test_color_twist_matches_dali_reference(seed):
    rng, imgs = fresh(seed, [(9, 14, 3), (5, 5, 3), (20, 3, 3)])
    b = len(imgs)
    h, s = rng.uniform(-180, 180, b), rng.uniform(0, 2, b)
    br, ct = rng.uniform(0, 2, b), rng.uniform(0, 2, b)
    out = KP.color_twist_numpy(imgs, KP.color_twist_matrices(br, ct, s, h, 128.0))
    fimgs = [(i / 255.0).astype(np.float32) for i in imgs]
    fout = KP.color_twist_numpy(fimgs, KP.color_twist_matrices(br, ct, s, h, 0.5))
    for k in range(b):
        close(out[k], ref_color_twist(imgs[k], h[k], s[k], br[k], ct[k]), 1)
        close(fout[k], ref_color_twist(fimgs[k], h[k], s[k], br[k], ct[k]), 1e-5)
        assert fout[k].dtype == np.float32


@pytest.mark.parametrize("seed", SEEDS)
def test_opencv_color_twist_within_a_level_of_the_twin(seed):
    rng, imgs = fresh(seed, [(31, 17, 3), (1, 1, 3), (0, 3, 3), (64, 64, 3)])
    b = len(imgs)
    mats = KP.color_twist_matrices(rng.uniform(0, 2, b), rng.uniform(0, 2, b), rng.uniform(0, 2, b),
                                   rng.uniform(-180, 180, b), 128.0)
    for got, want in zip(KP.color_twist_cv2(imgs, mats), KP.color_twist_numpy(imgs, mats)):
        assert got.dtype == np.uint8 and got.shape == want.shape
        close(got, want.astype(float), 1)
    fimgs = [(i / 255.0).astype(np.float32) for i in imgs]
    for got, want in zip(KP.color_twist_cv2(fimgs, mats), KP.color_twist_numpy(fimgs, mats)):
        assert got.dtype == np.float32
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-4)
    dense = np.stack(imgs[3:] * 2)
    out = KP.color_twist_cv2(dense, mats[[3, 3]], np.float32)  # uint8 -> float32: the twin
    np.testing.assert_array_equal(out, KP.color_twist_numpy(dense, mats[[3, 3]], np.float32))


def test_hsv_and_brightness_contrast_agree_with_color_twist():
    """fn.hsv(hue, saturation, value) is color_twist(hue, saturation, brightness=value), and
    fn.brightness_contrast about 128 is color_twist(brightness, contrast): same DALI matrices."""
    rng, imgs = fresh(11, [(12, 10, 3), (7, 8, 3)])
    h, s, v = rng.uniform(-90, 90, 2), rng.uniform(0, 2, 2), rng.uniform(0.5, 1.5, 2)
    twist = KP.color_twist_numpy(imgs, KP.color_twist_matrices(v, np.ones(2), s, h, 128.0))
    for a, c in zip(twist, KC.hsv_numpy(imgs, h, s, v)):
        close(a, c.astype(float), 1)
    br, ct = rng.uniform(0.5, 1.5, 2), rng.uniform(0, 2, 2)
    twist = KP.color_twist_numpy(imgs, KP.color_twist_matrices(br, ct, np.ones(2), np.zeros(2), 128.0))
    for a, c in zip(twist, KC.brightness_contrast_numpy(imgs, br, ct, contrast_center=128.0)):
        close(a, c.astype(float), 1)


def test_color_twist_hand_values():
    img = np.array([[[10, 128, 250]]], np.uint8)
    one, zero = np.ones(1), np.zeros(1)
    # brightness 2: 2x, clamped; contrast 0: everything at 128; contrast 2: 128 + 2 (x - 128)
    np.testing.assert_array_equal(KP.color_twist_numpy([img], KP.color_twist_matrices(one * 2, one, one, zero, 128.0))[0],
                                  [[[20, 255, 255]]])
    np.testing.assert_array_equal(KP.color_twist_numpy([img], KP.color_twist_matrices(one, zero, one, zero, 128.0))[0],
                                  [[[128, 128, 128]]])
    np.testing.assert_array_equal(KP.color_twist_numpy([img], KP.color_twist_matrices(one, one * 2, one, zero, 128.0))[0],
                                  [[[0, 128, 255]]])
    # saturation 0: every channel the YIQ luma 0.299 * 10 + 0.587 * 128 + 0.114 * 250 = 106.626
    np.testing.assert_array_equal(KP.color_twist_numpy([img], KP.color_twist_matrices(one, one, zero, zero, 128.0))[0],
                                  [[[107, 107, 107]]])
    # a float output keeps unclamped values in the input's units (DALI)
    f = KP.color_twist_numpy([img], KP.color_twist_matrices(one * 2, one, one, zero, 128.0), np.float32)[0]
    np.testing.assert_allclose(f, [[[20, 256, 500]]], rtol=1e-9)


# ----------------------------------------------------------------------------- the ops in a pipeline


def _pipe(images, graph, batch_size=None, seed=5):
    def src(info):
        return images[info.idx_in_epoch]

    pipe = track(Pipeline(batch_size=batch_size or len(images), num_threads=1, seed=seed))
    with pipe:
        img = fn.external_source(source=src, batch=False, size=len(images))
        out = graph(img)
        pipe.set_outputs(*(out if isinstance(out, tuple) else (out,)))
    return pipe


def _samples(batch):
    return [np.asarray(a) for a in batch.data]


def test_p0_is_identity_and_p1_applies_every_part():
    _, imgs = fresh(12, [(16, 12, 3)] * 6)
    out = _samples(_pipe(imgs, lambda i: fn.photometric_distort(i, p=0.0)).run()[0])
    for o, i in zip(out, imgs):
        np.testing.assert_array_equal(o, i)
    b, c, s, h = 1.1, 0.7, 1.3, 0.02
    out = _samples(_pipe(imgs, lambda i: fn.photometric_distort(
        i, brightness=(b, b), contrast=(c, c), saturation=(s, s), hue=(h, h), p=1.0)).run()[0])
    seen = set()
    for o, img in zip(out, imgs):
        # which of the 12 outcomes (contrast first or last, 6 permutations) this sample drew
        cands = [(first, k) for first in (True, False) for k in range(6)
                 if np.abs(o - ref_distort(img, b, c, s, h, first, KP.PERMS[k])).max() <= 2]
        assert cands, "matches no contrast order and permutation"
        seen.add(cands[0])
    assert len(seen) > 1  # the order and permutation are drawn per sample


def test_photometric_distort_probability_per_part():
    """With p = 0.5 each part is applied about half of the time (here: brightness alone, read off
    the output: a uniform image scaled by 1.125 exactly)."""
    img = np.full((4, 4, 3), 80, np.uint8)
    out = _samples(_pipe([img] * 400, lambda i: fn.photometric_distort(
        i, brightness=(1.125, 1.125), contrast=(1.0, 1.0), saturation=(1.0, 1.0), hue=(0.0, 0.0)),
        batch_size=400).run()[0])
    bright = np.mean([o[0, 0, 0] == 90 for o in out])
    assert all(o[0, 0, 0] in (80, 90) for o in out)
    assert 0.4 < bright < 0.6


def test_keyed_draws_any_order_and_batch_size():
    _, imgs = fresh(13, [(int(8 + k % 4), 10, 3) for k in range(8)])

    def graph(i):
        return fn.photometric_distort(i), fn.grayscale(i, p=0.5), fn.color_twist(
            i, hue=fn.random.uniform(range=(-30.0, 30.0)), saturation=fn.random.uniform(range=(0.5, 1.5)))

    whole = _pipe(imgs, graph, batch_size=4)
    fwd = [whole.run_batch(k) for k in (0, 1)]
    back = [whole.run_batch(k) for k in (1, 0)][::-1]
    single = _pipe(imgs, graph, batch_size=1)
    for k in range(8):
        one = single.run_batch(k)
        for j in range(3):
            a = _samples(fwd[k // 4][j])[k % 4]
            np.testing.assert_array_equal(a, _samples(back[k // 4][j])[k % 4])
            np.testing.assert_array_equal(a, _samples(one[j])[0])
    other_seed = _pipe(imgs, graph, batch_size=4, seed=6).run_batch(0)
    assert any((a != b).any() for a, b in zip(_samples(fwd[0][0]), _samples(other_seed[0])))


def test_per_sample_p_and_grayscale_op():
    _, imgs = fresh(14, [(6, 7, 3)] * 6)
    # p drawn per sample as 0 or 1: a sample is grey exactly where its p is 1
    pipe = _pipe(imgs, lambda i: (lambda p: (p, fn.grayscale(i, p=p)))(fn.random.uniform(values=[0.0, 1.0])))
    p, out = pipe.run()
    out = _samples(out)
    grey = [bool((o == o[..., :1]).all()) for o in out]
    for o, img, g in zip(out, imgs, grey):
        if g:
            np.testing.assert_array_equal(o, ref_gray(img.astype(float), True).astype(np.uint8))
        else:
            np.testing.assert_array_equal(o, img)
    assert grey == [bool(v) for v in np.asarray(p).reshape(-1)]
    assert any(grey) and not all(grey)
    one = _samples(_pipe(imgs, lambda i: fn.grayscale(i, num_output_channels=1)).run()[0])
    assert one[0].shape == (6, 7, 1)


@pytest.mark.parametrize("impl", ["reference", "opencv"])
def test_ops_follow_the_fused_warp_and_keep_float_images(impl, monkeypatch):
    """A colour op after a flip sees the flipped pixels; the CPU backend's linear colour ops run
    the twin under cpu_warp 'reference' (exactly) and OpenCV's transform otherwise (within one
    grey level)."""
    from detaug.core import backend

    monkeypatch.setitem(backend._CPU_WARP, "impl", impl)
    _, imgs = fresh(15, [(20, 30, 3), (10, 14, 3)])
    a = _samples(_pipe(imgs, lambda i: fn.hue(fn.flip(i, horizontal=1), hue=40.0)).run()[0])
    for o, img in zip(a, imgs):
        want = KP.color_twist_numpy([img[:, ::-1]], KP.color_twist_matrices(
            np.ones(1), np.ones(1), np.ones(1), np.full(1, 40.0), 128.0))[0]
        close(o, want.astype(float), 0 if impl == "reference" else 1)
    f = _samples(_pipe(imgs, lambda i: fn.photometric_distort(
        fn.normalize(i, mean=0.0, std=255.0, dtype="float32"), p=1.0)).run()[0])
    assert all(x.dtype == np.float32 and 0 <= x.min() and x.max() <= 1 for x in f)


def test_dali_single_ops_hand_values():
    """DALI's brightness / contrast (BrightnessContrast: the shift in the output's range) and
    hue / saturation (ColorTwist with one argument), on hand values."""
    img = np.array([[[0, 100, 200], [255, 128, 27]]], np.uint8)
    x = img.astype(np.float64)

    def run(graph):
        return _samples(_pipe([img], graph).run()[0])[0]

    # 0.1 * 255 + 0.5 x, rounded half up and clamped
    np.testing.assert_array_equal(run(lambda i: fn.brightness(i, brightness=0.5, brightness_shift=0.1)),
                                  np.floor(np.clip(25.5 + 0.5 * x, 0, 255) + 0.5))
    f = run(lambda i: fn.brightness(i, brightness=2.0, dtype="float32"))
    assert f.dtype == np.float32
    np.testing.assert_allclose(f, 2 * x, rtol=1e-6)  # DALI's bricon_ref: no input-range factor
    np.testing.assert_array_equal(run(lambda i: fn.contrast(i, contrast=2.0, contrast_center=100.0)),
                                  np.clip(100 + 2 * (x - 100), 0, 255))
    np.testing.assert_array_equal(run(lambda i: fn.contrast(i, contrast=0.5)),
                                  np.floor(128 + 0.5 * (x - 128) + 0.5))
    for graph, kw in ((lambda i: fn.hue(i, hue=70.0), dict(hue=70.0)),
                      (lambda i: fn.saturation(i, saturation=0.3), dict(saturation=0.3))):
        kw = {"hue": 0.0, "saturation": 1.0, **kw}
        close(run(graph), ref_color_twist(img[0], kw["hue"], kw["saturation"], 1.0, 1.0)[None], 1)


@pytest.mark.parametrize("graph,match", [
    (lambda i: fn.photometric_distort(i, hue=(-0.6, 0.0)), "hue"),
    (lambda i: fn.photometric_distort(i, contrast=(1.5, 0.5)), "contrast"),
    (lambda i: fn.photometric_distort(i, brightness=(-1.0, 1.0)), "brightness"),
    (lambda i: fn.photometric_distort(i, p=1.5), "p must be|argument p=1.5"),
    (lambda i: fn.grayscale(i, num_output_channels=2), "num_output_channels"),
    (lambda i: fn.grayscale(i, p=0.5, num_output_channels=1), "num_output_channels=1"),
    (lambda i: fn.color_twist(i, saturation=-1.0), "saturation"),
    (lambda i: fn.brightness(i, dtype="float16"), "dtype"),
    (lambda i: fn.contrast(fn.normalize(i, mean=0.0, std=1.0, output_layout="CHW"), contrast=2.0), "HWC"),
])
def test_bad_arguments_name_themselves(graph, match):
    _, imgs = fresh(16, [(6, 6, 3)] * 4)
    with pytest.raises(ValueError, match=match):
        _pipe(imgs, graph).run()

