"""Routine files: strict validation, one test per kind of mistake, asserting the exact text the
user reads (file, [table].key, what was expected, what was found), and the documented defaults."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from routines.schedule.tz import machine_timezone
from routines.spec import (
    DEFAULT_LOCAL_MODEL,
    DEFAULT_PREMIUM_MODEL,
    Action,
    Kind,
    Memory,
    Missed,
    OnExceed,
    Origin,
    OutputType,
    Permissions,
    Route,
    ScheduleSpec,
    Tool,
    ToolKind,
)
from routines.spec.checks import RoutineInvalid
from routines.spec.loader import load_file
from tests.helpers import AGENT, COMMAND, problems_of, write

NETWORK_EXPECTED = (
    'true, false or an array of host names such as ["api.github.com"] '
    '(or "host:port" for a port besides 80 and 443)'
)
UNLIMITED = "[budget]: WARN no max_dollars_per_day: this routine's daily spend is unlimited"


@pytest.fixture
def rdir(tmp_path: Path) -> Path:
    d = tmp_path / "routines"
    d.mkdir()
    return d


@pytest.fixture
def machine_zone() -> Iterator[None]:
    machine_timezone.cache_clear()
    yield
    machine_timezone.cache_clear()


def agent_with(extra: str, *, agent: str = "") -> str:
    """AGENT with `agent` lines added to [agent] and `extra` tables appended."""
    text = AGENT.replace('system = "Write the brief."\n', f'system = "Write the brief."\n{agent}')
    return text + extra


def errors(rdir: Path, text: str, name: str = "day-brief") -> list[str]:
    path = write(rdir, name, text)
    with pytest.raises(RoutineInvalid) as info:
        load_file(path)
    return [str(p) for p in info.value.problems]


# -- defaults ---------------------------------------------------------------------------------


def test_minimal_agent_routine_gets_the_seeds_defaults(rdir: Path) -> None:
    path = write(rdir, "day-brief", AGENT)
    r = load_file(path)
    assert (r.name, r.kind, r.enabled, r.description) == ("day-brief", Kind.AGENT, False, "")
    assert (r.source, r.origin, r.text, r.warnings) == (path, Origin.USER, AGENT, ())
    assert r.command is None and r.agent is not None
    a = r.agent
    assert a.system == "Write the brief."
    assert a.route is Route.AUTO
    assert a.local_model == DEFAULT_LOCAL_MODEL == "llama3.2:3b"
    assert a.premium_model == DEFAULT_PREMIUM_MODEL == "claude-sonnet-4-6"
    assert a.memory is Memory.SESSION
    assert a.network is False
    assert a.shell_timeout_sec == 30
    assert a.run_timeout_sec == 600
    assert (a.tools, a.tags, a.local_context_tokens) == ((), (), 4096)
    e = a.escalation
    assert (e.on_low_confidence, e.on_reasoning_task) == (True, True)
    assert (e.on_context_overflow, e.on_malformed_tool_json) == (True, True)
    assert e.max_escalations_per_run == 3
    s = r.schedule
    assert (s.cron, s.oncalendar, s.every, s.timezone) == ("0 6 * * *", None, None, "UTC")
    assert (s.jitter_sec, s.missed, s.allow_frequent) == (0, Missed.CATCH_UP, False)
    o = r.output
    assert (o.type, o.title, o.open_on_login, o.notify) == (
        OutputType.BRIEF,
        "{{name}} · {{date}}",
        False,
        False,
    )
    assert (o.path, o.url) == (None, None)
    b = r.budget
    assert (b.max_tokens_per_run, b.max_dollars_per_day, b.on_exceed) == (
        None,
        0.5,
        OnExceed.SKIP,
    )
    assert (r.network, r.run_timeout_sec) == (False, 600)


def test_command_routine_defaults_timeout_600_no_network_and_no_budget_warning(
    rdir: Path,
) -> None:
    r = load_file(write(rdir, "disk-report", COMMAND))
    assert r.kind is Kind.COMMAND and r.agent is None and r.command is not None
    assert (r.command.run, r.command.timeout_sec, r.command.network) == ("df -h", 600, False)
    assert (r.run_timeout_sec, r.network, r.warnings) == (600, False, ())


def test_timezone_defaults_to_the_machines(
    rdir: Path, monkeypatch: pytest.MonkeyPatch, machine_zone: None
) -> None:
    monkeypatch.setenv("TZ", "Asia/Tokyo")
    r = load_file(write(rdir, "day-brief", AGENT.replace('timezone = "UTC"\n', "")))
    assert r.schedule.timezone == "Asia/Tokyo"


def test_seed_000_example_file_loads_with_every_field(rdir: Path) -> None:
    text = """\
[routine]
name = "day-brief"
description = "Morning briefing: inbox, calendar, GitHub, top-of-mind"
enabled = true

[schedule]
cron       = "0 6 * * *"
timezone   = "America/New_York"
jitter     = "5m"

[agent]
route          = "auto"
local_model    = "llama3.1:8b"
premium_model  = "claude-sonnet-4-6"
system = \"\"\"
You are the user's morning briefing agent.
\"\"\"
tools = [
  "read:~/inbox/*",
  "shell:gh api /notifications",
  "shell:gcalcli agenda today",
]
memory = "persistent"
tags   = ["reasoning"]
local_context_tokens = 4096

