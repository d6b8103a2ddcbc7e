"""Classifying a failure into an `Unavailable` reason: SQLite's result codes, the file
system's free space for an I/O error (`sqlite_reason`, `os_reason`), whether a file SQLite
calls corrupt is (`damaged`), and what to tell the user (`unavailable_message`). The errors
themselves, and their tree, are routines/ledger/model.py's. Each store translates its errors
once, at its boundary: routines/ledger/sqlite_open.py with these, and
routines/ledger/postgres_open.py (a refused or lost connection, PostgreSQL's DiskFull).
"""

from __future__ import annotations

import contextlib
import errno
import os
import sqlite3
import stat
from pathlib import Path

from routines.ledger.model import Unavailable

__all__ = [
    "damaged",
    "is_no_space",
    "keep_wal_on_close",
    "mend_sidecars",
    "no_space",
    "os_reason",
    "sqlite_reason",
    "unavailable_message",
]


_READ_ONLY_CODES = {sqlite3.SQLITE_READONLY, sqlite3.SQLITE_PERM, sqlite3.SQLITE_CANTOPEN}
_LOCKED_CODES = {sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED}
_CORRUPT_CODES = {sqlite3.SQLITE_CORRUPT, sqlite3.SQLITE_NOTADB}


def sqlite_reason(exc: sqlite3.Error, where: Path) -> Unavailable | None:
    """Which `Unavailable` an SQLite error is, or None for one that is a bug of ours (a
    constraint, a misuse). `where` is the ledger's directory: an I/O error on a filesystem
    with no free block is a full disk (SQLite reports ENOSPC on its -shm as SQLITE_IOERR)."""
    if isinstance(exc, sqlite3.IntegrityError | sqlite3.ProgrammingError):
        return None
    code = getattr(exc, "sqlite_errorcode", None)
    primary = code & 0xFF if isinstance(code, int) else None
    text = str(exc)
    if primary == sqlite3.SQLITE_FULL or "is full" in text:
        return Unavailable.DISK_FULL
    # A file SQLite could not create or grow (its -shm included) on a filesystem with no
    # block left: a full disk, whatever code it came back with.
    if primary in (sqlite3.SQLITE_CANTOPEN, sqlite3.SQLITE_IOERR) and no_space(where):
        return Unavailable.DISK_FULL
    if primary in _READ_ONLY_CODES or "readonly" in text or "read-only" in text:
        return Unavailable.READ_ONLY
    if primary in _LOCKED_CODES or "locked" in text or "busy" in text:
        return Unavailable.LOCKED
    if primary in _CORRUPT_CODES or "malformed" in text or "not a database" in text:
        return Unavailable.CORRUPT
    if primary == sqlite3.SQLITE_IOERR or "disk I/O error" in text or "unable to open" in text:
        return Unavailable.DISK_FULL if no_space(where) else Unavailable.IO_ERROR
    if isinstance(exc, sqlite3.OperationalError | sqlite3.DatabaseError):
        # Nothing above matched: not the disk's fault as far as anything shows, so never its
        # advice (tests/routines/ledger/test_ledger_faults.py, an unrecognised database error)
        return Unavailable.UNEXPECTED
    return None


def no_space(directory: Path) -> bool:
    """Whether the filesystem holding `directory` has no block left for this user."""
    try:
        st = os.statvfs(directory)
    except OSError:
        return False
    return st.f_bavail == 0


def is_no_space(exc: OSError) -> bool:
    return exc.errno in (errno.ENOSPC, errno.EDQUOT)


def damaged(path: Path) -> bool:
    """Whether PRAGMA quick_check, on a read-only connection of its own, finds the ledger
    damaged. Only then is moving it aside the advice: for anything else (a full disk, an I/O
    error) moving it aside would cost the history (tests/routines/ledger/test_ledger_faults.py)."""
    # Without a -wal file, `immutable`: no -wal or -shm is made beside a file refused.
    wal = path.with_name(path.name + "-wal").exists()
    query = "mode=ro" if wal else "mode=ro&immutable=1"
    try:
        with contextlib.closing(
            sqlite3.connect(f"{path.resolve().as_uri()}?{query}", uri=True, timeout=1.0)
        ) as db:
            row = db.execute("PRAGMA quick_check(1)").fetchone()
    except sqlite3.DatabaseError as exc:
        return sqlite_reason(exc, path.parent) is Unavailable.CORRUPT
    except sqlite3.Error:
        return False
    return row is None or row[0] != "ok"


