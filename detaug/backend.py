"""``detaug.backend``: the names of DALI's ``nvidia.dali.backend`` that DALI programs import to
check or build outputs. ``TensorCPU`` / ``TensorGPU`` are detaug's Tensor; ``TensorListCPU`` the
host batch types ``pipe.run()`` gives (an ndarray or list subclass: docs/dali.md, "Outputs of
pipe.run()"); ``TensorListGPU`` the device one. Anything else of DALI's backend (its C++
runtime: ``GetCudaVersion``, ``SetHostDeviceMemoryLimits``, ...) raises one line naming it."""
from .core.tensor_list import ArrayList, SampleList, Tensor, TensorList

TensorCPU = TensorGPU = Tensor
TensorListCPU = (ArrayList, SampleList)
TensorListGPU = TensorList


def __getattr__(name):
    if name.startswith("_"):
        raise AttributeError(name)
    raise AttributeError(f"detaug.backend.{name}: DALI's backend name {name!r} is not in detaug "
                         "(it has TensorCPU, TensorGPU, TensorListCPU, TensorListGPU); see "
                         "docs/dali.md#not-in-detaug")