[agent.escalation]
on_low_confidence       = true
on_reasoning_task       = true
on_context_overflow     = false
on_malformed_tool_json  = true
max_escalations_per_run = 2

[output]
type = "brief"
title = "Today · {{date}}"
open_on_login = true
notify = true

[budget]
max_tokens_per_run = 20000
max_dollars_per_day = 0.50
on_exceed = "skip"
"""
    r = load_file(write(rdir, "day-brief", text))
    assert r.enabled is True and r.description.startswith("Morning briefing")
    assert (r.schedule.timezone, r.schedule.jitter_sec) == ("America/New_York", 300)
    assert r.agent is not None
    assert r.agent.local_model == "llama3.1:8b"
    assert r.agent.tools == (
        Tool(ToolKind.READ, "~/inbox/*"),
        Tool(ToolKind.SHELL, "gh api /notifications"),
        Tool(ToolKind.SHELL, "gcalcli agenda today"),
    )
    assert r.agent.read_patterns == ("~/inbox/*",)
    assert r.agent.shell_commands == ("gh api /notifications", "gcalcli agenda today")
    assert (r.agent.memory, r.agent.tags) == (Memory.PERSISTENT, ("reasoning",))
    assert r.agent.escalation.on_context_overflow is False
    assert r.agent.escalation.max_escalations_per_run == 2
    assert (r.output.title, r.output.open_on_login, r.output.notify) == (
        "Today · {{date}}",
        True,
        True,
    )
    assert (r.budget.max_tokens_per_run, r.budget.max_dollars_per_day) == (20000, 0.5)
    assert r.warnings == ()


@pytest.mark.parametrize(("text", "seconds"), [("30s", 30), ("5m", 300), ("1h", 3600)])
def test_jitter_durations(rdir: Path, text: str, seconds: int) -> None:
    text = AGENT.replace("[schedule]\n", f'[schedule]\njitter = "{text}"\n')
    r = load_file(write(rdir, "day-brief", text))
    assert r.schedule.jitter_sec == seconds


# -- malformed files ---------------------------------------------------------------------------


def test_malformed_toml_names_the_parsers_line_and_column(rdir: Path) -> None:
    path = write(rdir, "day-brief", "[routine]\nenabled = \n")
    assert errors(rdir, "[routine]\nenabled = \n") == [
        f"{path}: malformed TOML: Invalid value (at line 2, column 11)"
    ]


def test_a_file_cut_off_early_still_gets_a_line_and_column(rdir: Path) -> None:
    # tomllib says only "at end of document" there: the end's line and column are added.
    text = '[agent]\nsystem = """\nYou write the brief.\n'
    path = rdir / "day-brief.toml"
    assert errors(rdir, text) == [
        f"{path}: malformed TOML: Unterminated string (at end of document, line 4, column 1)"
    ]
    assert errors(rdir, "[routine]\ndescription = ") == [
        f"{path}: malformed TOML: Invalid value (at end of document, line 2, column 15)"
    ]


def test_unreadable_file(rdir: Path, not_root: None) -> None:
    path = write(rdir, "day-brief", AGENT)
    path.chmod(0)
    with pytest.raises(RoutineInvalid) as info:
        load_file(path)
    assert [str(p) for p in info.value.problems] == [f"{path}: cannot read: Permission denied"]


def test_file_that_is_not_utf8(rdir: Path) -> None:
    path = rdir / "day-brief.toml"
    path.write_bytes(b'[routine]\ndescription = "caf\xe9"\n')
    with pytest.raises(RoutineInvalid) as info:
        load_file(path)
    assert [str(p) for p in info.value.problems] == [f"{path}: not UTF-8 text (byte 28 is 0xe9)"]


# A route that is neither built in nor a provider config.toml declares (it declares none).
UNKNOWN_ROUTE = (
    'expected one of "anthropic" | "ollama" | "auto" or a provider declared in config.toml '
    "[providers.NAME] (none declared), "
)


def test_all_problems_of_a_file_are_reported_not_just_the_first(rdir: Path) -> None:
    text = agent_with('[output]\ntype = "email"\n', agent='route = "cloud"\nnetwork = "no"\n')
    path = rdir / "day-brief.toml"
    assert errors(rdir, text) == [
        f"{path}: [agent].network: expected {NETWORK_EXPECTED}, found " + '"no" (a string)',
        f'{path}: [agent].route: {UNKNOWN_ROUTE}found "cloud" (a string)',
        f'{path}: [output].type: expected one of "brief" | "notification" | "file" | "webhook", '
        'found "email" (a string)',
    ]


# -- unknown keys and tables ----------------------------------------------------------------


def test_unknown_key_names_the_nearest_known_key(rdir: Path) -> None:
    text = AGENT.replace("max_dollars_per_day", "max_dolars_per_day")
    path = rdir / "day-brief.toml"
    assert errors(rdir, text) == [
        f"{path}: [budget].max_dolars_per_day: unknown key (did you mean max_dollars_per_day?)",
        # A typo removes the budget: say so too.
        f"{path}: {UNLIMITED}",
    ]


def test_unknown_key_with_nothing_close_lists_the_known_keys(rdir: Path) -> None:
    path = rdir / "day-brief.toml"
    assert errors(rdir, AGENT.replace("[schedule]\n", "[schedule]\nxyzzy = 1\n")) == [
        f"{path}: [schedule].xyzzy: unknown key (known keys: cron, oncalendar, every, once, "
        "timezone, jitter, missed, allow_frequent)"
    ]


