"""`vinos-routine mcp`: serve routines to another agent over stdio (supervisor/cli/mcpserve.py)."""

from __future__ import annotations

import argparse
from typing import Any

__all__ = ["register"]

EXAMPLE = """example:
  claude mcp add vinos-routine -- vinos-routine mcp     # Claude Code, one line
  goose: extensions: {vinos-routine: {type: stdio, cmd: vinos-routine, args: [mcp]}}

Drafts are written disabled; only routines you enabled can be run; outputs and history are
shown only for the routines config.toml names in [mcp_server].expose.
"""


def register(sub: Any) -> None:
    p = sub.add_parser(
        "mcp",
        help="serve your routines to an assistant over MCP (stdio)",
        epilog=EXAMPLE,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from supervisor.cli.mcpserve import serve

    serve()
    return 0
