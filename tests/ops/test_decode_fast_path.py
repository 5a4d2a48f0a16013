"""The CPU decoder's OpenCV path for plain baseline JPEGs (detaug/ops/decode.py): the same pixels
as Pillow on every JPEG of examples/ and the tests and on fresh random images of each chroma
layout, the same errors (word for word) on corrupt and truncated files, EXIF orientation not
applied, and Pillow kept where OpenCV would differ (progressive, CMYK, GRAY of colour)."""
import glob
import io
import os
import re

import cv2
import numpy as np
import pytest

from helpers import fresh_seed
from hypothesis import given, settings, strategies as st
from PIL import Image

import detaug.ops.decode as dec
from detaug.core.errors import SampleError
from detaug.ops.sources import EncodedBatch
from helpers.fuzz import CORPUS, FUZZ, byte_mutation

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _outcome(data: bytes, out: str, fast: bool, monkeypatch):
    """('ok', pixels) or ('err', message) of the decoder, with or without the OpenCV path, and
    whether the OpenCV path gave the pixels."""
    used = []

    def counting(*a):
        r = _OPENCV(*a)
        used.append(r is not None)
        return r

    monkeypatch.setattr(dec, "_opencv_jpeg", counting if fast else (lambda *a: None))
    enc = EncodedBatch([np.frombuffer(data, np.uint8)], ["dir/x.jpg"])
    try:
        return ("ok", dec._decode_one(enc, 0, out)), any(used)
    except SampleError as e:
        return ("err", re.sub(r"0x[0-9a-f]+", "0x", str(e))), any(used)  # object addresses
    finally:
        monkeypatch.setattr(dec, "_opencv_jpeg", _OPENCV)


_OPENCV = dec._opencv_jpeg


def _same(a, b):
    if a[0] != b[0]:
        return False
    if a[0] == "err":
        return a[1] == b[1]
    return a[1].dtype == b[1].dtype and a[1].shape == b[1].shape and np.array_equal(a[1], b[1])


def _jpeg(img, **kw):
    buf = io.BytesIO()
    img.save(buf, "JPEG", **kw)
    return buf.getvalue()


def _random_image(rng, h=37, w=53):
    """Smooth plus noise: chroma subsampling and the IDCT both matter."""
    y, x = np.mgrid[0:h, 0:w]
    base = np.stack([x * 255 / w, y * 255 / h, (x + y) * 127 / (w + h)], -1)
    return np.clip(base + rng.normal(0, 30, (h, w, 3)), 0, 255).astype(np.uint8)


def _variants(rng):
    pil = Image.fromarray(_random_image(rng))
    exif = Image.Exif()
    exif[0x0112] = 6  # rotate 90: must NOT be applied
    return {"420": _jpeg(pil, subsampling=2, quality=85), "444": _jpeg(pil, subsampling=0),
            "422": _jpeg(pil, subsampling=1), "gray": _jpeg(pil.convert("L")),
            "progressive": _jpeg(pil, progressive=True), "cmyk": _jpeg(pil.convert("CMYK")),
            "exif6": _jpeg(pil, exif=exif.tobytes()), "optimized": _jpeg(pil, optimize=True),
            "restarts": cv2.imencode(".jpg", np.asarray(pil), [cv2.IMWRITE_JPEG_RST_INTERVAL, 1])[1]
            .tobytes()}


FAST = {"420", "444", "422", "gray", "exif6", "optimized", "restarts"}


@pytest.mark.parametrize("seed", [0, fresh_seed()])
def test_fresh_images_same_pixels_and_path_taken(seed, monkeypatch):
    rng = np.random.default_rng(seed)
    for name, data in _variants(rng).items():
        for out in ("RGB", "BGR", "GRAY"):
            ref, _ = _outcome(data, out, False, monkeypatch)
            got, used = _outcome(data, out, True, monkeypatch)
            assert ref[0] == "ok" and _same(ref, got), (seed, name, out)
            # the OpenCV path is taken where it is exact, Pillow kept elsewhere
            expect = name in FAST and (out != "GRAY" or name == "gray")
            assert used == expect, (name, out, used)
    # EXIF orientation 6 is not applied: the stored 37 x 53 grid comes out
    ok, _ = _outcome(_variants(rng)["exif6"], "RGB", True, monkeypatch)
    assert ok[1].shape == (37, 53, 3)


def test_every_jpeg_of_the_repository_same_pixels(monkeypatch):
    files = sorted(glob.glob(os.path.join(REPO, "examples", "**", "*.jp*g"), recursive=True)
                   + glob.glob(os.path.join(REPO, "tests", "**", "*.jp*g"), recursive=True))
    assert len(files) >= 20
    n_fast = 0
    for path in files:
        with open(path, "rb") as f:
            data = f.read()
        ref, _ = _outcome(data, "RGB", False, monkeypatch)  # (GRAY: the fresh images' test)
        got, used = _outcome(data, "RGB", True, monkeypatch)
        assert _same(ref, got), path
        n_fast += used
    assert n_fast >= len(files) - 5  # the COCO/VOC-style files take the fast path


def test_corpus_and_truncations_fail_as_pillow_does(monkeypatch):
    data = _variants(np.random.default_rng(1))["420"]
    cases = [data[:n] for n in (2, 3, 100, len(data) // 2, len(data) - 2, len(data) - 1)]
    cases += [data[:len(data) // 2] + b"\xff\xd9",  # truncated, an EOI appended
              data[:300] + b"\xff\xd9" + data[300:]]  # a marker inside the scan's data
    folder = os.path.join(CORPUS, "image")
    for name in sorted(os.listdir(folder)):
        with open(os.path.join(folder, name), "rb") as f:
            cases.append(f.read())
    for c in cases:
        ref, _ = _outcome(c, "RGB", False, monkeypatch)
        got, used = _outcome(c, "RGB", True, monkeypatch)
        assert _same(ref, got), (len(c), ref[1] if ref[0] == "err" else "")
        if not c.endswith(b"\xff\xd9"):
            assert not used  # no EOI at the end: Pillow's truncation error
        if ref[0] == "err":
            assert ref[1].startswith("dir/x.jpg: ")


SEED_JPEGS = [_jpeg(Image.fromarray(_random_image(np.random.default_rng(2), 24, 32)), **kw)
              for kw in ({"subsampling": 2}, {"subsampling": 0}, {})]


@settings(FUZZ, max_examples=150)
@given(data=st.sampled_from(SEED_JPEGS).flatmap(byte_mutation),
       out=st.sampled_from(["RGB", "BGR", "GRAY"]))
def test_mutated_jpegs_decode_or_fail_exactly_as_pillow(data, out):
    mp = pytest.MonkeyPatch()
    try:
        ref, _ = _outcome(data, out, False, mp)
        got, _ = _outcome(data, out, True, mp)
    finally:
        mp.undo()
    assert _same(ref, got), ref[1] if ref[0] == "err" else "pixels differ"
