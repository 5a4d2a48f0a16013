"""Decoding: colour conversions, grayscale and CMYK JPEGs, PNG, and size checks."""
import io

import numpy as np
import pytest
from PIL import Image

from detaug import Pipeline, fn
from detaug.core.errors import SampleError
from helpers import images_of


def _write(tmp_path, name, img, fmt="JPEG", **kw):
    buf = io.BytesIO()
    img.save(buf, fmt, **kw)
    (tmp_path / name).write_bytes(buf.getvalue())
    return name


def _decode(tmp_path, names, output_type="RGB", device="cpu"):
    pipe = Pipeline(batch_size=len(names), seed=0, device_id=0 if device == "mixed" else None)
    with pipe:
        enc, _ = fn.readers.file(files=names, file_root=str(tmp_path))
        pipe.set_outputs(fn.decoders.image(enc, output_type=output_type, device=device))
    (out,) = pipe.run()
    pipe.close()
    return images_of(out)


@pytest.fixture
def odd_images(tmp_path):
    rng = np.random.default_rng(0)
    rgb = rng.integers(0, 256, (24, 32, 3), dtype=np.uint8)
    smooth = np.repeat(np.linspace(0, 255, 32, dtype=np.uint8)[None, :, None], 24, 0).repeat(3, 2)
    names = {
        "gray": _write(tmp_path, "gray.jpg", Image.fromarray(smooth[..., 0], "L"), quality=95),
        "cmyk": _write(tmp_path, "cmyk.jpg", Image.fromarray(smooth).convert("CMYK"), quality=95),
        "png": _write(tmp_path, "rgb.png", Image.fromarray(rgb), "PNG"),
    }
    return tmp_path, names, rgb, smooth


def test_grayscale_cmyk_png_give_three_channels(odd_images):
    tmp, names, rgb, smooth = odd_images
    gray, cmyk, png = _decode(tmp, [names["gray"], names["cmyk"], names["png"]])
    assert gray.shape == cmyk.shape == png.shape == (24, 32, 3)
    np.testing.assert_array_equal(png, rgb)  # lossless
    assert np.abs(gray.astype(int) - smooth).max() <= 3 and (gray[..., 0] == gray[..., 2]).all()
    assert np.abs(cmyk.astype(int) - smooth).mean() < 4


def test_bgr_and_gray_outputs(odd_images):
    tmp, names, rgb, _ = odd_images
    (bgr,) = _decode(tmp, [names["png"]], "BGR")
    np.testing.assert_array_equal(bgr, rgb[..., ::-1])
    (g,) = _decode(tmp, [names["png"]], "GRAY")
    assert g.shape == (24, 32, 1)
    ref = np.asarray(Image.fromarray(rgb).convert("L"))
    np.testing.assert_array_equal(g[..., 0], ref)


@pytest.mark.gpu
def test_gpu_decode_grayscale_cmyk_png(odd_images):
    pytest.importorskip("nvidia.nvimgcodec")
    tmp, names, _, _ = odd_images
    files = [names["gray"], names["cmyk"], names["png"]]
    cpu = _decode(tmp, files)
    gpu = _decode(tmp, files, device="mixed")
    for c, g in zip(cpu, gpu):
        assert g.shape == c.shape == (24, 32, 3)
        assert np.abs(c.astype(int) - g.astype(int)).mean() < 2


def test_annotated_size_mismatch_names_the_file(tmp_path):
    import json

    Image.fromarray(np.zeros((10, 20, 3), np.uint8)).save(tmp_path / "a.jpg")
    ann = {"images": [{"id": 1, "file_name": "a.jpg", "width": 30, "height": 10}],
           "annotations": [{"id": 5, "image_id": 1, "category_id": 1, "bbox": [1, 1, 5, 5],
                            "area": 25, "iscrowd": 0}],
           "categories": [{"id": 1, "name": "thing"}]}
    (tmp_path / "ann.json").write_text(json.dumps(ann))
    pipe = Pipeline(batch_size=1, seed=0)
    with pipe:
        enc, boxes = fn.readers.coco(file_root=str(tmp_path), annotations_file=str(tmp_path / "ann.json"))
        pipe.set_outputs(fn.decoders.image(enc), boxes)
    with pytest.raises(SampleError, match="a.jpg: decoded size 20x10 differs from the annotated size 30x10"):
        pipe.run()


def test_16_bit_grayscale_png_scales_to_8_bits():
    """A 16-bit grayscale PNG decodes to v * 255 / 65535 rounded, not clipped at 255 (an image
    of mean 127 once came out 98% white)."""
    from PIL import Image

    from detaug.ops.decode import decode_pillow

    a = np.linspace(0, 65535, 48 * 64).reshape(48, 64).astype(np.uint16)
    a[0, :4] = [0, 128, 129, 65535]
    buf = io.BytesIO()
    Image.fromarray(a).save(buf, "PNG")
    want = np.floor(a.astype(np.float64) * 255 / 65535 + 0.5).astype(np.uint8)
    gray = decode_pillow(np.frombuffer(buf.getvalue(), np.uint8), "GRAY")
    np.testing.assert_array_equal(gray[..., 0], want)
    assert gray[0, :4, 0].tolist() == [0, 0, 1, 255]
    rgb = decode_pillow(np.frombuffer(buf.getvalue(), np.uint8), "RGB")
    np.testing.assert_array_equal(rgb, np.repeat(want[..., None], 3, -1))
    assert abs(rgb.mean() - 127.5) < 1


def _tiff(a, mode=None):
    buf = io.BytesIO()
    Image.fromarray(a, mode).save(buf, "TIFF")
    return np.frombuffer(buf.getvalue(), np.uint8)


@pytest.mark.parametrize("array", [np.array([[0.25, 0.75]], np.float32),
                                   np.array([[0, 70000]], np.int32),
                                   np.array([[-5, 100]], np.int32)],
                         ids=["float32", "int32 over 16 bits", "negative int32"])
def test_pixels_with_no_8_bit_scale_are_refused_naming_the_file(tmp_path, array):
    """Pillow's convert clipped float and 32-bit pixels silently (a float
    image of 0.25 / 0.75 came out 0 / 0)."""
    from detaug.ops.decode import decode_pillow

    with pytest.raises(ValueError, match="no 8-bit scale is defined"):
        decode_pillow(_tiff(array), "RGB")
    (tmp_path / "f.tif").write_bytes(_tiff(array).tobytes())
    with pytest.raises(SampleError, match=r"f\.tif: cannot decode image .*no 8-bit scale"):
        _decode(tmp_path, ["f.tif"])


def test_32_bit_int_image_within_16_bits_scales_like_16_bit():
    from detaug.ops.decode import decode_pillow

    a = np.array([[0, 128, 129, 65535, 40000]], np.int32)
    gray = decode_pillow(_tiff(a), "GRAY")[..., 0]
    want = np.floor(a.astype(np.float64) * 255 / 65535 + 0.5).astype(np.uint8)
    np.testing.assert_array_equal(gray, want)
