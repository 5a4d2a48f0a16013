"""detaug.ops.rand (fn.random.uniform / coin_flip / normal / choice) called on a stream whose
uniforms and normals are given, so each output is computed by hand: DALI's defaults, a
per-sample argument, the dtype conversion (round half away from zero, clamp), and the refusals
naming the op; then the ops in a pipeline on fresh seeds (values in range, per-sample ranges)."""
import re
from types import SimpleNamespace

import numpy as np
import pytest

from detaug import Pipeline, fn, types
from detaug.ops import rand as R

from helpers import close_pipelines  # noqa: F401 (fixture)


class GivenRNG:
    """The draws of a (B, k) stream given: ``u`` uniforms in [0, 1), ``z`` standard normals."""

    def __init__(self, u=None, z=None):
        self.u, self.z = (None if u is None else np.asarray(u, np.float64),
                          None if z is None else np.asarray(z, np.float64))

    def uniform(self, k=1, low=0.0, high=1.0):
        return low + (high - low) * self.u

    def normal(self, k=1, mean=0.0, stddev=1.0):
        return mean + stddev * self.z

    def integers(self, k, n):
        return np.floor(self.u * n).astype(np.int64)


def call(f, name, b, args, **draws):
    ctx = SimpleNamespace(batch_size=b, rng=lambda op: GivenRNG(**draws))
    defaults = {"shape": None, "dtype": None}
    return f(ctx, SimpleNamespace(name=name), [], {**defaults, **args})


def test_uniform_maps_the_draws_onto_range_and_picks_among_values():
    u = [[0.0], [0.25], [0.5], [0.999]]
    got = call(R.uniform, "random.uniform", 4, {"range": (-1.0, 1.0), "values": None}, u=u)
    assert got.dtype == np.float32 and got.shape == (4,)
    np.testing.assert_allclose(got, [-1.0, -0.5, 0.0, 0.998], rtol=1e-6)
    per_sample = np.array([[0, 10], [2, 4], [-8, -4], [1, 1]], np.float32)
    got = call(R.uniform, "random.uniform", 4, {"range": per_sample, "values": None}, u=u)
    np.testing.assert_allclose(got, [0.0, 2.5, -6.0, 1.0], rtol=1e-6)
    got = call(R.uniform, "random.uniform", 4, {"range": (-1.0, 1.0), "values": [3, 5, 9]}, u=u)
    np.testing.assert_array_equal(got, [3, 3, 5, 9])


def test_uniform_shape_and_dtype_round_half_away_and_clamp():
    u = np.array([[0.0, 0.5], [0.75, 1.0]])  # on range [-1.5, 200.5]: -1.5, 99.5, 150.0, 200.5
    got = call(R.uniform, "random.uniform", 2,
               {"range": (-1.5, 200.5), "values": None, "shape": 2, "dtype": types.INT8}, u=u)
    assert got.dtype == np.int8 and got.shape == (2, 2)
    np.testing.assert_array_equal(got, [[-2, 100], [127, 127]])
    got = call(R.uniform, "random.uniform", 2,
               {"range": (-1.5, 200.5), "values": None, "shape": [2], "dtype": "uint8"}, u=u)
    np.testing.assert_array_equal(got, [[0, 100], [150, 201]])


def test_convert_follows_dalis_rules():
    op = SimpleNamespace(name="random.x")
    v = np.array([-2.5, -0.5, 0.5, 2.5, 40000.0, -40000.0])
    np.testing.assert_array_equal(R.convert(op, v, types.INT16, np.float32),
                                  [-3, -1, 1, 3, 32767, -32768])
    np.testing.assert_array_equal(R.convert(op, v, "bool", np.float32), v != 0)
    assert R.convert(op, v, None, np.float32).dtype == np.float32
    assert R.convert(op, v, types.FLOAT64, np.float32).dtype == np.float64


