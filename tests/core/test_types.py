"""detaug.core.types (DALI's ``nvidia.dali.types`` names, public as ``detaug.types``): every constant
is the string detaug's ops take, compares and hashes as it; batch layouts name the sample layout;
the mappings to NumPy dtypes, colour spaces, filters and layouts, and their refusals."""
import numpy as np
import pytest

import detaug.types as public
from detaug.core import types as T


def test_constants_are_the_strings_ops_take():
    assert T.RGB == "RGB" and T.FLOAT == "float32" and T.FLOAT16 == "float16" and T.UINT8 == "uint8"
    assert T.NCHW == "CHW" and T.NHWC == "HWC" and T.INTERP_LINEAR == "linear"
    assert {"RGB": 1}[T.RGB] == 1 and {T.FLOAT: 2}["float32"] == 2  # hash as the string
    assert str(T.BGR) == "BGR" and repr(T.BGR) == "DALIImageType.BGR"
    assert T.DALITensorLayout is T.TensorLayout
    assert public.FLOAT is T.FLOAT and set(T.__all__) <= set(dir(public))


def test_every_data_type_maps_to_its_numpy_dtype():
    for m in T.DALIDataType:
        assert T.to_numpy_type(m) == np.dtype(m.value)
    assert T.to_numpy_type(T.FLOAT) == np.float32 and T.to_numpy_type(T.BOOL) == np.bool_
    assert T.to_numpy_type("int16") == np.int16 and T.to_numpy_type(np.uint8) == np.uint8


def test_image_types():
    assert [T.image_type(v) for v in (T.RGB, T.BGR, T.GRAY, "RGB")] == ["RGB", "BGR", "GRAY", "RGB"]
    for v in (T.YCbCr, T.ANY_DATA, "HSV"):
        with pytest.raises(ValueError, match="detaug decodes to RGB, BGR or GRAY only"):
            T.image_type(v)


@pytest.mark.parametrize("value,want", [(T.INTERP_LINEAR, "linear"), (T.INTERP_TRIANGULAR, "triangular"),
                                        ("INTERP_LINEAR", "linear"), ("interp_triangular", "triangular"),
                                        ("Linear", "linear")])
def test_interp_types_detaug_has(value, want):
    assert T.interp_type(value) == want


@pytest.mark.parametrize("value", [T.INTERP_NN, T.INTERP_CUBIC, T.INTERP_LANCZOS3, T.INTERP_GAUSSIAN,
                                   "INTERP_NN", "bicubic"])
def test_interp_types_detaug_lacks_are_refused_naming_the_op(value):
    with pytest.raises(ValueError, match=r"warp_affine: interp_type .* is not available in detaug"):
        T.interp_type(value, "warp_affine")


def test_layouts_name_the_sample_layout():
    assert [T.layout(v) for v in (T.NCHW, T.NHWC, "NCHW", "NHWC", "CHW", "HWC", T.NFHWC)] == \
        ["CHW", "HWC", "CHW", "HWC", "CHW", "HWC", "FHWC"]
