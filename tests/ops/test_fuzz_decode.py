"""Fuzzing the CPU decoder: random bytes, truncations and byte flips of JPEG and PNG files
through ``fn.decoders.image`` (CPU backend).

Every input either decodes to uint8 HWC or raises ``SampleError`` naming the file; through a
pipeline under ``on_error="skip"`` each undecodable file is counted once and every batch keeps
its size. Bounded and derandomized (see tests/readers/test_fuzz_readers.py for running longer:
``FUZZ_EXAMPLES=5000 FUZZ_RANDOM=1``). Inputs that once escaped go in tests/fuzz_corpus/image/.
"""
import io
import os
import shutil
import tempfile
import warnings

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st
from PIL import Image

from detaug import Pipeline, fn
from detaug.core.errors import SampleError
from detaug.ops.decode import _decode_one
from detaug.ops.sources import EncodedBatch
from helpers.fuzz import CORPUS, EXAMPLES, FUZZ, byte_mutation, time_bound


def _encoded(fmt, **kw):
    rng = np.random.default_rng(0)
    img = Image.fromarray(rng.integers(0, 256, (24, 32, 3), dtype=np.uint8))
    buf = io.BytesIO()
    img.save(buf, fmt, **kw)
    return buf.getvalue()


SEEDS = {"jpg": _encoded("JPEG", quality=90), "png": _encoded("PNG"),
         "progressive.jpg": _encoded("JPEG", progressive=True)}

image_bytes = st.one_of(
    st.sampled_from(sorted(SEEDS)).flatmap(lambda k: byte_mutation(SEEDS[k])),
    st.sampled_from(sorted(SEEDS)).flatmap(lambda k: st.integers(0, len(SEEDS[k])).map(
        lambda n, k=k: SEEDS[k][:n])),
    st.binary(max_size=64).map(lambda b: b"\xff\xd8\xff" + b),
    st.binary(max_size=64).map(lambda b: b"\x89PNG\r\n\x1a\n" + b),
    st.binary(max_size=128),
)


def decode_or_named_error(data: bytes, path="fuzz/x.img"):
    """True when ``data`` decodes, False when it raises SampleError naming ``path``."""
    enc = EncodedBatch([np.frombuffer(data, np.uint8)], [path])
    with time_bound(), warnings.catch_warnings():
        warnings.simplefilter("ignore")  # Pillow's DecompressionBombWarning and the like
        try:
            arr = _decode_one(enc, 0, "RGB")
        except SampleError as e:
            assert path in str(e) and e.path == path
            return False
    assert arr.dtype == np.uint8 and arr.ndim == 3 and arr.shape[2] == 3
    return True


@FUZZ
@given(data=image_bytes)
def test_fuzz_cpu_decode(data):
    decode_or_named_error(data)


@pytest.fixture(scope="module")
def image_dir():
    tmp = tempfile.mkdtemp(prefix="fuzz-img-")
    yield tmp
    shutil.rmtree(tmp)


@settings(FUZZ, max_examples=max(EXAMPLES // 6, 6))
@given(bad=st.lists(image_bytes, min_size=1, max_size=3))
def test_fuzz_pipeline_skip_keeps_batch_size(image_dir, bad):
    """Good and fuzzed files through a pipeline: raise names a bad file; skip counts each bad
    file once and every batch keeps its size."""
    names = []
    for i, data in enumerate(bad + [SEEDS["jpg"], SEEDS["png"], SEEDS["jpg"]]):
        names.append(f"f{i}.img")
        with open(os.path.join(image_dir, names[-1]), "wb") as f:
            f.write(data)
    n_bad = sum(not decode_or_named_error(d, n) for d, n in zip(bad, names))
    for on_error in ("raise", "skip"):
        pipe = Pipeline(batch_size=2, num_threads=1, seed=0, on_error=on_error)
        with pipe:
            enc, _ = fn.readers.file(files=names, file_root=image_dir)
            pipe.set_outputs(fn.decoders.image(enc))
        try:
            with time_bound(20), warnings.catch_warnings():
                warnings.simplefilter("ignore")
                batches = [out for (out,) in pipe]
        except SampleError as e:
            assert on_error == "raise" and n_bad and any(n in str(e) for n in names[:len(bad)])
            continue
        finally:
            pipe.close()
        assert all(b.batch_size == 2 for b in batches)
        if on_error == "skip":  # every bad file named; the count is a separate test below
            assert len({p for p, _ in pipe.stats["skipped_files"]}) == n_bad, pipe.stats
            assert pipe.stats["skipped"] >= n_bad
        else:
            assert n_bad == 0


def _corpus():
    folder = os.path.join(CORPUS, "image")
    return sorted(os.path.join(folder, n) for n in os.listdir(folder)) \
        if os.path.isdir(folder) else []


@pytest.mark.parametrize("case", _corpus(), ids=os.path.basename)
def test_corpus_image(case):
    with open(case, "rb") as f:
        decode_or_named_error(f.read())


def test_each_skipped_file_counted_once_per_epoch(image_dir):
    names = []
    for i, data in enumerate([b"", b"\xff\xd8\xff", SEEDS["jpg"], SEEDS["png"], SEEDS["jpg"]]):
        names.append(f"c{i}.img")
        with open(os.path.join(image_dir, names[-1]), "wb") as f:
            f.write(data)
    pipe = Pipeline(batch_size=2, num_threads=1, seed=0, on_error="skip")
    with pipe:
        enc, _ = fn.readers.file(files=names, file_root=image_dir)
        pipe.set_outputs(fn.decoders.image(enc))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        batches = [out for (out,) in pipe]
    assert all(b.batch_size == 2 for b in batches)
    assert pipe.stats["skipped"] == 2, pipe.stats["skipped_files"]
    assert sorted(p for p, _ in pipe.stats["skipped_files"]) == [os.path.join(image_dir, "c0.img"),
                                                               os.path.join(image_dir, "c1.img")]
    assert sum("skipping" in str(w.message) for w in caught) == 2  # one warning per file
    pipe.reset()  # the next epoch counts its own skips, once each
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert all(out.batch_size == 2 for (out,) in pipe)
    pipe.close()
    assert pipe.stats["skipped"] == 4, pipe.stats["skipped_files"]


def _file_pipe(image_dir, blobs, batch_size):
    names = []
    for i, data in enumerate(blobs):
        names.append(f"r{i:03d}.img")
        with open(os.path.join(image_dir, names[-1]), "wb") as f:
            f.write(data)
    pipe = Pipeline(batch_size=batch_size, num_threads=1, seed=0, on_error="skip")
    with pipe:
        enc, _ = fn.readers.file(files=names, file_root=image_dir)
        pipe.set_outputs(fn.decoders.image(enc))
    return pipe


def test_a_long_run_of_bad_files_is_skipped_not_given_up(image_dir):
    """70 corrupt files in a row (more than any fixed retry count) are skipped: every batch
    keeps its size, each bad file is counted once, and only good images come out."""
    blobs = [b"\xff\xd8\xff" + bytes([k]) for k in range(70)] + [SEEDS["jpg"], SEEDS["png"]] * 3
    pipe = _file_pipe(image_dir, blobs, 4)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        batches = [out for (out,) in pipe]
    pipe.close()
    assert len(batches) == 19 and all(b.batch_size == 4 for b in batches)
    assert pipe.stats["skipped"] == 70


def test_every_file_bad_raises_instead_of_looping(image_dir):
    pipe = _file_pipe(image_dir, [b"not an image %d" % k for k in range(5)], 2)
    with pytest.raises(RuntimeError, match="every record of the epoch order failed"):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            pipe.run()
    pipe.close()
