# Follows DALI's tensor joining tutorial (docs/examples/general/tensor_join.ipynb): three
# constants of one shape (an int array, +100, +200) concatenated along each of their three axes
# with fn.cat, and stacked along each of the four places of a new axis with fn.stack. Written here
# in DALI's API (not a copy of DALI's code); nothing else is adapted.
import detaug as dali
import detaug.fn as fn
import numpy as np

arr = np.arange(1, 25).reshape(2, 3, 4)
src1 = dali.types.Constant(arr)
src2 = dali.types.Constant(arr + 100)
src3 = dali.types.Constant(arr + 200)

pipe_cat = dali.pipeline.Pipeline(batch_size=1, num_threads=3, device_id=0)
with pipe_cat:
    pipe_cat.set_outputs(*(fn.cat(src1, src2, src3, axis=a) for a in range(3)))
pipe_cat.build()
concatenated = pipe_cat.run()

pipe_stack = dali.pipeline.Pipeline(batch_size=1, num_threads=3, device_id=0)
with pipe_stack:
    pipe_stack.set_outputs(*(fn.stack(src1, src2, src3, axis=a) for a in range(4)))
pipe_stack.build()
stacked = pipe_stack.run()
