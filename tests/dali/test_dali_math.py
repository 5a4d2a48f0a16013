"""DALI's arithmetic on DataNodes, its math functions (fn.math.*, detaug.math), the
slice of plain tensors and the TensorFlow plugin's DALIDataset, checked against NumPy float64
references on fresh random inputs and against DALI's documented type promotion."""
import numpy as np
import pytest

import detaug.fn as fn
import detaug.math as dmath
from detaug.pipeline import Pipeline

# name -> float64 reference (on positive inputs, in the domains of all of them)
UNARY = {"math.abs": np.abs, "math.fabs": np.abs, "math.sqrt": np.sqrt,
         "math.rsqrt": lambda x: 1 / np.sqrt(x), "math.cbrt": np.cbrt, "math.exp": np.exp,
         "math.log": np.log, "math.log2": np.log2, "math.log10": np.log10, "math.sin": np.sin,
         "math.cos": np.cos, "math.tan": np.tan, "math.asin": np.arcsin,
         "math.acos": np.arccos, "math.atan": np.arctan, "math.sinh": np.sinh,
         "math.cosh": np.cosh, "math.tanh": np.tanh, "math.floor": np.floor,
         "math.ceil": np.ceil}
BINARY = {"math.min": np.minimum, "math.max": np.maximum, "math.pow": np.power,
          "math.fpow": np.power, "math.atan2": np.arctan2}


def _run(samples, graph, batch=None):
    pipe = Pipeline(batch_size=batch or len(samples), num_threads=1, seed=3)
    with pipe:
        x = fn.external_source(source=lambda si: samples[si.idx_in_epoch], batch=False,
                               size=len(samples))
        out = graph(x)
        pipe.set_outputs(*(out if isinstance(out, tuple) else (out,)))
    return pipe.run()


@pytest.mark.parametrize("name", sorted(UNARY))
def test_unary_math_matches_numpy(name, rng):
    xs = [rng.uniform(0.05, 0.95, (int(rng.integers(1, 5)), 3)).astype(np.float32) for _ in range(3)]
    short = name.split(".")[1]
    (out,) = _run(xs, lambda x: getattr(fn.math, short)(x))
    (same,) = _run(xs, lambda x: getattr(dmath, short)(x))
    for k, x in enumerate(xs):
        ref = UNARY[name](x.astype(np.float64))
        assert out.at(k).dtype == np.float32
        np.testing.assert_allclose(out.at(k), ref, rtol=2e-6, atol=1e-7)
        np.testing.assert_array_equal(same.at(k), out.at(k))


@pytest.mark.parametrize("name", sorted(BINARY))
def test_binary_math_matches_numpy(name, rng):
    xs = [rng.uniform(0.05, 2.0, (4,)).astype(np.float32) for _ in range(3)]
    (out,) = _run(xs, lambda x: getattr(dmath, name.split(".")[1])(x, x * 0.5 + 0.25))
    for k, x in enumerate(xs):
        x64 = x.astype(np.float64)
        y64 = (x * np.float32(0.5) + np.float32(0.25)).astype(np.float64)
        np.testing.assert_allclose(out.at(k), BINARY[name](x64, y64), rtol=2e-6)


def test_operators_and_dalis_type_promotion(rng):
    ints = [rng.integers(-50, 50, (5,)).astype(np.int32) for _ in range(2)]
    outs = _run(ints, lambda x: (x + 3, x * 2.5, x / 4, x // 3, x % 7, -x, 2 - x, x ** 2,
                                 x < 0, dmath.clamp(x, -10, 10), dmath.min(x, 0)))
    add, mul, div, fdiv, mod, neg, rsub, sq, lt, cl, mn = outs
    for k, x in enumerate(ints):
        assert add.at(k).dtype == np.int32 and add.at(k).tolist() == (x + 3).tolist()
        assert mul.at(k).dtype == np.float32  # int32 * float32 is float32 (NumPy: float64)
        np.testing.assert_allclose(mul.at(k), x * 2.5)
        assert div.at(k).dtype == np.float32  # integer / integer: float32, as DALI
        np.testing.assert_allclose(div.at(k), x / 4)
        # C++'s // and %, as DALI's: truncation toward zero, the dividend's sign
        assert fdiv.at(k).tolist() == [int(v / 3) for v in x.tolist()]
        assert mod.at(k).tolist() == [int(np.fmod(v, 7)) for v in x.tolist()]
        assert neg.at(k).tolist() == (-x).tolist() and rsub.at(k).tolist() == (2 - x).tolist()
        assert sq.at(k).tolist() == (x ** 2).tolist() and lt.at(k).dtype == np.bool_
        assert lt.at(k).tolist() == (x < 0).tolist()
        assert cl.at(k).tolist() == np.clip(x, -10, 10).tolist()
        assert mn.at(k).tolist() == np.minimum(x, 0).tolist()
    # uint8 images with an int32 constant promote to int32; ragged samples work one by one
    imgs = [rng.integers(0, 256, (int(rng.integers(2, 6)), 3, 3), dtype=np.uint8) for _ in range(2)]
    (tw,) = _run(imgs, lambda x: x * 2)
    for k, im in enumerate(imgs):
        assert tw.at(k).dtype == np.int32 and tw.at(k).tolist() == (im.astype(np.int32) * 2).tolist()


