"""The row snapshot: what each routine file alone says of its row (routines.query `_file_part`),
its identity (the hash an enable/disable override is bound to), its zone and its next run, kept
between processes, so `list` without a daemon reads one small file instead of the registry's
parses of 10,000 routines (routines/spec/snapshot.py) and builds only what the ledger and the
clock say.

A kept row is used only for the file at the same path whose key (mtime, ctime, size, inode,
device, whether NAME.toml.sig is beside it) is what it was, that is not `racy`, under the same
code and `loader.context`: the registry snapshot's own rule and key (routines.spec.snapshot),
not a second one. Its next run is used only while the clock is between when it was computed
and that run, and only with the time-zone database it was computed with. Everything else is
parsed in full (routines.spec.registry `_read`) and never
kept: an invalid file, one whose parse read more than the file (`reads_only_the_file`, paths
held to the never-list), one that holds a credential (`holds_a_secret`), one that is signed or
asks for auto-approval (its row checks the signature), one that follows others (`after`: a
cycle is refused across files), one whose row asks for a premium key, and every file on a
fleet (its rows depend on the fleet's definitions). The rows are the same with it or without
(tests/routines/test_rowsnap.py).

The file is state/rows.snapshot (JSON), written as the registry's is: atomically, 0600, in
a state dir that is the user's alone. One that does not decode or is of another format or
context is ignored and replaced.
"""

from __future__ import annotations

import time
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple, cast

from routines.query.routines import RoutineRow, RowCache
from routines.spec.registry import Entry, Registry, _files, _Found, _read, _refuse_cycles, scan
from routines.spec.routine import Origin
from routines.spec.snapkey import (
    Key,
    code_context,
    racy,
    read_private,
    write_private,
    zone_data,
)

if TYPE_CHECKING:
    from routines.spec.paths import Paths
    from routines.spec.routine import Routine

__all__ = ["FILE_NAME", "FORMAT", "RowSnapshot"]

FILE_NAME = "rows.snapshot"  # in the state dir, beside registry.snapshot
FORMAT = 1

# A kept row, by its file's path, as JSON (no msgspec to load, and json's C scanner reads 10,000
# rows in a few ms): [key, the part's fields (RoutineRow's, next_run None), identity, zone,
# when the next run was computed (ISO 8601), the next run (ISO 8601; None: on its triggers)].
_KEY, _PART, _IDENTITY, _ZONE, _SINCE, _NEXT = range(6)
_ERRORS = RoutineRow._fields.index("errors")
_WARNINGS = RoutineRow._fields.index("warnings")
_NEXT_RUN = RoutineRow._fields.index("next_run")
_ENABLED = RoutineRow._fields.index("enabled")


class _Schedule(NamedTuple):
    timezone: str
    # A kept row's next run comes from `known_fire`; only one with none (on its triggers) is
    # asked of `summary`, which says so for "" without compiling anything.
    expression: str = ""


class _FileFacts(NamedTuple):
    """What routine_rows reads of a Routine beyond its file part, for a kept row: the name,
    the file's `enabled`, its identity (an override's binding), its zone; no agent, trigger
    or text (a kept row has none that matter: see the module's doc)."""

    name: str
    enabled: bool
    identity: str
    schedule: _Schedule
    kind: Any = None
    agent: None = None
    trigger: None = None
    text: str = ""


def _context() -> tuple[str, ...]:
    return (str(FORMAT), *code_context(), zone_data())


def _load(paths: Paths, context: tuple[str, ...]) -> dict[str, list[Any]]:
    data = read_private(paths.state_dir, FILE_NAME)
    if data is None:
        return {}
    import json

    try:
        file = json.loads(data)
    except ValueError:  # UnicodeDecodeError too
        return {}  # torn or corrupt: parse again
    if not isinstance(file, dict) or file.get("format") != FORMAT:
        return {}
    if file.get("context") != list(context) or not isinstance(file.get("kept"), dict):
        return {}
    kept: dict[str, list[Any]] = file["kept"]
    return kept


def _save(paths: Paths, context: tuple[str, ...], kept: dict[str, list[Any]]) -> None:
    """Never raises: the snapshot is a cache (a full disk costs speed, no more)."""
    import json

    try:
        file = {"format": FORMAT, "context": context, "kept": kept}
        write_private(paths.state_dir, FILE_NAME, json.dumps(file, separators=(",", ":")).encode())
    except (OSError, TypeError, ValueError):
        return


def _part(
    kept: list[Any], key: Key, now: datetime, now_ns: int
) -> tuple[RoutineRow, datetime | None] | None:
    """The kept row's part and next run, when it is for this file as it is (`key`, not `racy`)
    and that run has not come; None otherwise, or when it is not a kept row at all."""
    try:
        if tuple(kept[_KEY]) != key or racy(key[1], now_ns):
            return None
        nxt = kept[_NEXT]
        if nxt is not None:
            nxt = datetime.fromisoformat(nxt)
            if not datetime.fromisoformat(kept[_SINCE]) <= now < nxt:
                return None
        fields = list(kept[_PART])
        fields[_ERRORS] = tuple(fields[_ERRORS])
        fields[_WARNINGS] = tuple(fields[_WARNINGS])
        # The next run in the part when the file enables it: that routine's row is then the
        # part itself (routines.query `_row`), not a copy of it.
        if fields[_ENABLED] is True:
            fields[_NEXT_RUN] = nxt
        part = RoutineRow(*fields)
        if not (isinstance(kept[_IDENTITY], str) and isinstance(kept[_ZONE], str)):
            return None
    except (TypeError, ValueError, IndexError):
        return None  # of a shape this code does not write
    return part, nxt


