"""Writing a file so that no reader ever sees half of it: a temp file beside it, fsync,
rename. (Not `tempfile`: it costs a worker's start-up a few ms of imports for one name.)"""

from __future__ import annotations

import itertools
import os
from pathlib import Path

__all__ = ["write_atomic"]

_seq = itertools.count()


def write_atomic(path: Path, text: str, mode: int = 0o600) -> None:
    """Replace `path` with `text` (UTF-8) atomically; the file gets `mode`."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{next(_seq)}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, mode)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, mode)  # O_CREAT's mode is filtered by the umask
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
