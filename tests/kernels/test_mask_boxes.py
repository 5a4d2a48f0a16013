"""The boxes of bitmap masks (tight boxes): core/instances.py ``mask_boxes`` (the NumPy twin) on
hand-computed masks and against a float64 reference built another way (each nonzero pixel's
centre, half a pixel out on each side), and shapes.cu ``mask_boxes`` (kernels/shapes.py
``mask_boxes_cupy``: one launch for the batch, a block per mask) equal to the twin: compiled with
g++ and run on the CPU (tests/helpers/cuda_emulation.py, its barriers kept), and on the GPU in the
``gpu``-marked tests. ``union_boxes``: a NaN row is no box."""
import numpy as np
import pytest

from detaug.core.instances import mask_boxes, union_boxes
from detaug.kernels import shapes as ks
from helpers import cuda_emulation as emu
from helpers import cupy as cp  # imported on first use: by a gpu test, where there is a GPU
from helpers import fresh_seed

SEEDS = [5, fresh_seed()]
NAN4 = [np.nan] * 4


def reference_boxes(planes):
    """(N, 4) float64: pixel (i, j) has its centre at (j + 0.5, i + 0.5) and covers half a
    pixel about it each way; the box spans the extreme centres, widened by 0.5."""
    out = np.full((len(planes), 4), np.nan)
    for k, m in enumerate(planes):
        i, j = np.nonzero(m)
        if len(i):
            cx, cy = j.astype(np.float64) + 0.5, i.astype(np.float64) + 0.5
            out[k] = [cx.min() - 0.5, cy.min() - 0.5, cx.max() + 0.5, cy.max() + 0.5]
    return out


def _hand_masks():
    """(masks (5, 5, 6), their boxes by hand)."""
    m = np.zeros((5, 5, 6), np.uint8)
    m[0, 2, 3] = 1                   # one pixel, row 2, column 3
    m[1, 1:4, 1] = 7                 # an L: column 1 rows 1-3, then row 3 columns 1-4
    m[1, 3, 1:5] = 1
    m[3] = 1                         # the whole plane
    m[4, 0, 5] = m[4, 4, 0] = 255    # two opposite corners
    want = np.array([[3, 2, 4, 3], [1, 1, 5, 4], NAN4, [0, 0, 6, 5], [0, 0, 6, 5]])
    return m, want


def _random(rng, n, h, w):
    """``n`` masks of mixed density (some empty, some a single pixel, some sparse blobs)."""
    dens = rng.choice([0.0, 0.002, 0.05, 0.5], n)
    m = (rng.random((n, h, w)) < dens[:, None, None]).astype(np.uint8)
    one = rng.random(n) < 0.2
    m[one] = 0
    for k in np.flatnonzero(one):
        m[k, rng.integers(h), rng.integers(w)] = rng.integers(1, 256)
    return m


def test_mask_boxes_hand_computed():
    m, want = _hand_masks()
    np.testing.assert_array_equal(mask_boxes(m), want)
    np.testing.assert_array_equal(mask_boxes(m.astype(bool)), want)
    assert mask_boxes(np.zeros((0, 4, 4), np.uint8)).shape == (0, 4)
    np.testing.assert_array_equal(mask_boxes(np.zeros((2, 0, 3), np.uint8)), [NAN4, NAN4])


@pytest.mark.parametrize("seed", SEEDS)
def test_mask_boxes_equal_a_float64_reference(seed):
    rng = np.random.default_rng(seed)
    for h, w in [(1, 1), (7, 13), (32, 20), (int(rng.integers(2, 60)), int(rng.integers(2, 60)))]:
        m = _random(rng, 12, h, w)
        np.testing.assert_array_equal(mask_boxes(m), reference_boxes(m))


def test_union_boxes_takes_either_where_one_is_missing():
    a = np.array([[1, 2, 3, 4], NAN4, [0, 5, 2, 6], NAN4])
    b = np.array([[0, 3, 2, 9], [4, 4, 5, 5], NAN4, NAN4])
    np.testing.assert_array_equal(union_boxes(a, b),
                                  [[0, 2, 3, 9], [4, 4, 5, 5], [0, 5, 2, 6], NAN4])
    assert union_boxes(a) is a


# ----------------------------------------------------------------------------- the kernel
@pytest.fixture
def emulated(shape_kernels):
    return emu.dev, np.asarray, shape_kernels.calls


BACKENDS = ["emulated", pytest.param("gpu", marks=pytest.mark.gpu)]


@pytest.fixture
def backend(request):
    """(to_dev, to_host, launches recorded or None) of the emulated kernel or of the GPU."""
    if request.param == "emulated":
        return request.getfixturevalue("emulated")
    return cp.asarray, cp.asnumpy, None


@pytest.mark.parametrize("backend", BACKENDS, indirect=True)
def test_kernel_hand_computed(backend):
    to_dev, to_host, calls = backend
    m, want = _hand_masks()  # 30 pixels a plane: read byte by byte
    np.testing.assert_array_equal(to_host(ks.mask_boxes_cupy(to_dev(m))), want)
    m8 = np.zeros((5, 5, 8), np.uint8)  # 40 pixels: read 4 at a time
    m8[:, :, :6] = m
    np.testing.assert_array_equal(to_host(ks.mask_boxes_cupy(to_dev(m8))), want)
    if calls is not None:
        assert calls == ["mask_boxes", "mask_boxes"]  # one launch for every mask


@pytest.mark.parametrize("backend", BACKENDS, indirect=True)
@pytest.mark.parametrize("seed", SEEDS)
def test_kernel_equals_twin_on_random_masks(backend, seed):
    to_dev, to_host, _ = backend
    rng = np.random.default_rng(seed)
    for h, w in [(9, 11), (16, 24), (int(rng.integers(1, 40)), int(rng.integers(1, 40)))]:
        m = _random(rng, int(rng.integers(1, 9)), h, w)
        np.testing.assert_array_equal(to_host(ks.mask_boxes_cupy(to_dev(m))),
                                      ks.mask_boxes_numpy(m))
    # planes whose size is a multiple of 4 at an address that is not: read byte by byte
    buf = _random(rng, 1, 1, 6 * 8 * 3 + 1).reshape(-1)
    view = to_dev(buf)[1:].reshape(3, 6, 8)
    np.testing.assert_array_equal(to_host(ks.mask_boxes_cupy(view)),
                                  mask_boxes(buf[1:].reshape(3, 6, 8)))


@pytest.mark.parametrize("backend", BACKENDS, indirect=True)
def test_kernel_empty_inputs(backend):
    to_dev, to_host, calls = backend
    assert to_host(ks.mask_boxes_cupy(to_dev(np.zeros((0, 4, 4), np.uint8)))).shape == (0, 4)
    np.testing.assert_array_equal(to_host(ks.mask_boxes_cupy(to_dev(np.zeros((2, 0, 3),
                                                                              np.uint8)))),
                                  [NAN4, NAN4])
    with pytest.raises(ValueError, match=r"\(N, H, W\)"):
        ks.mask_boxes_cupy(to_dev(np.zeros((4, 4), np.uint8)))
    if calls is not None:
        assert calls == []  # nothing to launch
