"""DALI's tensor ops on both devices (detaug/dali/tensor_ops.py, kernels in
detaug/kernels/tensors.py: one function over NumPy or cupy): ``box_encoder``, ``coord_flip``,
``coord_transform``, ``cat``, ``stack``, ``reshape`` and ``shapes``.

On the host the batched kernels (ragged samples packed or padded) are checked against float64
references written per sample (box_encoder against DALI's BoxEncoder loops,
helpers.dali_refs), on fixed and fresh random ragged batches, in pipelines with per-sample
arguments. The ``gpu`` cases run the same graph with ``device='gpu'`` on uploaded batches and
compare every output with the CPU's (the NumPy twin is the kernel itself on NumPy)."""
import numpy as np
import pytest

from detaug import Pipeline, fn
from detaug.kernels import tensors as kt
from helpers import fresh_seed
from helpers.dali_refs import encode_ref

B = 5
ANCHORS = None


def _anchors(rng, m=30):
    a0 = rng.uniform(0, 0.7, (m, 2))
    return np.concatenate([a0, a0 + rng.uniform(0.05, 0.3, (m, 2))], 1).astype(np.float32)


def _samples(seed):
    """A ragged batch: per sample (n, 4) ltrb boxes (n from 0 to 5, one sample empty), (n,)
    int32 labels and (n, 2) float32 points."""
    rng = np.random.default_rng(seed)
    out = []
    for s in range(B):
        n = 0 if s == 1 else int(rng.integers(1, 6))
        b0 = rng.uniform(0, 0.7, (n, 2))
        boxes = np.concatenate([b0, b0 + rng.uniform(0.05, 0.3, (n, 2))], 1).astype(np.float32)
        out.append((boxes, rng.integers(1, 20, n).astype(np.int32),
                    rng.uniform(-1, 1, (n, 2)).astype(np.float32)))
    return out


KW = dict(criteria=0.3, offset=True, means=[0.1, -0.1, 0.0, 0.2], stds=[0.1, 0.1, 0.2, 0.2])


def _graph(seed, anchors, device):
    """One pipeline with every op of the family, its per-sample arguments as outputs too."""
    data = _samples(seed)
    pipe = Pipeline(batch_size=B, num_threads=1, seed=seed % 1000,
                    device_id=0 if device == "gpu" else None)
    with pipe:
        boxes, labels, pts = fn.external_source(source=lambda si: data[si.idx_in_epoch],
                                                batch=False, num_outputs=3, size=B)
        flip = fn.random.coin_flip(probability=0.5)
        centre = fn.random.uniform(range=[0.2, 0.8])
        mat = fn.random.uniform(range=[-2.0, 2.0], shape=4)
        if device == "gpu":
            boxes, labels, pts = boxes.gpu(), labels.gpu(), pts.gpu()
        enc, enc_labels = fn.box_encoder(boxes, labels, anchors=anchors.ravel().tolist(), **KW,
                                         device=device)
        enc_plain, _ = fn.box_encoder(boxes, labels, anchors=anchors.ravel().tolist(),
                                      criteria=0.5, device=device)
        flipped = fn.coord_flip(pts, flip_x=flip, center_x=centre, flip_y=1, center_y=0.25,
                                device=device)
        moved = fn.coord_transform(pts, M=mat, T=[0.5, -1.0], device=device)
        joined = fn.cat(boxes, boxes, axis=0, device=device)
        side = fn.cat(pts, pts, axis=1, device=device)
        stacked = fn.stack(enc_labels, enc_labels, axis=1, device=device)
        flat = fn.reshape(enc, shape=[-1], device=device)
        shapes = fn.shapes(pts, device=device)
        pipe.set_outputs(enc, enc_labels, enc_plain, flipped, moved, joined, side, stacked, flat,
                         shapes, flip, centre, mat)
    pipe.dali_outputs = False
    try:
        outs = pipe.run()
    finally:
        pipe.close()
    return data, [_host(o) for o in outs]


def _host(v):
    if isinstance(v, (list, tuple)):
        return [_host(a) for a in v]
    return v.get() if hasattr(v, "get") and not isinstance(v, dict) else np.asarray(v)


def _rows(v):
    return list(v) if not isinstance(v, list) else v