def test_unknown_key_in_a_nested_table(rdir: Path) -> None:
    path = rdir / "day-brief.toml"
    text = agent_with("[agent.escalation]\non_lowconfidence = false\n")
    assert errors(rdir, text) == [
        f"{path}: [agent.escalation].on_lowconfidence: unknown key "
        "(did you mean on_low_confidence?)"
    ]


def test_unknown_table_names_the_nearest_table(rdir: Path) -> None:
    path = rdir / "day-brief.toml"
    assert errors(rdir, agent_with('[outptu]\ntype = "brief"\n')) == [
        f"{path}: [outptu]: unknown table (did you mean output?)"
    ]


# -- types and values ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("agent_line", "message"),
    [
        ('network = "no"', f'[agent].network: expected {NETWORK_EXPECTED}, found "no" (a string)'),
        (
            "shell_timeout_sec = 1.5",
            "[agent].shell_timeout_sec: expected a positive integer, found 1.5 (a number)",
        ),
        (
            "run_timeout_sec = true",
            "[agent].run_timeout_sec: expected a positive integer, found true (a boolean)",
        ),
        (
            'tools = "shell:ls"',
            '[agent].tools: expected an array of strings, found "shell:ls" (a string)',
        ),
        ("tools = [1, 2]", "[agent].tools: expected an array of strings, found an array of 2"),
        ("escalation = 3", "[agent].escalation: expected a table, found 3 (an integer)"),
        (
            "local_model = 3",
            "[agent].local_model: expected a non-empty string, found 3 (an integer)",
        ),
    ],
)
def test_wrong_type(rdir: Path, agent_line: str, message: str) -> None:
    path = rdir / "day-brief.toml"
    assert errors(rdir, agent_with("", agent=agent_line + "\n")) == [f"{path}: {message}"]


def test_wrong_type_for_a_table(rdir: Path) -> None:
    # Not a crash, and said once (the top-level pass and the table reader both see it).
    path = rdir / "day-brief.toml"
    text = 'agent = 3\n[schedule]\ncron = "0 6 * * *"\n[budget]\nmax_dollars_per_day = 1\n'
    assert errors(rdir, text) == [f"{path}: [agent]: expected a table, found 3 (an integer)"]
    text = 'schedule = "daily"\n[agent]\nsystem = "x"\n[budget]\nmax_dollars_per_day = 1\n'
    assert errors(rdir, text) == [f'{path}: [schedule]: expected a table, found "daily" (a string)']


def test_wrong_type_for_a_command_table(rdir: Path) -> None:
    path = rdir / "disk-report.toml"
    text = '[routine]\nkind = "command"\n[schedule]\ncron = "0 6 * * *"\ntimezone = "UTC"\n'
    assert errors(rdir, 'command = "df -h"\n' + text, "disk-report") == [
        f'{path}: [command]: expected a table, found "df -h" (a string)'
    ]


@pytest.mark.parametrize(
    ("table", "line", "message"),
    [
        (
            "routine",
            'kind = "script"',
            '[routine].kind: expected one of "agent" | "command", found "script" (a string)',
        ),
        (
            "agent",
            'route = "cloud"',
            f'[agent].route: {UNKNOWN_ROUTE}found "cloud" (a string)',
        ),
        (
            "agent",
            'memory = "forever"',
            '[agent].memory: expected one of "session" | "persistent" | "shared", '
            'found "forever" (a string)',
        ),
        (
            "schedule",
            'missed = "retry"',
            '[schedule].missed: expected one of "catch_up" | "skip", found "retry" (a string)',
        ),
        (
            "budget",
            'on_exceed = "ignore"',
            '[budget].on_exceed: expected one of "skip" | "degrade-to-local" | "notify", '
            'found "ignore" (a string)',
        ),
        (
            "output",
            'type = "email"',
            '[output].type: expected one of "brief" | "notification" | "file" | "webhook", '
            'found "email" (a string)',
        ),
    ],
)
def test_bad_enum_value(rdir: Path, table: str, line: str, message: str) -> None:
    text = AGENT.replace(f"[{table}]\n", f"[{table}]\n{line}\n")
    if f"[{table}]" not in AGENT:
        text += f"[{table}]\n{line}\n"
    problems = errors(rdir, text)
    assert f"{rdir / 'day-brief.toml'}: {message}" in problems
    if table != "routine":  # a bad kind also leaves the routine without a usable kind
        assert len(problems) == 1


@pytest.mark.parametrize(
    ("line", "message"),
    [
        (
            "max_dollars_per_day = -1",
            "[budget].max_dollars_per_day: expected a positive number, found -1 (an integer)",
        ),
        (
            "max_dollars_per_day = 0",
            "[budget].max_dollars_per_day: expected a positive number, found 0 (an integer)",
        ),
        (
            "max_dollars_per_day = -0.25",
            "[budget].max_dollars_per_day: expected a positive number, found -0.25 (a number)",
        ),
        (
            "max_dollars_per_day = nan",
            "[budget].max_dollars_per_day: expected a positive number, found nan (a number)",
        ),
        (
            "max_dollars_per_day = inf",
            "[budget].max_dollars_per_day: expected a positive number, found inf (a number)",
        ),
    ],
)
def test_negative_zero_or_not_finite_daily_budget(rdir: Path, line: str, message: str) -> None:
    # Only the error: a budget that is present but wrong is not "no budget" (no WARN).
    text = AGENT.replace("max_dollars_per_day = 0.5", line)
    assert errors(rdir, text) == [f"{rdir / 'day-brief.toml'}: {message}"]


