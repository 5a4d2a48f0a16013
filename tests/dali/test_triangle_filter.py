"""DALI's triangle resampling filter (kernels/resample.py, resample.cu) against a float64 model
written from DALI's own code path (dali/kernels/imgproc/resample: ``Triangular(radius)`` rescales
the 3-coefficient filter [0, 1, 0] to a support ``S = max(1, 2 radius)``, anchor ``S / 2``;
``InitializeResamplingFilter`` starts at ``src0 + 0.5 scale - 0.5 - anchor``, takes
``ceil(S)`` taps from ``ceil(x * scale + src0)`` and divides by their sum; ``DefaultFilterRadius``
is ``in / out`` when shrinking, 1 otherwise), not from the module's formula: hand-computed cases,
fresh random images, the GPU kernel against the twin, and one launch per batch."""
from __future__ import annotations

import math

import numpy as np
import pytest

from detaug.kernels import resample as R
from detaug.kernels import warp as W
from helpers import cuda_emulation as emu
from helpers import fresh_seed
from helpers.dali_refs import assert_rounded


def dali_axis(n_in: int, n_out: int, scale: float | None = None, origin: float = 0.0,
              flip: bool = False) -> np.ndarray:
    """(n_out, n_in) float64 weights of one axis as DALI's CPU setup computes them (in double
    here): ``scale`` input pixels per output pixel (default ``n_in / n_out``), output 0 at input
    ``origin``; taps clamped to [0, n_in - 1]. ``flip``: the output reversed (DALI's negative
    scale, which mirrors about the ROI)."""
    scale = n_in / n_out if scale is None else scale
    radius = scale if scale > 1 else 1.0
    support_f = max(1.0, 2 * radius)
    step = 2.0 / support_f  # coefficient-index units per input pixel
    anchor = support_f / 2
    support = math.ceil(2.0 / step - 1e-12)

    def tri(x):  # DALI's ResamplingFilter::operator() over coefficients [0, 1, 0]
        if not x > -1 or x >= 3:
            return 0.0
        x0 = math.floor(x)
        c = [0.0, 1.0, 0.0]
        f0 = c[x0] if 0 <= x0 < 3 else 0.0
        f1 = c[x0 + 1] if 0 <= x0 + 1 < 3 else 0.0
        return f0 + (x - x0) * (f1 - f0)

    src0 = origin + 0.5 * scale - 0.5 - anchor
    w = np.zeros((n_out, n_in))
    for x in range(n_out):
        sx0f = x * scale + src0
        sx0 = math.ceil(sx0f)
        f0 = (sx0 - sx0f) * step
        c = np.array([tri(f0 + k * step) for k in range(support + 1)])  # one more: a zero
        for k, ck in enumerate(c / c.sum()):
            w[x, min(max(sx0 + k, 0), n_in - 1)] += ck
    return w[::-1] if flip else w


def dali_resize(img: np.ndarray, oh: int, ow: int, **kw) -> np.ndarray:
    """The float64 resize (oh, ow, C), not rounded."""
    wy, wx = dali_axis(img.shape[0], oh), dali_axis(img.shape[1], ow, **kw)
    return np.einsum("ij,jkc,lk->ilc", wy, img.astype(np.float64), wx, optimize=True)


def _scale(ih, iw, oh, ow):
    return np.diag([ow / iw, oh / ih, 1.0])


