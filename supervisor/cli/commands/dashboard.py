"""`vinos-routine dashboard`: the local web dashboard, a process of its own (`python -m
dashboard`): this command only replaces itself with it, so the CLI loads none of its web
libraries and the dashboard none of the supervisor."""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

from supervisor.cli.commands.common import add_parser

__all__ = ["register"]

DEFAULT_PORT = 8742  # dashboard.server.DEFAULT_PORT, not imported: the parser stays light


def register(sub: Any) -> None:
    p = add_parser(
        sub,
        "dashboard",
        "serve the web dashboard on 127.0.0.1 and open it in the browser",
        "  vinos-routine dashboard\n  vinos-routine dashboard --port 9000 --no-open\n",
    )
    p.add_argument("--port", type=int, default=DEFAULT_PORT, help=f"default {DEFAULT_PORT}")
    p.add_argument("--no-open", action="store_true", help="do not open a browser")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    import importlib.util

    if not 0 <= args.port <= 65535:
        print(f"vinos-routine: --port must be 0-65535, found {args.port}", file=sys.stderr)
        return 2
    missing = [
        m
        for m in ("starlette", "uvicorn", "jinja2", "markdown_it")
        if importlib.util.find_spec(m) is None
    ]
    if missing:
        from supervisor.cli.distro import dashboard_hint, os_release, this_install

        hint = dashboard_hint(os_release(), *this_install())
        print(
            f"vinos-routine: the dashboard needs {', '.join(missing)}: {hint} "
            "(see docs/install.md, the dashboard extra)",
            file=sys.stderr,
        )
        return 1
    # Where this program's packages are (a venv, or /usr/lib/vinos-routine for the Arch
    # package, which is not on the default sys.path): the new process looks there first.
    from supervisor.engine.spawn import package_root

    root = package_root()
    code = (
        f"import sys; sys.path.insert(0, {root!r}); "
        "from dashboard.server import main; sys.exit(main())"
    )
    argv = [sys.executable, "-I", "-c", code, "--port", str(args.port)]
    if args.no_open:
        argv.append("--no-open")
    sys.stdout.flush()
    os.execv(sys.executable, argv)
