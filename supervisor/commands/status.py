"""`vinos-routine status`: is the daemon up, what runs, what waits, what comes next."""

from __future__ import annotations

import argparse
from datetime import UTC, datetime
from typing import Any

from supervisor.commands.common import add_parser

__all__ = ["register"]


def register(sub: Any) -> None:
    p = add_parser(
        sub,
        "status",
        "daemon state, running and queued runs, and what is due next",
        "  vinos-routine status\n  vinos-routine status --json\n",
    )
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(func=run)


def gather() -> dict[str, Any]:
    """The status from the daemon when it is up, else from the files and the ledger."""
    from routines.paths import paths
    from supervisor.client import DaemonError
    from supervisor.commands.common import try_daemon

    p = paths()
    client = try_daemon(p)
    if client is not None:
        with client:
            try:
                result: dict[str, Any] = client.request("status")
                result["daemon"] = True
                return result
            except DaemonError:
                pass
    from supervisor.commands.listing import collect

    lines = collect()
    nxt = sorted((ln.next_run, ln.name) for ln in lines if ln.next_run is not None)
    return {
        "daemon": False,
        "running": [{"routine": ln.name} for ln in lines if ln.running],
        "queued": [{"routine": ln.name} for ln in lines if ln.queued],
        "next": [{"routine": n, "at": at.isoformat()} for at, n in nxt[:20]],
        "routines": len(lines),
        "enabled": sum(1 for ln in lines if ln.enabled),
        "invalid": [ln.name for ln in lines if ln.errors],
    }


def run(args: argparse.Namespace) -> int:
    from supervisor.client import START_HINT
    from supervisor.present import color, print_json, use_color, when

    st = gather()
    if args.json:
        print_json(st)
        return 0
    c = use_color()
    now = datetime.now(UTC)
    if st["daemon"]:
        print(f"daemon: {color('running', 'green', c)} (pid {st['pid']}) · {st['status']}")
    else:
        print(f"daemon: {color('not running', 'yellow', c)}; {START_HINT}")
    print(f"routines: {st['routines']} ({st['enabled']} enabled)")
    for r in st["running"]:
        since = f" since {r['started_at'][11:19]}" if r.get("started_at") else ""
        print(f"  running  {r['routine']}{since}")
    for r in st["queued"]:
        print(f"  queued   {r['routine']}")
    for item in st["next"][:5]:
        at = datetime.fromisoformat(item["at"])
        print(f"  next     {item['routine']} {when(at, now)}")
    for name in st["invalid"]:
        print(color(f"  invalid  {name} (see 'vinos-routine validate')", "yellow", c))
    return 0