@pytest.mark.parametrize(
    ("value", "found"), [("0", "0 (an integer)"), ("-500", "-500 (an integer)")]
)
def test_negative_or_zero_token_budget(rdir: Path, value: str, found: str) -> None:
    text = AGENT + f"max_tokens_per_run = {value}\n"
    assert errors(rdir, text) == [
        f"{rdir / 'day-brief.toml'}: [budget].max_tokens_per_run: expected a positive integer, "
        f"found {found}"
    ]


def test_bad_jitter(rdir: Path) -> None:
    text = AGENT.replace("[schedule]\n", '[schedule]\njitter = "5 minutes"\n')
    assert errors(rdir, text) == [
        f"{rdir / 'day-brief.toml'}: [schedule].jitter: expected a duration such as "
        '"30s", "5m" or "1h", found "5 minutes" (a string)'
    ]


def test_max_escalations_zero_is_allowed_negative_is_not(rdir: Path) -> None:
    ok = load_file(
        write(rdir, "day-brief", AGENT + "[agent.escalation]\nmax_escalations_per_run = 0\n")
    )
    assert ok.agent is not None and ok.agent.escalation.max_escalations_per_run == 0
    text = AGENT + "[agent.escalation]\nmax_escalations_per_run = -1\n"
    assert errors(rdir, text) == [
        f"{rdir / 'day-brief.toml'}: [agent.escalation].max_escalations_per_run: "
        "expected an integer >= 0, found -1 (an integer)"
    ]


# -- names -----------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["Day-Brief", "-brief", "day_brief", "day.brief", "a" * 64])
def test_bad_name(rdir: Path, name: str) -> None:
    path = write(rdir, f"{name}.toml", AGENT)
    assert problems_of(path) == [
        f"{path}: bad routine name {name!r}: expected lowercase letters, digits and '-', "
        "starting with a letter or digit, at most 63 characters"
    ]


def test_longest_and_shortest_good_names(rdir: Path) -> None:
    for name in ("a" * 63, "7", "0-a-"):
        assert load_file(write(rdir, name, AGENT)).name == name


@pytest.mark.parametrize("name", ["shared", "config"])
def test_reserved_names(rdir: Path, name: str) -> None:
    path = write(rdir, name, AGENT)
    assert problems_of(path) == [f"{path}: the name {name!r} is reserved: choose another file name"]


def test_file_name_must_end_in_toml(rdir: Path) -> None:
    path = write(rdir, "day-brief.tml", AGENT)
    assert problems_of(path) == [
        f"{path}: expected a file name ending in .toml, found 'day-brief.tml'"
    ]


def test_name_that_differs_from_the_file_name(rdir: Path) -> None:
    text = '[routine]\nname = "morning"\n' + AGENT
    assert errors(rdir, text) == [
        f'{rdir / "day-brief.toml"}: [routine].name: expected "day-brief" '
        '(the file name is the routine name), found "morning"'
    ]
    # ... and the same name is fine.
    assert load_file(write(rdir, "day-brief", '[routine]\nname = "day-brief"\n' + AGENT))


# -- kinds and their tables --------------------------------------------------------------------


def test_agent_with_a_command_table(rdir: Path) -> None:
    assert errors(rdir, AGENT + '[command]\nrun = "ls"\n') == [
        f'{rdir / "day-brief.toml"}: [command]: only for kind = "command"; this routine is an agent'
    ]


def test_command_with_agent_and_budget_tables(rdir: Path) -> None:
    text = COMMAND + '[agent]\nsystem = "x"\n[budget]\nmax_dollars_per_day = 1\n'
    path = rdir / "disk-report.toml"
    assert errors(rdir, text, "disk-report") == [
        f'{path}: [agent]: only for agent routines; this one has kind = "command"',
        f'{path}: [budget]: only for agent routines; this one has kind = "command"',
    ]


def test_agent_without_an_agent_table(rdir: Path) -> None:
    text = '[schedule]\ncron = "0 6 * * *"\n[budget]\nmax_dollars_per_day = 1\n'
    assert errors(rdir, text) == [
        f"{rdir / 'day-brief.toml'}: [agent]: required for an agent routine "
        '(or set [routine].kind = "command")'
    ]


def test_agent_without_a_system_prompt(rdir: Path) -> None:
    path = rdir / "day-brief.toml"
    text = AGENT.replace('system = "Write the brief."\n', "")
    assert errors(rdir, text) == [
        f"{path}: [agent].system: required: the system prompt (a non-empty string)"
    ]
    text = AGENT.replace('"Write the brief."', '"  "')
    assert errors(rdir, text) == [
        f'{path}: [agent].system: expected a non-empty string, found "  " (a string)'
    ]


