"""The Anthropic API key: ANTHROPIC_API_KEY, else $VINOS_HOME/secrets/anthropic-key.

The key is never logged and never put in an event or a result.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Callable
from pathlib import Path

__all__ = ["KEY_ENV", "MISSING_KEY", "find_api_key", "read_key_file"]

KEY_ENV = "ANTHROPIC_API_KEY"
MISSING_KEY = (
    "no Anthropic API key: set ANTHROPIC_API_KEY, or write the key to "
    "~/.vinos/secrets/anthropic-key (chmod 600)"
)


def find_api_key(key_file: Path, warn: Callable[[str], None]) -> str | None:
    """The key, or None when there is none; warns when the file is open to group or others."""
    env = os.environ.get(KEY_ENV, "").strip()
    if env:
        return env
    return read_key_file(key_file, warn)


def read_key_file(key_file: Path, warn: Callable[[str], None]) -> str | None:
    """A key file's key (Anthropic's, or a config.toml provider's `key_file`), or None when
    there is none; warns when the file is open to group or others."""
    try:
        fd = os.open(key_file, os.O_RDONLY | os.O_CLOEXEC)
    except FileNotFoundError:
        return None
    except OSError as exc:
        warn(f"cannot read the API key file {key_file}: {exc.strerror}")
        return None
    with os.fdopen(fd, "rb") as f:
        mode = os.fstat(f.fileno()).st_mode
        if mode & (stat.S_IRWXG | stat.S_IRWXO):
            warn(
                f"{key_file} is open to other users (mode {stat.S_IMODE(mode):04o}): "
                f"run `chmod 600 {key_file}`"
            )
        key = f.read(4096).decode("utf-8", "replace").strip()
    return key or None
