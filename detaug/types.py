"""``detaug.types``: DALI's ``nvidia.dali.types`` names (``import nvidia.dali.types as types``
ports as ``import detaug.types as types``). The constants are the vocabulary every op accepts, so
they live in the core layer (``detaug/core/types.py``); this is the public path."""
from .core.types import *  # noqa: F401,F403
from .core.types import __all__  # noqa: F401
