"""A non-editable install of this tree in a throwaway venv, for timing the console script as
users run it (an editable install adds its import hook to every start, `python -c pass`'s
included, which would flatter the ratio)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

__all__ = ["install"]

REPO = Path(__file__).resolve().parent.parent


def install(root: Path) -> Path:
    """The venv's bin dir, with `python` and the `vinos-routine` launcher pip wrote."""
    venv = root / "installed-venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    pip = [str(venv / "bin" / "python"), "-m", "pip", "install", "-q"]
    pip += ["--disable-pip-version-check", str(REPO)]
    done = subprocess.run(pip, check=False, capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"pip install {REPO} into {venv} failed:\n{done.stderr[-2000:]}")
    return venv / "bin"
