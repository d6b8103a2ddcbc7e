"""make lint's complexity gate (scripts/complexity.py): boolean operators and conditional
expressions count, an exemption holds a function at its score, and the list stays true."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent


def gate() -> Any:
    spec = importlib.util.spec_from_file_location("complexity", REPO / "scripts/complexity.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_boolean_operators_and_conditional_expressions_count(tmp_path: Path) -> None:
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "m.py").write_text(
        "def plain(a):\n    return a\n\n\n"
        "def hidden(a, b, c, d):\n    return (a and b or c and d) if a else (b if c else d)\n\n\n"
        "class K:\n    def m(self, a, b):\n        return a or b\n"
    )
    found = dict(gate().scores([pkg], tmp_path))
    # 1, +3 for the four operands of and/or, +2 for the two conditional expressions
    assert found == {"pkg/m.py:plain": 1, "pkg/m.py:hidden": 6, "pkg/m.py:K.m": 2}


def test_a_function_over_the_limit_fails_unless_exempt_and_then_only_if_it_grows() -> None:
    problems = gate().problems
    assert problems({"a.py:f": 6}, 5, {}) == [
        "a.py:f: complexity 6, over 5: split it (pure parts out)"
    ]
    assert problems({"a.py:f": 6}, 5, {"a.py:f": 6}) == []
    assert problems({"a.py:f": 7}, 5, {"a.py:f": 6}) == [
        "a.py:f: complexity 7, over its exemption's 6"
    ]


def test_an_exemption_that_is_stale_fails_so_the_list_stays_true() -> None:
    problems = gate().problems
    assert problems({}, 5, {"a.py:gone": 9}) == [
        "a.py:gone: exempt in pyproject.toml, but there is no such function"
    ]
    assert problems({"a.py:f": 4}, 5, {"a.py:f": 9}) == [
        "a.py:f: complexity 4 <= 5: drop its exemption"
    ]
    assert problems({"a.py:f": 7}, 5, {"a.py:f": 9}) == [
        "a.py:f: complexity 7: lower its exemption from 9"
    ]
