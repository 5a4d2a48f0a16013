"""detaug.core.tensor_list (DALI's TensorList and Tensor methods on what ``pipe.run()`` returns):
dense and ragged batches, ``as_tensor`` refused on ragged ones as DALI does, per-sample ``at`` and
``shape()``, layouts callable as DALI's ``layout()``, ``np.array`` of a list, the detaug value a
TensorList carries; the same methods on an ImageBatch out of a pipeline."""
import numpy as np
import pytest

from detaug.core.batch import ImageBatch
from detaug.core.tensor_list import Layout, Tensor, TensorList, detaug_value


def test_dense_list_is_one_tensor(rng):
    samples = [rng.integers(0, 9, (2, 3), dtype=np.int32) for _ in range(4)]
    tl = TensorList(samples, value="raw", layout="HW")
    assert len(tl) == 4 and tl.device == "cpu" and tl.layout() == "HW"
    assert tl.is_dense_tensor() and tl.shape() == [(2, 3)] * 4
    t = tl.as_tensor()
    assert t.shape() == [4, 2, 3] and t.layout() == "NHW" and t.dtype == np.int32
    np.testing.assert_array_equal(np.array(t), np.stack(samples))
    np.testing.assert_array_equal(tl.as_array(), np.stack(samples))
    np.testing.assert_array_equal(np.array(tl, dtype=np.float64), np.stack(samples).astype(np.float64))
    np.testing.assert_array_equal(tl.at(2), samples[2])
    assert tl[1] is samples[1] and list(tl) == samples
    assert detaug_value(tl) == "raw" and detaug_value(5) == 5
    assert repr(tl).startswith("TensorListCPU(4 samples, shapes [(2, 3), (2, 3), (2, 3)]")


def test_ragged_list_refuses_as_tensor_as_dali_does(rng):
    tl = TensorList([np.zeros((2, 3)), np.zeros((4, 3))])
    assert not tl.is_dense_tensor() and tl.shape() == [(2, 3), (4, 3)]
    with pytest.raises(ValueError, match=r"as_tensor\(\): the samples have different shapes"):
        tl.as_tensor()
    with pytest.raises(ValueError):
        np.array(tl)
    assert tl.at(1).shape == (4, 3)


def test_samples_of_one_shape_but_two_dtypes_are_not_one_tensor():
    tl = TensorList([np.zeros(3, np.uint8), np.zeros(3, np.float32)])
    assert tl.is_dense_tensor()  # DALI's rule is on shapes
    with pytest.raises(ValueError):
        tl.as_tensor()


def test_tensor_methods_and_layout_string():
    a = np.arange(6).reshape(1, 2, 3)
    t = Tensor(a, "CHW")
    assert t.squeeze().shape() == [2, 3] and t.squeeze(0).layout() == "CHW"
    assert np.array(t.as_cpu()).tolist() == a.tolist()
    with pytest.raises(AttributeError, match="a host tensor has no __cuda_array_interface__"):
        t.__cuda_array_interface__
    lay = Layout("HWC")
    assert lay == "HWC" and lay() == "HWC" and isinstance(lay(), str)


def test_image_batches_have_the_same_methods(rng):
    dense = ImageBatch(rng.integers(0, 255, (3, 4, 5, 3), dtype=np.uint8), "cpu", "HWC")
    assert dense.is_dense_tensor() and dense.shape() == [(4, 5, 3)] * 3
    np.testing.assert_array_equal(dense.as_array(), dense.data)
    assert dense.as_tensor().layout() == "NHWC"
    ragged = ImageBatch([np.zeros((4, 5, 3), np.uint8), np.ones((2, 2, 3), np.uint8)], "cpu", "HWC")
    assert not ragged.is_dense_tensor() and ragged.at(1).sum() == 12