def test_hand_computed():
    """1 x 4 -> 1 x 2 (radius 2): the taps at -1..2 weigh 1/8, 3/8, 3/8, 1/8 (the first clamped
    onto pixel 0): 0.5 * 0 + 0.375 * 40 + 0.125 * 80 = 25 and 95 (detaug's warp: 20 and 100).
    1 x 6 -> 1 x 2 (radius 3): weights 1/9, 2/9, 3/9, 2/9, 1/9: 10 and 35. Enlarging 1 x 2 ->
    1 x 4 is bilinear: 0, 25, 75, 100. Two equal rows shrunk to one stay that row."""
    cases = [([0, 40, 80, 120], 2, [25, 95]), ([0, 9, 18, 27, 36, 45], 2, [10, 35]),
             ([0, 100], 4, [0, 25, 75, 100])]
    for row, ow, want in cases:
        img = np.tile(np.asarray(row, np.uint8)[None, :, None], (2, 1, 1))
        m = _scale(2, len(row), 1, ow)[None]
        got = R.resample_numpy([img], m, [[1, ow]], out_dtype=np.float32)[0][0, :, 0]
        np.testing.assert_allclose(got, want, atol=1e-4)
        np.testing.assert_allclose(dali_resize(img, 1, ow)[0, :, 0], want, atol=1e-12)
    box = W.warp_numpy([np.tile(np.asarray([0, 40, 80, 120], np.uint8)[None, :, None], (2, 1, 1))],
                       _scale(2, 4, 1, 2)[None], [[1, 2]])[0][0, :, 0]
    assert box.tolist() == [20, 100]  # detaug's own filter is another one


def test_fresh_random_against_dali_model():
    """Random sizes, each axis shrunk (up to 5x) or enlarged, 1 and 3 channels, uint8 and
    float32 outputs, ragged batch, a flip in the map; the float32 fast path beside the twin."""
    rng = np.random.default_rng(fresh_seed())
    imgs, mats, sizes, refs = [], [], [], []
    for k in range(6):
        c = 3 if k % 2 else 1
        ih, iw = (int(v) for v in rng.integers(3, 50, 2))
        oh, ow = (max(1, int(round(n * rng.uniform(0.2, 2.5)))) for n in (ih, iw))
        img = rng.integers(0, 256, (ih, iw, c), dtype=np.uint8)
        flip = bool(k % 3 == 2)
        m = _scale(ih, iw, oh, ow)
        ref = dali_resize(img, oh, ow)
        if flip:  # mirror after the resize: x -> ow - x
            m = np.array([[-1.0, 0, ow], [0, 1, 0], [0, 0, 1]]) @ m
            ref = ref[:, ::-1]
        imgs.append(img), mats.append(m), sizes.append((oh, ow)), refs.append(ref)
    for C in (1, 3):
        sel = [k for k in range(6) if imgs[k].shape[2] == C]
        f = R.resample_numpy([imgs[k] for k in sel], np.stack([mats[k] for k in sel]),
                             [sizes[k] for k in sel], out_dtype=np.float32)
        u = R.resample_numpy([imgs[k] for k in sel], np.stack([mats[k] for k in sel]),
                             [sizes[k] for k in sel])
        fast = R.resample_numpy([imgs[k] for k in sel], np.stack([mats[k] for k in sel]),
                                [sizes[k] for k in sel], precision=np.float32)
        for j, k in enumerate(sel):
            np.testing.assert_allclose(f[j], refs[k], atol=2e-4)
            assert_rounded(u[j], refs[k], tol=1e-6)
            # the CPU backend's float32 sums: within a level, and only next to a half
            d = np.abs(fast[j].astype(int) - u[j].astype(int))
            near = np.abs(refs[k] - np.floor(refs[k]) - 0.5) < 1e-3
            assert d.max() <= 1 and not (d[~near] > 0).any()