def test_coin_flip_is_one_below_the_probability():
    u = [[0.1], [0.49], [0.5], [0.9]]
    got = call(R.coin_flip, "random.coin_flip", 4, {"probability": 0.5}, u=u)
    assert got.dtype == np.int32
    np.testing.assert_array_equal(got, [1, 1, 0, 0])
    got = call(R.coin_flip, "random.coin_flip", 4,
               {"probability": np.array([0.0, 0.5, 1.0, 0.95]), "dtype": types.BOOL}, u=u)
    np.testing.assert_array_equal(got, [False, True, True, True])


def test_normal_scales_and_shifts_the_standard_draws_per_sample():
    z = [[-1.0], [0.0], [2.0]]
    got = call(R.normal, "random.normal", 3, {"mean": np.array([1.0, 2.0, 3.0]), "stddev": 0.5}, z=z)
    assert got.dtype == np.float32
    np.testing.assert_allclose(got, [0.5, 2.0, 4.0])
    got = call(R.normal, "random.normal", 3, {"mean": 0.0, "stddev": 10.0, "dtype": types.UINT8}, z=z)
    np.testing.assert_array_equal(got, [0, 0, 20])


def test_choice_picks_by_cumulative_probability():
    u = [[0.1], [0.25], [0.5], [0.6]]
    got = call(R.choice, "random.choice", 4, {"values": [7, 8, 9], "p": [0.2, 0.3, 0.5]}, u=u)
    np.testing.assert_array_equal(got, [7, 8, 9, 9])  # 0.5 sits on the boundary: the next value
    got = call(R.choice, "random.choice", 4, {"values": 4, "p": None}, u=u)
    np.testing.assert_array_equal(got, [0, 1, 2, 2])


@pytest.mark.parametrize("f,name,args,message", [
    (R.uniform, "random.uniform", {"range": (0.0, 1.0), "values": [1, 2]}, "mutually exclusive"),
    (R.uniform, "random.uniform", {"range": (-1.0, 1.0), "values": []}, "values is empty"),
    (R.uniform, "random.uniform", {"range": (2.0, 1.0), "values": None}, "needs lo <= hi"),
    (R.uniform, "random.uniform", {"range": (0.0, 1.0, 2.0), "values": None}, "expected 2 value"),
    (R.coin_flip, "random.coin_flip", {"probability": 1.5}, "must be in [0, 1]"),
    (R.coin_flip, "random.coin_flip", {"probability": 0.5, "dtype": types.FLOAT}, "int32, uint8 or bool"),
    (R.choice, "random.choice", {"values": [1, 2], "p": [0.5, 0.6]}, "summing to 1"),
    (R.choice, "random.choice", {"values": [1, 2], "p": [1.0]}, "summing to 1"),
])
def test_refusals_name_the_op_and_fault(f, name, args, message):
    with pytest.raises(ValueError, match=re.escape(message)) as e:
        call(f, name, 2, args, u=[[0.5], [0.5]], z=[[0.0], [0.0]])
    if "expected" not in message:  # the shape check of a per-sample argument names no op
        assert str(e.value).startswith(name)


def test_in_a_pipeline_draws_stay_in_their_ranges(rng):
    pipe = Pipeline(batch_size=64, num_threads=1, seed=int(rng.integers(1 << 31)))
    with pipe:
        src = fn.external_source(source=lambda info: np.zeros(1, np.float32), batch=False, size=64)
        lohi = fn.stack(fn.random.uniform(range=(0, 5)), fn.random.uniform(range=(6, 10)))
        pipe.set_outputs(fn.random.uniform(range=lohi), fn.random.coin_flip(probability=0.0),
                         fn.random.choice(values=[2, 4], shape=3), lohi, src)
    u, c, ch, lh = (np.asarray(a) for a in pipe.run()[:4])
    pipe.close()
    assert u.shape == (64,) and ch.shape == (64, 3) and not c.any()
    assert ((u >= lh[:, 0]) & (u < lh[:, 1])).all()
    assert set(np.unique(ch)) <= {2, 4}