@pytest.mark.parametrize("seed", [7, fresh_seed()])
def test_tensor_ops_on_a_ragged_batch_equal_their_references(seed):
    anchors = _anchors(np.random.default_rng(seed + 1))
    data, outs = _graph(seed, anchors, "cpu")
    enc, enc_labels, enc_plain, flipped, moved, joined, side, stacked, flat, shapes, flip, \
        centre, mat = outs
    assert enc.shape == (B, len(anchors), 4) and enc.dtype == np.float32
    assert enc_labels.shape == (B, len(anchors)) and enc_labels.dtype == np.int32
    for s, (boxes, labels, pts) in enumerate(data):
        ref, ref_lab = encode_ref(boxes.astype(np.float64), labels, anchors.astype(np.float64),
                                  **{**KW, "means": np.array(KW["means"]),
                                     "stds": np.array(KW["stds"])})
        np.testing.assert_array_equal(enc_labels[s], ref_lab)
        np.testing.assert_allclose(enc[s], ref, rtol=1e-4, atol=1e-5)
        ref, _ = encode_ref(boxes.astype(np.float64), labels, anchors.astype(np.float64))
        np.testing.assert_allclose(enc_plain[s], ref, rtol=1e-6, atol=1e-7)
        # coord_flip: x -> 2 cx - x where the coin says, y -> 0.5 - y always
        p = pts.astype(np.float64)
        want = np.stack([np.where(flip[s], 2 * centre[s] - p[:, 0], p[:, 0]), 0.5 - p[:, 1]], 1)
        np.testing.assert_allclose(_rows(flipped)[s], want.astype(np.float32), rtol=0, atol=0)
        want = p @ mat[s].astype(np.float64).reshape(2, 2).T + [0.5, -1.0]
        np.testing.assert_allclose(_rows(moved)[s], want.astype(np.float32), rtol=1e-6, atol=1e-6)
        np.testing.assert_array_equal(_rows(joined)[s], np.concatenate([boxes, boxes]))
        np.testing.assert_array_equal(_rows(side)[s], np.concatenate([pts, pts], 1))
        np.testing.assert_array_equal(stacked[s], np.stack([enc_labels[s]] * 2, 1))
        np.testing.assert_array_equal(flat[s], enc[s].reshape(-1))
        np.testing.assert_array_equal(shapes[s], [len(pts), 2])
    assert isinstance(joined, list) and shapes.dtype == np.int64


def test_box_encoder_hand_case_in_a_batch():
    """Two samples through the batched kernel at once (box slot 0 of both, then slots 1 and 2 of
    the second): each keeps its own boxes and labels; a batch without boxes matches nothing."""
    anchors = np.array([[0, 0, 0.5, 0.5], [0.5, 0, 1, 0.5], [0, 0.5, 0.5, 1], [0.5, 0.5, 1, 1]],
                       np.float32)
    boxes = [np.array([[0, 0, 0.5, 0.4]], np.float32),
             np.array([[0.5, 0.5, 1, 1], [0.45, 0.45, 0.55, 0.55], [0.5, 0, 1, 0.5]], np.float32)]
    out, lab = kt.box_encoder_xp(np, boxes, [np.array([7]), np.array([1, 2, 3])], anchors, 0.5,
                                 False, np.zeros(4), np.ones(4))
    # sample 1: boxes 0 and 1 both have anchor 3 as their best (forced IoU 2): the last box
    # takes it, as DALI's ties go; box 0 is left without an anchor
    assert lab.tolist() == [[7, 0, 0, 0], [0, 3, 0, 2]]
    np.testing.assert_allclose(out[0, 0], [0.25, 0.2, 0.5, 0.4], rtol=1e-6)
    np.testing.assert_allclose(out[1, 3], [0.5, 0.5, 0.1, 0.1], rtol=1e-6)
    np.testing.assert_allclose(out[1, 2], [0.25, 0.75, 0.5, 0.5])  # unmatched: the anchor
    out, lab = kt.box_encoder_xp(np, np.zeros((2, 0, 4), np.float32), np.zeros((2, 0), np.int32),
                                 anchors, 0.5, True, np.zeros(4), np.ones(4))
    assert (out == 0).all() and (lab == 0).all() and out.shape == (2, 4, 4)


