"""A non-editable install of this tree in a throwaway venv, for timing the console script as
users run it (an editable install adds its import hook to every start, `python -c pass`'s
included, which would flatter the ratio)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

__all__ = ["install"]

REPO = Path(__file__).resolve().parent.parent


def install(root: Path) -> Path:
    """The venv's bin dir, with `python` and the `vinos-routine` launcher pip wrote."""
    # pip builds in the source tree (egg-info): build from a copy, the tree may be read-only.
    source = root / "source"
    junk = shutil.ignore_patterns(".git", ".venv", "build", "*.egg-info", "__pycache__", ".*_cache")
    shutil.copytree(REPO, source, ignore=junk)
    venv = root / "installed-venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    pip = [str(venv / "bin" / "python"), "-m", "pip", "install", "-q"]
    pip += ["--disable-pip-version-check", str(source)]
    done = subprocess.run(pip, check=False, capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"pip install {source} into {venv} failed:\n{done.stderr[-2000:]}")
    return venv / "bin"
