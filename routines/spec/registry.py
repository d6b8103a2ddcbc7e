"""The registry: every routine file, user and system, and which version of each is in force.

User routines ($VINOS_HOME/routines/*.toml) override system ones ($VINOS_SYSTEM_DIR/*.toml)
of the same name. One invalid file never stops the others. When a loaded routine's file is
edited into something invalid, the last good version stays in force and the entry carries
the new file's problems, so `list` can show both.

`scan` is cheap to call every tick: files whose (mtime, size, inode) did not change are not
parsed again. Without a previous registry, the parses kept in the registry's snapshot
(routines/spec/snapshot.py) stand in for files that did not change since.
"""

from __future__ import annotations

import os
import time
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path

from routines.spec.checks import Problem, RoutineInvalid
from routines.spec.paths import Paths
from routines.spec.routine import Origin, Routine
from routines.spec.snapkey import CONFIG_FILE_NAME, Found, files

TYPE_CHECKING = False
if TYPE_CHECKING:
    from routines.spec.snapshot import Snapshot

__all__ = ["Entry", "Registry", "scan"]


@dataclass(frozen=True, slots=True)
class Entry:
    name: str
    path: Path
    origin: Origin
    stamp: tuple[int, int, int]  # (mtime_ns, size, inode) of the file when it was read
    routine: Routine | None  # the version in force: the file's, or the last good one
    problems: tuple[Problem, ...] = ()  # the current file's problems when it is invalid
    overrides: Path | None = None  # the system file this user file shadows

    @property
    def errors(self) -> tuple[Problem, ...]:
        return tuple(p for p in self.problems if not p.warning)

    @property
    def warnings(self) -> tuple[str, ...]:
        return self.routine.warnings if self.valid and self.routine else ()

    @property
    def valid(self) -> bool:
        """The file on disk is valid (its routine is the one in force)."""
        return self.routine is not None and not self.errors

    @property
    def stale(self) -> bool:
        """The file on disk is invalid but an earlier good version is still in force."""
        return self.routine is not None and bool(self.errors)


@dataclass(frozen=True, slots=True)
class Registry:
    entries: dict[str, Entry] = field(default_factory=dict)
    # config.toml's (mtime_ns, size, inode) when scanned: a routine naming a provider from it
    # is valid or not by what it declares, so a changed config.toml re-reads every file.
    config_stamp: tuple[int, int, int] | None = None

    def routines(self) -> list[Routine]:
        """The routines in force, by name."""
        return [e.routine for _, e in sorted(self.entries.items()) if e.routine is not None]

    def get(self, name: str) -> Entry | None:
        return self.entries.get(name)

    def names(self) -> list[str]:
        return sorted(self.entries)

    def unknown(self, name: str) -> str:
        """What to tell a user who named no routine we have: the closest names, or all."""
        import difflib

        close = difflib.get_close_matches(name, self.names(), n=3, cutoff=0.5)
        if close:
            return f"no routine named {name!r}; did you mean {' or '.join(close)}?"
        return f"no routine named {name!r} (known: {', '.join(self.names()) or 'none'})"


# A directory entry: its path, its stamp, and the snapshot's key (routines.spec.snapkey `files`).
_Found = Found


def _files(directory: Path, origin: Origin) -> dict[str, _Found]:
    """Each routine file of `directory`, by name (config.toml is not one, in the user's)."""
    return files(directory, CONFIG_FILE_NAME if origin is Origin.USER else None)


def _read(
    name: str,
    found: _Found,
    origin: Origin,
    previous: Entry | None,
    reread: bool = False,
    snapshot: Snapshot | None = None,
) -> Entry:
    where, stamp, key = found
    # str(Path) is cached on the Path: comparing strings builds nothing for an unchanged file.
    same = previous is not None and str(previous.path) == where
    if not reread and same and previous is not None and previous.stamp == stamp:
        return previous
    if snapshot is not None and (kept := snapshot.get(where, key)) and kept.origin is origin:
        return Entry(name, kept.source, origin, stamp, kept)
    path = previous.path if same and previous is not None else Path(where)
    # The loader only now: a `list` whose rows all come from the row snapshot
    # (routines/query/rowsnap.py) reads no file and loads no parser.
    from routines.spec.loader import holds_a_secret, load_file, reads_only_the_file

    try:
        routine = load_file(path, origin)
    except RoutineInvalid as exc:
        last_good = previous.routine if previous is not None and previous.path == path else None
        return Entry(name, path, origin, stamp, last_good, exc.problems)
    if snapshot is not None and reads_only_the_file(routine) and not holds_a_secret(routine):
        snapshot.put(where, key, routine)
    return Entry(name, path, origin, stamp, routine)


