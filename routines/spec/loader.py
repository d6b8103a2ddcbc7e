"""TOML text → `Routine`, validated strictly.

Every problem names the file, the table and key, what was expected and what was found, e.g.

    day-brief.toml: [budget].max_dollars_per_day: expected a positive number, found -1

An unknown key is an error naming the nearest known key: a typo in a budget must never
silently remove the budget. All problems of a file are collected, not just the first.
"""

from __future__ import annotations

import os
import tomllib
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from routines.safetext import shortened
from routines.schedule.tz import UnknownZone, machine_timezone, zone_info
from routines.spec import mcpkeys
from routines.spec.checks import (
    Bad,
    Check,
    Problem,
    Reader,
    RoutineInvalid,
    boolean,
    duration,
    expiry,
    found,
    machine_list,
    malformed,
    nearest,
    nonempty_string,
    nonnegative_int,
    one_of,
    parse_duration,
    positive_int,
    positive_number,
    string,
    string_list,
    table_value,
)
from routines.spec.grants import CREDENTIAL_KEYS, read_credentials
from routines.spec.hosts import network_value
from routines.spec.paths import Paths, signature_path
from routines.spec.providers import ProviderSettings, unknown_route, uses_declared
from routines.spec.readfile import read_routine_file
from routines.spec.routekeys import (
    Declared,
    leg_checks,
    named_route,
    provider_checks,
    provider_name,
    route_value,
)
from routines.spec.routine import (
    ACTION_NAME_RE,
    NAME_RE,
    RESERVED_NAMES,
    Action,
    AgentSpec,
    BudgetSpec,
    CommandSpec,
    Escalation,
    Kind,
    Memory,
    Missed,
    OnExceed,
    Origin,
    OutputSpec,
    OutputType,
    Permissions,
    Route,
    Routine,
    ScheduleSpec,
    Tool,
    ToolKind,
)
from routines.spec.snapkey import context
from routines.spec.trigger import (
    GATE_KEYS,
    TRIGGER_KEYS,
    check_watch,
    read_gate,
    read_trigger,
)

__all__ = [
    "Problem",
    "RoutineInvalid",
    "checks_paths",
    "context",
    "holds_a_secret",
    "load_file",
    "load_text",
    "never_context",
    "parse_duration",
    "reads_only_the_file",
]


def _tables(example: str) -> Check:
    """An array of tables such as `[[agent.actions]]`, each checked by its own reader."""

    def check(value: object) -> object:
        if not isinstance(value, list) or not all(isinstance(v, dict) for v in value):
            raise Bad(f"an array of tables ({example})")
        return value

    return check


SCHEMA: dict[str, dict[str, Check]] = {
    "routine": {
        "name": nonempty_string,
        "title": string,  # routines/spec/shape.py: a short title, the description one sentence
        "description": string,
        "enabled": boolean,
        "kind": one_of(Kind),
        "machines": machine_list,
        "approvals_expire": expiry,
        "auto_approve": boolean,
        "permissions": one_of(Permissions),
        "needs_you_timeout": expiry,
    },
    "schedule": {
        "cron": nonempty_string,
        "oncalendar": nonempty_string,
        "every": nonempty_string,
        "once": nonempty_string,
        "timezone": nonempty_string,
        "jitter": duration,
        "missed": one_of(Missed),
        "allow_frequent": boolean,
    },
    "agent": {
        "route": route_value,
        "local_provider": provider_name,
        "premium_provider": provider_name,
        "model": nonempty_string,
        "local_model": nonempty_string,
        "premium_model": nonempty_string,
        "system": nonempty_string,
        "tools": string_list,
        "memory": one_of(Memory),
        "tags": string_list,
        "local_context_tokens": positive_int,
        "max_output_tokens": positive_int,
        "network": network_value,
        "home": string_list,
        "write": string_list,
        "shell_timeout_sec": positive_int,
        "run_timeout_sec": positive_int,
        "escalation": table_value,
        "actions": _tables("[[agent.actions]]"),
        "credentials": _tables("[[agent.credentials]]"),
        "mcp": _tables("[[agent.mcp]]"),
    },
    "agent.credentials": CREDENTIAL_KEYS,
    "agent.actions": {
        "name": nonempty_string,
        "description": string,
        "run": nonempty_string,
        "network": network_value,
        "home": string_list,
    },
    "agent.escalation": {
        "on_low_confidence": boolean,
        "on_reasoning_task": boolean,
        "on_context_overflow": boolean,
        "on_malformed_tool_json": boolean,
        "max_escalations_per_run": nonnegative_int,
    },
    "command": {
        "run": nonempty_string,
        "timeout_sec": positive_int,
        "network": network_value,
        "home": string_list,
        "credentials": _tables("[[command.credentials]]"),
        "mcp": table_value,
        "mcp_servers": _tables("[[command.mcp_servers]]"),
    },
    "command.credentials": CREDENTIAL_KEYS,
    "output": {
        "type": one_of(OutputType),
        "title": string,
        "open_on_login": boolean,
        "notify": boolean,
        "path": nonempty_string,
        "url": nonempty_string,
    },
    "budget": {
        "max_tokens_per_run": positive_int,
        "max_dollars_per_day": positive_number,
        "on_exceed": one_of(OnExceed),
    },
}
SCHEMA["trigger"] = TRIGGER_KEYS
SCHEMA["gate"] = GATE_KEYS
_TOP_TABLES = ("routine", "schedule", "trigger", "gate", "agent", "command", "output", "budget")
_AGENT_TABLES = ("model", "escalation", "actions", "credentials", "mcp")  # read on their own