def unavailable_message(path: Path, reason: Unavailable, detail: str) -> str:
    """What to tell the user about a ledger unavailable for `reason`: what is wrong and what
    to do. The daemon adds when it tries again (supervisor/engine/health.py)."""
    if reason is Unavailable.DISK_FULL:
        return (
            f"{path}: no space left for the ledger ({detail}); free some space on the disk "
            f"holding {path.parent}"
        )
    if reason is Unavailable.READ_ONLY:
        return (
            f"{path}: the ledger cannot be read or written ({detail}); it was left "
            f"untouched; {_writable_advice(path)}"
        )
    if reason is Unavailable.LOCKED:
        return (
            f"{path}: the ledger stayed locked past the busy timeout ({detail}); another "
            "vinos-routine process holds it (a long `vinos-routine` command, or a copy of the "
            "daemon); let it finish or stop it"
        )
    if reason is Unavailable.UNEXPECTED:
        return (
            f"{path}: an unexpected database error ({detail}); the ledger was left untouched. "
            "It is none of the faults vinos-routine knows (a full disk, a read-only file, a "
            "lock, damage): if it lasts, report it with this message"
        )
    if reason is Unavailable.CORRUPT:
        return (
            f"{path}: the ledger is damaged (PRAGMA quick_check fails: {detail}). It was left "
            f"untouched. Move it aside "
            f"(mv '{path}' '{path}.broken') and a new one is created on the next start; "
            "restore from a backup to keep the history."
        )
    return (
        f"{path}: the filesystem failed to read or write the ledger ({detail}); the ledger "
        "was left untouched and is not damaged (PRAGMA quick_check passes or cannot run): "
        "check the disk and its mount (dmesg)"
    )


def _writable_advice(path: Path) -> str:
    """Which of the ledger's files (and its directory) we cannot read and write, as a chmod
    to run: SQLite makes -shm with the file's own mode, so a ledger once 0400 leaves a 0400
    -shm behind that restoring ledger.db's mode does not mend."""
    names = [path.parent, path, *(path.with_name(path.name + s) for s in ("-wal", "-shm"))]
    locked = [str(p) for p in names if p.exists() and not os.access(p, os.R_OK | os.W_OK)]
    if locked:
        return "make them yours to write again: chmod u+rw " + " ".join(f"'{p}'" for p in locked)
    try:
        if os.statvfs(path.parent).f_flag & os.ST_RDONLY:
            return f"the filesystem holding {path.parent} is mounted read-only; remount it rw"
    except OSError:
        pass
    return f"check the permissions of {path.parent} and the files in it"


def os_reason(exc: OSError) -> Unavailable:
    """Which `Unavailable` an OSError on the ledger's directory or files is."""
    if exc.errno in (errno.ENOSPC, errno.EDQUOT):
        return Unavailable.DISK_FULL
    if exc.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
        return Unavailable.READ_ONLY
    return Unavailable.IO_ERROR


def mend_sidecars(path: Path) -> None:
    """Give the ledger's -wal and -shm back the mode of ledger.db when ledger.db is ours and
    writable and they are not: SQLite makes them with the file's own mode, so after a
    `chmod 0400 ledger.db` and back the -shm stays 0400 and every write fails. Only the mode
    changes, never a byte; a file of another user is left as it is (and named in the advice)."""
    try:
        st = os.stat(path)
    except OSError:
        return
    if st.st_uid != os.getuid() or not st.st_mode & 0o200:
        return
    for side in (path.with_name(path.name + s) for s in ("-wal", "-shm")):
        with contextlib.suppress(OSError):
            sst = os.stat(side, follow_symlinks=False)
            want = st.st_mode & 0o666
            mine = stat.S_ISREG(sst.st_mode) and sst.st_uid == st.st_uid  # never via a link
            if mine and sst.st_mode & 0o666 != want:
                os.chmod(side, want)


_NO_CKPT_ON_CLOSE = 1006  # SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE (sqlite3.h)


def keep_wal_on_close(conn: sqlite3.Connection, path: Path) -> bool:
    """Make closing `conn` leave its -wal and -shm as they are: no checkpoint, no unlink.
    True when it is so. For a ledger replaced under the daemon: SQLite finds those two files
    by the ledger's path, which now names another file, so a checkpoint or an unlink at
    close would write into, or delete, the replacement's (tests/supervisor/
    test_reliability_storage.py). Python 3.12 has `setconfig`; on 3.11 the flag is set
    through the library the sqlite3 module uses, on the connection's own handle, checked
    first by asking SQLite for that handle's file name."""
    setconfig = getattr(conn, "setconfig", None)
    if setconfig is not None:
        setconfig(_NO_CKPT_ON_CLOSE, True)
        return True
    try:
        import _sqlite3
        import ctypes

        lib = ctypes.CDLL(_sqlite3.__file__)
        # CPython 3.11's pysqlite_Connection: PyObject_HEAD, then `sqlite3 *db`.
        handle = ctypes.c_void_p.from_address(id(conn) + object.__basicsize__).value
        filename = lib.sqlite3_db_filename
        filename.restype = ctypes.c_char_p
        filename.argtypes = [ctypes.c_void_p, ctypes.c_char_p]
        named = filename(handle, b"main")
        if not named or os.fsdecode(named) != str(path.resolve()):
            return False  # not the handle we think: leave it alone
        config = lib.sqlite3_db_config
        config.restype = ctypes.c_int
        done = config(
            ctypes.c_void_p(handle), ctypes.c_int(_NO_CKPT_ON_CLOSE), ctypes.c_int(1), None
        )
    except (OSError, AttributeError, ValueError):
        return False
    return bool(done == 0)
