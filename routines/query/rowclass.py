"""`class Row(NamedTuple): ...` without importing typing, for the modules a `list` answered by
the daemon loads (routines.query, supervisor/cli/render/): typing brings re and enum with it,
~9 ms of CPU at start-up, most of what `list`'s 2.5x `python -c pass` leaves for the work.

The type checker sees typing.NamedTuple (`from routines.query.rowclass import NamedTuple` under
`if TYPE_CHECKING:`, with typing's in the other branch); at run time the class statement makes
the same collections.namedtuple that typing's would, with the class body's defaults, docstring
and methods (tests/routines/test_query.py::test_the_light_named_tuple_builds_what_typings_does).
Annotations stay strings (`from __future__ import annotations`): typing checks them, this not.
"""

from __future__ import annotations

import collections
from collections.abc import Callable

__all__ = ["NamedTuple"]

# What a class body may not redefine (typing._prohibited), and what it always has (_special).
_PROHIBITED = frozenset(
    {"__new__", "__init__", "__slots__", "__getnewargs__", "_fields", "_field_defaults"}
    | {"_make", "_replace", "_asdict", "_source"}
)
_SPECIAL = frozenset({"__module__", "__name__", "__annotations__"})
# Called with names known only at run time (the type checker wants literals: typing has them).
_namedtuple: Callable[..., type] = collections.namedtuple


class _Meta(type):
    def __new__(cls, name: str, bases: tuple[type, ...], ns: dict[str, object]) -> type:
        if bases != (_Base,):
            raise TypeError("a NamedTuple inherits from NamedTuple alone")
        fields = dict(ns.get("__annotations__", {}))  # type: ignore[call-overload]
        defaults = [n for n in fields if n in ns]
        if defaults and defaults != list(fields)[-len(defaults) :]:
            raise TypeError(f"a field without a default follows {defaults[0]}'s default")
        module = str(ns["__module__"])
        tp = _namedtuple(name, list(fields), defaults=[ns[n] for n in defaults], module=module)
        tp.__annotations__ = tp.__new__.__annotations__ = fields
        for key, value in ns.items():
            if key in _PROHIBITED:
                raise AttributeError(f"cannot overwrite NamedTuple attribute {key}")
            if key not in _SPECIAL and key not in fields:
                setattr(tp, key, value)
        return tp


_Base = type.__new__(_Meta, "NamedTuple", (), {})


def _mro_entries(bases: tuple[type, ...]) -> tuple[type, ...]:
    return (_Base,)


def NamedTuple() -> None:
    """Only a base class: `class Row(NamedTuple)` (the functional form is typing's alone)."""
    raise TypeError("use the class form: class Row(NamedTuple): ...")


NamedTuple.__mro_entries__ = _mro_entries  # type: ignore[attr-defined]
