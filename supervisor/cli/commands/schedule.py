"""`vinos-routine schedule explain|translate`: what a schedule means, before a routine uses it.

    explain EXPR | --oncalendar EXPR | --every PHRASE  [--tz ZONE] [--count N] [--from INSTANT]
        the description, the next N fires in local time, and the OnCalendar form
    translate CRON [--tz ZONE]
        the OnCalendar line(s) for a cron expression, or why there are none (exit 1)

Both take --json. Exit codes: 0 ok, 1 refused, 2 usage.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from datetime import UTC, datetime
from typing import Any

__all__ = ["register"]

EXPLAIN_EXAMPLE = """examples:
  vinos-routine schedule explain '0 9 * * 1-5' --tz Europe/Berlin
  vinos-routine schedule explain --every 'every monday and thursday at 8am' --count 3
  vinos-routine schedule explain --oncalendar 'Mon..Fri *-*-* 09:00' --from 2026-03-27T12:00Z
  vinos-routine schedule explain '*/30 * * * *' --json
"""
TRANSLATE_EXAMPLE = """\
  vinos-routine schedule translate '0 9,17 * * 1-5'     # Mon..Fri *-*-* 09,17:00:00
  vinos-routine schedule translate '0 0 1 * MON'        # two lines: systemd ANDs the days
  vinos-routine schedule translate '0 0 L * *'          # refused (exit 1), with the reason
