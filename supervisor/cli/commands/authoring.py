"""What `create`, `edit` and `install` share: the editor loop, the save, the daemon reload.

The editor loop works as `crontab -e` and `visudo` do: the editor gets a private temp copy;
on save the copy is validated; an invalid copy is shown with its errors and offered back to
the editor, and the routine file is only ever replaced by a valid one, atomically.
"""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from routines.spec import Routine
from routines.spec.checks import RoutineInvalid
from routines.spec.paths import Paths

__all__ = [
    "ChangedMeanwhile",
    "Edited",
    "EditorMissing",
    "edit_until_valid",
    "editor_argv",
    "ensure_disabled",
    "keep_state",
    "reload_daemon",
    "report_saved",
    "save_routine",
    "validate_text",
]


class EditorMissing(RuntimeError):
    pass


def editor_argv(env: dict[str, str] | None = None) -> list[str]:
    """$EDITOR, else $VISUAL, else vi, else nano; split as a shell would ("code --wait")."""
    env = dict(os.environ) if env is None else env
    for var in ("EDITOR", "VISUAL"):
        value = env.get(var, "").strip()
        if value:
            return shlex.split(value)
    for fallback in ("vi", "nano"):
        if shutil.which(fallback, path=env.get("PATH")):
            return [fallback]
    raise EditorMissing("no editor found: set EDITOR (e.g. export EDITOR=nano)")


def validate_text(text: str, target: Path) -> Routine:
    """The routine `text` would be as `target` (a user file); RoutineInvalid lists every error."""
    from routines.spec.loader import load_text

    return load_text(text, target)


@dataclass(frozen=True, slots=True)
class Edited:
    """How an editing session ended: `routine` and `text` when a valid version was saved in the
    editor, else `kept` may name the file holding the rejected text."""

    routine: Routine | None
    text: str
    changed: bool
    kept: Path | None = None


def _read_edit(path: Path) -> str:
    data = path.read_bytes()
    return data.decode("utf-8")


def edit_until_valid(initial: str, target: Path, interactive: bool) -> Edited:
    """Open the editor on a temp copy of `initial` until the text is valid or the user gives
    up. `interactive`: a person can answer "edit again?"; otherwise an invalid text ends it."""
    from supervisor.cli.present import ask_yes, color, use_color, visible

    argv = editor_argv()
    tmpdir = Path(tempfile.mkdtemp(prefix="vinos-edit-"))  # 0700: the copy stays private
    tmp = tmpdir / target.name
    tmp.write_text(initial, encoding="utf-8")
    keep = False
    try:
        while True:
            try:
                code = subprocess.run([*argv, str(tmp)], check=False).returncode
            except FileNotFoundError:
                raise EditorMissing(
                    f"the editor {argv[0]!r} was not found: set EDITOR to one that is installed"
                ) from None
            if code != 0:
                keep = True
                print(
                    f"vinos-routine: the editor exited with status {code}; nothing saved "
                    f"(your text is kept at {tmp})",
                    file=sys.stderr,
                )
                return Edited(None, "", False, tmp)
            try:
                text = _read_edit(tmp)
                if text == initial:
                    # Saved as it was (or not saved): nothing to check or keep, valid or not.
                    try:
                        return Edited(validate_text(text, target), text, False)
                    except RoutineInvalid:
                        return Edited(None, text, False)
                return Edited(validate_text(text, target), text, True)
            except UnicodeDecodeError:
                errors = [f"{target.name}: not UTF-8 text"]
            except RoutineInvalid as exc:
                errors = [str(p) for p in exc.errors]
            c = use_color(sys.stderr)
            print(color(f"{target.name} is not valid:", "red", c), file=sys.stderr)
            for error in errors:
                print(f"  {visible(error)}", file=sys.stderr)
            if interactive and ask_yes("Edit again?", default=True):
                continue
            keep = True
            print(
                f"vinos-routine: nothing saved; your text is kept at {tmp}",
                file=sys.stderr,
            )
            return Edited(None, "", True, tmp)
    finally:
        if not keep:
            shutil.rmtree(tmpdir, ignore_errors=True)


class ChangedMeanwhile(RuntimeError):
    pass


def save_routine(target: Path, text: str, expect: bytes | None) -> None:
    """Replace `target` with `text` atomically. `expect`: the bytes the file held when editing
    began (None: it did not exist); ChangedMeanwhile when someone changed it since."""
    from routines.store import write_atomic

    try:
        current: bytes | None = target.read_bytes()
    except FileNotFoundError:
        current = None
    if current != expect:
        raise ChangedMeanwhile(f"{target} changed while you were editing it")
    mode = 0o600
    if current is not None:
        mode = target.stat().st_mode & 0o777
    write_atomic(target, text.encode("utf-8"), mode=mode)


def ensure_disabled(p: Paths, routine: Routine) -> None:
    """A new draft or installed routine starts off, even when the file says enabled = true:
    that override is stored as `disable` stores it, bound to this file (changing the file's
    `enabled` later wins). Whatever the ledger remembers of an earlier routine of the same
    name (an override, a streak) is cleared: it was for another file."""
    from contextlib import closing

    from supervisor.fleet.view import cli_ledger

    with closing(cli_ledger(p)) as ledger:
        state = ledger.state(routine.name)
        if routine.enabled:
            ledger.disable(
                routine.name,
                file_enabled=True,
                file_identity=routine.identity,
                failure_streak=0,
            )
        elif state.overridden or state.disabled_reason or state.failure_streak:
            ledger.clear_override(routine.name)


def keep_state(p: Paths, was: Routine, now: Routine) -> None:
    """The person edited `was` into `now` (`edit`): an override bound to `was` follows it,
    daemon or none (supervisor/engine/toggle.py says why)."""
    from contextlib import closing

    from supervisor.fleet.view import cli_ledger

    if was.identity == now.identity:
        return
    with closing(cli_ledger(p)) as ledger:
        ledger.rebind_override(now.name, was.identity, now.identity)


def reload_daemon(p: Paths) -> str:
    """Ask a running daemon to re-read the files; a line saying what happened."""
    from supervisor.cli.client import DaemonError, try_daemon

    client = try_daemon(p)
    if client is None:
        return "the daemon is not running; it reads the file when it starts"
    with client:
        try:
            client.request("reload")
        except (DaemonError, OSError) as exc:
            return f"warning: the daemon did not reload: {exc}"
    return "the daemon reloaded it"


def report_saved(p: Paths, routine: Routine, target: Path, verb: str) -> None:
    """After a save: where it went, when it runs, and what to do next."""
    from contextlib import closing

    from supervisor.cli.commands.capabilities import next_run_text, schedule_text
    from supervisor.cli.present import color, use_color, visible
    from supervisor.fleet.view import cli_ledger

    c = use_color()
    with closing(cli_ledger(p)) as ledger:
        enabled = ledger.state(routine.name).enabled(routine.enabled, routine.identity)
    print(f"{verb} {routine.name}: {target}")
    print(f"  schedule  {visible(schedule_text(routine))}")
    if enabled:
        nxt = next_run_text(routine, datetime.now(UTC))
        print(f"  state     {color('on', 'green', c)}" + (f", next run {nxt}" if nxt else ""))
    else:
        print(f"  state     {color('off', 'dim', c)} (a draft)")
        print(f"  try it:   vinos-routine run {routine.name}")
        print(f"  turn on:  vinos-routine enable {routine.name}")
    for warning in routine.warnings:
        print(color(f"  {visible(warning)}", "yellow", c))
    print(f"  {reload_daemon(p)}")
