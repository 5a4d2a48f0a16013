"""Decode processes decode straight into their ring (detaug/decode_proc.py): each image's size is
taken from its header, nvImageCodec writes into a region of the ring, and what the GPU cannot
decode is decoded by Pillow and uploaded into its region. Checked on files of mixed kinds (colour
and gray JPEGs, PNGs, sizes odd and even), on fresh random pixels, against the CPU decoder and
the in-thread GPU decode. Run on the device."""
import io

import numpy as np
import pytest
from conftest import fresh_seed
from PIL import Image

from detaug import Pipeline, fn
from helpers import close_pipelines, to_np, track  # noqa: F401  (autouse fixture)

pytestmark = pytest.mark.gpu


def _files(tmp_path, seed):
    """12 files: colour JPEGs, gray JPEGs, colour and gray PNGs, random sizes; their names."""
    rng = np.random.default_rng(seed)
    names = []
    for k in range(12):
        h, w = int(rng.integers(17, 300)), int(rng.integers(17, 300))
        kind = ("rgb.jpg", "gray.jpg", "rgb.png", "gray.png")[k % 4]
        # smooth pixels (JPEG keeps them close), with noise so no two files are alike
        yy, xx = np.mgrid[0:h, 0:w]
        base = (np.stack([xx * 255 / w, yy * 255 / h, (xx + yy) * 127 / (h + w)], -1)
                + rng.normal(0, 4, (h, w, 3)))
        a = np.clip(base, 0, 255).astype(np.uint8)
        img = Image.fromarray(a[:, :, 0] if "gray" in kind else a)
        buf = io.BytesIO()
        img.save(buf, "JPEG" if kind.endswith("jpg") else "PNG", **({"quality": 92} if kind.endswith("jpg") else {}))
        name = f"{k:02d}_{kind}"
        (tmp_path / name).write_bytes(buf.getvalue())
        names.append(name)
    return names


def _pipe(tmp_path, names, device, output_type, decode_processes=None):
    pipe = track(Pipeline(batch_size=6, num_threads=2, seed=0, device_id=0, prefetch_queue_depth=2,
                          decode_processes=decode_processes))
    with pipe:
        enc, _ = fn.readers.file(files=names, file_root=str(tmp_path))
        # (the encoded batch is not an output: the decode processes then read the files)
        pipe.set_outputs(fn.decoders.image(enc, device=device, output_type=output_type))
    return pipe


@pytest.mark.parametrize("output_type", ["RGB", "GRAY"])
@pytest.mark.parametrize("seed", [0, fresh_seed()])
def test_decode_into_the_ring_matches_the_cpu_and_the_in_thread_decode(tmp_path, output_type, seed):
    pytest.importorskip("nvidia.nvimgcodec")
    names = _files(tmp_path, seed)
    cpu = _pipe(tmp_path, names, "cpu", output_type)
    here = _pipe(tmp_path, names, "mixed", output_type, decode_processes=0)
    procs = _pipe(tmp_path, names, "mixed", output_type, decode_processes=2)
    procs.build()
    assert procs._decode_service is not None and procs._paths_only
    seen = 0
    for i in range(2):  # 12 files in batches of 6, in order
        (a,), (b,), (c,) = cpu.run(), here.run(), procs.run()
        for x, y, z, path in zip(a.data, b.data, c.data, names[6 * i:6 * i + 6], strict=True):
            y, z = to_np(y), to_np(z)
            assert x.shape == y.shape == z.shape, path
            assert x.shape[2] == (1 if output_type == "GRAY" else 3)
            # the processes' decode is the in-thread decode, pixel for pixel
            np.testing.assert_array_equal(z, y, err_msg=path)
            if path.endswith(".png"):  # lossless: exactly Pillow's pixels, but for the
                # colour-to-gray conversion (nvImageCodec's rounding differs from Pillow's by 1)
                if output_type == "GRAY" and "rgb" in path:
                    assert np.abs(z.astype(int) - x.astype(int)).max() <= 1, path
                else:
                    np.testing.assert_array_equal(z, x, err_msg=path)
            else:  # JPEG: nvJPEG's IDCT and colour conversion differ from libjpeg's by a few levels
                d = np.abs(z.astype(int) - x.astype(int))
                assert d.mean() < 1.5 and d.max() <= 12, (path, d.mean(), d.max())
            if output_type == "RGB" and "gray" in path:  # a gray file in RGB: equal channels
                assert (z[:, :, 0] == z[:, :, 1]).all() and (z[:, :, 1] == z[:, :, 2]).all()
            seen += 1
    assert seen == 12