def test_window_clamp_and_fill():
    """A region whose clamp is a window (a crop that the resize reads) and a rect smaller than
    the output (a window reaching past the image): taps clamp to the window's columns and rows,
    outside the rect is the fill."""
    rng = np.random.default_rng(fresh_seed())
    img = rng.integers(0, 256, (30, 40, 3), dtype=np.uint8)
    win = img[5:25, 8:32]  # the crop, 20 x 24, resized to 8 x 10, placed at (2, 1) in 11 x 13
    m = np.array([[1, 0, 2.0], [0, 1, 1.0], [0, 0, 1]]) @ _scale(20, 24, 8, 10) @ \
        np.array([[1, 0, -8.0], [0, 1, -5.0], [0, 0, 1]])
    region = (np.array([[8.0, 32.0, 5.0, 25.0]]), np.array([[8, 31, 5, 24]]), np.zeros((1, 0, 4)),
              np.zeros((1, 0, 3)), np.zeros(1, np.int64))
    out = R.resample_numpy([img], m[None], [[11, 13]], fill=7.0, out_dtype=np.float32,
                           region=region)[0]
    ref = np.full((11, 13, 3), 7.0)
    ref[1:9, 2:12] = dali_resize(win, 8, 10)
    np.testing.assert_allclose(out, ref, atol=2e-4)


def test_normalize_layout_and_refusal():
    """The warp's epilogue (mean / std, CHW, float16) and a rotation refused by name."""
    rng = np.random.default_rng(fresh_seed())
    img = rng.integers(0, 256, (17, 23, 3), dtype=np.uint8)
    ref = dali_resize(img, 7, 9)
    mean, std = np.array([10.0, 20.0, 30.0]), np.array([2.0, 4.0, 8.0])
    out = R.resample_numpy([img], _scale(17, 23, 7, 9)[None], [[7, 9]], mean=mean, std=std,
                           out_dtype=np.float16, layout="CHW")[0]
    np.testing.assert_allclose(out.astype(np.float64), ((ref - mean) / std).transpose(2, 0, 1),
                               rtol=2e-3, atol=2e-3)
    rot = np.array([[0.0, -1, 23], [1, 0, 0], [0, 0, 1]])
    with pytest.raises(ValueError, match="axis-aligned"):
        R.resample_numpy([img], rot[None], [[23, 17]])


def test_mixed_batch_takes_each_filter_per_sample():
    """filtered_numpy: the axis-aligned samples DALI's filter, the rotated one the warp, in
    order; each equal to its own call."""
    rng = np.random.default_rng(fresh_seed())
    imgs = [rng.integers(0, 256, (20, 24, 3), dtype=np.uint8) for _ in range(3)]
    c, s = math.cos(0.3), math.sin(0.3)
    rot = np.array([[c, -s, 5.0], [s, c, -3.0], [0, 0, 1]]) @ _scale(20, 24, 10, 12)
    mats = np.stack([_scale(20, 24, 10, 12), rot, _scale(20, 24, 10, 12)])
    tri = R.triangle_samples(mats)
    assert tri.tolist() == [True, False, True]
    out = R.filtered_numpy(imgs, mats, [[10, 12]] * 3, tri, fill=0.0)
    assert out.shape == (3, 10, 12, 3)
    assert_rounded(out[0], dali_resize(imgs[0], 10, 12), tol=1e-6)
    assert_rounded(out[2], dali_resize(imgs[2], 10, 12), tol=1e-6)
    np.testing.assert_array_equal(out[1], W.warp_numpy([imgs[1]], rot[None], [[10, 12]])[0])


def test_cuda_source_on_the_cpu(resample_cu, monkeypatch):
    """resample.cu compiled by g++ (tests/helpers/cuda_emulation.py) through resample_cupy's own
    host code: one launch, the twin's uint8 values (but next to a half, float32 sums), float32
    within 1e-3, normalised CHW; a ragged batch and a dense one."""
    resample_cu.calls.clear()
    emu.install_fake_cupy(monkeypatch, resample_cu, R, W)  # (W: the launch half they share)
    rng = np.random.default_rng(fresh_seed())
    for C, dense in ((3, False), (1, True)):
        imgs, mats, sizes = _gpu_case(rng, 3, C, dense)
        got = R.resample_cupy([emu.dev(i) for i in imgs], mats, sizes, fill=5.0)
        want = R.resample_numpy(imgs, mats, sizes, fill=5.0, out_dtype=np.float32)
        for g, w in zip(got, want):
            assert_rounded(g, w.astype(np.float64))
        got = R.resample_cupy([emu.dev(i) for i in imgs], mats, sizes, mean=[2.0] * C,
                              std=[3.0] * C, out_dtype=np.float32, layout="CHW")
        want = R.resample_numpy(imgs, mats, sizes, mean=[2.0] * C, std=[3.0] * C,
                                out_dtype=np.float32, layout="CHW")
        for g, w in zip(got, want):
            np.testing.assert_allclose(np.asarray(g), w, atol=1e-3)
    assert len(resample_cu.calls) == 4  # one launch a batch