def test_dense_and_ragged_forms_give_the_same_values(rng):
    """A batch given dense (B, n, ...) or as a list of the same samples: the same results, in
    the input's form."""
    pts = rng.uniform(-1, 1, (3, 4, 2)).astype(np.float32)
    flips, centres = np.array([[1, 0], [0, 1], [1, 1]], bool), rng.uniform(0, 1, (3, 2))
    dense = kt.coord_flip_xp(np, pts, flips, centres)
    ragged = kt.coord_flip_xp(np, list(pts), flips, centres)
    assert isinstance(dense, np.ndarray) and isinstance(ragged, list)
    np.testing.assert_array_equal(dense, np.stack(ragged))
    m, t = rng.uniform(-1, 1, (3, 2, 2)), rng.uniform(-1, 1, (3, 2))
    np.testing.assert_array_equal(kt.coord_transform_xp(np, pts, m, t, np.float32),
                                  np.stack(kt.coord_transform_xp(np, list(pts), m, t, np.float32)))
    np.testing.assert_array_equal(kt.join_xp(np, [pts, pts], -1, True),
                                  kt.join_xp(np, [list(pts), pts], -1, True))


def test_rules_of_the_device_variants():
    """box_encoder's outputs are known before it runs (the memory plan reads them); the other
    ops' are the data's own (one unknown output)."""
    from detaug.core import shapes as S
    from detaug.graph.trace import REGISTRY

    schema = REGISTRY["box_encoder"]
    out = schema.rule([None, None], {**schema.args, "anchors": list(range(40))})
    assert out.values == (S.Array(160), S.Array(40))
    enc, lab = kt.box_encoder_xp(np, [np.zeros((2, 4), np.float32)], [np.zeros(2, np.int32)],
                                 np.ones((10, 4)), 0.5, False, np.zeros(4), np.ones(4))
    assert enc[0].nbytes == 160 and lab[0].nbytes == 40
    for name in ("coord_flip", "coord_transform", "cat", "stack", "reshape", "shapes"):
        s = REGISTRY[name]
        assert "gpu" in s.devices and s.plans is False
        assert s.rule([None] * s.inputs[0], dict(s.args)).values == (None,)


def test_a_shape_input_on_the_device_is_refused():
    """reshape on the GPU takes its shape as an argument: a shape input would come back to the
    host in the middle of the graph."""
    from types import SimpleNamespace

    from detaug.dali.tensor_ops import reshape

    class Dev:  # stands for a cupy array (its module's name is all the check reads)
        __module__ = "cupy._core.core"
        shape, ndim = (2, 3), 2

    op = SimpleNamespace(name="reshape", device="gpu")
    args = {"shape": None, "rel_shape": None, "layout": None, "src_dims": None}
    with pytest.raises(ValueError, match="shape input on the GPU"):
        reshape(None, op, [np.zeros((2, 6)), Dev()], args)


def test_ragged_device_outputs_are_held_until_dropped():
    """The hand-out hold (runtime/gpu/handout.py) sees every sample of a ragged output."""
    from detaug.runtime.gpu.handout import device_arrays

    class Dev:
        __cuda_array_interface__ = {}

    a, b, c = Dev(), Dev(), Dev()
    assert device_arrays([[a, b], c]) == [a, b, c]


def test_the_device_variants_host_code_through_a_stand_in_cupy(monkeypatch):
    """The 'gpu' kernels' own code (on the stream, parameters uploaded in one copy, empty ones
    made, ragged samples as device views) run with tests/helpers/cuda_emulation.py's stand-in
    cupy (NumPy behind cupy's names, uploads as identities): the NumPy kernels' values."""
    from helpers import cuda_emulation as emu

    data = _samples(11)
    anchors = _anchors(np.random.default_rng(3))
    boxes, labels, pts = ([d[k] for d in data] for k in range(3))
    want = [kt.box_encoder_xp(np, boxes, labels, anchors, 0.3, off, np.float32(KW["means"]),
                              np.float32(KW["stds"])) for off in (False, True)]
    flips, centres = np.array([[1, 0], [0, 1], [1, 1], [0, 0], [1, 1]], bool), np.full((B, 2), .3)
    m, t = np.random.default_rng(4).uniform(-1, 1, (B, 2, 2)), np.full((B, 2), 0.5)
    want_flip, want_move = (kt.coord_flip_xp(np, pts, flips, centres),
                            kt.coord_transform_xp(np, pts, m, t, np.float32))
    want_cat = kt.join_xp(np, [boxes, boxes], 0, False)
    emu.install_fake_cupy(monkeypatch, None, kt)
    dev = [[emu.dev(a) for a in col] for col in (boxes, labels, pts)]
    for off, (w_out, w_lab) in zip((False, True), want):
        out, lab = kt.box_encoder_cupy(dev[0], dev[1], anchors, 0.3, off,
                                       np.float32(KW["means"]), np.float32(KW["stds"]))
        assert isinstance(out, emu.FakeDeviceArray)
        np.testing.assert_array_equal(lab, w_lab)
        np.testing.assert_array_equal(out, w_out)
    for got, w in ((kt.coord_flip_cupy(dev[2], flips, centres), want_flip),
                   (kt.coord_transform_cupy(dev[2], m, t, np.float32), want_move),
                   (kt.join_cupy([dev[0], dev[0]], 0, False), want_cat)):
        assert isinstance(got, list) and len(got) == B
        for g, ws in zip(got, w):
            np.testing.assert_array_equal(g, ws)
    shapes = kt.host_values_cupy(np.array([[1, 2], [3, 4]]))
    assert isinstance(shapes, emu.FakeDeviceArray) and shapes.tolist() == [[1, 2], [3, 4]]


