"""`vinos-routine fleet status [--json] | join | leave [MACHINE]`: this machine in a fleet of
machines sharing routines through PostgreSQL (config.toml [fleet]; README "Several machines").
"""

from __future__ import annotations

import argparse
from typing import Any

from supervisor.cli.commands.common import add_parser, die

__all__ = ["register"]

NO_FLEET = (
    "no fleet configured: add to {config}\n"
    '  [fleet]\n  database = "postgresql://vinos@homeserver/vinos"\n'
    "(or set VINOS_FLEET_DATABASE), then run 'vinos-routine fleet join'"
)


def register(sub: Any) -> None:
    p = add_parser(
        sub,
        "fleet",
        "machines sharing routines through PostgreSQL: status, join, leave",
        "  vinos-routine fleet join\n  vinos-routine fleet status --json\n"
        "  vinos-routine fleet leave old-laptop\n",
    )
    what = p.add_subparsers(dest="fleet_command", metavar="ACTION", required=True)
    st = add_parser(
        what,
        "status",
        "machines, heartbeats, what runs where, divergence",
        "  vinos-routine fleet status\n  vinos-routine fleet status --json | jq '.machines'\n",
    )
    st.add_argument("--json", action="store_true", help="one JSON object")
    st.set_defaults(func=status)
    jo = add_parser(
        what,
        "join",
        "register this machine and copy its history, claims and cursors in",
        "  systemctl --user stop vinos-routined   # the join runs with the daemon stopped\n"
        "  vinos-routine fleet join\n"
        "  systemctl --user start vinos-routined\n",
    )
    jo.set_defaults(func=join)
    le = add_parser(
        what,
        "leave",
        "take a machine (default: this one) out of the fleet",
        "  vinos-routine fleet leave              # this machine\n"
        "  vinos-routine fleet leave old-laptop   # its runs stay in the history\n",
    )
    le.add_argument("machine", nargs="?", help="the machine's name (default: this machine)")
    le.set_defaults(func=leave)


def _fleet_ledger() -> Any:
    from routines.ledger.postgres import PgLedger
    from routines.spec.config import ConfigInvalid, load_config
    from routines.spec.paths import paths

    p = paths()
    try:
        config = load_config(p.config_file)
    except ConfigInvalid as exc:
        raise SystemExit(die(f"config.toml is invalid:\n{exc}")) from None
    if config.fleet is None:
        raise SystemExit(die(NO_FLEET.format(config=p.config_file)))
    return PgLedger(config.fleet.database, config.fleet.machine)


def status(args: argparse.Namespace) -> int:
    from routines.safetext import one_line
    from routines.spec.paths import paths
    from routines.spec.registry import scan
    from supervisor.cli.present import print_json, table
    from supervisor.fleet.view import picture

    with _fleet_ledger() as ledger:
        pic = picture(
            ledger.machine,
            ledger.machines(),
            ledger.where_running(),
            ledger.definitions(),
            scan(paths()),
        )
        where = ledger.where
    if args.json:
        print_json({"database": where, **pic.as_json()})
        return 0
    print(f"fleet: {where} · this machine: {pic.machine}")
    running_on: dict[str, list[str]] = {}
    for routine, machine in pic.running.items():
        running_on.setdefault(machine, []).append(routine)
    rows = []
    for m in pic.machines:
        state = "left" if m.left else ("up" if m.up else "down")
        age = "never" if m.age_sec is None else f"{m.age_sec:.0f}s ago"
        rows.append(
            [
                one_line(m.machine) + (" (this one)" if m.machine == pic.machine else ""),
                state,
                age,
                one_line(f"{m.host or '?'}:{m.pid}") if m.pid else "",
                m.version or "",
                ", ".join(sorted(running_on.get(m.machine, []))),
            ]
        )
    table(["MACHINE", "STATE", "HEARTBEAT", "DAEMON", "VERSION", "RUNNING"], rows)
    for m in pic.machines:
        if m.conflict:
            print(
                f"conflict: {one_line(m.machine)}: {one_line(m.conflict)}; the name is held "
                "by the daemon above: give each machine its own [fleet] machine"
            )
    for name, groups in pic.divergent.items():
        parts = " / ".join(" and ".join(g) for g in groups)
        print(f"divergent: {one_line(name)} runs nowhere until its files agree ({parts})")
    for name, why in sorted(pic.held_here.items()):
        if name not in pic.divergent:
            print(f"not here: {one_line(name)}: {why}")
    return 0


def join(args: argparse.Namespace) -> int:
    import os
    import secrets
    import socket
    from datetime import UTC, datetime

    from routines.ledger import Ledger
    from routines.ledger.fleetjoin import join as copy_in
    from routines.spec.paths import paths
    from supervisor.cli.client import try_daemon
    from supervisor.engine.owner import version
    from supervisor.fleet.member import boot_id, pid_alive

    p = paths()
    client = try_daemon(p)
    if client is not None:
        client.close()
        return die(
            "the daemon is running: stop it for the join (systemctl --user stop "
            "vinos-routined), then start it again; it then uses the fleet's database"
        )
    with _fleet_ledger() as fleet:  # connects and applies the migrations
        # As a daemon registers: refused while another live daemon holds the name (the
        # machine's own daemon, started next, takes it over: this pid is gone by then).
        fleet.instance = secrets.token_hex(8)
        fleet.register(
            version(), os.getpid(), host=socket.gethostname(), boot_id=boot_id(), alive=pid_alive
        )
        if p.ledger.exists():
            with Ledger(p.ledger) as local:
                report = copy_in(fleet, local, datetime.now(UTC))
        else:
            report = None
        machine, where = fleet.machine, fleet.where
    print(f"{machine} joined the fleet at {where}")
    if report is not None:
        print(
            f"copied {report.runs} run(s) ({report.interrupted} left running, now "
            f"interrupted), {report.claims} claim(s), {report.states} routine state(s), "
            f"{report.days} compacted day(s); nothing is run again"
        )
    return 0


def leave(args: argparse.Namespace) -> int:
    with _fleet_ledger() as fleet:
        machine = args.machine or fleet.machine
        if not fleet.leave(machine):
            return die(f"{machine} is not in the fleet (fleet status lists its machines)")
    print(
        f"{machine} left the fleet: its routine files no longer count for divergence. Its "
        "runs stay in the fleet's history."
        + (
            " Remove [fleet] from config.toml and restart the daemon to run alone again."
            if not args.machine
            else ""
        )
    )
    return 0
