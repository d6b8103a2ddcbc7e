"""A routine file's bytes, read safely: a regular file of at most 256 KB, opened so that a FIFO
or a device swapped in cannot hang or trip the reader.

Shared by the loader (routines.spec.loader), config.toml (routines.spec.config) and the
signature checks (routines.signing): whatever reads a file a user may point anywhere reads it
here. Parsing the text is the loader's; this module only decides whether the bytes are read.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from routines.spec.checks import Problem, RoutineInvalid

__all__ = ["MAX_ROUTINE_FILE", "read_routine_file"]

# A routine file is a page of TOML; past this it is a mistake or an attack (a symlink to a
# 1 GiB file once took the daemon to 2.1 GB and froze it for 3.5 s), refused before reading.
MAX_ROUTINE_FILE = 256 * 1024
_KINDS = (
    (stat.S_ISDIR, "a directory"),
    (stat.S_ISFIFO, "a FIFO"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
)


def _not_regular(path: Path, mode: int) -> RoutineInvalid:
    kind = next((name for test, name in _KINDS if test(mode)), "not a regular file")
    return RoutineInvalid(
        [Problem(str(path), "", f"expected a regular file, found {kind}; nothing was read")]
    )


def read_routine_file(path: Path) -> bytes:
    """The bytes of a routine file, read only if it is a regular file of at most
    MAX_ROUTINE_FILE bytes; RoutineInvalid (naming what was found) otherwise.

    A symlinked routine file is allowed (a dotfiles manager links them); what it points to
    is checked. The open is O_NONBLOCK, so a FIFO swapped in after the stat cannot hang the
    scan, and the checks are made again on what was opened.
    """
    try:
        st = os.stat(path)  # before opening: opening some devices has side effects
        if not stat.S_ISREG(st.st_mode):
            raise _not_regular(path, st.st_mode)
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as exc:
        raise RoutineInvalid([Problem(str(path), "", f"cannot read: {exc.strerror}")]) from exc
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise _not_regular(path, st.st_mode)
        size = st.st_size
        chunks: list[bytes] = []
        if size <= MAX_ROUTINE_FILE:
            got = 0
            while got <= MAX_ROUTINE_FILE and (chunk := os.read(fd, 1 << 16)):
                chunks.append(chunk)
                got += len(chunk)
            size = max(size, got)  # it may have grown since the fstat
    except OSError as exc:
        raise RoutineInvalid([Problem(str(path), "", f"cannot read: {exc.strerror}")]) from exc
    finally:
        os.close(fd)
    if size > MAX_ROUTINE_FILE:
        raise RoutineInvalid(
            [
                Problem(
                    str(path),
                    "",
                    f"the file is {size:,} bytes; a routine file may be at most "
                    f"{MAX_ROUTINE_FILE:,} bytes (256 KB), so it was not read",
                )
            ]
        )
    return b"".join(chunks)
