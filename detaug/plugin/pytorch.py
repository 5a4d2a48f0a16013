"""``detaug.plugin.pytorch``: DALI's ``nvidia.dali.plugin.pytorch`` path. The iterators live with
the rest of DALI compatibility, in ``detaug/dali/plugin/pytorch.py``; this is the public path."""
from ..dali.plugin.pytorch import *  # noqa: F401,F403
from ..dali.plugin.pytorch import __all__  # noqa: F401
from ..dali.plugin.pytorch import DetaugIterator, shard_from_torch_distributed  # noqa: F401
