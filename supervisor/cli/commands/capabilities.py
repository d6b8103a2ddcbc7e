"""What a routine will be able to do, in plain words: shown by `install` before it writes
anything, and by `create`/`edit` after a save. Pure: a routine in, labelled lines out.

`card` is the short capability card `install`, `create --from`, `enable` and `validate`
print: what it reads, which credentials go to which hosts, where it can connect, what each
MCP server sees (its installation and credentials included), the environment, and what
actions it may propose. It is a rendering of the routine's policy (routines/policy.py), the
object the sandbox is built from, never a second computation of it: tests/worker/
test_policy_card.py walks every grant kind from the bwrap argv to the card.

`needs_consent` says whether `install` must ask first (it reads something and can reach the
network: the pair that lets a routine send what it read away).
A webhook output reaches the network too: the worker POSTs what the run wrote, so a routine
with its `network` off still sends what it read to that host (tests/supervisor/
test_capability_card.py::test_a_webhook_output_counts_as_reaching_the_network).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from routines.policy import Policy, Scope, ScopeKind, policy_of
from routines.safetext import redact_url
from routines.spec import Kind, Memory, OutputType, Route, Routine
from routines.spec.paths import Paths

__all__ = [
    "Line",
    "capabilities",
    "card",
    "card_lines",
    "needs_consent",
    "on_this_host",
    "reach_text",
    "schedule_text",
    "trigger_lines",
]


@dataclass(frozen=True, slots=True)
class Line:
    label: str
    text: str
    caution: bool = False  # worth a second look (network, webhook, no budget)


def schedule_text(routine: Routine) -> str:
    """ "Every day at 6:00 AM (cron 0 6 * * *, Europe/Berlin, ±5m jitter)"."""
    from routines.schedule import ScheduleError, compile_schedule

    spec = routine.schedule
    if not routine.scheduled:
        return "none: only its [trigger] starts it"
    try:
        compiled = compile_schedule(spec, routine.kind)
    except ScheduleError as exc:
        return f"invalid: {exc}"
    description = compiled.description
    # A plain-language phrase reads as the description already: show the cron it became,
    # never "every every 30 minutes".
    form = None
    if spec.form == "every":
        form = f"cron {compiled.cron}" if compiled.cron else f"oncalendar {compiled.oncalendar[0]}"
    extra = [form or f"{spec.form} {spec.expression}", spec.timezone]
    if spec.jitter_sec:
        extra.append(f"±{_duration(spec.jitter_sec)} jitter")
    if description == spec.expression:
        extra = extra[1:]
        description = f"{spec.form} {spec.expression}"
    return f"{description} ({', '.join(extra)})"


def next_run_text(routine: Routine, now: datetime) -> str | None:
    """ "in 2h 13m (06:00)" for the next slot, or None when there is none."""
    from routines.schedule import ScheduleError, compile_schedule
    from supervisor.cli.present import when

    if not routine.scheduled:
        return None
    try:
        slot = compile_schedule(routine.schedule, routine.kind).next_after(now)
    except ScheduleError:
        return None
    return when(slot.instant, now) if slot else None


def _duration(seconds: int) -> str:
    if seconds % 3600 == 0:
        return f"{seconds // 3600}h"
    if seconds % 60 == 0:
        return f"{seconds // 60}m"
    return f"{seconds}s"


def capabilities(routine: Routine, policy: Policy | None = None) -> list[Line]:
    """Everything the routine may do, each tool verbatim."""
    lines = [Line("schedule", schedule_text(routine))]
    if routine.kind is Kind.COMMAND:
        assert routine.command is not None
        call = routine.command.mcp
        shown = f"mcp:{call.server}/{call.tool} {call.arguments}" if call else routine.command.run
        lines.append(Line("command", shown))
        lines.append(Line("timeout", f"{routine.command.timeout_sec}s"))
    else:
        lines.extend(_agent_lines(routine))
    lines.extend(card(routine, policy))
    if _webhook_host(routine) is None:  # a webhook's line is on the card already
        lines.append(_output_line(routine))
    return lines


def on_this_host(routine: Routine) -> Policy:
    """The routine's policy as a run here would get it: config.toml's [sandbox], and each MCP
    server's installation found on the PATH its sandbox gets (the one impure step: the card
    above it stays a function of the policy)."""
    import os
    from dataclasses import replace

    from routines.policy import host_policy
    from routines.spec.paths import paths
    from sandbox.policy import DEFAULT_PATH
    from supervisor.fleet.view import config_or_default

    p = paths()
    settings = config_or_default(p).sandbox
    policy = host_policy(routine, p, settings, os.environ.get("PATH") or DEFAULT_PATH)
    from sandbox.overlay import quota_in_force

    return replace(policy, run_limits=in_force(p)[1], disk_quota=quota_in_force()[1])


def in_force(p: Paths) -> tuple[bool, str]:
    """What `doctor` and the card say: whether the kernel keeps the run limits, and how
    (supervisor/engine/runcgroup.py). The running daemon's, or, with none running, what this
    host allows one under the user unit."""
    from supervisor.cli.client import daemon_locks, lock_holder
    from supervisor.engine import runcgroup

    pid = lock_holder(daemon_locks(p))
    if pid:
        s = runcgroup.support(pid)
        return s.enforcement is runcgroup.Enforcement.CGROUP, runcgroup.describe(s)
    return runcgroup.host_limits()


def card(routine: Routine, policy: Policy | None = None) -> list[Line]:
    """The capability card of `policy` (default: the routine's, without looking at the host,
    so no MCP server's installation): reads, credentials → hosts, network, each MCP server,
    the environment, actions."""
    policy = policy or policy_of(routine)
    shell = policy.of(ScopeKind.SHELL, routine.name)
    lines = _read_lines(shell, policy)
    lines.extend(_write_lines(shell))
    lines.extend(_credential_lines(shell))
    lines.append(_network_line(routine, shell))
    if _webhook_host(routine) is not None:
        lines.append(_output_line(routine))
    lines.extend(_mcp_lines(routine, policy))
    lines.append(_env_line(policy))
    lines.extend(_action_lines(routine, policy))
    lines.extend(trigger_lines(routine))
    lines.extend(_permission_lines(routine))
    if policy.run_limits:
        lines.append(Line("limits", policy.run_limits))
    if policy.disk_quota:
        lines.append(Line("disk quota", policy.disk_quota))
    return lines


def _permission_lines(routine: Routine) -> list[Line]:
    """[routine].permissions in plain words (agent routines: a command routine has no model
    to ask for anything)."""
    from routines.spec import Kind, Permissions

    if routine.kind is not Kind.AGENT:
        return []
    if not routine.actions and not routine.write and routine.permissions is Permissions.ASK:
        return []  # the default, with nothing that could ask: nothing to say
    p = routine.permissions
    what = {
        Permissions.ASK: "every action "
        + ("and every write to its write folders " if routine.write else "")
        + "pauses the run until you answer",
        Permissions.FILES: "writes in its write folders go ahead; every action pauses the run",
        Permissions.EVERYTHING: "nothing pauses, while its signature verifies",
    }[p]
    return [
        Line("unattended", f"{p.words} ({p.value}): {what}", caution=p is Permissions.EVERYTHING)
    ]


def _env_line(policy: Policy) -> Line:
    """What every sandbox of it is given in its environment (sandbox.policy.ENV_NAMES, the
    list the sandbox sets), and the proxy's address where a part reaches the network."""
    from sandbox.policy import ENV_NAMES

    text = f"{', '.join(ENV_NAMES)} only (no secret)"
    if any(s.network for s in policy.scopes):
        text += "; and the egress proxy's address (HTTP_PROXY, …) where it reaches the network"
    return Line("environment", text)


def _credential_lines(shell: Scope) -> list[Line]:
    """Each grant, what it is (judged by its resolved path), and every host its calls can
    reach: the egress proxy lets every call of the routine reach the union of all its
    credentials' hosts and its own network list, so "only to its hosts" would be false
    (tests/supervisor/test_capability_card.py::
    test_credentials_go_to_their_hosts_and_narrow_where_it_connects)."""
    import os
    from pathlib import Path

    from routines.spec.never import describe

    home = os.path.realpath(Path.home())
    own = shell.own_hosts
    out = []
    for i, cred in enumerate(shell.credentials):
        what = describe(cred.path, home)
        shown = f"{cred.path} ({what})" if what else cred.path
        mine = dict.fromkeys(cred.hosts)
        listed = [h for h in dict.fromkeys(own) if h not in mine]
        others = [
            h
            for c in shell.credentials
            for h in c.hosts
            if c is not cred and h not in mine and h not in listed
        ]
        groups = [f"{', '.join(mine)} (its hosts)"]
        if listed:
            groups.append(f"{', '.join(listed)} (the routine's network list)")
        if others:
            groups.append(f"{', '.join(dict.fromkeys(others))} (its other credentials' hosts)")
        text = f"{shown} → its calls can reach: {', '.join(groups)}"
        out.append(Line("credentials" if i == 0 else "", text, caution=True))
    return out


def _mcp_lines(routine: Routine, policy: Policy) -> list[Line]:
    """Each MCP server: its argv, what it sees (home entries, its installation, credentials),
    where it connects, the tools allowed."""
    import shlex

    allowed = list(routine.agent.mcp_tools) if routine.agent else []
    if routine.command is not None and routine.command.mcp is not None:
        allowed = [(routine.command.mcp.server, routine.command.mcp.tool)]
    out = []
    servers = [s for s in policy.scopes if s.kind is ScopeKind.MCP]
    for i, server in enumerate(servers):
        tools = ", ".join(t for s, t in allowed if s == server.name) or "none"
        seen = [*server.home, *(f"its installation {p}" for p in server.install)]
        if server.install:
            seen[-1] += " (credential-named files hidden)"
        sees = ", ".join(seen) or "nothing of your files"
        if server.install_problem:
            sees += f"; not installed here: {server.install_problem}"
        creds = ", ".join(_described(c.path) for c in server.credentials)
        given = f"; credentials: {creds}" if creds else ""
        text = (
            f"{server.name}: `{shlex.join(server.argv)}` (sees {sees}{given}; network: "
            f"{_where(server.network)}; tools: {tools})"
        )
        caution = bool(server.home or server.credentials or server.install)
        out.append(Line("mcp" if i == 0 else "", text, caution=caution))
    return out


def _described(path: str) -> str:
    """`~/.aws (AWS CLI credentials)`: a credential's path and what it holds."""
    import os
    from pathlib import Path

    from routines.spec.never import describe

    what = describe(path, os.path.realpath(Path.home()))
    return f"{path} ({what})" if what else path


def needs_consent(routine: Routine) -> bool:
    """Whether it reads anything (a home or write folder, a read glob, a credential) and can also
    reach the network (its calls, or an action it may propose)."""
    policy = policy_of(routine)
    reads = bool(policy.read_globs) or any(
        s.home or s.write or s.credentials or s.install for s in policy.scopes
    )
    return reads and bool(reach_text(routine))


def reach_text(routine: Routine) -> str:
    """How what it read can leave: "can reach the network", "sends its output to HOST",
    both joined by "and", or "" when nothing of it leaves the machine."""
    online = any(s.network for s in policy_of(routine).scopes)
    parts = ["can reach the network"] if online else []
    if (host := _webhook_host(routine)) is not None:
        parts.append(f"sends its output to {host}")
    return " and ".join(parts)


def _webhook_host(routine: Routine) -> str | None:
    """The host a webhook output is POSTed to, or None when the output stays here."""
    from urllib.parse import urlsplit

    from routines.safetext import one_line

    if routine.output.type is not OutputType.WEBHOOK:
        return None
    try:
        host = urlsplit(routine.output.url or "").hostname
    except ValueError:
        host = None
    return one_line(host) if host else "(an invalid URL)"


def card_lines(lines: list[Line], colour: bool = False) -> list[str]:
    """The card as text, escapes in what a file says shown, not acted on."""
    from supervisor.cli.present import color, visible

    if not lines:
        return []
    width = max(len(line.label) for line in lines)
    out = []
    for line in lines:
        text = visible(line.text)
        text = color(text, "yellow", colour) if line.caution else text
        out.append(f"  {line.label:<{width}}  {text}")
    return out


def _read_lines(shell: Scope, policy: Policy) -> list[Line]:
    reads = [f"{entry} (its shell commands, read-only)" for entry in shell.home]
    reads += [f"{glob} (read tool)" for glob in policy.read_globs]
    if not reads:
        return [Line("reads", "nothing of your files")]
    return [Line("reads" if i == 0 else "", r, caution=True) for i, r in enumerate(reads)]


def _write_lines(shell: Scope) -> list[Line]:
    """Its `write` folders, and how a write there goes: the same Scope the sandbox binds
    them from (read-write, or read-only with write_file asking first)."""
    if not shell.write:
        return []
    how = (
        "read-only to its shell commands; each write_file there asks you first"
        if shell.write_asks
        else "its shell commands and write_file write there without asking"
    )
    return [
        Line("writes" if i == 0 else "", f"{entry} ({how})", caution=True)
        for i, entry in enumerate(shell.write)
    ]


def _action_lines(routine: Routine, policy: Policy) -> list[Line]:
    if not routine.actions:
        return [Line("actions", "none")]
    ask = (
        "runs without asking while its signature verifies"
        if routine.auto_approve
        else "runs once you approve it"
    )
    out = []
    for i, action in enumerate(routine.actions):
        scope = policy.of(ScopeKind.ACTION, action.name)
        sees = f"; sees {', '.join(scope.home)}" if scope.home else ""
        text = f"{action.name}: `{action.run}` ({ask}{sees}; network: {_where(scope.network)})"
        out.append(Line("actions" if i == 0 else "", text, caution=True))
    return out


def _where(network: bool | tuple[str, ...]) -> str:
    if not network:
        return "none"
    return ", ".join(network) if isinstance(network, tuple) else "any host"


def _agent_lines(routine: Routine) -> list[Line]:
    agent = routine.agent
    assert agent is not None
    models = {
        Route.AUTO: f"auto: {agent.local_model} locally, {agent.premium_model} when escalated",
        Route.OLLAMA: f"ollama: {agent.local_model} (local, no API cost)",
        Route.ANTHROPIC: f"anthropic: {agent.premium_model}",
        Route.PROVIDER: f"{agent.provider}: {agent.model} (a provider in config.toml)",
    }[agent.route]
    lines = [Line("model", models)]
    if agent.tools:
        for i, tool in enumerate(agent.tools):
            lines.append(Line("tools" if i == 0 else "", str(tool)))
    else:
        lines.append(Line("tools", "none (it can only write text)"))
    memory = {
        Memory.SESSION: "none: every run starts blank",
        Memory.PERSISTENT: f"its own notes, kept across runs (state/{routine.name}/memory.md)",
        Memory.SHARED: "the journal shared by all routines (state/shared/memory.md)",
    }[agent.memory]
    lines.append(Line("memory", memory))
    lines.append(_budget_line(routine))
    return lines


def _budget_line(routine: Routine) -> Line:
    from supervisor.cli.present import money

    b = routine.budget
    assert routine.agent is not None
    if routine.agent.route is Route.OLLAMA:
        return Line("budget", "none needed: local model only")
    parts = []
    if b.max_dollars_per_day is not None:
        parts.append(f"{money(b.max_dollars_per_day)} a day")
    if b.max_tokens_per_run is not None:
        parts.append(f"{b.max_tokens_per_run:,} tokens a run")
    if not parts:
        return Line("budget", "UNLIMITED: no max_dollars_per_day", caution=True)
    return Line("budget", ", ".join(parts) + f"; past it: {b.on_exceed.value}")


def _network_line(routine: Routine, shell: Scope) -> Line:
    line = _calls_line(routine, shell)
    if (host := _webhook_host(routine)) is None:
        return line
    # "no" alone would read as "nothing leaves": the output does (see the output line).
    return Line("network", f"{line.text}; its output is POSTed to {host}", caution=True)


def _calls_line(routine: Routine, shell: Scope) -> Line:
    if not shell.network:
        return Line("network", "no: its shell commands cannot reach the network")
    if isinstance(shell.network, tuple):
        hosts = ", ".join(shell.network)
        return Line("network", f"only {hosts} (HTTP and HTTPS, through a proxy)", caution=True)
    if routine.kind is Kind.COMMAND:
        return Line("network", "YES: its command can reach the internet", caution=True)
    return Line("network", "YES: its shell commands can reach the internet", caution=True)


def _output_line(routine: Routine) -> Line:
    out = routine.output
    extras = ["leaves this machine"] if out.type is OutputType.WEBHOOK else []
    if out.open_on_login:
        extras.append("shown at login")
    if out.notify or out.type is OutputType.NOTIFICATION:
        extras.append("desktop notification")
    tail = f" ({', '.join(extras)})" if extras else ""
    if out.type is OutputType.WEBHOOK:
        return Line("output", f"POSTed to {redact_url(out.url or '')}{tail}", caution=True)
    if out.type is OutputType.FILE:
        return Line("output", f"markdown copied to {out.path}{tail}", caution=True)
    return Line("output", f"{out.type.value}, kept in state/{routine.name}/{tail}")


def trigger_lines(routine: Routine) -> list[Line]:
    """What starts it besides the clock, and its gate: the watched paths, what it takes in
    from another routine's output or a fire call (untrusted input), the gate's command."""
    out: list[Line] = []
    t = routine.trigger
    if t is not None:
        if t.after:
            on = ", ".join(o.value for o in t.on)
            up = " or ".join(t.after)
            out.append(Line("after", f"a run of {up} ending {on}; its output is this run's input"))
        if t.watch:
            out.append(Line("watches", ", ".join(t.watch)))
        if t.fire:
            out.append(Line("fire", "vinos-routine fire may start it, with an input", True))
    if routine.gate is not None:
        out.append(Line("gate", f"{routine.gate.run} (in its sandbox, before any model call)"))
    return out
