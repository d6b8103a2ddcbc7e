"""`vinos-routine reload`: make the daemon re-read routine files and config.toml now."""

from __future__ import annotations

import argparse
from typing import Any

from supervisor.cli.commands.common import add_parser, die

__all__ = ["register"]


def register(sub: Any) -> None:
    p = add_parser(
        sub,
        "reload",
        "make the daemon re-read routine files and config.toml now",
        "  vinos-routine reload\n",
    )
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from routines.spec.paths import paths
    from supervisor.cli.client import DaemonError, DaemonNotRunning, connect
    from supervisor.cli.present import print_json

    try:
        with connect(paths().control_socket) as client:
            result = client.request("reload")
    except DaemonNotRunning as exc:
        return die(str(exc))
    except DaemonError as exc:
        return die(str(exc))
    if args.json:
        print_json(result)
        return 0
    print(f"reloaded: {result['routines']} routines, {result['enabled']} enabled")
    for name in result["invalid"]:
        print(f"  {name}: invalid (see 'vinos-routine validate')")
    return 0
