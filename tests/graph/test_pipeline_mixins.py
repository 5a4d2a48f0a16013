"""Pipeline still mixes in some of its methods (batch making, device stage, planning ahead; the run
state, the sharding and its schedule, retries, hand-out and DALI's facade are parts it holds): a
method name defined in two of them silently hides one (a
merge once gave DeviceStage and PlanAhead each a ``_decode_plan``, and every planned GPU launch
called the wrong one). Overrides are allowed only where named here and where they call super()."""
import inspect

from detaug.pipeline import Pipeline

OVERRIDES = {}


def test_no_method_is_defined_by_two_mixins():
    where = {}
    for base in Pipeline.__mro__[1:-1]:
        for name, value in vars(base).items():
            if not name.startswith("__") and (callable(value) or isinstance(value, property)):
                where.setdefault(name, []).append(base)
    clashes = {n: tuple(b.__name__ for b in bs) for n, bs in where.items() if len(bs) > 1}
    assert set(clashes) <= set(OVERRIDES), {n: c for n, c in clashes.items() if n not in OVERRIDES}
    for name, bases in clashes.items():
        assert bases == OVERRIDES[name], (name, bases)
        first = vars(where[name][0])[name]
        assert "super()." + name in inspect.getsource(first), f"{bases[0]}.{name} must call super()"