def _keepable(entry: Entry, key: Key, now_ns: int) -> bool:
    """Whether a file read in full may be kept (the module's doc says why each is not)."""
    from routines.spec.loader import checks_paths, holds_a_secret, reads_only_the_file
    from routines.spec.routine import Route

    r = entry.routine
    if r is None or not entry.valid or key[5] or racy(key[1], now_ns):
        return False
    if holds_a_secret(r) or not reads_only_the_file(r) or checks_paths(r.agent, r.command):
        return False
    if "auto_approve" in r.text or (r.trigger is not None and r.trigger.after):
        return False
    a = r.agent
    return a is None or not (a.route is Route.AUTO and a.escalation.possible)


class RowSnapshot:
    """The kept rows for one `list`: `registry` is the registry to build rows from (kept rows'
    files as stand-ins, `_FileFacts`, with their parts in `cache` and their next runs in
    `known_fire`; the rest read in full), then `save` keeps what may be kept."""

    def __init__(
        self,
        paths: Paths,
        now: datetime,
        found: tuple[dict[str, _Found], dict[str, _Found]] | None = None,
    ) -> None:
        """`found`: the system and user folders' files as just listed (`_files`), if they were."""
        self._paths = paths
        self._found = found
        self._now = now
        self._now_ns = time.time_ns()
        try:
            self._context: tuple[str, ...] | None = _context()
        except OSError:  # which code parses cannot be told: no cache
            self._context = None
        self._old = _load(paths, self._context) if self._context is not None else {}
        self._new: dict[str, list[Any]] = {}
        self._read: dict[str, tuple[Entry, Key]] = {}  # by path: files read in full
        self._next: dict[str, datetime | None] = {}  # kept rows' next runs, by name
        self.cache = RowCache()

    def registry(self) -> Registry:
        if self._found is not None:
            system, user = self._found
        else:
            system = _files(self._paths.system_dir, Origin.SYSTEM)
            user = _files(self._paths.routines_dir, Origin.USER)
        chosen: dict[str, tuple[_Found, Origin]] = {
            n: (f, Origin.SYSTEM) for n, f in system.items()
        }
        chosen.update((n, (f, Origin.USER)) for n, f in user.items())
        entries: dict[str, Entry] = {}
        misses: list[str] = []
        for name, (found, origin) in chosen.items():
            where, stamp, key = found
            kept = self._old.get(where)
            got = _part(kept, key, self._now, self._now_ns) if kept is not None else None
            if kept is None or got is None:
                misses.append(name)
                continue
            part, nxt = got
            facts = _FileFacts(name, part.enabled, kept[_IDENTITY], _Schedule(kept[_ZONE]))
            # A str for a Path: the rows read it with os.fspath only (a Path a row is most of
            # what the snapshot saves).
            entry = Entry(name, cast(Path, where), origin, stamp, cast("Routine", facts))
            entries[name] = entry
            self.cache.parts[id(entry)] = (entry, part)
            # Also a file-disabled one's: the ledger may enable it (test_rowsnap.py::
            # test_an_override_of_a_kept_routine_binds_to_its_identity).
            self._next[name] = nxt
            self._new[where] = kept
        if misses and not entries:  # nothing kept: the registry's own snapshot, for all
            full = scan(self._paths).entries
        else:
            full = {n: _read(n, chosen[n][0], chosen[n][1], None) for n in misses}
        for name, entry in full.items():
            found = chosen[name][0]
            self._read[found[0]] = (entry, found[2])
        entries.update(full)
        return Registry(_refuse_cycles(dict(sorted(entries.items())), {}))

    def read_a_secret(self) -> bool:
        """Whether a file read in full makes rows that may not be kept whole
        (routines/query/listsnap.py; a kept row's file does neither): it holds a credential
        (`holds_a_secret`: nothing made from the files is written beside them), or declares
        paths held to the never-list (`checks_paths`), which the environment moves (a store's
        variable, HOME) and the list's inputs do not hold
        (tests/routines/test_rowsnap.py::test_a_kept_list_with_a_routines_paths_follows_the_never_list)."""
        if not self._read:
            return False
        from routines.spec.loader import checks_paths, holds_a_secret

        return any(
            e.routine is not None
            and (holds_a_secret(e.routine) or checks_paths(e.routine.agent, e.routine.command))
            for e, _ in self._read.values()
        )

    def known_fire(self, name: str, routine: Any, now: datetime) -> datetime | None:
        """A kept row's next run (routines.query KnownFire); None for a file read in full."""
        return self._next.get(name) if isinstance(routine, _FileFacts) else None

    def save(self) -> None:
        """Keep the parts of the files read in full that may be kept (`_keepable`), with the
        kept rows of files still there; written only when that changed."""
        if self._context is None:
            return
        parts = {id(e): p for e, p in self.cache.parts.values()} if self._read else {}
        for where, (entry, key) in self._read.items():
            part = parts.get(id(entry))
            r = entry.routine
            if part is None or r is None or not _keepable(entry, key, self._now_ns):
                continue
            from routines.schedule import summary

            nxt = summary(r.schedule, r.kind, entry.name, True, self._now)[1]
            if nxt is None and r.schedule.expression:
                continue  # a schedule that never fires again, or no longer compiles
            self._new[where] = [
                list(key),
                list(part),
                r.identity,
                r.schedule.timezone,
                self._now.isoformat(),
                nxt.isoformat() if nxt is not None else None,
            ]
        if self._new.keys() == self._old.keys() and all(
            self._new[k] is self._old[k] for k in self._new
        ):
            return
        _save(self._paths, self._context, self._new)
