"""Building a worker's Job: everything one run needs, decided before the process starts."""

from __future__ import annotations

import secrets
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING
from zoneinfo import ZoneInfo

from ipc.messages import Decision, Job, SandboxProbe
from routines.runs import Trigger
from routines.spec import Memory, Routine
from routines.spec.config import Config
from routines.spec.paths import Paths
from routines.spec.providers import to_job
from routines.store import read_regular

if TYPE_CHECKING:
    from supervisor.engine.reply import ReplyTo

__all__ = ["EventInput", "build_job", "new_run_id", "read_memory"]

MEMORY_CAP = 4096


@dataclass(frozen=True, slots=True)
class EventInput:
    """What an event hands its run (supervisor/engine/triggers.py): where it came from, and the text
    (capped, untrusted: the worker shows it to the model fenced as data)."""

    label: str  # "the output of research-bot's run 2026…-a1b2c3 (done)", "changed files", …
    text: str


def new_run_id(routine: str, now: datetime) -> str:
    """Sortable and unique: 20261202T060012-day-brief-3f9a1c."""
    return f"{now.strftime('%Y%m%dT%H%M%S')}-{routine}-{secrets.token_hex(3)}"


def memory_path(routine: Routine, paths: Paths) -> str | None:
    if routine.agent is None or routine.agent.memory is Memory.SESSION:
        return None
    if routine.agent.memory is Memory.SHARED:
        return str(paths.shared_memory)
    return str(paths.memory(routine.name))


def read_memory(path: str | None) -> str:
    """The memory text a run starts from (the last ~4 KB; "" when none or unreadable)."""
    if path is None:
        return ""
    # Never through a symlink: a shell tool could have planted memory.md -> ~/.ssh/id_rsa.
    data = read_regular(Path(path), MEMORY_CAP)
    return data.decode("utf-8", errors="replace") if data else ""


def build_job(
    routine: Routine,
    *,
    run_id: str,
    trigger: Trigger,
    slot: str | None,
    now: datetime,
    max_tokens: int | None,
    dollars_left: float | None,
    paths: Paths,
    config: Config,
    decisions: list[Decision] | None = None,
    reply: ReplyTo | None = None,
    debug: bool = False,
    sandbox_probe: SandboxProbe | None = None,
    event: EventInput | None = None,
    permissions: str = "ask",
) -> Job:
    mem = memory_path(routine, paths)
    return Job(
        run_id=run_id,
        routine_name=routine.name,
        routine_path=str(routine.source),
        routine_toml=routine.text,
        routine_origin=routine.origin.value,
        trigger=trigger,
        slot=slot,
        started_at=now.astimezone(ZoneInfo(routine.schedule.timezone)).isoformat(),
        max_tokens=max_tokens,
        dollars_left=dollars_left,
        memory=read_memory(mem),
        vinos_home=str(paths.home),
        state_dir=str(paths.routine_state(routine.name)),
        scratch_dir=str(paths.scratch(routine.name, run_id)),
        memory_path=mem,
        ollama_url=config.ollama_url,
        ollama_listener_users=list(config.ollama_listener_users),
        pricing={m: [p[0], p[1]] for m, p in config.pricing.items()},
        sandbox=config.sandbox.as_dict(),
        providers=to_job(config.providers),
        parent_run_id=reply.parent_run_id if reply else None,
        reply_text=reply.text if reply else "",
        answer=reply.answer if reply else None,
        permissions=permissions,
        decisions=decisions or [],
        debug=debug,
        sandbox_probe=sandbox_probe,
        event_label=event.label if event else "",
        event_text=event.text if event else "",
    )
