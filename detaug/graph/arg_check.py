"""One validation of every op's arguments, from the ranges (numbers) and kinds (the rest)
declared beside each op.

An op module declares, next to its ``@register``, the range of each numeric argument
(:func:`declare_ranges`; STYLE.md item 16). :func:`check_args` runs once per traced call
(``trace.call_op``) and per rebuilt op (``runtime.persist``), before anything is planned or
allocated, and refuses by op and argument name:

- NaN and infinity, anywhere in the value (a scalar, a (lo, hi) range, a per-channel list,
  nested points): comparisons with NaN are false, so a check written ``(v < 0) | (v > 1)`` or
  ``lo <= hi`` lets NaN through, and the op then makes black images, drops every box or does
  nothing without a word;
- a number outside its range (a probability of 2, a fill of 300 on uint8 images, a size of 0);
- a (lo, hi) range with lo > hi;
- a non-integer where a count or a size is meant;
- a size over :data:`MAX_SIDE` pixels a side, or a canvas over :data:`MAX_PIXELS` (a huge size
  or sigma would otherwise end in NumPy's MemoryError, naming no op).

- a value that is not numbers (a string, a dict, None inside a pair) where the op takes
  numbers, unless it is one of the words declared for it (``Num.words``: ``'random'``).

The other arguments have a declared kind (:class:`Kind`, :func:`declare_kinds` beside the
ranges; a bool default means a bool, a str default a str, unless declared otherwise; the
DALI arguments every op shares by name, ``dtype``, ``layout``..., in :data:`SHARED_KINDS`):
a value of another kind (a number as a path, a string as a bool, a word outside a choice, a
dtype NumPy does not know) is refused by the same check, by op and argument name, instead of
failing inside the op with a TypeError that names nothing.

A per-sample DataNode is not a number at trace time; it is not checked here (its values are,
for range, when the batch runs). Declared ranges are data (:class:`Num`), so the docs and the tests read them
(``tests/ops/test_numeric_args.py`` drives every op's every declared argument with NaN, inf,
negatives and huge values, and fails on a numeric argument with no declared range).
"""
from __future__ import annotations

import enum
import math
import numbers
import os
import reprlib
from dataclasses import dataclass

import numpy as np

# The largest output side, in pixels, any op may be asked for, and the largest canvas. Beyond
# them an allocation fails in NumPy or cupy with a message that names no op (a side over 32,767
# also exceeds OpenCV's warp limit).
MAX_SIDE = 32767
MAX_PIXELS = 2 ** 28

ARG_RANGES: dict = {}

_REPR = reprlib.Repr()
_REPR.maxlevel, _REPR.maxlist, _REPR.maxtuple, _REPR.maxother = 2, 6, 6, 40


@dataclass(frozen=True)
class Num:
    """The range of one numeric argument.

    Attributes:
        lo, hi: the bounds (None: unbounded on that side; infinity is refused regardless).
        lo_open, hi_open: the bound itself is excluded.
        integer: every value is a whole number.
        form: ``'scalar'`` (one number), ``'range'`` (one number or an ordered (lo, hi) pair),
            ``'pair'`` (one number or two, e.g. (h, w); not ordered), ``'seq'`` (one number or
            any nesting of numbers, each in range: per-channel values, points, matrices).
        none: None is accepted (the argument left out).
        size: the values are output extents (sides in pixels, a shape): their product at most
            :data:`MAX_PIXELS` (and :func:`side`'s sides at most :data:`MAX_SIDE`).
        words: strings the op accepts in place of a number (e.g. ``('random',)``); any other
            value that is not numbers is refused.
    """

    lo: float | None = None
    hi: float | None = None
    lo_open: bool = False
    hi_open: bool = False
    integer: bool = False
    form: str = "scalar"
    none: bool = True
    size: bool = False
    words: tuple = ()

    def describe(self) -> str:
        """The range in words, e.g. 'a number in [0, 1]' or 'whole numbers >= 1'."""
        what = "whole number" if self.integer else "number"
        lo = None if self.lo is None else ("(" if self.lo_open else "[") + _num(self.lo)
        hi = None if self.hi is None else _num(self.hi) + (")" if self.hi_open else "]")
        if lo and hi:
            where = f" in {lo}, {hi}"
        elif lo:
            where = f" {'>' if self.lo_open else '>='} {_num(self.lo)}"
        elif hi:
            where = f" {'<' if self.hi_open else '<='} {_num(self.hi)}"
        else:
            where = " (finite)"
        shape = {"scalar": "", "range": " or a (lo, hi) range with lo <= hi",
                 "pair": " or a pair of them", "seq": " or a sequence of them"}[self.form]
        return f"a {what}{where}{shape}"