def load_file(path: Path, origin: Origin = Origin.USER) -> Routine:
    """Read and validate one routine file; raises RoutineInvalid (also for an unreadable file)."""
    data = read_routine_file(path)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise RoutineInvalid(
            [Problem(str(path), "", f"not UTF-8 text (byte {exc.start} is {data[exc.start]:#x})")]
        ) from exc
    return load_text(text, path, origin)


def load_text(
    text: str,
    path: Path,
    origin: Origin = Origin.USER,
    *,
    check_schedule: bool = True,
    providers: Mapping[str, ProviderSettings] | None = None,
) -> Routine:
    """Validate routine TOML `text` whose file is `path` (the file name is the routine name).

    `check_schedule=False` skips evaluating the schedule expression: for a worker, which is
    handed text the supervisor already validated and never looks at the schedule (it saves
    the worker the schedule machinery's import time).

    `providers` are config.toml's [providers.NAME] (a worker passes its job's); None reads
    config.toml, only when the routine names a provider that is not Ollama or Anthropic.
    """
    r = Reader(str(path), SCHEMA)
    declared = Declared(providers)
    try:
        doc = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        r.error("", malformed(exc, text))
        raise RoutineInvalid(r.problems) from exc

    for top, value in doc.items():
        if top not in _TOP_TABLES:
            r.error(f"[{top}]", f"unknown table ({nearest(top, list(_TOP_TABLES))})")
        elif not isinstance(value, dict):
            r.error(f"[{top}]", f"expected a table, found {found(value)}")

    name = _check_name(r, path, doc)
    routine_t = r.table(doc, "routine")
    kind: Kind = routine_t.get("kind", Kind.AGENT)
    trigger = read_trigger(r, doc, name)
    schedule = _schedule(r, doc, kind, check_schedule, triggered="trigger" in doc)
    gate = read_gate(r, doc)
    agent = command = None
    if kind is Kind.AGENT:
        if "command" in doc:
            r.error("[command]", 'only for kind = "command"; this routine is an agent')
        if "agent" not in doc:
            r.error("[agent]", 'required for an agent routine (or set [routine].kind = "command")')
        else:
            agent = _agent(r, doc, declared)
    else:
        for table in ("agent", "budget"):
            if table in doc:
                r.error(f"[{table}]", 'only for agent routines; this one has kind = "command"')
        if "command" not in doc:
            r.error("[command]", 'required for kind = "command" (with run = "<shell string>")')
        else:
            command = _command(r, doc)
    output = _output(r, doc)
    permissions = _permissions(r, routine_t, path)
    budget = _budget(r, doc, kind)
    provider_checks(r, agent, budget, declared)
    if name is not None and (agent or command):
        _never_checks(r, name, agent, command, doc)
    check_watch(r, trigger, agent, command)

    if any(not p.warning for p in r.problems):
        raise RoutineInvalid(r.problems)
    assert schedule is not None and name is not None
    return Routine(
        name=name,
        kind=kind,
        schedule=schedule,
        title=routine_t.get("title", ""),
        description=routine_t.get("description", ""),
        enabled=routine_t.get("enabled", False),
        machines=routine_t.get("machines", ()),
        agent=agent,
        command=command,
        output=output,
        budget=budget,
        source=path,
        origin=origin,
        text=text,
        warnings=tuple(str(p) for p in r.problems if p.warning),
        permissions=permissions,
        **{k: routine_t[k] for k in ("approvals_expire", "needs_you_timeout") if k in routine_t},
        trigger=trigger,
        gate=gate,
    )