# ---- GPU ------------------------------------------------------------------------------------
def _gpu_case(rng, n, C, dense):
    shapes = [(int(h), int(w)) for h, w in rng.integers(8, 90, (n, 2))]
    imgs = [rng.integers(0, 256, (h, w, C), dtype=np.uint8) for h, w in shapes]
    if dense:
        imgs = [rng.integers(0, 256, (40, 56, C), dtype=np.uint8) for _ in range(n)]
        shapes = [(40, 56)] * n
    sizes = [(max(1, int(h * rng.uniform(0.15, 1.8))), max(1, int(w * rng.uniform(0.15, 1.8))))
             for h, w in shapes]
    if dense:
        sizes = [sizes[0]] * n
    mats = np.stack([_scale(h, w, oh, ow) for (h, w), (oh, ow) in zip(shapes, sizes)])
    return imgs, mats, sizes


@pytest.mark.gpu
@pytest.mark.parametrize("C,dense", [(3, False), (1, True), (3, True)])
def test_gpu_matches_twin(cp, C, dense):
    """resample_cupy = resample_numpy: uint8 the twin's (but next to a half: float32 sums),
    float32 within 1e-3; normalised CHW float16."""
    from detaug.kernels.launch import launch_counts

    rng = np.random.default_rng(fresh_seed())
    imgs, mats, sizes = _gpu_case(rng, 5, C, dense)
    dev = [cp.asarray(i) for i in imgs]
    before = launch_counts().get("resample_u8_hwc_c%d" % C, 0)
    got = R.resample_cupy(dev, mats, sizes, fill=3.0)
    assert launch_counts().get("resample_u8_hwc_c%d" % C, 0) == before + 1  # one launch a batch
    want = R.resample_numpy(imgs, mats, sizes, fill=3.0, out_dtype=np.float32)
    for g, w in zip(got, want):
        assert_rounded(cp.asnumpy(g), w.astype(np.float64))
    gf = R.resample_cupy(dev, mats, sizes, out_dtype=np.float32)
    wf = R.resample_numpy(imgs, mats, sizes, out_dtype=np.float32)
    for g, w in zip(gf, wf):
        np.testing.assert_allclose(cp.asnumpy(g), w, atol=1e-3)
    mean, std = [5.0] * C, [3.0] * C
    gh = R.resample_cupy(dev, mats, sizes, mean=mean, std=std, out_dtype=np.float16, layout="CHW")
    wh = R.resample_numpy(imgs, mats, sizes, mean=mean, std=std, out_dtype=np.float16, layout="CHW")
    for g, w in zip(gh, wh):
        np.testing.assert_allclose(cp.asnumpy(g).astype(np.float32), w.astype(np.float32),
                                   rtol=2e-3, atol=2e-3)


