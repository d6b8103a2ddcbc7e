"""`vinos-routine edit NAME`: change a routine in $EDITOR, safely (as `crontab -e` does).

The editor gets a temp copy; the file is replaced, atomically, only by a valid version. An
invalid save shows its errors and offers the editor again. Editing a system routine (from
/etc/vinos/routines) writes your own copy into ~/.vinos/routines/, which overrides it.
"""

from __future__ import annotations

import argparse
from typing import Any

from supervisor.cli.commands.common import add_parser, die

__all__ = ["register"]


def register(sub: Any) -> None:
    p = add_parser(
        sub,
        "edit",
        "edit a routine in $EDITOR; it is saved only when valid",
        "  vinos-routine edit day-brief\n  EDITOR='code --wait' vinos-routine edit day-brief\n",
    )
    p.add_argument("name", help="routine name")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from routines.spec import Origin
    from routines.spec.paths import paths
    from supervisor.cli.commands.authoring import (
        ChangedMeanwhile,
        EditorMissing,
        edit_until_valid,
        keep_state,
        report_saved,
        save_routine,
    )
    from supervisor.cli.commands.common import NoSuchRoutine, find_entry
    from supervisor.cli.present import interactive

    p = paths()
    try:
        entry, _ = find_entry(args.name, p)
    except NoSuchRoutine as exc:
        return die(str(exc))
    name = entry.name
    user_file = p.routines_dir / f"{name}.toml"
    try:
        original = entry.path.read_bytes()
        text = original.decode("utf-8")
    except OSError as exc:
        return die(f"cannot read {entry.path}: {exc.strerror}")
    except UnicodeDecodeError:
        return die(f"{entry.path} is not UTF-8 text; fix its encoding first")
    if entry.origin is Origin.SYSTEM:
        target = user_file
        expect: bytes | None = None
        print(
            f"{name} is a system routine ({entry.path}); your edited copy will be saved as "
            f"{target} and used instead of it"
        )
    else:
        # Through a symlink (routines kept in a dotfiles repository): write the real file.
        target = entry.path.resolve()
        expect = original
    try:
        edited = edit_until_valid(text, user_file, interactive=interactive())
    except EditorMissing as exc:
        return die(str(exc))
    if edited.kept is not None:  # the editor failed, or an invalid text was given up on
        return die(f"{name} was not changed", 1)
    if not edited.changed or edited.routine is None:
        print(f"no changes: {name} is as it was")
        return 0
    try:
        save_routine(target, edited.text, expect)
    except ChangedMeanwhile:
        import tempfile
        from pathlib import Path

        fd, kept = tempfile.mkstemp(prefix=f"{name}-", suffix=".toml")
        with open(fd, "w", encoding="utf-8") as f:
            f.write(edited.text)
        return die(
            f"{target} was changed by someone else while you edited it, so it was not "
            f"overwritten; your version is at {Path(kept)}"
        )
    except OSError as exc:
        return die(f"cannot write {target}: {exc.strerror or exc}")
    if entry.routine is not None:
        keep_state(p, entry.routine, edited.routine)
    report_saved(p, edited.routine, target, "saved")
    return 0
