"""`vinos-routine`: the command line. One small module per command in supervisor/commands/.

Each command module has `register(subparsers)`, which adds its parser and sets `func`, and the
function itself, `(args) -> int` exit code: 0 ok, 1 error or failed run, 2 usage.
Modules are imported only to build the parser: keep their top-level imports light, since
`vinos-routine list` should start about as fast as Python itself.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence
from typing import Any

__all__ = ["COMMAND_MODULES", "build_parser", "main"]

# In the order `--help` lists them.
COMMAND_MODULES = (
    "listing",
    "status",
    "enable",
    "run",
    "logs",
    "history",
    "cost",
    "brief",
    "create",
    "install",
    "edit",
    "validate",
    "schedule",
    "sandbox",
    "reload",
    "daemon",
)


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("vinos-routine")
    except PackageNotFoundError:
        return "0.1.0"


class _Version(argparse.Action):
    """--version, looked up only when asked: importlib.metadata costs every command ~20 ms."""

    def __init__(self, option_strings: Sequence[str], dest: str, **kw: Any) -> None:
        super().__init__(option_strings, dest=argparse.SUPPRESS, nargs=0, **kw)

    def __call__(self, parser: argparse.ArgumentParser, *args: Any) -> None:
        print(f"vinos-routine {_version()}")
        parser.exit()


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # type: ignore[override]
        self.print_usage(sys.stderr)
        self.exit(2, f"{self.prog}: error: {message}\n")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="vinos-routine",
        description="Scheduled autonomous agents, sandboxed and on a budget.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="Run 'vinos-routine COMMAND --help' for a command's options and an example.",
    )
    parser.add_argument("--version", action=_Version, help="show the version and exit")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    for name in COMMAND_MODULES:
        try:
            module = importlib.import_module(f"supervisor.commands.{name}")
        except ModuleNotFoundError as exc:
            if exc.name != f"supervisor.commands.{name}":
                raise
            continue  # a command not built yet
        module.register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the `vinos-routine` console script."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if getattr(args, "func", None) is None:
        parser.print_help(sys.stderr)
        return 2
    try:
        code: int = args.func(args)
    except KeyboardInterrupt:
        print(file=sys.stderr)
        return 130
    except BrokenPipeError:
        # `vinos-routine list | head`: the reader left, which is not an error.
        sys.stderr.close()
        return 0
    except Exception as exc:
        # A ledger that cannot be used says what to do about it: that, not a traceback.
        from routines.ledger import LedgerError

        if not isinstance(exc, LedgerError):
            raise
        print(f"vinos-routine: {exc}", file=sys.stderr)
        return 1
    return code


if __name__ == "__main__":
    sys.exit(main())