def _num(v) -> str:
    return str(int(v)) if float(v).is_integer() and abs(v) < 1e15 else repr(float(v))


# Shorthands for the tables beside the ops.
def prob(**kw) -> Num:
    """A probability in [0, 1]."""
    return Num(0.0, 1.0, **kw)


def nonneg(hi=None, **kw) -> Num:
    return Num(0.0, hi, **kw)


def positive(hi=None, **kw) -> Num:
    return Num(0.0, hi, lo_open=True, **kw)


def finite(**kw) -> Num:
    return Num(**kw)


def count(lo=1, hi=None, **kw) -> Num:
    return Num(lo, hi, integer=True, **kw)


def side(hi=MAX_SIDE, **kw) -> Num:
    """An output side (or (h, w)) in pixels: a whole number in [1, hi] (MAX_SIDE)."""
    return Num(1, hi, integer=kw.pop("integer", True), size=True,
               form=kw.pop("form", "pair"), **kw)


def shape(**kw) -> Num:
    """A per-sample output shape: whole numbers >= 0 whose product is at most MAX_PIXELS."""
    return Num(0, MAX_PIXELS, integer=True, size=True, form="seq", **kw)


def byte(**kw) -> Num:
    """A uint8 pixel value, one or one per channel: [0, 255]."""
    return Num(0.0, 255.0, form=kw.pop("form", "seq"), **kw)


def declare_ranges(op_name: str, **ranges: Num) -> None:
    """Declare the ranges of op ``op_name``'s numeric arguments (beside its ``@register``)."""
    for k, spec in ranges.items():
        if not isinstance(spec, Num):
            raise TypeError(f"{op_name}: range of {k!r} must be a Num, got {spec!r}")
    ARG_RANGES.setdefault(op_name, {}).update(ranges)


class ArgumentError(ValueError):
    """An argument refused by its declared range or kind; the message names the op and argument."""


@dataclass(frozen=True)
class Kind:
    """The kind of one non-numeric argument.

    Attributes:
        what: ``'bool'`` (True / False, or 0 / 1), ``'str'`` (text: a name or a path; a
            ``str``, ``os.PathLike`` or a detaug.types constant), ``'choice'`` (one of
            ``choices``, or a types constant whose value is one), ``'dtype'`` (a NumPy dtype, its
            name, or a types constant), ``'dtypes'`` (a dtype or a sequence of them), ``'strs'`` (a str or a sequence of them), ``'free'`` (an
            object the op checks itself: a callable, a dict, a source).
        choices: the words of a ``'choice'``.
        none: None is accepted (the argument left out).
    """

    what: str
    choices: tuple = ()
    none: bool = True

    def describe(self) -> str:
        return {"bool": "a bool", "str": "a str", "dtype": "a dtype (a NumPy dtype or its name)",
                "dtypes": "a dtype (a NumPy dtype or its name) or a sequence of them",
                "strs": "a str or a sequence of str", "free": "anything",
                "choice": "one of " + " / ".join(map(repr, self.choices))}[self.what] + \
            (" or None" if self.none else "")


BOOL, STR, DTYPE, STRS, FREE = Kind("bool"), Kind("str"), Kind("dtype"), Kind("strs"), Kind("free")
DTYPES = Kind("dtypes")


def choice(*words) -> Kind:
    """One of ``words``."""
    return Kind("choice", tuple(words))


# DALI's arguments that many ops share, by name (an op's own declaration wins).
SHARED_KINDS = {"dtype": DTYPE, "output_dtype": DTYPE, "layout": STR, "axis_names": STR,
                "axis_name": STR, "output_layout": STR, "bbox_layout": STR, "shape_layout": STR,
                "interp_type": STR, "min_filter": STR, "mag_filter": STR, "image_type": STR,
                "file_root": STR, "annotations_file": STR, "on_error": choice("raise", "skip"),
                "stick_to_shard": BOOL, "per_channel": BOOL}

ARG_KINDS: dict = {}
_DERIVED: dict = {}


def declare_kinds(op_name: str, **kinds: Kind) -> None:
    """Declare the kinds of op ``op_name``'s non-numeric arguments (beside its ``@register``)
    where its default does not say it (None, or a str that is one of a few words)."""
    for k, kind in kinds.items():
        if not isinstance(kind, Kind):
            raise TypeError(f"{op_name}: kind of {k!r} must be a Kind, got {kind!r}")
    ARG_KINDS.setdefault(op_name, {}).update(kinds)