def test_command_without_a_command_table_or_run(rdir: Path) -> None:
    path = rdir / "disk-report.toml"
    text = COMMAND.replace('[command]\nrun = "df -h"\n', "")
    assert errors(rdir, text, "disk-report") == [
        f'{path}: [command]: required for kind = "command" (with run = "<shell string>")'
    ]
    text = COMMAND.replace('run = "df -h"\n', "timeout_sec = 60\n")
    assert errors(rdir, text, "disk-report") == [
        f'{path}: [command].run: required: the shell string to run, e.g. run = "df -h"'
    ]


def test_command_run_with_a_nul(rdir: Path) -> None:
    text = COMMAND.replace('run = "df -h"', 'run = "df -h\\u0000; rm -rf ~"')
    assert errors(rdir, text, "disk-report") == [
        f"{rdir / 'disk-report.toml'}: [command].run: expected text, found a NUL byte"
    ]


def test_missing_schedule_and_empty_schedule(rdir: Path) -> None:
    path = rdir / "day-brief.toml"
    text = AGENT.replace('[schedule]\ncron = "0 6 * * *"\ntimezone = "UTC"\n', "")
    assert errors(rdir, text) == [
        f"{path}: [schedule]: required: set one of cron, oncalendar or every (or a [trigger])"
    ]
    text = AGENT.replace('cron = "0 6 * * *"\n', "")
    assert errors(rdir, text) == [
        f"{path}: [schedule]: expected one of cron, oncalendar, every or once, found none"
    ]


# -- tools -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("entry", "message"),
    [
        (
            "ls -la",
            'expected "read:<glob>", "shell:<command>" or "mcp:SERVER/TOOL", found "ls -la"',
        ),
        (
            "exec:ls",
            'expected "read:<glob>", "shell:<command>" or "mcp:SERVER/TOOL", found "exec:ls"',
        ),
        (
            "Shell:ls",
            'expected "read:<glob>", "shell:<command>" or "mcp:SERVER/TOOL", found "Shell:ls"',
        ),
        ("shell:", 'empty shell command: expected "shell:<something>", found "shell:"'),
        ("shell:   ", 'empty shell command: expected "shell:<something>", found "shell:   "'),
        ("read:", 'empty read glob: expected "read:<something>", found "read:"'),
        ("shell:ls\\u0000 /", "expected one line, found a NUL, newline or carriage return"),
        ("shell:ls\\nrm -rf ~", "expected one line, found a NUL, newline or carriage return"),
        ("shell:ls\\r", "expected one line, found a NUL, newline or carriage return"),
        ("read:~/x\\n", "expected one line, found a NUL, newline or carriage return"),
        (
            "read:inbox/*.eml",
            'expected an absolute glob starting with "~/" or "/", found "inbox/*.eml"',
        ),
        ("read:~user/x", 'expected an absolute glob starting with "~/" or "/", found "~user/x"'),
    ],
)
def test_bad_tool_entry(rdir: Path, entry: str, message: str) -> None:
    text = agent_with("", agent=f'tools = ["shell:date", "{entry}"]\n')
    assert errors(rdir, text) == [f"{rdir / 'day-brief.toml'}: [agent].tools[1]: {message}"]


def test_tools_are_kept_verbatim_and_a_duplicate_warns(rdir: Path) -> None:
    text = agent_with(
        "",
        agent='tools = ["shell:gh api /user | head -c 100", "read:/etc/hostname", '
        '"shell:gh api /user | head -c 100"]\n',
    )
    r = load_file(write(rdir, "day-brief", text))
    assert r.agent is not None
    assert r.agent.tools == (
        Tool(ToolKind.SHELL, "gh api /user | head -c 100"),
        Tool(ToolKind.READ, "/etc/hostname"),
    )
    assert r.warnings == (
        f"{rdir / 'day-brief.toml'}: [agent].tools[2]: WARN duplicate of an earlier entry "
        '"shell:gh api /user | head -c 100"',
    )


# -- schedules ---------------------------------------------------------------------------------


def test_cron_and_every_warn_and_cron_wins(rdir: Path) -> None:
    text = AGENT.replace('cron = "0 6 * * *"\n', 'cron = "0 6 * * *"\nevery = "every morning"\n')
    r = load_file(write(rdir, "day-brief", text))
    assert r.warnings == (
        f"{rdir / 'day-brief.toml'}: [schedule]: WARN cron and every are both set; cron wins "
        "(precedence: oncalendar > cron > every > once)",
    )
    assert (r.schedule.form, r.schedule.expression) == ("cron", "0 6 * * *")


def test_oncalendar_wins_over_cron_and_every_with_a_warning(rdir: Path) -> None:
    text = AGENT.replace(
        'cron = "0 6 * * *"\n',
        'cron = "0 6 * * *"\nevery = "every morning"\noncalendar = "*-*-* 07:00:00"\n',
    )
    r = load_file(write(rdir, "day-brief", text))
    assert r.warnings == (
        f"{rdir / 'day-brief.toml'}: [schedule]: WARN oncalendar, cron and every are all set; "
        "oncalendar wins (precedence: oncalendar > cron > every > once)",
    )
    assert (r.schedule.form, r.schedule.expression) == ("oncalendar", "*-*-* 07:00:00")


def test_schedule_precedence_is_oncalendar_then_cron_then_every() -> None:
    both = ScheduleSpec(cron="0 6 * * *", oncalendar="*-*-* 07:00:00", every="every morning")
    assert (both.form, both.expression) == ("oncalendar", "*-*-* 07:00:00")
    cron_every = ScheduleSpec(cron="0 6 * * *", every="every morning")
    assert (cron_every.form, cron_every.expression) == ("cron", "0 6 * * *")
    only_every = ScheduleSpec(every="every morning")
    assert (only_every.form, only_every.expression) == ("every", "every morning")


