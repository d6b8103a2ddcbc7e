"""write_file: one file written into a routine's `write = [...]` folders, on the host side.

The model names a path and the content. `target` decides where that is (pure but for
resolving links): the path with every link resolved must lie below one of the folders, also
resolved, and no name on the way may be credential-named. A link out of a folder is refused,
not followed (tests/supervisor/test_daemon_writes.py::
test_a_write_outside_the_folders_or_through_a_link_out_is_refused).

`write` carries it out from the folder's own descriptor, one component at a time with
O_NOFOLLOW, so a link planted after the check is never followed either: the content goes to a
new file beside the target and is renamed over it, so a reader never sees half of it.

Under permissions "files" (and "everything") the worker writes at once. Under "ask" the
request (the resolved path and the content) is a proposal the run pauses at, and
`python -m worker.actioncmd` writes it once the person approves, checked again then
(worker/tools.py, worker/actioncmd.py).
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Sequence
from dataclasses import dataclass

from routines.safetext import visible
from routines.spec.never import name_pattern, runs_as_you
from sandbox.copyback import marks_a_repository

__all__ = ["Target", "make_folder", "target", "write"]


@dataclass(frozen=True, slots=True)
class Target:
    folder: str  # the real write folder that holds it
    below: tuple[str, ...]  # its components below the folder, the last one the file's name

    @property
    def path(self) -> str:
        return os.path.join(self.folder, *self.below)


def _expand(path: str, home: str) -> str:
    if path == "~" or path.startswith("~/"):
        return home.rstrip("/") + path[1:]
    return path


def target(path: str, folders: Sequence[str], home: str, never: Sequence[str] = ()) -> Target | str:
    """Where `path` (`~/...` or absolute) is written, or why it may not be. `folders` are
    the routine's `write` entries (`~/...`), `home` the real home, `never` the never-list
    (masked below a folder in the sandbox, so never written here either)."""
    if not folders:
        return "this routine declares no write folders"
    if not path or visible(path, newlines=False) != path or not _utf8(path):
        # A name the person reads at approval, and in every listing after, is what it is
        # (tests/routines/test_redteam_writes.py::test_a_name_that_is_not_plain_text_is_refused).
        return "the path must be one line of plain text (no control or invisible characters)"
    full = _expand(path, home)
    if not os.path.isabs(full):
        return f'expected a path starting with "~/" or "/", found {path!r}'
    real = os.path.realpath(full)
    for entry in folders:
        folder = os.path.realpath(_expand(entry, home))
        if not real.startswith(folder.rstrip("/") + "/"):
            continue
        below = tuple(real[len(folder.rstrip("/")) + 1 :].split("/"))
        if problem := _below_problem(real, folder, below, home, never):
            return problem
        return Target(folder, below)
    shown = ", ".join(folders)
    moved = f" (it resolves to {real})" if real != os.path.normpath(full) else ""
    return f"{path} is outside this routine's write folders ({shown}){moved}"


def _below_problem(
    real: str, folder: str, below: Sequence[str], home: str, never: Sequence[str]
) -> str | None:
    """Why the file `real`, `below` the write folder `folder`, is never written, or None."""
    if any(real == n or real.startswith(n.rstrip("/") + "/") for n in never):
        return f"{real} is on the never-list: never written"
    for name in below:
        if pattern := name_pattern(name):
            return f'"{name}" is credential-named ({pattern.holds}): never written'
    if any(marks_a_repository(n) for n in below) or _in_repository(folder, below):
        # A plain-named bare repository (HEAD, objects/, refs/, config with core.worktree)
        # runs its fsmonitor at the person's `git status` as a .git would
        # (tests/routines/test_redteam_writes.py::test_write_file_never_makes_a_repository).
        return f"{real} is in a repository (a folder holding HEAD): never written"
    dotted = next((n for n in below if n.startswith(".")), None)
    if starts := dotted or runs_as_you(real, home):
        return (
            f'"{starts}" is where your programs start from (a dot-name: a repository\'s '
            "hooks and config, .envrc, start-up files, or ~/bin): never written"
        )
    return None


def _in_repository(folder: str, below: Sequence[str]) -> bool:
    """Whether the write folder, or a folder on the way to the file, holds a HEAD."""
    return any(os.path.lexists(os.path.join(folder, *below[:i], "HEAD")) for i in range(len(below)))


def _utf8(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:  # a lone surrogate: no name the person could read
        return False
    return True


def write(where: Target, content: str) -> str:
    """Write `content` at `where`; the tool's result as JSON. Raises OSError (a link on the
    way, a folder in the file's place, a full disk): the caller says so to the model."""
    from sandbox.runner import open_dir_nofollow

    data = content.encode("utf-8", "surrogatepass")
    fd = _descend(open_dir_nofollow(where.folder), where.below[:-1])
    try:
        name = where.below[-1]
        replaced = _exists(name, fd)
        temp = f".{name}.{os.getpid()}.write"
        out = os.open(
            temp,
            os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
            0o600,
            dir_fd=fd,
        )
        try:
            with os.fdopen(out, "wb") as f:
                f.write(data)
            os.replace(temp, name, src_dir_fd=fd, dst_dir_fd=fd)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(temp, dir_fd=fd)
            raise
    finally:
        os.close(fd)
    return json.dumps({"written": where.path, "bytes": len(data), "replaced": replaced})


def make_folder(path: str) -> None:
    """`mkdir -p` of the absolute, link-free `path` (a write folder below the real home),
    following no link on the way: a link in a missing folder's place is an error, never a
    folder made where it leads (tests/worker/test_writetool.py::
    test_a_write_folder_is_made_without_following_a_link_on_the_way)."""
    os.close(_descend(os.open("/", _DIR_FLAGS), tuple(path.split("/")[1:])))


_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


def _descend(fd: int, names: Sequence[str]) -> int:
    """The folder `names` below the open folder `fd`, each made when missing and opened with
    O_NOFOLLOW; `fd` is consumed, the result is the caller's to close."""
    try:
        for name in names:
            try:
                nfd = os.open(name, _DIR_FLAGS, dir_fd=fd)
            except FileNotFoundError:
                os.mkdir(name, 0o700, dir_fd=fd)
                nfd = os.open(name, _DIR_FLAGS, dir_fd=fd)
            os.close(fd)
            fd = nfd
    except BaseException:
        os.close(fd)
        raise
    return fd


def _exists(name: str, fd: int) -> bool:
    try:
        os.stat(name, dir_fd=fd, follow_symlinks=False)
    except FileNotFoundError:
        return False
    return True