def scan(paths: Paths, previous: Registry | None = None) -> Registry:
    """Read both directories; reuse unchanged entries of `previous`. Without one (a command
    run without the daemon, the daemon's first scan), unchanged files' parses come from the
    snapshot (routines/spec/snapshot.py), which is written again when one was parsed anew."""
    if previous is not None and previous.entries:
        return _scan(paths, previous)
    from routines.collector import collector_paused

    with collector_paused():  # every entry is made anew here, and all of them stay
        return _scan(paths, previous)


def _scan(paths: Paths, previous: Registry | None) -> Registry:
    prev = previous.entries if previous else {}
    config = _config_stamp(paths.config_file)
    reread = previous is not None and previous.config_stamp != config
    system = _files(paths.system_dir, Origin.SYSTEM)
    user = _files(paths.routines_dir, Origin.USER)
    snapshot = None
    if not prev and (system or user):
        from routines.spec.snapshot import Snapshot

        try:
            snapshot = Snapshot(paths, time.time_ns())
        except OSError:  # which code parses cannot be told (its files unlisted): no cache
            snapshot = None
    entries: dict[str, Entry] = {}
    for name in sorted(set(system) | set(user)):
        if name in user:
            entry = _read(name, user[name], Origin.USER, prev.get(name), reread, snapshot)
            if name in system:
                shadowed = system[name][0]
                if entry.overrides is None or str(entry.overrides) != shadowed:
                    entry = replace(entry, overrides=Path(shadowed))
            elif entry.overrides is not None:  # the system file it shadowed is gone
                entry = replace(entry, overrides=None)
        else:
            entry = _read(name, system[name], Origin.SYSTEM, prev.get(name), reread, snapshot)
        entries[name] = entry
    if snapshot is not None:
        snapshot.save()
    return Registry(_refuse_cycles(entries, prev), config)


def _refuse_cycles(entries: dict[str, Entry], prev: Mapping[str, Entry]) -> dict[str, Entry]:
    """Refuse the files that close a cycle of `after` triggers, naming it: each file read anew
    on the cycle keeps its last good version (or none), with the cycle as its error, until
    none is left (tests/routines/spec/test_triggers_spec.py). An unchanged file is never the one
    refused:
    the set in force before had no cycle, so a new or edited file closed it."""
    from routines.spec.trigger import cycle_problem, find_cycle

    refused: set[str] = set()
    while True:
        # Only followers have edges: a routine that follows nothing is on no cycle, and the
        # common case (no [trigger].after anywhere) costs one pass over the entries.
        graph = {
            n: e.routine.trigger.after
            for n, e in entries.items()
            if e.routine is not None and e.routine.trigger is not None and e.routine.trigger.after
        }
        cycle = find_cycle(graph)
        if cycle is None:
            return entries
        fresh = [n for n in cycle[:-1] if entries[n] is not prev.get(n)] or cycle[:-1]
        for n in fresh:
            e = entries[n]
            old = prev.get(n)
            # Refused once: its last good version; still on a cycle with it: none at all.
            good = old.routine if old is not None and old.path == e.path else None
            problem = Problem(str(e.path), "[trigger].after", cycle_problem(cycle))
            problems = e.problems if n in refused else (*e.problems, problem)
            entries[n] = replace(e, routine=None if n in refused else good, problems=problems)
            refused.add(n)


def _config_stamp(path: Path) -> tuple[int, int, int] | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (st.st_mtime_ns, st.st_size, st.st_ino)