@pytest.mark.gpu
def test_gpu_mixed_batch_matches_host(cp):
    """MixedLaunch (axis-aligned samples resampled, the rotated one warped) = filtered_numpy
    with the warp's twin: the resampled samples as resample_cupy's, the warped one within a
    level."""
    rng = np.random.default_rng(fresh_seed())
    imgs = [rng.integers(0, 256, (30, 36, 3), dtype=np.uint8) for _ in range(3)]
    c, s = math.cos(0.4), math.sin(0.4)
    mats = np.stack([_scale(30, 36, 12, 14), np.array([[c, -s, 4.0], [s, c, -2.0], [0, 0, 1]])
                     @ _scale(30, 36, 12, 14), _scale(30, 36, 12, 14)])
    tri = R.triangle_samples(mats)
    kw = dict(fill=np.zeros((3, 3)), mean=None, std=None, out_dtype=np.uint8, layout="HWC",
              region=None, antialias=True)
    ln = R.MixedLaunch([cp.asarray(i) for i in imgs], mats, [[12, 14]] * 3, tri, kw)
    keep = [cp.ascontiguousarray(cp.asarray(i)) for i in imgs]
    got = cp.asnumpy(ln.launch([a.data.ptr for a in keep]))
    assert got.shape == (3, 12, 14, 3)
    fkw = {**kw, "out_dtype": np.float32}
    want = R.filtered_numpy(imgs, mats, [[12, 14]] * 3, tri, **fkw).astype(np.float64)
    assert_rounded(got[0], want[0])
    assert_rounded(got[2], want[2])
    # the warped sample: warp.cu's own bound against its twin (tests/kernels/test_warp.py)
    assert np.abs(got[1] - want[1]).max() <= 1.0 + 1e-3


def test_planned_ahead_gpu_launch_equals_the_cpu_pipeline(resample_cu, monkeypatch):
    """A GPU pipeline (decoders.image(device='mixed'), then DALI's resize of the images alone and
    a mirror) planned ahead on a machine without a GPU: its planned launch is DALI's filter (a
    ResampleLaunch, pickled as a worker sends it), and run by resample.cu (emulated) on the
    images Pillow decodes it gives the CPU pipeline's pixels (the float64 twin) within a level."""
    import os

    from detaug import Pipeline
    from detaug import fn, types
    from detaug.core import backend
    from detaug.core.batch import DeferredWarp
    from detaug.ops.decode import decode_pillow
    from detaug.ops.sources import read_files
    from helpers import COCO
    from helpers.cases import plan_without_cupy, stand_in_gpu

    def graph(pipe, device):
        with pipe:
            enc, _ = fn.readers.coco(file_root=os.path.join(COCO, "images"),
                                     annotations_file=os.path.join(COCO, "annotations.json"),
                                     random_shuffle=True)
            img = fn.flip(fn.resize(fn.decoders.image(enc, device=device), size=(37, 45)),
                          horizontal=fn.random.coin_flip())
            # the same pixels unrounded (float32), for the CPU reference
            pipe.set_outputs(img, fn.crop_mirror_normalize(img, mean=0.0, std=1.0,
                                                           dtype=types.FLOAT, output_layout="HWC"))

    stand_in_gpu(monkeypatch, resample_cu, R, W)
    gpu = Pipeline(batch_size=3, seed=5, device_id=0, host_processes=0, decode_processes=1)
    graph(gpu, "mixed")
    gpu.build()
    assert gpu.plan_ahead
    before = backend.cpu_warp()
    backend.set_cpu_warp("reference")
    cpu = Pipeline(batch_size=3, seed=5, num_threads=1, host_processes=0)
    try:
        graph(cpu, "cpu")
        plan = plan_without_cupy(gpu, (0, 1, 1))
        ref, ref_f = cpu.run_batch(1, epoch=0)
        warp = plan.values[(gpu._outputs[0].op.id, gpu._outputs[0].index)].raw
        assert isinstance(warp, DeferredWarp) and isinstance(warp.launch, R.ResampleLaunch)
        pixels = [decode_pillow(buf) for buf in read_files(warp.source.enc.paths)]
        got = warp.launch.launch([p.ctypes.data for p in pixels])
        assert got.shape == (3, 37, 45, 3)
        assert_rounded(ref.data, np.asarray(ref_f.data, np.float64))  # the twin's own
        assert_rounded(got, np.asarray(ref_f.data, np.float64))
    finally:
        backend.set_cpu_warp(before)
        gpu.close()
        cpu.close()