def test_unknown_time_zone(rdir: Path) -> None:
    text = AGENT.replace('timezone = "UTC"', 'timezone = "Mars/Olympus_Mons"')
    assert errors(rdir, text) == [
        f"{rdir / 'day-brief.toml'}: [schedule].timezone: expected an IANA time zone such as "
        '"Europe/Berlin", found "Mars/Olympus_Mons" (not in this machine\'s tz database)'
    ]


def test_time_zone_that_is_a_path_is_refused(rdir: Path) -> None:
    text = AGENT.replace('timezone = "UTC"', 'timezone = "../../etc/passwd"')
    assert errors(rdir, text) == [
        f"{rdir / 'day-brief.toml'}: [schedule].timezone: expected an IANA time zone such as "
        '"Europe/Berlin", found "../../etc/passwd" (not in this machine\'s tz database)'
    ]


# -- routes and the legacy `model` --------------------------------------------------------------


def test_legacy_model_with_route_anthropic_is_the_premium_model(rdir: Path) -> None:
    text = agent_with("", agent='route = "anthropic"\nmodel = "claude-opus-4-5"\n')
    r = load_file(write(rdir, "day-brief", text))
    assert r.agent is not None
    assert (r.agent.route, r.agent.premium_model) == (Route.ANTHROPIC, "claude-opus-4-5")
    assert r.agent.local_model == "llama3.2:3b"


def test_legacy_model_with_route_ollama_is_the_local_model(rdir: Path) -> None:
    text = agent_with("", agent='route = "ollama"\nmodel = "qwen2.5:7b"\n')
    r = load_file(write(rdir, "day-brief", text))
    assert r.agent is not None
    assert (r.agent.route, r.agent.local_model) == (Route.OLLAMA, "qwen2.5:7b")


def test_legacy_model_is_refused_with_route_auto(rdir: Path) -> None:
    for agent in ('model = "claude-opus-4-5"\n', 'route = "auto"\nmodel = "claude-opus-4-5"\n'):
        assert errors(rdir, agent_with("", agent=agent)) == [
            f'{rdir / "day-brief.toml"}: [agent].model: only with route = "anthropic" or '
            '"ollama"; with route = "auto" set local_model and premium_model'
        ]


def test_legacy_model_and_the_new_key_together_are_refused(rdir: Path) -> None:
    text = agent_with(
        "", agent='route = "anthropic"\nmodel = "claude-opus-4-5"\npremium_model = "x"\n'
    )
    assert errors(rdir, text) == [
        f"{rdir / 'day-brief.toml'}: [agent].model: set either model or premium_model, not both"
    ]


# -- output --------------------------------------------------------------------------------


def test_output_file_needs_a_path(rdir: Path) -> None:
    assert errors(rdir, AGENT + '[output]\ntype = "file"\n') == [
        f'{rdir / "day-brief.toml"}: [output].path: required for type = "file": '
        "where to copy the output"
    ]
    r = load_file(write(rdir, "day-brief", AGENT + '[output]\ntype = "file"\npath = "~/b.md"\n'))
    assert (r.output.type, r.output.path) == (OutputType.FILE, "~/b.md")


def test_output_webhook_needs_an_http_url(rdir: Path) -> None:
    path = rdir / "day-brief.toml"
    assert errors(rdir, AGENT + '[output]\ntype = "webhook"\n') == [
        f'{path}: [output].url: required for type = "webhook"'
    ]
    assert errors(rdir, AGENT + '[output]\ntype = "webhook"\nurl = "ftp://h/x"\n') == [
        f'{path}: [output].url: expected an http(s):// URL, found "ftp://h/x"'
    ]
    text = AGENT + '[output]\ntype = "webhook"\nurl = "https://h.example/hook"\n'
    assert load_file(write(rdir, "day-brief", text)).output.url == "https://h.example/hook"


def test_output_path_or_url_with_the_wrong_type(rdir: Path) -> None:
    path = rdir / "day-brief.toml"
    assert errors(rdir, AGENT + '[output]\npath = "~/b.md"\n') == [
        f'{path}: [output].path: only for type = "file", found type "brief"'
    ]
    assert errors(rdir, AGENT + '[output]\ntype = "file"\npath = "~/b"\nurl = "https://h"\n') == [
        f'{path}: [output].url: only for type = "webhook", found type "file"'
    ]


# -- budget warning ----------------------------------------------------------------------------


def test_agent_without_a_daily_budget_warns_that_spend_is_unlimited(rdir: Path) -> None:
    text = AGENT.replace("[budget]\nmax_dollars_per_day = 0.5\n", "")
    r = load_file(write(rdir, "day-brief", text))
    assert r.warnings == (f"{rdir / 'day-brief.toml'}: {UNLIMITED}",)
    assert r.budget.max_dollars_per_day is None
    r = load_file(write(rdir, "day-brief", text + "[budget]\nmax_tokens_per_run = 100\n"))
    assert r.warnings == (f"{rdir / 'day-brief.toml'}: {UNLIMITED}",)


