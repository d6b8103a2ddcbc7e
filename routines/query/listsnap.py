"""The list snapshot: the rows the last `list` without a daemon showed, kept whole with what
they were made from, so that the next one, when nothing changed, is those rows: no parse, no
ledger read, no row built (the row snapshot, routines/query/rowsnap.py, still spares the
parses when something did).

They are used only when every input is what it was: each routine file's key (the registry's
own, routines.spec.snapkey `files`: an added, removed, replaced or signed file changes it),
config.toml's, the ledger's files' (the database and its write-ahead log, `_ledger_key`), the
code and the zone context (the row snapshot's, with the time-zone database), none of them
`racy`, and while the clock is between when they were made and the first moment that changes
one (routines.query `settled_until`: a next run shown, the end of today). They are kept only
when the rows depend on nothing else (routines.query `depends_on_files_and_ledger`: no
signature, auto-approval or premium key to check), never when a file holds a credential (the
row snapshot's rule: nothing made from it is written beside it, supervisor/overview.py
`list_rows`), declares paths held to the never-list (which the environment moves) or is
invalid (an error quotes what was found there), and never on a fleet (whose rows the fleet's
database says; config.toml's [fleet] or VINOS_FLEET_DATABASE). The rows are the same with it
or without (tests/routines/test_rowsnap.py).

The file is state/list.snapshot (JSON: the rows as the control socket carries them,
routines.query `encode_rows`), written as the other snapshots are: atomically, 0600, in a state
dir that is the user's alone. One that does not decode or is of another format is ignored.
"""

from __future__ import annotations

import os
import time
from datetime import datetime
from typing import TYPE_CHECKING, Any

from routines.query.routines import RoutineRow, decode_rows, encode_rows
from routines.spec.paths import fleet_database_env
from routines.spec.snapkey import (
    CONFIG_FILE_NAME,
    Found,
    code_context,
    files,
    racy,
    read_private,
    version,
    write_private,
    zone_data,
)

if TYPE_CHECKING:
    from routines.spec.paths import Paths
    from routines.spec.registry import Registry

__all__ = ["FILE_NAME", "FORMAT", "ListSnapshot"]

FILE_NAME = "list.snapshot"  # in the state dir, beside rows.snapshot
FORMAT = 1


def _stat_key(path: str) -> list[int] | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return list(version(st))


def _ledger_key(ledger: str) -> list[list[int] | None]:
    """The ledger's files as SQLite leaves them: the database, and its write-ahead log when
    it holds something (the last connection to close removes it, the next one makes it again,
    empty: that is no change); every commit writes one or the other."""
    wal = _stat_key(ledger + "-wal")
    return [_stat_key(ledger), wal if wal is not None and wal[2] > 0 else None]


class ListSnapshot:
    """The inputs of one `list` (read when made: before the ledger is), the rows kept for
    them if any (`rows`), and `save` of the rows built when there were none."""

    def __init__(self, paths: Paths, now: datetime) -> None:
        self._paths = paths
        self._now = now
        self._now_ns = time.time_ns()
        self.system = files(paths.system_dir, None)
        self.user = files(paths.routines_dir, CONFIG_FILE_NAME)
        context: list[str] | None = None
        # Nor on a fleet turned on by the environment alone, config.toml unchanged: its rows
        # are its database's, never those kept on one machine (routines/spec/paths.py).
        if not fleet_database_env():
            try:
                folders = [os.fspath(paths.system_dir), os.fspath(paths.routines_dir)]
                context = [str(FORMAT), *code_context(), zone_data(), *folders]
            except OSError:  # which code parses cannot be told: no cache
                context = None
        self._inputs = None if context is None else self._read_inputs(context)

    def _read_inputs(self, context: list[str]) -> list[Any] | None:
        """What the rows are made from, as JSON keeps it; None when one may change unseen."""
        # By name in each folder (the folders are in the context): the same files give equal
        # dicts, whatever order the folders list them in.
        keys = [{n: list(f[2]) for n, f in d.items()} for d in (self.system, self.user)]
        config = _stat_key(os.fspath(self._paths.config_file))
        ledger = _ledger_key(os.fspath(self._paths.ledger))
        stamps = [k for k in (config, *ledger) if k is not None]
        if ledger[0] is None or any(racy(k[1], self._now_ns) for k in stamps):
            return None
        if any(racy(k[1], self._now_ns) for d in keys for k in d.values()):
            return None
        return [context, config, ledger, keys]

    def rows(self) -> list[RoutineRow] | None:
        """The rows kept for these inputs, while the clock allows; None otherwise."""
        if self._inputs is None:
            return None
        data = read_private(self._paths.state_dir, FILE_NAME)
        if data is None:
            return None
        import json

        try:
            file = json.loads(data)
            if not isinstance(file, dict) or file.get("format") != FORMAT:
                return None
            if file.get("inputs") != self._inputs:
                return None
            made = datetime.fromisoformat(file["made"])
            if not made <= self._now < datetime.fromisoformat(file["until"]):
                return None
            return decode_rows(file["rows"])
        except (ValueError, TypeError, KeyError):  # torn, corrupt, or of another shape
            return None

    def save(self, registry: Registry, rows: list[RoutineRow]) -> None:
        """Keep `rows`, built from `registry` and the ledger read after these inputs, when
        they may be kept (the module's doc). Never raises: a cache (a full disk costs speed)."""
        from routines.query.routines import depends_on_files_and_ledger, settled_until

        if self._inputs is None or not depends_on_files_and_ledger(registry):
            return
        if any(r.errors for r in rows):  # an error quotes what the file holds, maybe a secret
            return
        until = settled_until(registry, rows, self._now)
        if until is None:
            return
        import json

        file = {
            "format": FORMAT,
            "inputs": self._inputs,
            "made": self._now.isoformat(),
            "until": until.isoformat(),
            "rows": encode_rows(rows),
        }
        try:
            write_private(
                self._paths.state_dir, FILE_NAME, json.dumps(file, separators=(",", ":")).encode()
            )
        except (OSError, TypeError, ValueError):
            return

    def found(self) -> tuple[dict[str, Found], dict[str, Found]]:
        """The routine files listed for the inputs (system, user), for the registry's read."""
        return self.system, self.user
