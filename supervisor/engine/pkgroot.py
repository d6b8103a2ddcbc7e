"""Where our packages are: a leaf, so a command that only needs this (`sandbox`, which execs
`python -m worker.sandboxcli`) does not import the spawner's asyncio."""

from __future__ import annotations

from pathlib import Path

__all__ = ["package_root"]


def package_root() -> str:
    """The directory holding our packages, so the worker imports this very code."""
    return str(Path(__file__).resolve().parents[2])
