"""Carrying out the model's tool calls, whitelist first (sandbox/ decides, we enforce).

An undeclared or mismatched call is refused before anything runs: it gets an error tool
result, a `tool_refused` event and the log line `[NAME] refused tool call: shell:CMD`, and
the run goes on. Shell commands run only through sandbox.run_shell (bwrap); reads through
sandbox.read_files with one read budget for the whole run.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ipc.framing import ProtocolError, encode
from ipc.messages import EventKind, Outcome, Proposal
from routines.spec.never import NAME_PATTERNS, read_problem
from worker.channel import preview
from worker.context import RunContext
from worker.prompts import TOOL_OUTCOME, TOOL_PROPOSE, TOOL_READ, TOOL_SHELL, TOOL_WRITE
from worker.providers.base import ToolCall, ToolResult
from worker.replies import PAUSED_RESULT

if TYPE_CHECKING:
    from sandbox import ReadBudget, ShellPolicy

__all__ = ["Toolbox", "describe_call"]

_ARG = {TOOL_SHELL: "command", TOOL_READ: "glob", TOOL_PROPOSE: "action", TOOL_WRITE: "path"}
_PREFIX = {TOOL_SHELL: "shell", TOOL_READ: "read", TOOL_PROPOSE: "propose", TOOL_WRITE: "write"}


def describe_call(call: ToolCall) -> str:
    """How a call appears in the log: `shell:CMD`, `read:GLOB`, or `name:{args}`."""
    args = call.arguments or {}
    if call.name in _ARG and isinstance(args.get(_ARG[call.name]), str):
        return f"{_PREFIX[call.name]}:{args[_ARG[call.name]]}"
    text = json.dumps(args, ensure_ascii=False) if call.arguments is not None else "<malformed>"
    server, sep, tool = call.name.removeprefix("mcp__").partition("__")
    if call.name.startswith("mcp__") and sep:  # as the whitelist writes it: mcp:SERVER/TOOL
        return f"mcp:{server}/{tool}:{text[:200]}"
    return f"{call.name or '<unnamed>'}:{text[:200]}"


class Toolbox:
    def __init__(self, run: RunContext) -> None:
        self.run = run
        agent = run.routine.agent
        assert agent is not None
        self.agent = agent
        self._policy: ShellPolicy | None = None
        self._read_budget: ReadBudget | None = None

    def execute(self, call: ToolCall) -> ToolResult:
        if call.arguments is None:
            return self._error(
                call,
                f"your {call.name or 'tool'} call's arguments were not a valid JSON object "
                f"({call.error}); call it again with a JSON object",
            )
        if call.name == TOOL_OUTCOME:
            return self._outcome(call, call.arguments)
        if call.name == TOOL_SHELL:
            return self._shell(call, call.arguments.get("command"))
        if call.name == TOOL_READ:
            return self._read(call, call.arguments.get("glob"))
        if call.name == TOOL_PROPOSE and self.agent.actions:
            return self._propose(call, call.arguments)
        if call.name == TOOL_WRITE and self.agent.write:
            return self._write(call, call.arguments)
        if self.run.mcp is not None and call.name in self.run.mcp.offered:
            return self._mcp(call, call.arguments)
        return self._refuse(call, f"there is no tool named {call.name!r}")

    # --- the tools ---

    def _outcome(self, call: ToolCall, args: dict[str, Any]) -> ToolResult:
        status, summary = args.get("status"), args.get("summary")
        valid = [o.value for o in Outcome]
        if status not in valid:
            return self._error(call, f"status must be one of {valid}, found {status!r}")
        text = " ".join(str(summary or "").split())[:500]
        self.run.outcome, self.run.outcome_summary = Outcome(status), text
        self.run.channel.event(
            EventKind.LOG, f"outcome: {status}: {text}", outcome=status, summary=text
        )
        return ToolResult(call, json.dumps({"recorded": True}))

    def _shell(self, call: ToolCall, command: object) -> ToolResult:
        import sandbox

        if not isinstance(command, str):
            return self._refuse(call, "run_shell needs a string argument `command`")
        reason = sandbox.check_shell(self.agent.shell_commands, command)
        if reason is not None:
            return self._refuse(call, reason)
        self._announce(call)
        remaining = self.run.deadline.remaining()
        if remaining <= 1:
            return self._error(call, "the run is out of time; no more commands will run")
        try:
            policy = self._shell_policy()
        except ValueError as exc:  # sandbox.UnsafeValue: a path that must never reach bwrap
            return self._error(call, f"the sandbox refused to start: {exc}")
        result = sandbox.run_shell(
            command,
            policy,
            timeout_sec=min(float(self.agent.shell_timeout_sec), remaining),
            on_argv=self.run.debug_argv(),
            on_copy_back=self.run.announce_copy_back,
        )
        self.run.record_tool(TOOL_SHELL)
        body = json.dumps(result.to_json(), ensure_ascii=False)
        failed = result.error is not None
        self._report(call, body, ok=not failed, exit_code=result.exit_code)
        return ToolResult(call, body, is_error=failed)

    def _read(self, call: ToolCall, pattern: object) -> ToolResult:
        import sandbox

        if not isinstance(pattern, str):
            return self._refuse(call, "read_files needs a string argument `glob`")
        reason = sandbox.check_read(self.agent.read_patterns, pattern)
        if reason is not None:
            return self._refuse(call, reason)
        never, own, extra = self._never()
        home = os.path.realpath(Path.home())  # `~` in a read pattern is the user's home
        # config.toml's [sandbox].never is known only here: the loader checked the defaults.
        reason = read_problem(pattern, home, never, own, extra)
        if reason is not None:
            return self._refuse(call, reason)
        self._announce(call)
        if self._read_budget is None:
            self._read_budget = sandbox.ReadBudget()
        found = sandbox.read_files(
            pattern,
            self.agent.read_patterns,
            home=Path(home),
            budget=self._read_budget,
            never=never,
            own=own,
            never_names=tuple(e.path for e in NAME_PATTERNS),
        )
        self.run.record_tool(TOOL_READ)
        body = json.dumps(found, ensure_ascii=False)
        self._report(call, body, ok=True)
        return ToolResult(call, body)

    def _propose(self, call: ToolCall, args: dict[str, Any]) -> ToolResult:
        """Pass a proposal to the supervisor; nothing runs here: a person decides
        (test_cli_approvals.py::test_a_proposal_is_recorded_and_nothing_runs)."""
        from routines.proposals import MAX_INPUT, MAX_PER_RUN

        name, text, summary = args.get("action"), args.get("input"), args.get("summary")
        if not isinstance(name, str) or self.agent.action(name) is None:
            declared = [a.name for a in self.agent.actions]
            return self._refuse(call, f"no declared action {name!r} (declared: {declared})")
        if not isinstance(text, str) or not isinstance(summary, str):
            return self._refuse(call, "propose_action needs strings `input` and `summary`")
        size = len(text.encode("utf-8", "surrogatepass"))
        if size > MAX_INPUT:
            return self._refuse(call, f"the input is {size:,} bytes; at most {MAX_INPUT:,}")
        if self.run.proposals >= MAX_PER_RUN:
            return self._refuse(call, f"at most {MAX_PER_RUN} proposals per run")
        summary = " ".join(summary.split())[:300] or f"run {name}"
        try:
            encode(Proposal(action=name, input=text, summary=summary))
        except ProtocolError:
            return self._refuse(call, "the input or summary is not valid UTF-8 text")
        self._announce(call)
        self.run.channel.send(Proposal(action=name, input=text, summary=summary))
        self.run.proposals += 1
        self.run.record_tool(TOOL_PROPOSE)
        if self.run.pauses_at_actions:
            # "Ask me first" and "Allow file changes": the run pauses here, and the person's
            # answer (the action's real output, or the refusal) takes this result's place
            # when it resumes (worker/replies.py `resumed_turns`).
            self.run.paused = name
            self._report(call, PAUSED_RESULT, ok=True, action=name, paused=True)
            return ToolResult(call, PAUSED_RESULT)
        body = json.dumps(
            {
                "proposed": True,
                "note": "the user will approve or deny it; a later run hears which",
            }
        )
        self._report(call, body, ok=True, action=name)
        return ToolResult(call, body)

    def _write(self, call: ToolCall, args: dict[str, Any]) -> ToolResult:
        """A file in one of the routine's `write` folders (worker/writetool.py): written now
        under "files" and "everything"; under "ask" the run pauses with the exact request
        (the resolved path and the content) as a proposal of its own, and the person's
        approval writes it (worker/actioncmd.py), whose result the resumed model sees."""
        from routines.proposals import MAX_INPUT, MAX_PER_RUN
        from worker import writetool

        path, content = args.get("path"), args.get("content")
        if not isinstance(path, str) or not isinstance(content, str):
            return self._refuse(call, "write_file needs strings `path` and `content`")
        try:
            size = len(content.encode("utf-8"))
        except UnicodeEncodeError:
            return self._refuse(call, "the content is not valid UTF-8 text")
        if size > MAX_INPUT:
            return self._refuse(call, f"the content is {size:,} bytes; at most {MAX_INPUT:,}")
        never = self._never()[0]
        where = writetool.target(path, self.agent.write, os.path.realpath(Path.home()), never)
        if isinstance(where, str):
            return self._refuse(call, where)
        self._announce(call)
        self.run.record_tool(TOOL_WRITE)
        if self.run.writes_ask:
            if self.run.proposals >= MAX_PER_RUN:
                return self._refuse(call, f"at most {MAX_PER_RUN} requests per run")
            summary = f"write {size:,} bytes to {where.path}"
            self.run.channel.send(
                Proposal(action=TOOL_WRITE, input=content, summary=summary, path=where.path)
            )
            self.run.proposals += 1
            self.run.paused = TOOL_WRITE
            self._report(call, PAUSED_RESULT, ok=True, path=where.path, paused=True)
            return ToolResult(call, PAUSED_RESULT)
        try:
            body = writetool.write(where, content)
        except OSError as exc:
            return self._error(call, f"{where.path} was not written: {exc.strerror or exc}")
        self._report(call, body, ok=True, path=where.path)
        return ToolResult(call, body)

    def _mcp(self, call: ToolCall, args: dict[str, Any]) -> ToolResult:
        """One whitelisted MCP tool (worker.mcptools); only offered names reach here."""
        assert self.run.mcp is not None
        server, tool = self.run.mcp.offered[call.name]
        self._announce(call)
        called = self.run.mcp.call(call.name, args)
        self.run.record_tool(f"mcp:{server}/{tool}")
        self._report(call, called.body, ok=not called.is_error, server=server)
        return ToolResult(call, called.body, is_error=called.is_error, images=called.images)

    # --- helpers ---

    def _never(self) -> tuple[tuple[str, ...], tuple[str, ...], tuple[str, ...]]:
        """(the never-list, what of it this routine may read: its own workspace, and
        config.toml's additions as written, for the refusal to name)."""
        from routines.spec.config import SandboxSettings
        from worker.shellpolicy import never_for

        p = self.run.paths
        settings = SandboxSettings(**self.run.job.sandbox)
        never = never_for(p, settings)
        own = (os.path.realpath(p.workspace(self.run.name)),)
        return never, own, (*settings.never, *settings.masks)

    def _shell_policy(self) -> ShellPolicy:
        if self._policy is None:
            self._policy = self.run.shell_policy()
        return self._policy

    def _announce(self, call: ToolCall) -> None:
        self.run.channel.event(EventKind.TOOL_CALL, describe_call(call), tool=call.name, id=call.id)

    def _report(self, call: ToolCall, body: str, *, ok: bool, **data: Any) -> None:
        self.run.channel.event(
            EventKind.TOOL_RESULT,
            f"{call.name}: {'ok' if ok else 'error'} ({len(body):,} bytes)",
            tool=call.name,
            id=call.id,
            ok=ok,
            preview=preview(body),
            **data,
        )

    def _refuse(self, call: ToolCall, reason: str) -> ToolResult:
        self.run.refused += 1
        line = f"[{self.run.name}] refused tool call: {describe_call(call)}"
        self.run.channel.log(line)
        self.run.channel.event(
            EventKind.TOOL_REFUSED, line, tool=call.name, id=call.id, reason=reason
        )
        return ToolResult(call, json.dumps({"error": f"refused: {reason}"}), is_error=True)

    def _error(self, call: ToolCall, message: str) -> ToolResult:
        self.run.channel.event(
            EventKind.TOOL_RESULT, f"{call.name}: error: {message}", tool=call.name, ok=False
        )
        return ToolResult(call, json.dumps({"error": message}), is_error=True)