"""


def _zone(text: str) -> str:
    """--tz: a zone this machine knows, checked where it is parsed (argparse names the option
    and exits 2), by the one check every zone goes through (routines.schedule.tz.zone_info)."""
    from routines.schedule.tz import UnknownZone, zone_info

    try:
        zone_info(text)
    except UnknownZone as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return text


def register(sub: Any) -> None:
    p = sub.add_parser(
        "schedule",
        help="explain a schedule or translate cron to OnCalendar",
        description="Explain a schedule (cron, OnCalendar or plain language), or translate "
        "cron to systemd OnCalendar.",
        epilog=EXPLAIN_EXAMPLE + TRANSLATE_EXAMPLE,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.set_defaults(func=lambda _args: _usage(p))
    inner = p.add_subparsers(dest="schedule_command", metavar="SUBCOMMAND")

    e = inner.add_parser(
        "explain",
        help="describe a schedule and list its next fires",
        description="Describe a schedule, list its next fires in local time, and show its "
        "OnCalendar form. Give a cron expression, or --oncalendar, or --every.",
        epilog=EXPLAIN_EXAMPLE,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    e.add_argument(
        "cron",
        nargs="?",
        metavar="CRON|NAME",
        help="a five-field cron expression, or a routine's name (its schedule)",
    )
    e.add_argument("--oncalendar", metavar="EXPR", help="a systemd OnCalendar expression")
    e.add_argument("--every", metavar="PHRASE", help='plain language, e.g. "every day at 7:30"')
    e.add_argument(
        "--tz", type=_zone, metavar="ZONE", help="IANA time zone (default: this machine's)"
    )
    e.add_argument("--count", type=int, default=5, metavar="N", help="how many fires (default 5)")
    e.add_argument(
        "--from",
        dest="base",
        metavar="INSTANT",
        help="base time, ISO 8601 (e.g. 2026-03-27T12:00Z; without an offset it is in --tz); "
        "default now",
    )
    e.add_argument("--json", action="store_true", help="one JSON object")
    e.set_defaults(func=explain)

    t = inner.add_parser(
        "translate",
        help="cron to systemd OnCalendar",
        description="Print the OnCalendar line(s) that fire when a cron expression does, or "
        "why there are none (exit 1).",
        epilog="examples:\n" + TRANSLATE_EXAMPLE,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    t.add_argument("cron", metavar="CRON", help="a five-field cron expression or @shortcut")
    t.add_argument("--tz", type=_zone, metavar="ZONE", help="append this IANA zone to each line")
    t.add_argument("--json", action="store_true", help="one JSON object")
    t.set_defaults(func=translate)


def _usage(parser: argparse.ArgumentParser) -> int:
    parser.print_help(sys.stderr)
    return 2


def _usage_error(message: str) -> int:
    print(f"vinos-routine schedule: error: {message}", file=sys.stderr)
    return 2


def _refused(message: str, as_json: bool, extra: dict[str, Any] | None = None) -> int:
    if as_json:
        print(json.dumps({**(extra or {}), "error": message}))
    else:
        print(f"vinos-routine: refused: {message}", file=sys.stderr)
    return 1


def _parse_base(text: str | None, zone: Any) -> datetime | None:
    """`--from`: ISO 8601 (a trailing Z allowed), in `zone` when it has no offset."""
    if text is None:
        return datetime.now(UTC)
    try:
        if text.startswith("@"):
            return datetime.fromtimestamp(int(text[1:]), UTC)
        value = datetime.fromisoformat(text.strip())
    except ValueError:
        return None
    return value.replace(tzinfo=zone) if value.tzinfo is None else value


def _routine_schedule(word: str) -> Any:
    """`schedule explain NAME`: a single word that could be a routine's name (a cron
    expression has five fields, a shortcut starts with @) is that routine's [schedule];
    a str when there is no such routine or its file is invalid; None when it is no name."""
    from routines.spec import NAME_RE
    from routines.spec.paths import paths
    from supervisor.cli.commands.common import InvalidRoutine, NoSuchRoutine, find_routine

    if not NAME_RE.fullmatch(word):
        return None
    try:
        _, routine = find_routine(word, paths())
    except (NoSuchRoutine, InvalidRoutine) as exc:
        return f"{exc} (a cron expression has five fields)"
    if not routine.scheduled:
        return f"{word} has no [schedule]: only its [trigger] starts it"
    return routine.schedule


def explain(args: argparse.Namespace) -> int:
    from zoneinfo import ZoneInfo

    from routines.schedule import ScheduleError
    from routines.schedule import explain as explain_schedule
    from routines.schedule.tz import machine_timezone
    from routines.spec import ScheduleSpec

    given = [x for x in (args.cron, args.oncalendar, args.every) if x is not None]
    if len(given) != 1:
        return _usage_error("give exactly one of CRON, --oncalendar EXPR or --every PHRASE")
    if not 1 <= args.count <= 1000:
        return _usage_error(f"--count must be 1-1000, found {args.count}")
    if args.cron is not None and (named := _routine_schedule(args.cron)) is not None:
        if isinstance(named, str):
            return _refused(named, args.json)
        spec = named if args.tz is None else dataclasses.replace(named, timezone=args.tz)
        zone = spec.timezone
    else:
        zone = args.tz or machine_timezone()
        spec = ScheduleSpec(args.cron, args.oncalendar, args.every, timezone=zone)
    base = _parse_base(args.base, ZoneInfo(zone))  # a naive --from is in --tz, as documented
    try:
        # A command routine may fire every minute; the note says when an agent could not.
        # A refused schedule is reported before a bad --from (then no slot is shown anyway).
        schedule, slots, note = explain_schedule(spec, base or datetime.now(UTC), args.count)
    except ScheduleError as exc:
        return _refused(str(exc), args.json)
    if base is None:
        return _usage_error(
            f"--from: expected an ISO 8601 time such as 2026-03-27T12:00Z, found {args.base!r}"
        )
    if args.json:
        out: dict[str, Any] = {
            "description": schedule.description,
            "oncalendar": list(schedule.oncalendar),
            "next": [s.local.isoformat() for s in slots],
            "timezone": schedule.zone,
            "cron": schedule.cron,
        }
        if note:
            out["note"] = note
        print(json.dumps(out))
    else:
        _print_explained(schedule, slots, note, show_cron=spec.every is not None)
    return 0


def _print_explained(schedule: Any, slots: list[Any], note: str | None, show_cron: bool) -> None:
    print(schedule.description)
    print(f"  time zone   {schedule.zone}")
    if show_cron and schedule.cron:
        print(f"  cron        {schedule.cron}")
    for i, line in enumerate(schedule.oncalendar):
        print(f"  {'OnCalendar' if i == 0 else '':10}  {line}")
    if not slots:
        print("  no fire after the base time")
    else:
        print(f"  next {len(slots)} fire{'s' if len(slots) != 1 else ''}:")
    for s in slots:
        print(f"    {s.local.strftime('%a %Y-%m-%d %H:%M:%S %Z')}   {s.local.isoformat()}")
    if note:
        print(f"  note: {note}")


def translate(args: argparse.Namespace) -> int:
    from routines.schedule import ScheduleError
    from routines.schedule.translate import translate_cron

    try:
        lines = translate_cron(args.cron, args.tz)
    except ScheduleError as exc:
        return _refused(str(exc), args.json, {"cron": args.cron, "oncalendar": []})
    if args.json:
        print(json.dumps({"cron": args.cron, "oncalendar": list(lines)}))
    else:
        for line in lines:
            print(line)
    return 0
