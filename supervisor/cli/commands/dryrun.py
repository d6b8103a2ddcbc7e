"""`vinos-routine run NAME --dry-run [--json] [--gate]`: the resolved job, not run.

It prints the schedule's next fires, the triggers, the capability card, the exact system prompt
and tools, the sandbox argv, the route and an estimated cost range (routines/estimate.py, the
estimate the pool checks before dispatch). The worker's parts come from `python -m
worker.dryrun` (this side imports no worker code). Nothing calls a model, opens a connection
or runs a tool, except the gate with `--gate` (tests/cli/test_cli_dry_run.py).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from datetime import UTC, datetime
from typing import Any

from routines.spec import Routine
from routines.spec.paths import Paths

__all__ = ["dry_run", "job_rows", "render"]

NEXT_FIRES = 3


def job_rows(routine: Routine, now: datetime, worker_part: dict[str, Any]) -> dict[str, Any]:
    """What a dry run shows, as data (`--json` prints it; `render` writes it as text)."""
    from routines.estimate import estimate
    from routines.spec.config import load_config
    from routines.spec.paths import paths
    from supervisor.cli.commands.capabilities import card

    fires: list[str] = []
    if routine.scheduled:
        from routines.schedule import ScheduleError, compile_schedule

        try:
            sched = compile_schedule(routine.schedule, routine.kind)
        except ScheduleError:
            sched = None
        at = now
        while sched is not None and len(fires) < NEXT_FIRES:
            slot = sched.next_after(at)
            if slot is None:
                break
            fires.append(slot.instant.isoformat())
            at = slot.instant
    t = routine.trigger
    config = load_config(paths().config_file)
    est = estimate(routine, config.providers, config.pricing)
    return {
        "routine": routine.name,
        "kind": routine.kind.value,
        "next_fires": fires,
        "triggers": {
            "after": list(t.after),
            "on": [o.value for o in t.on] if t.after else [],
            "watch": list(t.watch),
            "fire": t.fire,
        }
        if t is not None
        else None,
        "gate": routine.gate.run if routine.gate else None,
        "card": [{"label": x.label, "text": x.text} for x in card(routine)],
        "estimate": est.as_json() if est is not None else None,
        **worker_part,
    }


def render(rows: dict[str, Any]) -> str:
    from routines.safetext import one_line, visible

    out = [f"dry run of {rows['routine']} ({rows['kind']}): nothing is run"]
    fires = rows["next_fires"]
    out.append("next fires: " + (", ".join(fires) if fires else "none (no [schedule])"))
    t = rows["triggers"]
    if t:
        if t["after"]:
            out.append(f"after: {', '.join(t['after'])} (on {', '.join(t['on'])})")
        if t["watch"]:
            out.append(f"watch: {', '.join(one_line(w) for w in t['watch'])}")
        if t["fire"]:
            out.append("fire: vinos-routine fire " + rows["routine"])
    if rows["gate"]:
        out.append(f"gate: {one_line(rows['gate'])}")
    out.append("card:")
    out += [f"  {x['label']}: {one_line(x['text'])}" for x in rows["card"]]
    route = rows.get("route")
    if route:
        legs = f"local {route.get('local')}, premium {route.get('premium')}"
        out.append("route: " + (route.get("error") or f"{route['label']} ({legs})"))
    est = rows["estimate"]
    if est:
        high = f"${est['high']:.4f}" if est["high"] is not None else "unknown"
        line = (
            f"estimated cost: ${est['low']:.4f} to {high} (~{est['prompt_tokens']:,} prompt tokens)"
        )
        out.append(line + (f"; {est['note']}" if est["note"] else ""))
    if "system_prompt" in rows:
        out.append("system prompt:")
        out += ["  " + visible(line) for line in rows["system_prompt"].splitlines()]
        out.append("tools: " + ", ".join(x["name"] for x in rows["tools"]))
    for cmd, argv in rows.get("sandbox_argv", {}).items():
        out.append(f"sandbox argv for {one_line(cmd)}:\n  {one_line(argv)}")
    if rows.get("sandbox_error"):
        out.append(one_line(rows["sandbox_error"]))
    if rows.get("gate_result"):
        g = rows["gate_result"]
        out.append(f"gate ran: exit {g['exit_code']}: {g['verdict']}: {one_line(g['text'])}")
    return "\n".join(out) + "\n"


def _worker_part(routine: Routine, gate: bool) -> tuple[dict[str, Any], str | None]:
    from supervisor.engine.spawn import package_root

    argv = [sys.executable, "-P", "-m", "worker.dryrun", str(routine.source)]
    if gate:
        argv.append("--gate")
    env = {**os.environ, "PYTHONPATH": package_root()}
    done = subprocess.run(argv, capture_output=True, text=True, check=False, env=env)
    if done.returncode != 0:
        return {}, done.stderr.strip() or f"worker.dryrun exited {done.returncode}"
    part = json.loads(done.stdout)
    part.pop("routine", None)
    if "gate" in part:
        part["gate_result"] = part.pop("gate")
    return part, None


def dry_run(routine: Routine, p: Paths, *, as_json: bool, gate: bool) -> int:
    from supervisor.cli.commands.common import die
    from supervisor.cli.present import print_json

    part, error = _worker_part(routine, gate)
    if error is not None:
        return die(error)
    rows = job_rows(routine, datetime.now(UTC), part)
    if as_json:
        print_json(rows)
    else:
        print(render(rows), end="")
    return 0
