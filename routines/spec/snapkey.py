"""Whether a routine file is the one a cache saw: its key (`Key`) and the `racy` rule for an
edit within a clock tick, the code and context a parse read (`code_context`), and the private
state dir a cache lives in (`open_private`). One rule for the registry's snapshot of parses
(routines/spec/snapshot.py, whose doc says why each part is there) and the row snapshot
(routines/query/rowsnap.py). Light: a `list` from the row snapshot imports nothing else here.
"""

from __future__ import annotations

import contextlib
import os
import stat
import sys
from pathlib import Path

__all__ = [
    "CONFIG_FILE_NAME",
    "MAX_BYTES",
    "RACY_NS",
    "Found",
    "Key",
    "code_context",
    "context",
    "files",
    "open_private",
    "racy",
    "version",
    "zone_data",
]

# Beyond this a snapshot is not written (nor read): 10,000 routines' parses make ~7 MB.
MAX_BYTES = 64 * 1024 * 1024
# A file changed this recently is parsed again each time (`racy`): 2 s is FAT's tick, the
# coarsest a routine directory could have; ext4, xfs, btrfs and tmpfs tick every few ms.
RACY_NS = 2_000_000_000

# (mtime_ns, ctime_ns, size, inode, device, NAME.toml.sig is beside it)
Key = tuple[int, int, int, int, int, bool]


def version(st: os.stat_result) -> tuple[int, int, int, int, int]:
    """What changes when a file is written, replaced or moved: the first five of a Key, and
    the whole key of a file beside the routines (config.toml, the ledger's)."""
    return (st.st_mtime_ns, st.st_ctime_ns, st.st_size, st.st_ino, st.st_dev)


def racy(ctime_ns: int, now_ns: int) -> bool:
    """Whether a file whose ctime is `ctime_ns` may change again, unseen, with the same times."""
    return ctime_ns > now_ns - RACY_NS


def _code() -> str:
    """Which code parsed: the routines package's source files, by name, size, mtime and
    inode (an upgrade or an edit of the tree changes one), and the interpreter."""
    root = Path(__file__).resolve().parent.parent
    seen: list[str] = [sys.version]
    stack = [str(root)]
    while stack:
        with os.scandir(stack.pop()) as it:
            for de in it:
                if de.is_dir(follow_symlinks=False) and de.name != "__pycache__":
                    stack.append(de.path)
                elif de.name.endswith(".py"):
                    st = de.stat()
                    seen.append(f"{de.path}\0{st.st_size}\0{st.st_mtime_ns}\0{st.st_ino}")
    return "\n".join(sorted(seen))


def context() -> tuple[str, ...]:
    """What `load_text` reads of the machine besides the file, config.toml and the clock, for
    every routine: the machine's zone (a schedule without one). Two parses of the same bytes
    under the same context (and `never_context`, for a routine that `checks_paths`) are the
    same (routines/spec/snapshot.py keeps parses by them). The loader's, kept here so that a
    `list` from the row snapshot loads no parser."""
    from routines.schedule.tz import machine_timezone

    return (machine_timezone(),)


def code_context() -> tuple[str, ...]:
    """What a parse read besides its file, for every routine: the code (`_code`) and
    `loader.context` (the machine's zone). OSError when the code's files cannot be listed."""
    return (_code(), *context())


CONFIG_FILE_NAME = "config.toml"  # in the user's routines folder, and no routine


# A directory entry: its path (a str: a Path costs ~90 us to build, most of a 10,000-file
# rescan, and is made only for a file read anew, in `_read`), its stamp, and the snapshot's key.
Found = tuple[str, tuple[int, int, int], Key]


def files(directory: Path, config: str | None) -> dict[str, Found]:
    """Each routine file of `directory`, by name, with its key; `config`: a file name that is
    not a routine (config.toml, in the user's folder). The registry's scan and the row
    snapshots (routines/query/) read the folders through this one function."""
    out: dict[str, Found] = {}
    signed: set[str] = set()
    try:
        it = os.scandir(directory)
    except (FileNotFoundError, NotADirectoryError):
        return out
    with it:
        for de in it:
            if de.name.endswith(".toml.sig"):
                signed.add(de.name.removesuffix(".sig"))
            if not de.name.endswith(".toml") or de.name.startswith("."):
                continue
            if de.name == config:
                continue
            try:
                st = de.stat()  # follows symlinks: a linked routine file is fine
            except OSError:
                try:  # a dangling link: an entry too, which the loader reports
                    st = de.stat(follow_symlinks=False)
                except OSError:
                    continue
            if stat.S_ISDIR(st.st_mode):
                continue
            # Anything else is an entry, also a FIFO, a device or a link to /dev/zero: the
            # loader refuses it with a reason (nothing is read), and a routine that was loaded
            # keeps its last good version and says so, as after any other bad edit.
            key = (*version(st), False)
            out[de.name[:-5]] = (de.path, (st.st_mtime_ns, st.st_size, st.st_ino), key)
    for name in signed.intersection(f"{n}.toml" for n in out):
        path, stamp, key = out[name[:-5]]
        out[name[:-5]] = (path, stamp, (*key[:5], True))
    return out


def zone_data() -> str:
    """What identifies the time-zone database next runs were computed with: an upgrade of it
    (a zone's rules changed) drops every kept one. The system's (zoneinfo.TZPATH, whose
    tzdata.zi every tzdata package rewrites, or the folder itself), else none found."""
    import zoneinfo

    for root in zoneinfo.TZPATH:
        for path in (os.path.join(root, "tzdata.zi"), root):
            try:
                st = os.stat(path)
            except OSError:
                continue
            return f"{path}:{st.st_mtime_ns}:{st.st_size}:{st.st_ino}"
    return "no system zone data"


def open_private(directory: Path, *, make: bool) -> int | None:
    """An O_NOFOLLOW fd on `directory` when it is this user's and no one else may write in
    it (a 0700 state dir), else None. With `make` it is created (0700) when its parent, the
    routines dir, is there: a `list` of system routines alone creates no VINOS_HOME."""
    from routines.store import open_dir

    try:
        if make:
            with contextlib.suppress(FileExistsError):
                os.mkdir(directory, 0o700)
        fd = open_dir(directory)
    except OSError:
        return None
    st = os.fstat(fd)
    if st.st_uid != os.geteuid() or st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        os.close(fd)
        return None
    return fd


def read_private(directory: Path, name: str) -> bytes | None:
    """`directory`/`name` when `directory` is private (`open_private`) and the file is a
    regular one of at most MAX_BYTES; None otherwise, or when it cannot be read: a snapshot
    is a cache, read anew then."""
    dfd = open_private(directory, make=False)
    if dfd is None:
        return None
    try:
        from routines.store import read_regular_at

        data = read_regular_at(dfd, name, MAX_BYTES + 1, head=True)
    except OSError:
        return None
    finally:
        os.close(dfd)
    return data if data and len(data) <= MAX_BYTES else None


def write_private(directory: Path, name: str, data: bytes) -> None:
    """`data` as `directory`/`name`, atomically, in a private `directory` (made 0700 when
    missing); nothing past MAX_BYTES or where the directory is not private. OSError on a
    failed write (the caller's cache goes unwritten)."""
    if len(data) > MAX_BYTES:
        return
    dfd = open_private(directory, make=True)
    if dfd is None:
        return
    try:
        from routines.store import write_atomic_at

        write_atomic_at(dfd, name, data)
    finally:
        os.close(dfd)
