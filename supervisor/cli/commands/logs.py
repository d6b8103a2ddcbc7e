"""`vinos-routine logs NAME`: what a run did, from its event log (state/NAME/runs/ID.jsonl)."""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from supervisor.cli.commands.common import NoSuchRoutine, add_parser, die, find_entry

__all__ = ["register"]


def register(sub: Any) -> None:
    p = add_parser(
        sub,
        "logs",
        "show a run's log (the newest run unless --run is given)",
        "  vinos-routine logs day-brief\n"
        "  vinos-routine logs day-brief --follow\n"
        "  vinos-routine logs day-brief --run 20261202T060012-day-brief-3f9a1c\n",
    )
    p.add_argument("name", help="routine name")
    p.add_argument("--run", metavar="ID", help="a run id (see 'vinos-routine history NAME')")
    p.add_argument("-f", "--follow", "--tail", action="store_true", help="keep printing")
    p.add_argument("--json", action="store_true", help="print the log's JSON lines")
    p.set_defaults(func=run)


def _newest_log(runs_dir: Path) -> Path | None:
    """The newest run log: regular files only, listed through an O_NOFOLLOW directory fd."""
    try:
        fd = os.open(runs_dir, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        with os.scandir(fd) as entries:
            logs = [
                (e.stat(follow_symlinks=False).st_mtime, e.name)
                for e in entries
                if e.name.endswith(".jsonl") and e.is_file(follow_symlinks=False)
            ]
    except OSError:
        return None
    finally:
        os.close(fd)
    return runs_dir / max(logs)[1] if logs else None


def run(args: argparse.Namespace) -> int:
    import orjson

    from routines.spec.paths import paths
    from supervisor.cli.present import format_event, use_color
    from supervisor.engine.runlog import read_log

    p = paths()
    try:
        find_entry(args.name, p)
    except NoSuchRoutine as exc:
        return die(str(exc))
    runs_dir = p.routine_state(args.name) / "runs"
    if args.run:
        from routines.conversation import RUN_ID_RE  # the one shape of a run id
        from routines.safetext import shortened

        if not RUN_ID_RE.fullmatch(args.run):
            return die(
                f"not a run id: {shortened(args.run)!r} (a run id looks like "
                f"20261202T060012-{args.name}-3f9a1c; see 'vinos-routine history {args.name}')"
            )
    path = runs_dir / f"{args.run}.jsonl" if args.run else _newest_log(runs_dir)
    if path is None or not path.exists():
        if args.run:
            from datetime import UTC, datetime

            from supervisor.engine.retention import keep_days, log_pruned, pruned_note

            keep = keep_days(p.config_file)
            if log_pruned(args.run, keep, datetime.now(UTC)):
                return die(f"no log for run {args.run}: {pruned_note('run logs', keep)}")
            return die(f"no log for run {args.run} (see 'vinos-routine history {args.name}')")
        if not args.follow:
            # With --json, stdout stays JSON lines (none here); the note goes to stderr.
            print(f"{args.name} has no run logs yet", file=sys.stderr if args.json else sys.stdout)
            return 0
    c = use_color()

    def show(entry: dict[str, Any]) -> None:
        if args.json:
            print(orjson.dumps(entry).decode(), flush=True)
        else:
            data = entry.get("data")
            status = data.get("status") if isinstance(data, dict) else None
            text = format_event(
                entry.get("kind", ""), entry.get("text", ""), c, entry.get("ts"), status
            )
            print(text, flush=True)

    seen = 0
    ended = False
    if path is not None:
        for entry in read_log(path):
            show(entry)
            seen += 1
            ended = ended or entry.get("kind") == "end"
    if args.follow and not ended:
        _follow(path, runs_dir, seen, show)
    return 0


def _follow(
    path: Path | None, runs_dir: Path, seen: int, show: Callable[[dict[str, Any]], None]
) -> None:
    """Poll the log (works with or without a daemon) until the run's "end" entry."""
    from supervisor.engine.runlog import read_log

    while True:
        time.sleep(0.3)
        if path is None:
            path = _newest_log(runs_dir)
            if path is None:
                continue
        entries = list(read_log(path))
        for entry in entries[seen:]:
            show(entry)
            if entry.get("kind") == "end":
                return
        seen = len(entries)