# ---- the device ------------------------------------------------------------------------------------
@pytest.mark.gpu
@pytest.mark.parametrize("seed", [7, fresh_seed()])
def test_tensor_ops_on_the_gpu_equal_the_cpu(seed):
    anchors = _anchors(np.random.default_rng(seed + 1))
    _, cpu = _graph(seed, anchors, "cpu")
    _, gpu = _graph(seed, anchors, "gpu")
    names = ["enc", "enc_labels", "enc_plain", "flipped", "moved", "joined", "side", "stacked",
             "flat", "shapes", "flip", "centre", "mat"]
    for name, c, g in zip(names, cpu, gpu):
        assert type(c) is type(g), name
        for cs, gs in zip(_rows(c), _rows(g)):
            assert cs.dtype == gs.dtype and cs.shape == gs.shape, name
            if name in ("enc", "flat"):  # (flat: enc reshaped; the device's log / divide may
                # round a last bit differently from NumPy's)
                np.testing.assert_allclose(gs, cs, rtol=1e-5, atol=1e-6, err_msg=name)
            else:
                np.testing.assert_array_equal(gs, cs, err_msg=name)


@pytest.mark.gpu
def test_box_encoder_kernel_on_the_device_equals_the_twin(cp, rng):
    anchors = _anchors(rng, 200)
    data = _samples(int(rng.integers(1 << 30)))
    boxes, labels = [d[0] for d in data], [d[1] for d in data]
    for offset in (False, True):
        host = kt.box_encoder_xp(np, boxes, labels, anchors, 0.4, offset, np.float32(KW["means"]),
                                 np.float32(KW["stds"]))
        dev = kt.box_encoder_cupy([cp.asarray(b) for b in boxes], [cp.asarray(x) for x in labels],
                                  anchors, 0.4, offset, np.float32(KW["means"]),
                                  np.float32(KW["stds"]))
        np.testing.assert_array_equal(dev[1].get(), host[1])
        np.testing.assert_allclose(dev[0].get(), host[0], rtol=1e-5, atol=1e-6)


@pytest.mark.gpu
def test_a_ragged_batch_goes_up_in_one_copy_and_casts_on_the_device(cp):
    """``.gpu()`` of a ragged host batch: a list of device arrays (views of one upload) that
    DALI's cast and transpose take on the device too."""
    data = _samples(3)
    pipe = Pipeline(batch_size=B, num_threads=1, seed=1, device_id=0)
    with pipe:
        pts = fn.external_source(source=lambda si: data[si.idx_in_epoch][2], batch=False, size=B)
        up = pts.gpu()
        pipe.set_outputs(up, fn.cast(up, dtype="float64"), fn.transpose(up, perm=(1, 0)))
    pipe.dali_outputs = False
    try:
        up, cast, tr = pipe.run()
    finally:
        pipe.close()
    for s, (_, _, p) in enumerate(data):
        assert isinstance(up[s], cp.ndarray)
        np.testing.assert_array_equal(up[s].get(), p)
        assert cast[s].dtype == cp.float64 and (cast[s].get() == p).all()
        np.testing.assert_array_equal(tr[s].get(), p.T)
