"""sandbox/ imports nothing of ours: the boundary around what a model may do depends on no
project code that could change under it (routines/product.py and sandbox/probe.py keep their
shared text twice for this reason)."""

from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
OURS = {"dashboard", "ipc", "routines", "supervisor", "worker"}


def test_the_sandbox_package_imports_nothing_of_the_project() -> None:
    found = []
    for path in sorted((REPO / "sandbox").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            found += [f"{path.name}: {n}" for n in names if n.split(".")[0] in OURS]
    assert found == []
    assert len(list((REPO / "sandbox").rglob("*.py"))) > 5  # the walk saw the package
