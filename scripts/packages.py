#!/usr/bin/env python3
"""Prints the project's top-level packages, one per line, from pyproject.toml's
[tool.setuptools.packages.find] include list: the one place they are named (the Makefile, the
PKGBUILD and tests/packaging read them from here)."""

from __future__ import annotations

import sys
import tomllib
from pathlib import Path

PYPROJECT = Path(__file__).resolve().parent.parent / "pyproject.toml"


def top_level_packages(pyproject: Path = PYPROJECT) -> list[str]:
    data = tomllib.loads(pyproject.read_text())
    try:
        include = data["tool"]["setuptools"]["packages"]["find"]["include"]
    except KeyError:
        sys.exit(f"{pyproject}: no [tool.setuptools.packages.find] include list")
    return sorted({pattern.split(".", 1)[0] for pattern in include})


if __name__ == "__main__":
    print("\n".join(top_level_packages(Path(sys.argv[1]) if len(sys.argv) > 1 else PYPROJECT)))