def test_ollama_only_agent_and_command_routines_do_not_warn_about_budget(rdir: Path) -> None:
    text = AGENT.replace("[budget]\nmax_dollars_per_day = 0.5\n", "")
    r = load_file(
        write(rdir, "day-brief", text.replace("[agent]\n", '[agent]\nroute = "ollama"\n'))
    )
    assert r.warnings == ()
    assert load_file(write(rdir, "disk-report", COMMAND)).warnings == ()


def test_problem_text_names_file_key_expected_and_found(rdir: Path) -> None:
    # The shape every message follows: "<file>: [table].key: expected …, found …".
    path = write(rdir, "day-brief", AGENT.replace("0.5", '"lots"'))
    (message,) = problems_of(path)
    file, key, rest = message.split(": ", 2)
    assert (file, key) == (str(path), "[budget].max_dollars_per_day")
    assert rest == 'expected a positive number, found "lots" (a string)'
    assert os.path.isabs(file)


# -- network: false, true, or a host list (routines/spec/hosts.py) ---------------------------------


def test_network_host_list_is_kept_lower_case_without_duplicates(rdir: Path) -> None:
    text = agent_with("", agent='network = ["API.GitHub.com", "github.com", "github.com."]\n')
    r = load_file(write(rdir, "day-brief", text))
    assert r.network == ("api.github.com", "github.com")
    cmd = COMMAND.replace('run = "df -h"', 'run = "df -h"\nnetwork = ["example.org"]')
    assert cmd != COMMAND
    assert load_file(write(rdir, "disk", cmd)).network == ("example.org",)


def test_network_host_list_takes_host_port_entries(rdir: Path) -> None:
    """`host:port` reaches that one port (the proxy allows 80 and 443 for a bare name)."""
    text = agent_with("", agent='network = ["Git.Example.org:08443", "github.com", "nas.lan:80"]\n')
    r = load_file(write(rdir, "day-brief", text))
    assert r.network == ("git.example.org:8443", "github.com", "nas.lan:80")


@pytest.mark.parametrize(
    ("value", "why"),
    [
        ("[]", " (an empty array: write false)"),
        (
            '["https://api.github.com"]',
            '; "https://api.github.com" is not a host name or host:port (no scheme or path)',
        ),
        ('["github.com:0"]', '; "github.com:0" has a port that is not a number from 1 to 65535'),
        (
            '["github.com:65536"]',
            '; "github.com:65536" has a port that is not a number from 1 to 65535',
        ),
        ('["github.com:"]', '; "github.com:" has a port that is not a number from 1 to 65535'),
        (
            '["github.com:ssh"]',
            '; "github.com:ssh" has a port that is not a number from 1 to 65535',
        ),
        ('["a:1:2"]', '; "a:1:2" is not a host name or host:port (no scheme or path)'),
        ('["10.0.0.1"]', '; "10.0.0.1" is an IP address; name the host'),
        ('["10.0.0.1:8080"]', '; "10.0.0.1:8080" is an IP address; name the host'),
        ('["[::1]:443"]', '; "[::1]:443" is an IP address; name the host'),
        ('["[fd00::1]"]', '; "[fd00::1]" is an IP address; name the host'),
        ('["*.github.com"]', '; "*.github.com" is not a host name'),
        ('["bad_host.com"]', '; "bad_host.com" is not a host name'),
        ('["a\\nb"]', '; "a\\nb" is not a host name'),
        ("[1]", ""),
    ],
)
def test_network_host_list_refuses_what_is_not_a_host_name(
    rdir: Path, value: str, why: str
) -> None:
    path = rdir / "day-brief.toml"
    got = errors(rdir, agent_with("", agent=f"network = {value}\n"))
    assert len(got) == 1
    assert got[0].startswith(f"{path}: [agent].network: expected {NETWORK_EXPECTED}{why}, found ")


# -- actions and approvals -----------------------------------------------------------------------

ACTION = """
[[agent.actions]]
name = "send-reply"
description = "Send the drafted reply with msmtp"
run = "msmtp -t"
network = ["smtp.fastmail.com"]
home = ["~/.config/msmtp"]
"""


def test_actions_approvals_expire_and_auto_approve(rdir: Path) -> None:
    text = '[routine]\napprovals_expire = "36 hours"\nauto_approve = true\n' + AGENT + ACTION
    (rdir / "day-brief.toml.sig").write_text("a signature, verified elsewhere\n")
    r = load_file(write(rdir, "day-brief", text))
    assert r.actions == (
        Action(
            "send-reply",
            "msmtp -t",
            "Send the drafted reply with msmtp",
            ("smtp.fastmail.com",),
            ("~/.config/msmtp",),
        ),
    )
    assert (r.approvals_expire, r.auto_approve) == (36 * 3600, True)
    plain = load_file(write(rdir, "plain", AGENT))
    assert (plain.actions, plain.approvals_expire, plain.auto_approve) == ((), 7 * 86400, False)
    assert r.permissions is Permissions.EVERYTHING  # auto_approve = true is "everything"
    assert (plain.permissions, plain.needs_you_timeout) == (Permissions.ASK, None)


@pytest.mark.parametrize("value", ["ask", "files"])
def test_permissions_ask_and_files_need_no_signature(rdir: Path, value: str) -> None:
    text = f'[routine]\npermissions = "{value}"\nneeds_you_timeout = "2 hours"\n' + AGENT
    r = load_file(write(rdir, "day-brief", text + ACTION))
    assert (r.permissions, r.needs_you_timeout, r.auto_approve) == (value, 7200, False)
    assert r.permissions.words == {"ask": "Ask me first", "files": "Allow file changes"}[value]


