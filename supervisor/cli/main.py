"""`vinos-routine`: the command line. One small module per command in supervisor/cli/commands/.

Each command module has `register(subparsers)`, which adds its parser and sets `func`, and the
function itself, `(args) -> int` exit code: 0 ok, 1 error or failed run, 2 usage.
Modules are imported only to build the parser: keep their top-level imports light, since
`vinos-routine list` should start about as fast as Python itself.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from collections.abc import Sequence
from typing import Any

__all__ = ["COMMANDS", "COMMAND_MODULES", "MAX_ARGUMENT", "bad_argument", "build_parser", "main"]

# Command name → the module in supervisor/cli/commands/ that registers it, in `--help` order.
COMMANDS = {
    "list": "listing",
    "status": "status",
    "enable": "enable",
    "disable": "enable",
    "run": "run",
    "fire": "fire",
    "logs": "logs",
    "history": "history",
    "cost": "cost",
    "brief": "brief",
    "pending": "approvals",
    "approve": "approvals",
    "deny": "approvals",
    "create": "create",
    "install": "install",
    "edit": "edit",
    "remove": "remove",
    "validate": "validate",
    "schedule": "schedule",
    "sandbox": "sandbox",
    "reload": "reload",
    "daemon": "daemon",
    "dashboard": "dashboard",
    "mcp": "mcpserver",
    "reply": "reply",
    "sign": "sign",
    "trust": "sign",
    "fleet": "fleet",
    "setup": "setup",
    "doctor": "setup",
}
COMMAND_MODULES = tuple(dict.fromkeys(COMMANDS.values()))


class _Version(argparse.Action):
    """--version, looked up only when asked: importlib.metadata costs every command ~20 ms."""

    def __init__(self, option_strings: Sequence[str], dest: str, **kw: Any) -> None:
        super().__init__(option_strings, dest=argparse.SUPPRESS, nargs=0, **kw)

    def __call__(self, parser: argparse.ArgumentParser, *args: Any) -> None:
        from routines.product import version

        print(f"vinos-routine {version()}")
        parser.exit()


# The longest argument any command takes: a path (PATH_MAX), a name, a zone, a date, a reply's
# word. A longer one is a mistake (a file pasted in place of its name), refused before it is
# echoed back in a message or made into a path too long for the kernel.
MAX_ARGUMENT = 4096


def bad_argument(argv: Sequence[str]) -> str | None:
    """Why an argument cannot be taken by any command (None: each can). Checked once, before
    parsing, for every command: bytes that are no UTF-8 (Python hands them over as surrogate
    escapes, which no file, ledger row or message can hold) and arguments longer than
    MAX_ARGUMENT (tests/cli/test_cli_bad_input.py walks every argument with both)."""
    from routines.safetext import shortened

    for n, arg in enumerate(argv, 1):
        if len(arg) > MAX_ARGUMENT:
            return (
                f"argument {n} ({shortened(arg, 40)}) is longer than the {MAX_ARGUMENT} "
                "characters any command takes: give a file's name, not its content"
            )
        try:
            arg.encode("utf-8")
        except UnicodeEncodeError:
            return (
                f"argument {n} ({shortened(arg)}) is not UTF-8 text: names, zones, dates and "
                "paths here are UTF-8 (check the terminal's or the script's encoding)"
            )
    return None


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # type: ignore[override]
        self.print_usage(sys.stderr)
        self.exit(2, f"{self.prog}: error: {message}\n")


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    """The whole parser, or with `only` (a command name) just that command's: a command runs
    without importing and building all the others (about a fifth of `list`'s time)."""
    parser = _Parser(
        prog="vinos-routine",
        description="Scheduled autonomous agents, sandboxed and on a budget.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="Run 'vinos-routine COMMAND --help' for a command's options and an example.",
    )
    parser.add_argument("--version", action=_Version, help="show the version and exit")
    sub = parser.add_subparsers(dest="command_name", metavar="COMMAND", parser_class=_Parser)
    for name in (COMMANDS[only],) if only in COMMANDS else COMMAND_MODULES:
        importlib.import_module(f"supervisor.cli.commands.{name}").register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the `vinos-routine` console script."""
    os.umask(0o077)  # as every command runs (supervisor/cli/guarded.py says why)
    argv = list(sys.argv[1:] if argv is None else argv)
    if problem := bad_argument(argv):
        print(f"vinos-routine: {problem}", file=sys.stderr)
        return 2
    parser = build_parser(only=argv[0] if argv else None)
    args = parser.parse_args(argv)
    if getattr(args, "func", None) is None:
        parser.print_help(sys.stderr)
        return 2
    from supervisor.cli.guarded import guarded

    return guarded(args.command_name, lambda: int(args.func(args)))


if __name__ == "__main__":
    sys.exit(main())