def _permissions(r: Reader, routine_t: Mapping[str, Any], path: Path) -> Permissions:
    """`[routine].permissions` (default "ask"); `auto_approve = true` of older files means
    "everything". "everything" needs the file signed: a file without NAME.toml.sig beside it
    is refused here, by name and with the fix; a signature that no longer verifies (an edit
    since) is not the loader's to check (it runs ssh-keygen): the run asks first
    (routines/signing.py `effective_permissions`)."""
    chosen = routine_t.get("permissions")
    if "auto_approve" in routine_t and chosen is not None:
        r.error(
            "[routine].auto_approve",
            "set beside [routine].permissions: keep only permissions "
            '(auto_approve = true is permissions = "everything")',
        )
        return Permissions.ASK
    if chosen is None:
        chosen = Permissions.EVERYTHING if routine_t.get("auto_approve") else Permissions.ASK
    key = "[routine].permissions" if "permissions" in routine_t else "[routine].auto_approve"
    sig = signature_path(path)
    if chosen is Permissions.EVERYTHING and not os.path.lexists(sig):
        r.error(
            key,
            f'"everything" (act without asking) needs the file signed, and {sig.name} is '
            f"missing: read the file, then `vinos-routine sign {path.stem}`; or set "
            'permissions = "ask" (Ask me first) or "files" (Allow file changes)',
        )
    return chosen


def _never_checks(
    r: Reader,
    name: str,
    agent: AgentSpec | None,
    command: CommandSpec | None,
    doc: Mapping[str, Any],
) -> None:
    """Refuse `home = [...]` entries and `read:` globs that reach the never-list."""
    if not checks_paths(agent, command):
        return  # nothing to check: spare `list` the never-list's realpath per entry
    table = "agent" if agent is not None else "command"
    declared = agent.home if agent is not None else command.home if command else ()
    homes = [(f"[{table}].home[{i}]", e) for i, e in enumerate(declared)]
    homes += mcpkeys.server_homes(agent, command)  # each MCP server's own `home`
    reads: list[tuple[str, str]] = []
    if agent is not None:
        for j, action in enumerate(agent.actions):
            homes += [(f"[agent].actions[{j}].home[{i}]", e) for i, e in enumerate(action.home)]
        raw = doc.get("agent", {}).get("tools", [])
        for i, entry in enumerate(raw if isinstance(raw, list) else []):
            valid = isinstance(entry, str) and Tool(ToolKind.READ, entry[5:]) in agent.tools
            if valid and entry.startswith("read:"):
                reads.append((f"[agent].tools[{i}]", entry[5:]))
    from routines.spec.never import home_problem, read_problem, write_problem
    from routines.spec.paths import paths

    p = paths()
    home, never = _never_list(p)
    # A write folder is held to what a home entry is (it is shown to the sandbox too), and
    # to more (routines.spec.never.write_problem).
    for check, entries in ((home_problem, homes), (write_problem, _write_entries(agent))):
        for key, entry in entries:
            if problem := check(entry, home, never):
                r.error(key, problem)
    if reads:
        own = (os.path.realpath(p.workspace(name)),)
        for key, pattern in reads:
            if problem := read_problem(pattern, home, never, own):
                r.error(key, problem)


def _write_entries(agent: AgentSpec | None) -> list[tuple[str, str]]:
    if agent is None:
        return []
    return [(f"[agent].write[{i}]", e) for i, e in enumerate(agent.write)]


def _never_list(p: Paths) -> tuple[str, tuple[str, ...]]:
    """The real home and the never-list the home and read checks hold declared paths to."""
    from routines.spec.never import never_paths

    home = os.path.realpath(Path.home())
    try:
        return home, never_paths(home, os.path.realpath(p.home))
    except ValueError:  # VINOS_HOME is the home itself: nothing can be declared
        return home, (home,)


