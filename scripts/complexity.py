#!/usr/bin/env python3
"""The complexity gate in `make lint`: radon's cyclomatic complexity of every function under
the given folders, against pyproject.toml's [tool.vinos.complexity].

radon counts what ruff's mccabe (C901) does not: each `and`/`or` operand and each conditional
expression (`x if c else y`), so a function cannot hide its branches in one long condition.
A function over `max` fails, unless `exempt` names it ("path:Class.method"), and then it may
not grow past the score written beside it (a ratchet: lower it when the function shrinks;
an exemption that no longer matches a function, or is no longer needed, fails too, so the
list stays true). tests/test_complexity_gate.py holds these rules.

    .venv/bin/python scripts/complexity.py dashboard ipc routines sandbox supervisor worker bench
"""

from __future__ import annotations

import sys
import tomllib
from collections.abc import Iterator, Mapping
from pathlib import Path

from radon.complexity import cc_visit
from radon.visitors import Class, Function

ROOT = Path(__file__).resolve().parent.parent


def scores(folders: list[Path], root: Path) -> Iterator[tuple[str, int]]:
    """("path:Class.method", complexity) for every function and method under `folders`."""
    for folder in folders:
        for path in sorted(folder.rglob("*.py")):
            seen: set[str] = set()
            for block in cc_visit(path.read_text(encoding="utf-8")):
                # A class's methods come both as functions of their own and under the class.
                blocks = [*block.methods] if isinstance(block, Class) else [block]
                for f in blocks:
                    assert isinstance(f, Function)
                    name = f"{path.relative_to(root).as_posix()}:{f.fullname}"
                    if name not in seen:
                        seen.add(name)
                        yield name, f.complexity


def problems(found: Mapping[str, int], top: int, exempt: Mapping[str, int]) -> list[str]:
    """What breaks the gate: a function over `top` and not exempt, an exempt one over its own
    score, and an exemption that matches nothing or is no longer needed."""
    out = []
    for name, score in sorted(found.items()):
        if name in exempt:
            if score > exempt[name]:
                out.append(f"{name}: complexity {score}, over its exemption's {exempt[name]}")
        elif score > top:
            out.append(f"{name}: complexity {score}, over {top}: split it (pure parts out)")
    for name, allowed in sorted(exempt.items()):
        if name not in found:
            out.append(f"{name}: exempt in pyproject.toml, but there is no such function")
        elif found[name] <= top:
            out.append(f"{name}: complexity {found[name]} <= {top}: drop its exemption")
        elif found[name] < allowed:
            out.append(f"{name}: complexity {found[name]}: lower its exemption from {allowed}")
    return out


def main(argv: list[str]) -> int:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["vinos"]["complexity"]
    found = dict(scores([ROOT / a for a in argv], ROOT))
    bad = problems(found, int(config["max"]), config.get("exempt", {}))
    for line in bad:
        print(f"complexity: {line}", file=sys.stderr)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