def derive_kinds(op_name: str, args: dict, hints=()) -> None:
    """The kinds a registered op's defaults say (``trace.register`` calls this): a bool default
    means a bool, a str default a str (a shared name's kind first: a dtype default is written as
    a str); hints (changing no value) are free."""
    table = {}
    for k, v in args.items():
        if k in hints:
            table[k] = FREE
        elif k in SHARED_KINDS:
            table[k] = SHARED_KINDS[k]
        elif isinstance(v, (bool, np.bool_)):
            table[k] = BOOL
        elif isinstance(v, str):
            table[k] = STR
    _DERIVED[op_name] = table


def kind_of(op_name: str, arg: str):
    """The declared (else derived) :class:`Kind` of argument ``arg``, or None."""
    return ARG_KINDS.get(op_name, {}).get(arg) or _DERIVED.get(op_name, {}).get(arg)


def _fits(value, kind: Kind) -> bool:
    w = kind.what
    if w == "free":
        return True
    if w == "bool":
        return isinstance(value, (bool, np.bool_)) or (
            isinstance(value, numbers.Integral) and value in (0, 1))
    if isinstance(value, (bool, np.bool_, numbers.Number)):
        return False
    if w == "str":
        return isinstance(value, (str, os.PathLike, enum.Enum))
    if w == "choice":
        v = value.value if isinstance(value, enum.Enum) else value
        return isinstance(v, str) and v in kind.choices
    if w == "strs":
        return isinstance(value, str) or (isinstance(value, (list, tuple))
                                          and all(isinstance(x, str) for x in value))
    if w == "dtypes":
        return _fits(value, DTYPE) or (isinstance(value, (list, tuple))
                                       and all(_fits(x, DTYPE) for x in value))
    if w == "dtype":
        if isinstance(value, enum.Enum):
            return True
        if not isinstance(value, (str, type, np.dtype)):
            return False
        try:
            np.dtype(value)
        except (TypeError, ValueError):
            return False
        return True
    raise AssertionError(w)


def check_kind(op_name: str, arg: str, value, kind: Kind) -> None:
    """Raise :class:`ArgumentError` naming ``op_name`` and ``arg`` where ``value`` is not of
    ``kind``."""
    if value is None and kind.none or _fits(value, kind):
        return
    try:
        shown = _REPR.repr(value)
    except ValueError:
        shown = "<?>"
    raise ArgumentError(f"{op_name}: argument {arg}={shown} ({type(value).__name__}) is not of "
                        f"its kind: it takes {kind.describe()}")


def _numbers(value):
    """The numbers of ``value`` as float64 (flat), or None when it holds anything else."""
    if isinstance(value, numbers.Number) and not isinstance(value, complex):  # bools too
        try:
            return np.asarray([float(value)], np.float64)
        except OverflowError:  # an int beyond float64: as large as infinity here
            return np.asarray([np.inf if value > 0 else -np.inf])
    if isinstance(value, np.ndarray):
        if value.dtype.kind not in "biuf":
            return None
        return value.astype(np.float64, copy=False).reshape(-1)
    if isinstance(value, np.generic):
        return _numbers(value.item())
    if isinstance(value, (list, tuple)):
        parts = [_numbers(v) for v in value]
        if any(p is None for p in parts):
            return None
        return np.concatenate(parts) if parts else np.zeros(0, np.float64)
    return None


