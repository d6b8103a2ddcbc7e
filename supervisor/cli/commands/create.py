"""`vinos-routine create NAME`: scaffold a routine, disabled (a draft), and open it in $EDITOR.

From a commented template (an agent, or `--kind command`), or `--from` a starter or another
routine. On a terminal the draft opens in the editor and is saved only once it is valid; not
on a terminal, the draft is written as it is and its path printed.
"""

from __future__ import annotations

import argparse
import re
from pathlib import Path
from typing import TYPE_CHECKING, Any

from supervisor.cli.commands.common import add_parser, die

if TYPE_CHECKING:
    from routines.spec.paths import Paths

__all__ = ["register", "scaffold"]


def register(sub: Any) -> None:
    p = add_parser(
        sub,
        "create",
        "scaffold a new routine (disabled) and open it in $EDITOR",
        "  vinos-routine create standup-notes\n"
        "  vinos-routine create disk-report --kind command\n"
        "  vinos-routine create my-brief --from day-brief\n"
        "  vinos-routine create standup-notes --no-edit   # write the draft, print its path\n",
    )
    p.add_argument("name", help="the new routine's name (lowercase letters, digits, '-')")
    source = p.add_mutually_exclusive_group()
    source.add_argument(
        "--from",
        dest="source",
        metavar="ROUTINE",
        help="start from a starter (day-brief, inbox-triage, …) or another routine",
    )
    source.add_argument(
        "--kind",
        choices=("agent", "command"),
        default="agent",
        help="agent (a model with tools, the default) or command (a shell command, no model)",
    )
    p.add_argument("--no-edit", action="store_true", help="do not open the editor")
    p.set_defaults(func=run)


def _template(kind: str, name: str) -> str:
    from importlib.resources import files

    text = files("routines.templates").joinpath(f"{kind}.toml").read_text(encoding="utf-8")
    return text.replace("@NAME@", name)


def _starter_text(source: str) -> str | None:
    from importlib.resources import files

    entry = files("routines.starters").joinpath(f"{source}.toml")
    return entry.read_text(encoding="utf-8") if entry.is_file() else None


_ENABLED = re.compile(r"^(\s*enabled\s*=\s*)true\b", re.MULTILINE)
_NAME = re.compile(r"""^(\s*name\s*=\s*)(["'])[^"'\n]*\2""", re.MULTILINE)


def scaffold(text: str, name: str, source: str) -> str:
    """A copy of another routine's TOML for `name`: off, and renamed where it names itself."""
    text = _ENABLED.sub(r"\1false", text, count=1)
    text = _NAME.sub(lambda m: f'{m.group(1)}"{name}"', text, count=1)
    # The source's own hints ("Turn it on with: vinos-routine enable day-brief") name the copy.
    text = re.sub(rf"(vinos-routine [a-z]+ ){re.escape(source)}\b", rf"\g<1>{name}", text)
    return f"# {name}: created from {source} with `vinos-routine create`.\n{text}"


def _source_text(source: str, name: str) -> str:
    """The TOML to start from; LookupError names what exists."""
    from supervisor.cli.commands.common import NoSuchRoutine, find_entry

    text = _starter_text(source)
    if text is None:
        try:
            entry, _ = find_entry(source)
        except NoSuchRoutine as exc:
            raise LookupError(str(exc)) from None
        text = entry.path.read_text(encoding="utf-8")
    return scaffold(text, name, source)


def run(args: argparse.Namespace) -> int:
    from routines.spec import NAME_RE, RESERVED_NAMES
    from routines.spec.checks import RoutineInvalid
    from routines.spec.paths import paths
    from routines.spec.registry import scan
    from supervisor.cli.commands.authoring import EditorMissing, edit_until_valid, validate_text
    from supervisor.cli.present import interactive, visible

    name: str = args.name
    if not NAME_RE.fullmatch(name):
        return die(
            f"bad routine name {name!r}: use lowercase letters, digits and '-', starting with "
            "a letter or digit, at most 63 characters (e.g. standup-notes)",
            2,
        )
    if name in RESERVED_NAMES:
        return die(f"the name {name!r} is reserved: choose another", 2)
    p = paths()
    target = p.routines_dir / f"{name}.toml"
    if target.exists():
        return die(f"{name} exists already ({target}); change it with: vinos-routine edit {name}")
    existing = scan(p).get(name)
    if existing is not None:
        return die(
            f"a system routine named {name} exists ({existing.path}); to change it, "
            f"'vinos-routine edit {name}' makes your own copy"
        )
    try:
        text = _source_text(args.source, name) if args.source else _template(args.kind, name)
    except LookupError as exc:
        return die(f"--from: {exc}")
    except OSError as exc:
        return die(f"--from: cannot read it: {exc}")

    problems: list[str] = []
    try:
        validate_text(text, target)
    except RoutineInvalid as exc:
        problems = [str(e) for e in exc.errors]
    editing = interactive() and not args.no_edit
    if not editing:
        if problems:
            return die(f"the draft of {name} is not valid:\n  " + visible("\n  ".join(problems)))
        return _save(p, target, name, text, bool(args.source))
    if problems:
        print(f"the draft of {name} needs fixing before it can be saved:")
        for problem in problems:
            print(f"  {visible(problem)}")
    try:
        edited = edit_until_valid(text, target, interactive=True)
    except EditorMissing as exc:
        return die(f"{exc}; or use --no-edit to write the draft without an editor")
    if edited.routine is None:
        return die(f"{name} was not created")
    return _save(p, target, name, edited.text, bool(args.source))


def _save(p: Paths, target: Path, name: str, text: str, copied: bool = False) -> int:
    from supervisor.cli.commands.authoring import (
        ChangedMeanwhile,
        ensure_disabled,
        report_saved,
        save_routine,
        validate_text,
    )

    routine = validate_text(text, target)
    ensure_disabled(p, routine)
    try:
        save_routine(target, text, expect=None)
    except ChangedMeanwhile:
        return die(f"{target} appeared while you were editing; your draft was not saved over it")
    report_saved(p, routine, target, "created")
    if copied:  # --from: someone else's routine, so say what it may do
        from supervisor.cli.commands.capabilities import card, card_lines, on_this_host
        from supervisor.cli.present import use_color

        for line in card_lines(card(routine, on_this_host(routine)), use_color()):
            print(line)
    return 0