def test_per_sample_scalars_broadcast_with_vectors(rng):
    xs = [rng.uniform(0, 1, (3,)).astype(np.float32) for _ in range(4)]
    out, u = _run(xs, lambda x: (lambda u: (x * u, u))(fn.random.uniform(range=(1.0, 2.0))))
    for k, x in enumerate(xs):
        np.testing.assert_allclose(out.at(k), x.astype(np.float64) * float(u.at(k)), rtol=1e-6)


def test_slice_of_plain_tensors(rng):
    xs = [rng.integers(0, 100, (6, 4)).astype(np.float32) for _ in range(2)]
    a, b, c, d = _run(xs, lambda x: (fn.slice(x, (2, 1), (3, 2), axes=[0, 1]),        # ints
                                     fn.slice(x, 1, 2, axes=[0]),
                                     fn.slice(x, fn.constant(fdata=[0.5]),            # relative
                                              fn.constant(fdata=[0.5]), axes=[0]),
                                     fn.slice(x, (4,), (4,), axes=[0], out_of_bounds_policy="pad",
                                              fill_values=-1.0)))
    for k, x in enumerate(xs):
        np.testing.assert_array_equal(a.at(k), x[2:5, 1:3])
        np.testing.assert_array_equal(b.at(k), x[1:3])
        np.testing.assert_array_equal(c.at(k), x[3:6])
        np.testing.assert_array_equal(d.at(k), np.concatenate([x[4:], np.full((2, 4), -1.0)]))
    with pytest.raises(ValueError, match="outside"):
        _run(xs, lambda x: fn.slice(x, (4,), (4,), axes=[0]))


def test_integer_anchor_slices_images_in_pixels(rng):
    imgs = [rng.integers(0, 256, (20, 30, 3), dtype=np.uint8) for _ in range(2)]
    (out,) = _run(imgs, lambda x: fn.slice(x, fn.constant(idata=[5, 3]),
                                           fn.constant(idata=[10, 8])))
    for k, im in enumerate(imgs):
        np.testing.assert_array_equal(out.at(k), im[3:11, 5:15])  # anchor (x, y), shape (w, h)


@pytest.mark.slow  # TensorFlow's import alone takes ~8 s here
def test_dali_dataset_gives_the_pipeline_outputs():
    tf = pytest.importorskip("tensorflow")
    import detaug.plugin.tf as dali_tf

    pipe = Pipeline(batch_size=2, num_threads=1, seed=1)
    with pipe:
        x = fn.external_source(source=lambda si: np.full((3,), si.idx_in_epoch, np.int32),
                               batch=False, size=4)
        pipe.set_outputs(x, x * 2.5)
    ds = dali_tf.DALIDataset(pipeline=pipe, batch_size=2, output_shapes=((2, 3), (2, 3)),
                             output_dtypes=(tf.int32, tf.float32), device_id=0)
    got = [(a.numpy(), b.numpy()) for a, b in ds]
    assert len(got) == 2  # the source's epoch: StopIteration ends the dataset
    for k, (a, b) in enumerate(got):
        np.testing.assert_array_equal(a, [[2 * k] * 3, [2 * k + 1] * 3])
        np.testing.assert_allclose(b, a * 2.5)
    with pytest.raises(TypeError, match="input_datasets"):
        dali_tf.DALIDataset(pipeline=pipe, output_dtypes=(tf.int32,), input_datasets={})