def checks_paths(agent: AgentSpec | None, command: CommandSpec | None) -> bool:
    """Whether a routine's paths are held to the never-list: it declares a `home` (its own, an
    action's, an MCP server's) or a `read:` tool; or to the home and the broad containers the
    environment moves, as a granted credential's path is (routines/spec/grants.py), so a parse
    of it is kept only under the same `never_context`
    (tests/routines/test_rowsnap.py::test_a_kept_list_with_a_credential_grant_follows_the_environment)."""
    if agent is not None:
        if agent.home or agent.write or agent.read_patterns or agent.credentials:
            return True
        if any(a.home for a in agent.actions):
            return True
    elif command is not None and (command.home or command.credentials):
        return True
    servers = agent.mcp if agent is not None else command.mcp_servers if command else ()
    return bool(mcpkeys.server_homes(agent, command)) or any(s.credentials for s in servers)


def never_context(p: Paths) -> tuple[str, ...]:
    """What the never-list checks of `checks_paths` read: the real home, the never-list, the
    real workspace root (a routine may read its own workspace)."""
    home, never = _never_list(p)
    return (home, *never, "", os.path.realpath(p.workspace_root))


def reads_only_the_file(routine: Routine) -> bool:
    """Whether `routine`'s parse depended on its file and `context` alone: not on config.toml
    (a provider declared there), nor on the clock (a `once` warns when its time is past)."""
    if routine.agent is not None and uses_declared(routine.agent):
        return False
    return routine.schedule.form != "once"


def holds_a_secret(routine: Routine) -> bool:
    """Whether the parse carries a credential that must stay in the file the person wrote and
    never be copied into the state dir: a webhook's URL (its path or query is often the token;
    tests/routines/spec/test_registry_snapshot.py::test_a_webhook_routine_is_never_kept)."""
    return routine.output.url is not None


def _check_name(r: Reader, path: Path, doc: Mapping[str, Any]) -> str | None:
    stem = path.name.removesuffix(".toml")
    if not path.name.endswith(".toml"):
        r.error("", f"expected a file name ending in .toml, found {path.name!r}")
        return None
    if not NAME_RE.fullmatch(stem):
        r.error(
            "",
            f"bad routine name {stem!r}: expected lowercase letters, digits and '-', "
            "starting with a letter or digit, at most 63 characters",
        )
        return None
    if stem in RESERVED_NAMES:
        r.error("", f"the name {stem!r} is reserved: choose another file name")
        return None
    declared = doc.get("routine", {}).get("name") if isinstance(doc.get("routine"), dict) else None
    if isinstance(declared, str) and declared != stem:
        r.error(
            "[routine].name",
            f'expected "{stem}" (the file name is the routine name), found "{declared}"',
        )
    return stem


def _schedule(
    r: Reader, doc: Mapping[str, Any], kind: Kind, check: bool = True, triggered: bool = False
) -> ScheduleSpec | None:
    if "schedule" not in doc:
        if triggered:  # started by its triggers only: the zone counts its days and budget
            return ScheduleSpec(timezone=machine_timezone())
        r.error("[schedule]", "required: set one of cron, oncalendar or every (or a [trigger])")
        return None
    t = r.table(doc, "schedule")
    given = [k for k in ("oncalendar", "cron", "every", "once") if k in t]
    raw = doc.get("schedule")
    if (
        not given
        and isinstance(raw, dict)
        and not any(k in raw for k in ("oncalendar", "cron", "every", "once"))
    ):
        r.error("[schedule]", "expected one of cron, oncalendar, every or once, found none")
        return None
    if len(given) > 1:
        r.warn(
            "[schedule]",
            f"{_both_or_all(given)}; {given[0]} wins "
            "(precedence: oncalendar > cron > every > once)",
        )
    zone = t.get("timezone")
    if zone is None:
        zone = machine_timezone()
    else:
        try:
            zone_info(zone)
        except UnknownZone:
            r.error(
                "[schedule].timezone",
                f'expected an IANA time zone such as "Europe/Berlin", found "{shortened(zone)}" '
                "(not in this machine's tz database)",
            )
            return None
    if not given:
        return None
    spec = ScheduleSpec(
        cron=t.get("cron"),
        oncalendar=t.get("oncalendar"),
        every=t.get("every"),
        once=t.get("once"),
        timezone=zone,
        jitter_sec=t.get("jitter", 0),
        missed=t.get("missed", Missed.CATCH_UP),
        allow_frequent=t.get("allow_frequent", False),
    )
    if not check:
        return spec
    from routines.schedule import ScheduleError, compile_schedule

    try:
        compile_schedule(spec, kind)
    except ScheduleError as exc:
        r.error(f"[schedule].{spec.form}", str(exc))
        return None
    if spec.form == "once" and (past := once_past(spec)):
        # A warning, never an error: time passing must not turn a valid file invalid (the
        # daemon would then keep a stale version). `validate` and `enable` refuse it.
        r.warn("[schedule].once", past)
    return spec


