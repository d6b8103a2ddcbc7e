"""The system prompt, the user turn and the tool schemas the model sees.

The runtime's own words avoid the router's reasoning words (worker.router.REASONING_RE), so
only the routine's own prompt can make a run a "reasoning task"; a unit test pins that.
"""

from __future__ import annotations

from datetime import datetime

from routines.runs import Outcome, Trigger
from routines.spec import AgentSpec
from worker import memory
from worker.providers.base import ToolSpec

__all__ = [
    "TOOL_OUTCOME",
    "TOOL_READ",
    "TOOL_SHELL",
    "runtime_notes",
    "system_prompt",
    "tool_specs",
    "user_turn",
]

TOOL_READ = "read_files"
TOOL_SHELL = "run_shell"
TOOL_OUTCOME = "report_outcome"
_TRIGGER_WORDS = {
    Trigger.SCHEDULE: "scheduled",
    Trigger.CATCH_UP: "catch-up",
    Trigger.MANUAL: "manual",
    Trigger.REPLY: "reply",
}


def runtime_notes(name: str, tools: list[ToolSpec]) -> str:
    names = [t.name for t in tools if t.name != TOOL_OUTCOME]
    lines = [
        f'You are running unattended as the scheduled routine "{name}"; nobody is watching '
        "this run live and nobody can answer questions.",
    ]
    if names:
        lines.append(
            "Tools run only with the exact arguments listed in each tool's description; "
            "anything else is refused."
        )
    if any(t.name == TOOL_OUTCOME for t in tools):
        lines.append(
            f"When you are finished, call {TOOL_OUTCOME} once (status done, nothing-to-do or "
            "needs-attention, with a one-line summary), then reply with your final output "
            "as markdown."
        )
    else:
        lines.append("Reply with your final output as markdown.")
    return " ".join(lines)


def system_prompt(agent: AgentSpec, name: str, tools: list[ToolSpec]) -> str:
    return f"{agent.system.strip()}\n\n---\n{runtime_notes(name, tools)}"


def task_text(started: datetime, trigger: Trigger) -> str:
    """The user turn without memory (what the router reads as "the user turn")."""
    kind = _TRIGGER_WORDS.get(trigger, trigger)
    when = started.strftime("%A %d %B %Y, %H:%M (UTC%z)")
    return f"It is {when}. This is a {kind} run: do your task now."


def user_turn(task: str, memory_text: str) -> str:
    """Memory first, under the "Prior context from earlier runs" heading, then the task."""
    if not memory_text.strip():
        return task
    return f"{memory.PREFIX}:\n\n{memory_text.strip()}\n\n---\n{task}"


def tool_specs(agent: AgentSpec) -> list[ToolSpec]:
    """read_files and run_shell when the routine declares entries for them; report_outcome."""
    specs: list[ToolSpec] = []
    if agent.read_patterns:
        specs.append(
            ToolSpec(
                TOOL_READ,
                "Read the files matching one of these declared glob patterns (pass the "
                "pattern exactly as listed): " + "; ".join(agent.read_patterns),
                {
                    "type": "object",
                    "properties": {"glob": {"type": "string", "enum": list(agent.read_patterns)}},
                    "required": ["glob"],
                },
            )
        )
    if agent.shell_commands:
        specs.append(
            ToolSpec(
                TOOL_SHELL,
                "Run one of these declared shell commands in a sandbox and get its output "
                "(pass the command exactly as listed): " + "; ".join(agent.shell_commands),
                {
                    "type": "object",
                    "properties": {
                        "command": {"type": "string", "enum": list(agent.shell_commands)}
                    },
                    "required": ["command"],
                },
            )
        )
    specs.append(
        ToolSpec(
            TOOL_OUTCOME,
            "Report how this run went, once, before your final reply: done (you did the "
            "task), nothing-to-do (there was nothing to act on), needs-attention (the user "
            "should look at something).",
            {
                "type": "object",
                "properties": {
                    "status": {"type": "string", "enum": [o.value for o in Outcome]},
                    "summary": {"type": "string", "description": "one line"},
                },
                "required": ["status", "summary"],
            },
        )
    )
    return specs
