"""``detaug.plugin.tf``: DALI's ``nvidia.dali.plugin.tf`` path (``DALIDataset``). It lives with
the rest of DALI compatibility, in ``detaug/dali/plugin/tf.py``; TensorFlow is imported when a
dataset is made. Other names of DALI's plugin raise one line naming them."""
from ..dali.plugin.tf import DALIDataset, __all__  # noqa: F401


def __getattr__(name):
    if name.startswith("_"):
        raise AttributeError(name)
    raise AttributeError(f"detaug.plugin.tf.{name}: DALI's TensorFlow plugin name {name!r} is not "
                         "in detaug (it has DALIDataset); see docs/dali.md#not-in-detaug")