def _tools(r: Reader, entries: tuple[str, ...]) -> tuple[Tool, ...]:
    tools: list[Tool] = []
    for i, entry in enumerate(entries):
        where = f"[agent].tools[{i}]"
        kind_s, sep, value = entry.partition(":")
        if kind_s == "mcp":  # its shape here, its server once the servers are read
            tools += [m for m in [mcpkeys.mcp_tool(r, where, value)] if m and m not in tools]
            continue
        if not sep or kind_s not in ("read", "shell"):
            expected = '"read:<glob>", "shell:<command>" or "mcp:SERVER/TOOL"'
            r.error(where, f'expected {expected}, found "{entry[:80]}"')
            continue
        kind = ToolKind(kind_s)
        if not value.strip():
            what = "shell command" if kind is ToolKind.SHELL else "read glob"
            r.error(where, f'empty {what}: expected "{kind_s}:<something>", found "{entry}"')
            continue
        if "\0" in value or "\n" in value or "\r" in value:
            r.error(where, "expected one line, found a NUL, newline or carriage return")
            continue
        if kind is ToolKind.READ and not value.startswith(("~/", "/")):
            r.error(where, f'expected an absolute glob starting with "~/" or "/", found "{value}"')
            continue
        tool = Tool(kind, value)
        if tool in tools:
            r.warn(where, f'duplicate of an earlier entry "{entry}"')
            continue
        tools.append(tool)
    return tuple(tools)


def _agent(r: Reader, doc: Mapping[str, Any], declared: Declared) -> AgentSpec | None:
    t = r.table(doc, "agent")
    if not isinstance(doc.get("agent"), dict):
        return None  # `agent = 3`: reported as "expected a table"
    esc = r.table(doc, "agent.escalation") if isinstance(t.get("escalation"), dict) else {}
    route: Route | str = t.get("route", Route.AUTO)
    fields: dict[str, Any] = {k: v for k, v in t.items() if k not in _AGENT_TABLES}
    if not isinstance(route, Route):
        known = declared.get(r)
        if known is not None and route not in known:
            r.error("[agent].route", unknown_route(route, known))
            return None
        named_route(r, t, doc["agent"], route, fields)
    elif "model" in t:
        target = {Route.ANTHROPIC: "premium_model", Route.OLLAMA: "local_model"}.get(route)
        if target is None:
            r.error(
                "[agent].model",
                'only with route = "anthropic" or "ollama"; with route = "auto" set '
                "local_model and premium_model",
            )
        elif target in t:
            r.error("[agent].model", f"set either model or {target}, not both")
        else:
            fields[target] = t["model"]
    if "system" not in t and "system" not in doc.get("agent", {}):
        r.error("[agent].system", "required: the system prompt (a non-empty string)")
        return None
    if "system" not in t:
        return None
    leg_checks(r, t)
    fields["tools"] = _tools(r, t.get("tools", ()))
    fields["escalation"] = Escalation(**esc)
    fields["actions"] = _actions(r, t.get("actions", []))
    fields["credentials"] = read_credentials(r, "agent", t, SCHEMA["agent.credentials"])
    fields["mcp"] = mcpkeys.read_servers(r, "[agent].mcp", t.get("mcp", []))
    mcpkeys.check_tool_servers(r, t.get("tools", ()), fields["mcp"])
    return AgentSpec(**fields)


def _actions(r: Reader, entries: list[dict[str, Any]]) -> tuple[Action, ...]:
    """`[[agent.actions]]`, each a table with name, run and optional description, network,
    home. A name appears once; `run` is one line (the sandbox refuses newlines)."""
    actions: list[Action] = []
    schema = SCHEMA["agent.actions"]
    for i, raw in enumerate(entries):
        where = f"[agent].actions[{i}]"
        fields: dict[str, Any] = {}
        for key, value in raw.items():
            if key not in schema:
                r.error(f"{where}.{key}", f"unknown key ({nearest(key, list(schema))})")
                continue
            try:
                fields[key] = schema[key](value)
            except Bad as bad:
                r.error(f"{where}.{key}", f"expected {bad.expected}, found {found(value)}")
        for key, example in (("name", '"send-reply"'), ("run", '"msmtp -t"')):
            if key not in raw:
                r.error(f"{where}.{key}", f"required, e.g. {key} = {example}")
        name, run = fields.get("name"), fields.get("run")
        if name is not None and not ACTION_NAME_RE.fullmatch(name):
            r.error(
                f"{where}.name",
                f"expected lowercase letters, digits and '-', found {found(name)}",
            )
            continue
        if name is not None and any(a.name == name for a in actions):
            r.error(f"{where}.name", f'expected a name unique in the routine, found "{name}" again')
            continue
        if run is not None and any(c in run.strip("\n") for c in "\0\n\r"):
            r.error(f"{where}.run", "expected one line, found a NUL, newline or carriage return")
            continue
        if name is None or run is None or len(fields) != len(raw):
            continue
        actions.append(Action(**{**fields, "run": run.strip("\n")}))
    return tuple(actions)


