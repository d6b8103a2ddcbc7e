"""A command routine whose command is one MCP tool call with fixed arguments:

    [command]
    mcp = { server = "time", tool = "get_current_time", arguments = { timezone = "UTC" } }

The server starts in the routine's sandbox as an agent's would (worker.mcptools); the
tool's text is the output, an error result or a failed server a failed run.
"""

from __future__ import annotations

import json

from ipc.messages import EventKind, Result, RunStatus
from worker.context import RunContext
from worker.output import write_and_post
from worker.results import run_failed

__all__ = ["run_mcp_command"]


def run_mcp_command(run: RunContext) -> Result:
    from routines.spec.mcpkeys import model_tool_name
    from worker.mcptools import McpTools

    spec = run.routine.command
    assert spec is not None and spec.mcp is not None
    call = spec.mcp
    entry = f"mcp:{call.server}/{call.tool}"
    run.mcp = McpTools(run, spec.mcp_servers, float(spec.timeout_sec))  # closed by worker.main
    run.mcp.specs([(call.server, call.tool)])
    name = model_tool_name(call.server, call.tool)
    run.channel.event(EventKind.TOOL_CALL, f"{entry}:{call.arguments}", tool="command")
    if name not in run.mcp.offered:
        return _failed(f"{entry}: the server does not offer that tool (see the run's warnings)")
    called = run.mcp.call(name, json.loads(call.arguments))
    body, is_error = called.body, called.is_error
    result = json.loads(body)
    run.channel.event(
        EventKind.TOOL_RESULT,
        f"command: {'error' if is_error else 'ok'} ({len(body):,} bytes)",
        tool="command",
        ok=not is_error,
    )
    if is_error:
        why = result.get("content") or result.get("error") or "the tool reported an error"
        return _failed(f"{entry} failed: {why}")
    text = str(result.get("content", ""))
    delivery = write_and_post(run, text)
    first = next((ln.strip() for ln in text.splitlines() if ln.strip()), "")
    return Result(
        status=RunStatus.FAILED if delivery.webhook_error else RunStatus.OK,
        summary=first[:200] or f"{entry} returned no text",
        output_file=delivery.output_file,
        route="command",
        error=delivery.error,
    )


def _failed(message: str) -> Result:
    return run_failed(message, base=Result(status=RunStatus.FAILED, route="command"))
