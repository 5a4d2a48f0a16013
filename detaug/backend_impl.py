"""``detaug.backend_impl``: DALI's older path of its backend names (``from
nvidia.dali.backend_impl import TensorListGPU``); the same names as :mod:`detaug.backend`."""
from .backend import *  # noqa: F401,F403
from .backend import TensorCPU, TensorGPU, TensorListCPU, TensorListGPU, __getattr__  # noqa: F401
