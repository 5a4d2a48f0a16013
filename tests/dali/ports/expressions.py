# Follows DALI's arithmetic expressions tutorial (docs/examples/general/expressions/
# expr_examples.ipynb): two int32 batches from a per-batch external source (num_outputs=2), then
# tensor-tensor arithmetic (+, *, //), tensor-constant arithmetic (an int, a float, and
# types.Constant(...).float32() on the left), and a batch of 0-d scalars broadcast against the
# tensors. Written here in DALI's API (not a copy of DALI's code); nothing else is adapted (the
# data are the tutorial's kind: small int32 arrays written here).
import numpy as np
from detaug.pipeline import Pipeline
import detaug.fn as fn
import detaug.types as types
from detaug.types import Constant

left = [[[42, 7, 0], [0, 0, 0]], [[5, 10, 15], [10, 100, 1000]]]
right = [[[3, 3, 3], [1, 3, 5]], [[1, 5, 5], [1, 1, 1]]]
batch_size = len(left)


def get_data():
    return [np.int32(t) for t in left], [np.int32(t) for t in right]


tensor_pipe = Pipeline(batch_size=batch_size, num_threads=2, device_id=0)
with tensor_pipe:
    l, r = fn.external_source(source=get_data, num_outputs=2)
    tensor_pipe.set_outputs(l, r, l + r, l * r, l // r, -l, l - r)
tensor_pipe.build()
tensors = tensor_pipe.run()

constant_pipe = Pipeline(batch_size=batch_size, num_threads=2, device_id=0)
with constant_pipe:
    l, r = fn.external_source(source=get_data, num_outputs=2)
    constant_pipe.set_outputs(l + 200, l * 0.75, Constant(15).float32() - r, l / r,
                              Constant(3, types.UINT8) * r)
constant_pipe.build()
constants = constant_pipe.run()

scalar_pipe = Pipeline(batch_size=batch_size, num_threads=2, device_id=0)
with scalar_pipe:
    data = fn.external_source(lambda: get_data()[0])
    scalars = fn.external_source(lambda: np.arange(1, batch_size + 1))
    scalar_pipe.set_outputs(data, scalars, data + scalars, data * scalars)
scalar_pipe.build()
scalar_outputs = scalar_pipe.run()
