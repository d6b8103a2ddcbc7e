"""`status`: is the daemon up, what runs, what waits, what comes next; and `status --waybar`.

`gather` asks the daemon (or reads the files when none answers); `lines` builds the text from
that status alone (tests/supervisor/test_views.py); `show` is the command's flow, run by the
CLI and, for a thin client, by the daemon.
"""

from __future__ import annotations

import sys
from datetime import UTC, datetime
from typing import Any

__all__ = ["gather", "lines", "show", "waybar"]


def waybar() -> int:
    """One line of JSON for waybar, from the files and the ledger (never the daemon: a bar
    that polls must not wait on it). An error is shown in the bar, with exit status 0,
    because waybar hides a module whose command fails."""
    import orjson

    from supervisor.waybar import waybar_error, waybar_json

    try:
        from contextlib import closing
        from zoneinfo import ZoneInfo

        from routines.schedule.tz import machine_timezone
        from routines.spec.paths import paths
        from supervisor.fleet.view import cli_ledger
        from supervisor.overview import collect
        from supervisor.seen import unseen_count

        now = datetime.now(UTC)
        lines = collect(now)
        zone = ZoneInfo(machine_timezone())
        p = paths()
        day = now.astimezone(zone).date()
        from routines.ledger import Ledger
        from routines.proposals import waiting_count

        with closing(cli_ledger(p)) as ledger:
            today = ledger.dollars_by_day([day], zone)
        # Proposals are kept in this machine's own ledger file, on a fleet too.
        pending = 0
        if p.ledger.exists():
            with Ledger(p.ledger) as local:
                pending = waiting_count(local, now)
        unseen = unseen_count(p.state_dir, {ln.name for ln in lines if ln.open_on_login}, day)
        value = waybar_json(lines, sum(today.values()), now, unseen, pending)
    except Exception as exc:  # the bar shows any failure rather than going blank
        value = waybar_error(str(exc) or type(exc).__name__)
    sys.stdout.buffer.write(orjson.dumps(value) + b"\n")
    sys.stdout.flush()
    return 0


def gather() -> dict[str, Any]:
    """The status from the daemon when it is up, else from the files and the ledger: the
    same shape (ipc.StatusReply) either way."""
    from routines.spec.paths import paths
    from supervisor.client import DaemonError, try_daemon

    p = paths()
    client = try_daemon(p)
    if client is not None:
        with client:
            try:
                result: dict[str, Any] = client.request("status")
                return result
            except DaemonError:
                pass
    from supervisor.overview import collect, offline_status

    return offline_status(collect())


def lines(st: dict[str, Any], now: datetime, c: bool, start_hint: str) -> list[str]:
    """What `status` prints of the status `st` (with its "problems"); `start_hint`: how to
    start the daemon, shown when it is not running."""
    from routines.safetext import one_line
    from supervisor.present import color, when

    out = []
    if st["daemon"]:
        out.append(f"daemon: {color('running', 'green', c)} (pid {st['pid']}) · {st['status']}")
    else:
        out.append(f"daemon: {color('not running', 'yellow', c)}; {start_hint}")
    out.append(f"routines: {st['routines']} ({st['enabled']} enabled)")
    for r in st["running"]:
        since = f" since {r['started_at'][11:19]}" if r.get("started_at") else ""
        out.append(f"  running  {one_line(r['routine'])}{since}")
    for r in st["queued"]:
        out.append(f"  queued   {one_line(r['routine'])}")
    for item in st["next"][:5]:
        at = datetime.fromisoformat(item["at"])
        out.append(f"  next     {one_line(item['routine'])} {when(at, now)}")
    stale = set(st.get("stale", []))
    for name in st["invalid"]:
        still = "; its last good version still runs" if name in stale else ""
        line = f"  invalid  {one_line(name)}{still} (see 'vinos-routine validate')"
        out.append(color(line, "yellow", c))
    for problem in st["problems"]:
        out.append(color(f"  problem  {one_line(problem)}", "red", c))
    return out


def show(as_json: bool, as_waybar: bool) -> int:
    """`status [--json | --waybar]`: gather, then print (the CLI's and the daemon's flow)."""
    if as_waybar:
        return waybar()
    from supervisor.present import print_json, use_color

    st = gather()
    st["problems"] = _problems(st)
    if as_json:
        print_json(st)
        return 0
    hint = ""
    if not st["daemon"]:
        from supervisor.userunits import start_hint

        hint = start_hint()
    for line in lines(st, datetime.now(UTC), use_color(), hint):
        print(line)
    return 0


def _problems(st: dict[str, Any]) -> list[str]:
    """What keeps enabled routines from working here (key, Ollama, bwrap), with the fix."""
    from contextlib import closing

    from routines.ledger import LedgerError, RoutineState, is_enabled
    from routines.spec.config import ConfigInvalid, load_config
    from routines.spec.paths import paths
    from supervisor.fleet.view import cli_ledger
    from supervisor.hostcheck import problems
    from supervisor.source import scan

    p = paths()
    try:
        config = load_config(p.config_file)
    except ConfigInvalid as exc:
        return [f"{p.config_file} is invalid: {exc}"]
    registry = scan(p)
    states: dict[str, RoutineState] = {}
    # A daemon paused because its ledger is away (a fleet's database down or hung) says so,
    # and that is what this prints: the routines' own `enabled` stands in for their states
    # meanwhile, without a read that would wait out the call deadline (tests/fleet/
    # test_fleet_cli.py: a fresh fleet machine; status answers within a second on a hang).
    if not (st.get("daemon") and st.get("health", "ok") != "ok"):
        try:
            with closing(cli_ledger(p)) as ledger:
                states = ledger.states()
        except LedgerError:
            if not st.get("daemon"):
                raise
    enabled = [r for r in registry.routines() if is_enabled(states, r)]
    pid = st.get("pid") if st.get("daemon") else None
    return problems(p, enabled, config.ollama_url, pid, config.providers)
