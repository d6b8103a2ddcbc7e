"""Where our packages are: a leaf, so a command that only needs this (`sandbox`, which execs
`python -m worker.sandboxcli` from the thin client) imports neither the spawner's asyncio nor
pathlib."""

from __future__ import annotations

import os

__all__ = ["package_root"]


def package_root() -> str:
    """The directory holding our packages, so the worker imports this very code."""
    return os.path.dirname(os.path.dirname(os.path.dirname(os.path.realpath(__file__))))
