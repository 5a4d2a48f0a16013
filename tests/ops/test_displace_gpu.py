"""water and sphere in a GPU pipeline (device='gpu' on uploaded images) against the same
pipeline on the CPU: sphere to the bit, water up to its sin / cos last bits (a pixel differs
only where its sample point lies at a pixel edge)."""
import numpy as np
import pytest

from detaug import Pipeline, fn
from helpers import to_np


def _run(images, device, **kw):
    pipe = Pipeline(batch_size=len(images), num_threads=1, seed=5,
                    device_id=0 if device == "gpu" else None)
    with pipe:
        img = fn.external_source(source=lambda si: images[si.idx_in_epoch], batch=False,
                                 size=len(images))
        if device == "gpu":
            img = img.gpu()
        mask = fn.random.coin_flip(probability=0.7)
        pipe.set_outputs(fn.sphere(img, mask=mask, device=device, **kw),
                         fn.water(img, ampl_x=6.0, phase_y=1.0, device=device, **kw), mask)
    pipe.dali_outputs = False
    try:
        outs = pipe.run()
    finally:
        pipe.close()
    return [[to_np(a) for a in o.data] for o in outs[:2]]


@pytest.mark.gpu
@pytest.mark.parametrize("interp", [None, "INTERP_LINEAR"])
def test_water_and_sphere_on_the_gpu_equal_the_cpu(rng, interp):
    images = [rng.integers(0, 256, (int(rng.integers(8, 60)), int(rng.integers(8, 60)), 3),
                           dtype=np.uint8) for _ in range(5)]
    cpu, gpu = _run(images, "cpu", interp_type=interp), _run(images, "gpu", interp_type=interp)
    for c, g in zip(cpu[0], gpu[0]):
        np.testing.assert_array_equal(g, c)
    for c, g in zip(cpu[1], gpu[1]):
        assert g.shape == c.shape and g.dtype == c.dtype
        assert (np.abs(g.astype(int) - c) > 1).mean() <= 1e-3