def check_value(op_name: str, arg: str, value, spec: Num, numbers_only: bool = True) -> None:
    """Raise :class:`ArgumentError` naming ``op_name`` and ``arg`` where ``value`` breaks
    ``spec``: None where not allowed, a number out of range, and, with ``numbers_only``, a
    value that is not numbers nor one of ``spec.words`` (a string, a dict, None inside a
    range: it failed later in ``int()`` or ``float()``, naming nothing). Without it, such a
    value passes through (per-sample values: their layout is the op's to check)."""
    if value is None:
        if spec.none:
            return
        _refuse(op_name, arg, value, spec, "is required")
    vals = _numbers(value)
    if vals is None:
        if numbers_only and not (isinstance(value, str) and value in spec.words):
            _refuse(op_name, arg, value, spec, f"is a {type(value).__name__}, not numbers")
        return
    if np.isnan(vals).any():
        _refuse(op_name, arg, value, spec, "is NaN")
    if np.isinf(vals).any():
        _refuse(op_name, arg, value, spec, "is infinite (or beyond float64)")
    if spec.lo is not None and (vals <= spec.lo if spec.lo_open else vals < spec.lo).any():
        _refuse(op_name, arg, value, spec, "is out of range")
    if spec.hi is not None and (vals >= spec.hi if spec.hi_open else vals > spec.hi).any():
        _refuse(op_name, arg, value, spec, "is out of range")
    if spec.integer and (vals != np.round(vals)).any():
        _refuse(op_name, arg, value, spec, "is not a whole number")
    nested = isinstance(value, (list, tuple)) or isinstance(value, np.ndarray) and value.ndim > 0
    deep = (value.ndim > 1 if isinstance(value, np.ndarray) else nested and any(
        isinstance(x, (list, tuple)) or isinstance(x, np.ndarray) and x.ndim > 0 for x in value))
    if spec.form == "scalar" and nested:
        _refuse(op_name, arg, value, spec, "is a sequence")
    if spec.form in ("pair", "range") and (deep or len(vals) > 2):
        _refuse(op_name, arg, value, spec, "is not one number or two")
    if spec.form == "range" and nested:
        if len(vals) != 2:
            _refuse(op_name, arg, value, spec, f"holds {len(vals)} numbers")
        if vals[0] > vals[1]:
            _refuse(op_name, arg, value, spec, "has lo > hi")
    if spec.size and nested and len(vals) > 1 and float(np.prod(np.maximum(vals, 1))) > MAX_PIXELS:
        _refuse(op_name, arg, value, spec, f"asks for {float(np.prod(vals)):,.0f} elements, over "
                                           f"detaug.graph.arg_check.MAX_PIXELS ({MAX_PIXELS:,})")


def _refuse(op_name, arg, value, spec, why):
    try:
        shown = _REPR.repr(value)
    except ValueError:
        shown = "<?>"
    words = f" (or {' / '.join(map(repr, spec.words))})" if spec.words else ""
    limit = (f"; sides are at most detaug.graph.arg_check.MAX_SIDE ({MAX_SIDE:,})"
             if spec.size and spec.hi == MAX_SIDE else "")
    raise ArgumentError(f"{op_name}: argument {arg}={shown} {why}: it takes "
                        f"{spec.describe()}{words}{limit}")


def check_args(op_name: str, args: dict) -> None:
    """Check every declared argument of ``args``, numbers by range and the rest by kind
    (per-sample DataNodes and undeclared arguments are skipped). ``op_name`` is the registered
    name (aliases resolved)."""
    ranges = ARG_RANGES.get(op_name, {})
    for k, v in args.items():
        if hasattr(v, "op"):  # a DataNode has .op
            continue
        spec = ranges.get(k)
        if spec is not None:
            check_value(op_name, k, v, spec)
            continue
        kind = kind_of(op_name, k)
        if kind is not None:
            check_kind(op_name, k, v, kind)


def check_per_sample(op_name: str, args: dict) -> None:
    """Check per-sample values (the arrays a DataNode argument gave this batch) of declared
    arguments: every number finite and in range (their layout is the op's to check)."""
    ranges = ARG_RANGES.get(op_name)
    if not ranges:
        return
    for k, v in args.items():
        spec = ranges.get(k)
        if spec is not None and v is not None:
            check_value(op_name, k, v, Num(spec.lo, spec.hi, spec.lo_open, spec.hi_open,
                                            spec.integer, "seq", True, False, spec.words),
                        numbers_only=False)


def check_canvas(op_name: str, sizes) -> None:
    """Refuse, naming the op, output sizes ``(B, 2)`` (H, W) that a plan computed from the
    images (a ratio times a large image, a shorter side scaled past the limits) beyond
    :data:`MAX_SIDE` a side or :data:`MAX_PIXELS` a canvas, before anything is allocated."""
    sizes = np.asarray(sizes, np.float64).reshape(-1, 2)
    if not len(sizes):
        return
    area = sizes[:, 0] * sizes[:, 1]
    bad = np.flatnonzero((sizes > MAX_SIDE).any(1) | (area > MAX_PIXELS))
    if len(bad):
        h, w = sizes[bad[0]]
        raise ArgumentError(f"{op_name}: sample {int(bad[0])} would get a {h:,.0f} x {w:,.0f} "
                            f"canvas, over detaug.graph.arg_check.MAX_SIDE ({MAX_SIDE:,}) a side "
                            f"or MAX_PIXELS ({MAX_PIXELS:,}) a canvas: check the op's sizes")


def is_numeric_default(value) -> bool:
    """Whether a declared default looks numeric (a number, or a tuple of them): such an
    argument must have a declared range (tests/ops/test_numeric_args.py)."""
    if isinstance(value, bool):
        return False
    vals = _numbers(value)
    return vals is not None and (len(vals) > 0 or isinstance(value, numbers.Number)) \
        and all(math.isfinite(v) for v in vals)
