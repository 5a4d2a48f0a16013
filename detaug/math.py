"""``detaug.math`` (DALI's ``nvidia.dali.math``): math functions on DataNodes inside a pipeline
definition, elementwise per sample (``math.min(a / b, c)``, ``math.clamp(x, 0, 1)``,
``math.sqrt(x)``); numbers given become constants. They run on the host: detaug/dali/
arithmetic.py (``fn.math.<name>`` are the same ops). A name DALI's module has and detaug's does
not raises one line naming it."""
from .graph.trace import call_op as _call_op

_NAMES = ("abs", "fabs", "sqrt", "rsqrt", "cbrt", "exp", "log", "log2", "log10", "sin", "cos",
          "tan", "asin", "acos", "atan", "sinh", "cosh", "tanh", "floor", "ceil", "min", "max",
          "pow", "fpow", "atan2", "clamp")


def _make(name):
    def f(*operands):
        return _call_op(f"math.{name}", operands, {})

    f.__name__ = f.__qualname__ = name
    f.__doc__ = f"DALI's math.{name}: fn.math.{name} (elementwise per sample)."
    return f


for _name in _NAMES:
    globals()[_name] = _make(_name)

__all__ = list(_NAMES)


def __getattr__(name):
    if name.startswith("_"):
        raise AttributeError(name)
    raise AttributeError(f"detaug.math.{name}: DALI's math.{name} is not in detaug (it has "
                         f"{', '.join(_NAMES)}); see docs/dali.md#not-in-detaug")