def test_permissions_everything_unsigned_is_refused_with_the_file_key_and_fix(
    rdir: Path,
) -> None:
    found = errors(rdir, '[routine]\npermissions = "everything"\n' + AGENT + ACTION)
    f = str(rdir / "day-brief.toml")
    assert (
        f'{f}: [routine].permissions: "everything" (act without asking) needs the file signed, '
        "and day-brief.toml.sig is missing: read the file, then `vinos-routine sign day-brief`; "
        'or set permissions = "ask" (Ask me first) or "files" (Allow file changes)'
    ) in found, found
    (rdir / "day-brief.toml.sig").write_text("x\n")  # signed: whether it verifies is per run
    r = load_file(rdir / "day-brief.toml")
    assert r.permissions is Permissions.EVERYTHING


def test_permissions_and_auto_approve_together_are_refused(rdir: Path) -> None:
    text = '[routine]\npermissions = "files"\nauto_approve = false\n' + AGENT
    found = errors(rdir, text)
    f = str(rdir / "day-brief.toml")
    assert (
        f"{f}: [routine].auto_approve: set beside [routine].permissions: keep only permissions "
        '(auto_approve = true is permissions = "everything")'
    ) in found, found
    bad = errors(rdir, '[routine]\npermissions = "all"\n' + AGENT)
    assert (
        f'{f}: [routine].permissions: expected one of "ask" | "files" | "everything", '
        'found "all" (a string)'
    ) in bad, bad


@pytest.mark.parametrize(
    ("value", "seconds"),
    [
        ('"7 days"', 604800),
        ('"1 day"', 86400),
        ('"2w"', 1209600),
        ('"90 minutes"', 5400),
        ('"30m"', 1800),
        ('"45s"', 45),
    ],
)
def test_approvals_expire_durations(rdir: Path, value: str, seconds: int) -> None:
    r = load_file(write(rdir, "day-brief", f"[routine]\napprovals_expire = {value}\n" + AGENT))
    assert r.approvals_expire == seconds


def test_bad_actions_are_named_by_key(rdir: Path) -> None:
    bad = (
        ACTION
        + """
[[agent.actions]]
name = "send-reply"
run = "msmtp -t"

[[agent.actions]]
name = "Send Reply"
run = "x"

[[agent.actions]]
nme = "typo"
run = "true"

[[agent.actions]]
name = "peek"
run = "cat"
home = ["~/.ssh"]
network = "yes"
"""
    )
    text = '[routine]\napprovals_expire = "soon"\nauto_approve = "yes"\n' + AGENT + bad
    found = errors(rdir, text)
    f = str(rdir / "day-brief.toml")
    for line in (
        f'{f}: [routine].approvals_expire: expected a positive duration such as "7 days", '
        '"36 hours" or "30m", found "soon" (a string)',
        f'{f}: [routine].auto_approve: expected true or false, found "yes" (a string)',
        f"{f}: [agent].actions[1].name: expected a name unique in the routine, found "
        '"send-reply" again',
        f"{f}: [agent].actions[2].name: expected lowercase letters, digits and '-', found "
        '"Send Reply" (a string)',
        f"{f}: [agent].actions[3].nme: unknown key (did you mean name?)",
        f'{f}: [agent].actions[3].name: required, e.g. name = "send-reply"',
    ):
        assert line in found, found
    assert any(
        x.startswith(f"{f}: [agent].actions[4].network: expected true, false") for x in found
    )


def test_an_action_home_on_the_never_list_is_refused(rdir: Path) -> None:
    text = AGENT + '\n[[agent.actions]]\nname = "peek"\nrun = "cat"\nhome = ["~/.ssh"]\n'
    [line] = errors(rdir, text)
    assert line.startswith(f"{rdir / 'day-brief.toml'}: [agent].actions[0].home[0]: ")
    assert "never-list" in line


@pytest.mark.parametrize(
    ("entry", "says"),
    [
        ('"~/.ssh"', "never-list"),
        ('"~/notes/.env"', "credential-named"),
        ('"~"', "all of ~"),
        ('"/srv/notes"', 'expected a path starting with "~/"'),
    ],
)
def test_a_write_folder_is_held_to_what_a_home_entry_is(rdir: Path, entry: str, says: str) -> None:
    """`write` folders are shown to the sandbox (read-write, or read-only under "ask"), so
    the home entry's checks hold them too."""
    [line] = errors(rdir, AGENT.replace("[agent]\n", f"[agent]\nwrite = [{entry}]\n", 1))
    assert line.startswith(f"{rdir / 'day-brief.toml'}: [agent].write[0]: ")
    assert says in line, line


def test_a_write_folder_is_read(rdir: Path) -> None:
    r = load_file(write(rdir, "day-brief", agent_with("", agent='write = ["~/notes"]\n')))
    assert (r.write, r.home) == (("~/notes",), ())


def test_a_command_routine_has_no_write_folders(rdir: Path) -> None:
    [line] = errors(rdir, COMMAND.replace("[command]\n", '[command]\nwrite = ["~/notes"]\n', 1))
    assert "[command].write: unknown key" in line, line
