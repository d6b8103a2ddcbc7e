"""`python -m worker.dryrun PATH [--gate]`: what `vinos-routine run NAME --dry-run` execs for
the parts only the worker's code knows: the exact system prompt and tool schemas a run would
send, the route's legs, and the bwrap argv its shell calls would run under. One JSON object
on stdout.

It calls no model, opens no connection, starts no MCP server and runs no tool (the dry-run
tests check it): MCP tools are listed as whitelisted, not asked of their servers. With
`--gate` it runs the routine's [gate] in its sandbox, the one thing it may run.
"""

from __future__ import annotations

import json
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

__all__ = ["describe", "main"]


def describe(path: Path, *, gate: bool) -> dict[str, Any]:
    """The worker's part of a dry run of the routine file at `path` (see the module doc)."""
    from routines.spec.config import load_config
    from routines.spec.loader import load_file
    from routines.spec.paths import paths
    from routines.spec.providers import RouteInvalid, plan_route
    from worker import prompts

    p = paths()
    config = load_config(p.config_file)
    routine = load_file(path)
    out: dict[str, Any] = {"routine": routine.name}
    agent = routine.agent
    if agent is not None:
        tools = prompts.tool_specs(agent)
        out["system_prompt"] = prompts.system_prompt(agent, routine.name, tools)
        out["tools"] = [{"name": t.name, "description": t.description} for t in tools]
        out["mcp_tools"] = [f"mcp:{s}/{t}" for s, t in agent.mcp_tools]  # not started
        try:
            plan = plan_route(agent, config.providers)
        except RouteInvalid as exc:
            out["route"] = {"error": f"{exc.key}: {exc}"}
        else:
            out["route"] = {
                "label": plan.label,
                "only": plan.only.value if plan.only else None,
                "local": f"{plan.local.provider}:{plan.local.model}",
                "premium": f"{plan.premium.provider}:{plan.premium.model}",
            }
    commands = _commands(routine)
    if commands or routine.gate is not None:
        out |= _sandbox(routine, p, config.sandbox, commands, gate)
    return out


def _commands(routine: Any) -> list[str]:
    if routine.command is not None and routine.command.run:
        return [routine.command.run]
    return list(routine.agent.shell_commands) if routine.agent is not None else []


def _sandbox(
    routine: Any, p: Any, settings: Any, commands: Sequence[str], gate: bool
) -> dict[str, Any]:
    """The bwrap argv of each shell call (built, not run: fd 3 stands for the seccomp
    filter), and the gate's verdict when asked."""
    import sandbox
    from sandbox.argv import argv_line
    from worker.gate import gate_verdict
    from worker.sandboxcli import tidy
    from worker.shellpolicy import shell_policy_for

    out: dict[str, Any] = {}
    root = p.sandbox_scratch_root / routine.name
    root.mkdir(mode=0o700, parents=True, exist_ok=True)
    scratch = Path(tempfile.mkdtemp(prefix="dry-run-", dir=root))
    try:
        try:
            policy = shell_policy_for(routine, paths=p, scratch_dir=scratch, settings=settings)
            host = sandbox.Host.probe(policy)
            shown = [*commands, *([routine.gate.run] if routine.gate else [])]
            out["sandbox_argv"] = {
                c: argv_line(sandbox.build_argv(policy, host, 3, c)) for c in shown
            }
        except ValueError as exc:
            out["sandbox_error"] = f"the sandbox refused to start: {exc}"
            return out
        if gate and routine.gate is not None:
            res = sandbox.run_shell(routine.gate.run, policy, timeout_sec=routine.gate.timeout_sec)
            verdict = gate_verdict(
                res.exit_code,
                timed_out=res.timed_out,
                error=res.error,
                stdout=res.stdout,
                stderr=res.stderr,
                timeout_sec=routine.gate.timeout_sec,
            )
            out["gate"] = {"exit_code": res.exit_code, "verdict": verdict.go.value,
                           "text": verdict.text}  # fmt: skip
    finally:
        tidy(scratch, "dry run", keep=False)
    return out


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    gate = "--gate" in args
    files = [a for a in args if a != "--gate"]
    if len(files) != 1:
        print("usage: python -m worker.dryrun PATH [--gate]", file=sys.stderr)
        return 2
    from routines.spec.checks import RoutineInvalid

    try:
        out = describe(Path(files[0]), gate=gate)
    except RoutineInvalid as exc:
        print(f"vinos-routine: {exc}", file=sys.stderr)
        return 1
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