def _command(r: Reader, doc: Mapping[str, Any]) -> CommandSpec | None:
    t = r.table(doc, "command")
    if not isinstance(doc.get("command"), dict):
        return None  # `command = "ls"`: reported as "expected a table"
    if "mcp" in doc["command"] or "mcp_servers" in doc["command"]:
        return mcpkeys.read_command_mcp(r, t, doc["command"])
    if "run" not in t:
        if "run" not in doc.get("command", {}):
            r.error("[command].run", 'required: the shell string to run, e.g. run = "df -h"')
        return None
    run = t["run"]
    if "\0" in run:
        r.error("[command].run", "expected text, found a NUL byte")
        return None
    stripped = run.strip("\n")
    if "\n" in stripped or "\r" in stripped:
        # The sandbox refuses newlines in any command (test_sandbox_argv.py::
        # test_a_command_with_a_newline_or_nul_is_refused), so say it here.
        r.error(
            "[command].run",
            'expected one line (join commands with ; or &&; in a """ string a \\ at the '
            "end of a line joins it to the next), "
            f"found {stripped.count(chr(10)) + 1} lines",
        )
        return None
    creds = read_credentials(r, "command", t, SCHEMA["command.credentials"])
    return CommandSpec(**{**t, "run": stripped, "credentials": creds})


def _output(r: Reader, doc: Mapping[str, Any]) -> OutputSpec:
    t = r.table(doc, "output")
    out_type = t.get("type", OutputType.BRIEF)
    if out_type is OutputType.FILE and "path" not in t:
        r.error("[output].path", 'required for type = "file": where to copy the output')
    if out_type is OutputType.WEBHOOK:
        url = t.get("url")
        if url is None:
            r.error("[output].url", 'required for type = "webhook"')
        elif not url.startswith(("https://", "http://")):
            r.error("[output].url", f'expected an http(s):// URL, found "{url}"')
    for key, only in (("path", OutputType.FILE), ("url", OutputType.WEBHOOK)):
        if key in t and out_type is not only:
            r.error(f"[output].{key}", f'only for type = "{only.value}", found type "{out_type}"')
    return OutputSpec(**t)


def _budget(r: Reader, doc: Mapping[str, Any], kind: Kind) -> BudgetSpec:
    t = r.table(doc, "budget")
    raw = doc.get("budget")
    if not isinstance(raw, dict):
        raw = {}
    agent = doc.get("agent") if isinstance(doc.get("agent"), dict) else None
    # A declared provider's route may be local too, which only config.toml says: a paid one
    # without a budget is warned about by routines.spec.providers.check_agent.
    route = agent.get("route", "auto") if agent is not None else "auto"
    ollama_only = agent is not None and route not in ("auto", "anthropic")
    # A max_dollars_per_day that is present but invalid is an error already, not "no budget".
    if kind is Kind.AGENT and not ollama_only and "max_dollars_per_day" not in raw:
        r.warn("[budget]", "no max_dollars_per_day: this routine's daily spend is unlimited")
    return BudgetSpec(**t)


def _both_or_all(keys: Sequence[str]) -> str:
    """ "oncalendar and cron are both set", "oncalendar, cron and every are all set"."""
    if len(keys) == 2:
        return f"{keys[0]} and {keys[1]} are both set"
    return f"{', '.join(keys[:-1])} and {keys[-1]} are all set"


def once_past(spec: ScheduleSpec, now: datetime | None = None) -> str | None:
    """Why a `once` schedule can no longer run (its time is past), or None."""
    from routines.schedule import compile_schedule

    now = now or datetime.now(UTC)
    if compile_schedule(spec, Kind.COMMAND).next_after(now) is not None:
        return None
    return f'"{spec.once}" is in the past ({spec.timezone}): it will not run again'
