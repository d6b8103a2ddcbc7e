"""JSON for the quick clients (supervisor/cli/daemonsock.py, supervisor/cli/waybarfollow.py),
from the C scanner and encoder the json package itself runs on (`_json`), without importing
json: its Python layer compiles regular expressions at import and brings re and enum with it,
~5 ms of CPU, a third of what `list`'s 2.5x `python -c pass` leaves for the work
(bench/bench_thin.py). The same C code parses, so the values are json.loads's
(tests/supervisor/test_thin_client.py::test_wire_json_reads_and_writes_what_json_does).
Where `_json` is missing (not CPython), the json package does it.
"""

from __future__ import annotations

TYPE_CHECKING = False  # typing's own flag
if TYPE_CHECKING:
    from typing import Any

__all__ = ["dumps", "loads"]


class _Context:
    """What the C scanner reads off a json.JSONDecoder: json.loads's defaults."""

    strict = True
    object_hook = None
    object_pairs_hook = None
    parse_float = float
    parse_int = int
    parse_constant = float  # NaN and ±Infinity, as json.loads reads them
    memo: dict[str, object] = {}  # noqa: RUF012 - read by the Python scanner only


def _refuse(value: object) -> object:
    raise TypeError(f"{type(value).__name__} is not JSON")


_scan: Any = None
_encode: Any = None
try:
    import _json

    context: Any = _Context()  # typeshed types the argument as a scanner: it is duck-typed
    _scan = _json.make_scanner(context)
    _encode = _json.make_encoder(
        None, _refuse, _json.encode_basestring_ascii, None, ":", ",", False, False, False
    )
except (ImportError, AttributeError, TypeError):  # pragma: no cover - CPython has _json
    pass


_WHITESPACE = " \t\n\r"


def loads(data: bytes) -> Any:
    """The value of one JSON document; ValueError (UnicodeDecodeError included) when it is
    not one."""
    text = data.decode()
    if _scan is None:  # pragma: no cover
        import json

        return json.loads(text)
    start = len(text) - len(text.lstrip(_WHITESPACE))
    try:
        value, end = _scan(text, start)
    except StopIteration as exc:
        raise ValueError(f"not JSON at character {exc.value}") from None
    if text[end:].strip(_WHITESPACE):
        raise ValueError(f"extra data at character {end}")
    return value


def dumps(value: object) -> bytes:
    """`value` as compact JSON (json.dumps with separators=(",", ":")), ASCII."""
    if _encode is None:  # pragma: no cover
        import json

        return json.dumps(value, separators=(",", ":")).encode()
    return "".join(_encode(value, 0)).encode()
