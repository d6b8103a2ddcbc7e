"""The registry's snapshot: the parse of every routine file, kept between processes, so a command
run without the daemon (`list` of 10,000 routines) reads one file instead of parsing 10,000.

It is a cache of `load_file` and nothing more: an entry is used only for the file at the same
path whose (mtime, ctime, size, inode, device) and whose signature beside it (NAME.toml.sig, which
the loader looks for) are what they were when it was parsed, and only while everything else the
parse read is the same: the code that parsed it, `loader.context` (the machine's zone) and, for a
routine that declares paths, `loader.never_context` (the real home, the never-list, the real
workspace root; computed only then, so a plain `list` loads no never-list). What it gives is what
parsing the same bytes again would give (tests/routines/spec/test_registry_snapshot.py): `scan`
builds the
same entries from it, with no last good version of a file (that is the daemon's alone).

Only a valid parse that read nothing but the file is kept: not an invalid file, not one on a
provider from config.toml, not a `once` whose time may pass (routines.spec.loader
`reads_only_the_file`), not one that holds a credential (a webhook's URL: `holds_a_secret`),
and not a file changed in the last RACY_NS: a file's times have a
coarse clock tick, so an edit that keeps its size within the same tick as the parse would
otherwise look unchanged (git's "racily clean" index entries, the same cure).

The ctime is in the key because nothing but the kernel sets it: `touch -d` can put an old mtime
back, not an old ctime. No sandbox can write a routine file (sandbox/policy.py binds only the
workspace and the run's scratch dir; VINOS_HOME is on the never-list), nor the snapshot.

The file is state/registry.snapshot (msgpack, msgspec): written atomically (temp file, rename,
routines.store), 0600, in the state dir only when that is the user's own and no one else may
write in it, and read with O_NOFOLLOW from there. One that cannot be read, does not decode,
or is of another format or context is ignored, and replaced at the next write.
"""

from __future__ import annotations

from pathlib import Path

import msgspec

from routines.collector import collector_paused
from routines.spec.paths import Paths
from routines.spec.routine import Routine
from routines.spec.snapkey import (
    RACY_NS,
    Key,
    code_context,
    racy,
    read_private,
    write_private,
)

# RACY_NS, Key and racy are routines/spec/snapkey.py's, named here too.
__all__ = ["FILE_NAME", "RACY_NS", "Key", "Snapshot", "collector_paused", "racy"]

FILE_NAME = "registry.snapshot"  # in the state dir: a dot in it, so no routine's state dir
FORMAT = 1


class _Parsed(msgspec.Struct, array_like=True):
    key: Key
    routine: Routine


class _File(msgspec.Struct, array_like=True):
    format: int
    context: tuple[str, ...]  # the code, then loader.context()
    never: tuple[str, ...] | None  # loader.never_context(), when a parse kept needed it
    parsed: dict[str, _Parsed]  # by the file's path


def _enc_hook(obj: object) -> object:
    if isinstance(obj, Path):
        return str(obj)
    raise NotImplementedError(f"cannot encode {type(obj).__name__}")


class _PathHook:
    """Decodes a Path: as its directory's first Path `with_name` (a third of building one
    from the string, which is most of decoding 10,000 routines on Python 3.11)."""

    def __init__(self) -> None:
        self._dirs: dict[str, Path] = {}

    def __call__(self, kind: type, obj: object) -> object:
        if kind is not Path or not isinstance(obj, str):
            raise NotImplementedError(f"cannot decode {kind.__name__}")
        head, sep, tail = obj.rpartition("/")
        head += sep  # "/r.toml" and "r.toml" are not siblings
        like = self._dirs.get(head)
        if like is not None and tail not in ("", ".", ".."):
            return like.with_name(tail)
        path = Path(obj)
        if str(path) == obj:  # already normal: its siblings may be built from it
            self._dirs[head] = path
        return path


def _decoder() -> msgspec.msgpack.Decoder[_File]:
    # routine.py names Outcome for the type checker only (it loads alone: test_package_exports);
    # msgspec resolves the annotation in that module's namespace, so the name is put there, as
    # the very object the annotation means.
    from routines.runs import Outcome
    from routines.spec import routine

    vars(routine).setdefault("Outcome", Outcome)
    return msgspec.msgpack.Decoder(_File, dec_hook=_PathHook())


def _context() -> tuple[str, ...]:
    return (str(FORMAT), *code_context())


def _checks_paths(routine: Routine) -> bool:
    from routines.spec.loader import checks_paths

    return checks_paths(routine.agent, routine.command)


class Snapshot:
    """The parses kept for one `scan`: `get` what is still good, `put` what was parsed anew,
    then `save` (written only when something changed)."""

    def __init__(self, paths: Paths, now_ns: int) -> None:
        self._paths = paths
        self._context = _context()
        self._now = now_ns
        self._never: tuple[str, ...] | None = None  # loader.never_context(), once asked
        self._old_never: tuple[str, ...] | None = None
        self._old: dict[str, _Parsed] = self._load()
        self._new: dict[str, _Parsed] = {}

    def _never_now(self) -> tuple[str, ...]:
        # Only for a routine that declares paths: a plain `list` loads no never-list.
        if self._never is None:
            from routines.spec.loader import never_context

            self._never = never_context(self._paths)
        return self._never

    def _load(self) -> dict[str, _Parsed]:
        data = read_private(self._paths.state_dir, FILE_NAME)
        if data is None:
            return {}
        try:
            file = _decoder().decode(data)
        except (msgspec.DecodeError, msgspec.ValidationError, ValueError, TypeError):
            return {}  # torn, corrupt, or of a shape this code does not know: parse again
        if file.format != FORMAT or file.context != self._context:
            return {}
        self._old_never = file.never
        return file.parsed

    def get(self, path: str, key: Key) -> Routine | None:
        """The routine parsed from the file at `path` when its key was `key`, or None."""
        got = self._old.get(path)
        if got is None or got.key != key or racy(key[1], self._now):
            return None
        if _checks_paths(got.routine) and self._old_never != self._never_now():
            return None
        self._new[path] = got
        return got.routine

    def put(self, path: str, key: Key, routine: Routine) -> None:
        """Keep the parse of a file read anew, unless it may change again unseen."""
        if not racy(key[1], self._now):
            self._new[path] = _Parsed(key, routine)

    def save(self) -> None:
        """Write the snapshot when it holds other parses than the one read; never raises (the
        snapshot is only a cache: a full disk or a read-only state dir costs speed, no more)."""
        if self._new.keys() == self._old.keys() and all(
            self._new[p] is self._old[p] for p in self._new
        ):
            return
        never = (
            self._never_now() if any(_checks_paths(v.routine) for v in self._new.values()) else None
        )
        try:
            data = msgspec.msgpack.Encoder(enc_hook=_enc_hook).encode(
                _File(FORMAT, self._context, never, self._new)
            )
            write_private(self._paths.state_dir, FILE_NAME, data)
        except (OSError, TypeError, NotImplementedError):
            return
