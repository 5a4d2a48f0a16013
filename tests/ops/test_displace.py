"""DALI's water and sphere (detaug/ops/displace.py): hand-computed pixels, a float64 reference
written here from DALI's documented rules (per pixel, with math.sin / math.cos), the mask, the
fill, and the refusals (boxes, other filters)."""
import math

import numpy as np
import pytest

import detaug.types as types
from detaug import Pipeline, fn


def run(op, images, **kw):
    pipe = Pipeline(batch_size=len(images))
    with pipe:
        x = fn.external_source(source=lambda: images, layout="HWC")
        pipe.set_outputs(getattr(fn, op)(x, **kw))
    pipe.build()
    out = pipe.run()[0]
    pipe.close()
    return [np.asarray(out.at(i)) for i in range(len(images))]


def ref(img, point, linear, fill):
    """float64 reference: output pixel (x, y) samples ``img`` at ``point(x, y, H, W)``; NN takes
    floor, LINEAR blends the 4 taps around the point less 0.5; taps outside take ``fill``."""
    h, w, c = img.shape
    out = np.zeros((h, w, c))

    def tap(xi, yi):
        return img[yi, xi].astype(np.float64) if 0 <= xi < w and 0 <= yi < h else np.full(c, fill, float)

    for y in range(h):
        for x in range(w):
            px, py = point(x, y, h, w)
            if not linear:
                out[y, x] = tap(math.floor(px), math.floor(py))
                continue
            px, py = px - 0.5, py - 0.5
            x0, y0 = math.floor(px), math.floor(py)
            qx, qy = px - x0, py - y0
            out[y, x] = ((1 - qy) * ((1 - qx) * tap(x0, y0) + qx * tap(x0 + 1, y0))
                         + qy * ((1 - qx) * tap(x0, y0 + 1) + qx * tap(x0 + 1, y0 + 1)))
    return out


def water_point(ax, ay, fx, fy, phx, phy):
    return lambda x, y, h, w: (x + ax * math.sin(fx * y + phx), y + ay * math.cos(fy * x + phy))


def sphere_point(x, y, h, w):
    mx, my = w / 2, h / 2
    d = int(max(mx, my))
    tx, ty = x + 0.5 - mx, y + 0.5 - my
    r = math.hypot(tx, ty) / d
    return mx + r * tx, my + r * ty


def test_water_hand_case_linear():
    # sx = x + 1.5 (freq_x 0, phase pi/2), sy = y + 0.25: bilinear at (x + 1, y - 0.25), so
    # out = 0.25 * in[y-1, x+1] + 0.75 * in[y, x+1], fill 100 outside, rounded half up
    img = (10 * np.arange(3)[:, None] + np.arange(4)[None, :]).astype(np.uint8)[..., None]
    out = run("water", [img], ampl_x=1.5, freq_x=0.0, phase_x=math.pi / 2, ampl_y=0.25,
              freq_y=0.0, phase_y=0.0, interp_type=types.INTERP_LINEAR, fill_value=100)[0]
    np.testing.assert_array_equal(out[..., 0], [[26, 27, 27, 100], [9, 10, 11, 100],
                                                [19, 20, 21, 100]])


def test_sphere_hand_case_nn():
    # 8x8: mid (4, 4), d 4; e.g. pixel (x=1, y=4): t = (-2.5, 0.5), |t| / d = 0.6374, point
    # (2.41, 4.32) -> in[4, 2]; pixel (2, 2): point (3.20, 3.20) -> in[3, 3]; (0, 0) -> (-0.33, ..)
    img = np.arange(64, dtype=np.uint8).reshape(8, 8, 1) + 1
    out = run("sphere", [img], fill_value=200)[0][..., 0]
    assert out[0, 0] == 200
    assert out[4, 1] == img[4, 2, 0] and out[2, 2] == img[3, 3, 0]
    assert out[4, 7] == img[4, 7, 0] and out[4, 0] == img[4, 0, 0]


@pytest.mark.parametrize("linear", [False, True])
def test_water_and_sphere_match_the_reference_on_random_images(rng, linear):
    imgs = [rng.uniform(0, 255, (int(rng.integers(5, 13)), int(rng.integers(5, 13)), 3))
            .astype(np.float32) for _ in range(2)]
    a = rng.uniform(-3, 3, 2)
    f = rng.uniform(0.1, 1.0, 2)
    ph = rng.uniform(-3, 3, 2)
    interp = types.INTERP_LINEAR if linear else types.INTERP_NN
    wat = run("water", imgs, ampl_x=a[0], ampl_y=a[1], freq_x=f[0], freq_y=f[1], phase_x=ph[0],
              phase_y=ph[1], interp_type=interp, fill_value=7.5)
    sph = run("sphere", imgs, interp_type=interp)
    for im, w, s in zip(imgs, wat, sph):
        assert w.dtype == s.dtype == np.float32 and w.shape == s.shape == im.shape
        rw = ref(im, water_point(*a, *f, *ph), linear, 7.5)
        rs = ref(im, sphere_point, linear, 0.0)
        if linear:  # continuous in the point: float32 points differ from float64 by ~1e-5 px
            np.testing.assert_allclose(w, rw, atol=0.05)
            np.testing.assert_allclose(s, rs, atol=0.05)
        else:  # floor may flip where a point lies within float32 error of a pixel edge
            assert (np.abs(w - rw).max(axis=-1) > 0).mean() < 0.02
            assert (np.abs(s - rs).max(axis=-1) > 0).mean() < 0.02


def test_defaults_mask_and_uint8(rng):
    imgs = [rng.integers(0, 256, (9, 11, 3), dtype=np.uint8) for _ in range(2)]
    mask = np.array([1, 0], np.int32)
    pipe = Pipeline(batch_size=2)
    with pipe:
        x = fn.external_source(source=lambda: imgs, layout="HWC")
        m = fn.external_source(source=lambda: [mask[:1], mask[1:]])
        pipe.set_outputs(fn.water(x, mask=m))
    pipe.build()
    out = pipe.run()[0]
    pipe.close()
    # DALI's defaults: ampl 10, freq 2 pi / 128, phase 0, INTERP_NN, fill 0
    r = ref(imgs[0], water_point(10, 10, 2 * math.pi / 128, 2 * math.pi / 128, 0, 0), False, 0)
    got = np.asarray(out.at(0))
    assert got.dtype == np.uint8
    assert (np.abs(got - r).max(axis=-1) > 0).mean() < 0.02
    np.testing.assert_array_equal(out.at(1), imgs[1])  # mask 0: copied


def test_refusals():
    pipe = Pipeline(batch_size=1)
    with pipe:
        enc, boxes = fn.readers.coco(file_root="x", annotations_file="x.json")
        img = fn.decoders.image(enc, device="cpu")
        with pytest.raises(TypeError, match="water: takes images only.*boxes cannot follow"):
            fn.water(img, boxes)
        with pytest.raises(TypeError, match="sphere: takes images only"):
            fn.sphere(img, boxes)
        with pytest.raises(ValueError, match="water.*ampl_x"):
            fn.water(img, ampl_x=float("nan"))
    img = np.zeros((4, 4, 3), np.uint8)
    with pytest.raises(NotImplementedError, match=r"water\w*: interp_type"):
        run("water", [img], interp_type=types.INTERP_CUBIC)
    with pytest.raises(ValueError, match=r"sphere\w*: fill_value must lie in 0..255"):
        run("sphere", [img], fill_value=300)
