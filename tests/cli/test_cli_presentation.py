"""How the CLI presents itself: --help with an example everywhere, --json on read commands,
aligned tables, colour only on a terminal (NO_COLOR honoured), times as "in 2h 13m (06:00)",
errors a user can act on, exit codes 0 / 1 / 2; and the desktop files under packaging/."""

from __future__ import annotations

import configparser
import json
import re
import shlex
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from supervisor.cli.main import COMMANDS, build_parser
from supervisor.cli.present import (
    bar,
    clock,
    format_event,
    money,
    relative,
    table,
    tokens,
    visible,
    when,
)
from tests.cli.cli_helpers import REPO, Cli, OnPty

WAYBAR = REPO / "packaging" / "waybar"


def commands() -> list[str]:
    parser = build_parser()
    sub = next(a for a in parser._actions if a.__class__.__name__ == "_SubParsersAction")
    return sorted(sub.choices)  # type: ignore[arg-type]


def test_every_command_module_is_built() -> None:
    names = set(commands())
    assert {"cost", "brief", "create", "install", "edit"} <= names
    # The name → module table that lets a command build only its own parser is complete.
    assert names == set(COMMANDS)
    for name, module in COMMANDS.items():
        parser = build_parser(only=name)
        sub = next(a for a in parser._actions if a.__class__.__name__ == "_SubParsersAction")
        assert name in sub.choices, f"{module}.py does not register {name!r}"  # type: ignore[operator]


@pytest.mark.parametrize("command", commands())
def test_help_has_an_example(cli: Cli, command: str) -> None:
    res = cli(command, "--help")
    assert res.returncode == 0
    example = re.search(r"^examples?:\n((?:  .*\n?)+)", res.stdout, re.MULTILINE)
    assert example and "vinos-routine " in example.group(1), res.stdout


@pytest.mark.parametrize(
    "argv",
    [
        ["list"],
        ["status"],
        ["history", "notes"],
        ["logs", "notes"],
        ["validate"],
        ["cost"],
        ["cost", "--week"],
        ["brief"],
        ["brief", "--unseen"],
    ],
)
def test_read_commands_print_json(cli: Cli, argv: list[str]) -> None:
    cli.agent("notes")
    res = cli(*argv, "--json")
    assert res.returncode == 0, res.stderr
    lines = [line for line in res.stdout.splitlines() if line]
    try:
        json.loads(res.stdout)
    except json.JSONDecodeError:
        for line in lines:  # JSON lines (history, logs, validate)
            json.loads(line)


def test_usage_errors_exit_2_and_errors_exit_1(cli: Cli) -> None:
    # The exit statuses of the real entry point (`python -m supervisor`), then in-process.
    assert cli.spawn().returncode == 2
    res = cli.spawn("frobnicate")
    assert res.returncode == 2 and "invalid choice" in res.stderr
    assert cli.spawn("enable", "evening-shutdwn").returncode == 1
    assert cli().returncode == 2
    res = cli("frobnicate")
    assert res.returncode == 2 and "invalid choice" in res.stderr
    assert cli("history", "x", "-n", "many").returncode == 2
    cli.agent("evening-shutdown")
    for argv in (
        ["enable", "evening-shutdwn"],
        ["logs", "evening-shutdwn"],
        ["history", "evening-shutdwn"],
        ["run", "evening-shutdwn"],
    ):
        res = cli(*argv)
        assert res.returncode == 1, argv
        assert "no routine named 'evening-shutdwn'; did you mean evening-shutdown?" in res.stderr


def test_the_daemon_not_running_says_how_to_start_it(cli: Cli, tmp_path: Path) -> None:
    # With a user unit installed (without one, the hint is `setup`: test_cli_setup.py).
    unit = tmp_path / "home/.config/systemd/user/vinos-routined.service"
    unit.parent.mkdir(parents=True)
    unit.write_text("[Service]\n")
    env = {"HOME": str(tmp_path / "home"), "XDG_CONFIG_HOME": None}
    hint = "start it: systemctl --user enable --now vinos-routined"
    res = cli("reload", env=env)
    assert res.returncode == 1 and hint in res.stderr
    assert hint in cli("status", env=env).stdout


def test_status_names_what_keeps_enabled_routines_from_working(cli: Cli) -> None:
    cli.agent("notes")  # route anthropic: needs a key
    assert cli("enable", "notes").returncode == 0
    res = cli("status")
    assert "no Anthropic API key (needed by notes)" in res.stdout
    assert f"{cli.home}/secrets/anthropic-key (chmod 600)" in res.stdout
    key = cli.home / "secrets" / "anthropic-key"
    key.parent.mkdir()
    key.write_text("sk-test\n")
    key.chmod(0o644)
    assert f"chmod 600 {key}" in cli("status").stdout
    key.chmod(0o600)
    problems = json.loads(cli("status", "--json").stdout)["problems"]
    assert problems == []
    # Ollama at an address where nothing listens: the URL tried is named.
    (cli.routines / "config.toml").write_text('ollama_url = "http://127.0.0.1:9"\n')
    cli.write("local", cli.agent("local").read_text().replace('"anthropic"', '"ollama"'))
    assert cli("enable", "local").returncode == 0
    res = cli("status")
    assert "Ollama is not reachable at http://127.0.0.1:9" in res.stdout
    assert "needed by local" in res.stdout


def test_tables_are_aligned(cli: Cli) -> None:
    cli.agent("a")
    cli.agent("a-much-longer-name", cron="30 7 * * 1-5")
    lines = cli("list").stdout.splitlines()
    header = lines[0]
    for column in ("KIND", "STATE", "SCHEDULE", "NEXT"):
        start = header.index(column)
        for line in lines[1:3]:
            assert line[start - 2 : start] == "  " and line[start] != " ", (column, line)


def test_colour_on_a_terminal_only_and_never_with_no_color(cli: Cli, on_pty: OnPty) -> None:
    cli.agent("notes")
    cli("enable", "notes")
    run = on_pty("list")
    assert run.wait() == 0
    assert "\x1b[32mon\x1b[0m" in run.text
    run = on_pty("list", env={"NO_COLOR": "1"})
    assert run.wait() == 0
    assert "\x1b[" not in run.text and " on " in run.text
    assert "\x1b[" not in cli("list").stdout


def test_next_runs_read_relative_and_absolute(cli: Cli) -> None:
    cli.agent("evening", cron="0 17 * * *")  # it is 12:xx in the test's zone
    assert cli("enable", "evening").returncode == 0
    out = cli("list").stdout
    assert re.search(r"in 4h( \d+m)? \(17:00\)", out), out


def test_presentation_helpers() -> None:
    now = datetime(2026, 12, 2, 3, 47, tzinfo=UTC)
    assert relative(timedelta(hours=2, minutes=13)) == "2h 13m"
    assert relative(timedelta(days=3, hours=4)) == "3d 4h"
    assert relative(timedelta(seconds=-45)) == "45s ago"
    assert when(now + timedelta(hours=2, minutes=13), now).startswith("in 2h 13m (")
    local = now.astimezone()
    assert clock(now + timedelta(hours=23), now) == (local + timedelta(hours=23)).strftime("%H:%M")
    assert clock(now + timedelta(days=2), now) == (local + timedelta(days=2)).strftime("%a %H:%M")
    assert clock(now + timedelta(days=9), now).endswith(
        (local + timedelta(days=9)).strftime("%b %H:%M")
    )
    assert money(0.04) == "$0.04" and money(0.0031) == "$0.0031" and money(0) == "$0.00"
    assert money(1234.5) == "$1,234.50"
    assert tokens(950) == "950" and tokens(12_345) == "12.3k" and tokens(2_000_000) == "2M"
    assert bar(1, 1, 10) == "█" * 10 and bar(0.05, 1, 10) == "▌" and bar(0, 1, 10) == ""
    assert bar(0.001, 1, 10) == "▏", "a non-zero value is never invisible"
    assert visible("a\tb\nc \x1b[2K \u202e 👨\u200d👩") == "a\tb\nc \\x1b[2K \\u202e 👨\\u200d👩"
    # What `run` and `logs` print of a model's tool output.
    assert format_event("tool_result", "x\x1b]52;c;Zg==\x07", False) == "  x\\x1b]52;c;Zg==\\x07"


def test_table_counts_colour_and_wide_characters(capsys: pytest.CaptureFixture[str]) -> None:
    table(["NAME", "N"], [["\x1b[31mred\x1b[0m", "1"], ["日本", "10"]], right={1})
    lines = capsys.readouterr().out.splitlines()
    # "red" is 3 columns wide, "日本" 4: the column is 4 wide; numbers align right.
    assert lines == ["NAME   N", "\x1b[31mred\x1b[0m    1", "日本  10"]


# -- desktop files -------------------------------------------------------------------------


def jsonc(text: str) -> dict[str, object]:
    """JSON with // comments (waybar's config format); no // inside strings here but URLs."""
    stripped = re.sub(r'^\s*//.*$|(?<=[,{\["\d])\s*//[^"\n]*$', "", text, flags=re.MULTILINE)
    data: dict[str, object] = json.loads(stripped)
    return data


def test_the_waybar_example_runs_the_waybar_status(cli: Cli) -> None:
    module = jsonc((WAYBAR / "vinos-routine.jsonc").read_text())["custom/vinos-routine"]
    assert isinstance(module, dict)
    # One long-lived process the daemon pushes each change to: no "interval", no polling.
    assert module["exec"] == "vinos-routine status --waybar --follow"
    assert "interval" not in module
    assert module["return-type"] == "json"
    css = (WAYBAR / "vinos-routine.css").read_text()
    for state in ("ok", "warning", "attention", "critical"):
        assert f"#custom-vinos-routine.{state}" in css
    menu = (WAYBAR / "vinos-routine-menu.xml").read_text()
    ids = set(re.findall(r'class="GtkMenuItem" id="([^"]+)"', menu))
    assert ids and ids <= set(module["menu-actions"])


def test_the_launcher_entry_opens_the_brief(cli: Cli) -> None:
    entry = configparser.ConfigParser(interpolation=None)
    entry.optionxform = str  # type: ignore[assignment,method-assign]
    entry.read(WAYBAR / "vinos-brief.desktop")
    main = entry["Desktop Entry"]
    assert main["Type"] == "Application" and main["Terminal"] == "false"
    # Run its Exec line as a launcher would (no terminal), vinos-routine being this CLI.
    cli.fake("vinos-routine", f'#!/bin/sh\nexec {sys.executable} -m supervisor "$@"\n')
    calls = cli.recorder("xdg-open")
    out = cli.state / "notes"
    out.mkdir(parents=True)
    (out / datetime.now(cli.tz).strftime("%Y-%m-%d-0600.md")).write_text("# Notes\n\nhello\n")
    import subprocess

    argv = shlex.split(main["Exec"])
    assert argv[0] == "vinos-routine"
    res = subprocess.run(
        [str(cli.bin / argv[0]), *argv[1:]],
        env=cli.environ(),
        capture_output=True,
        text=True,
        check=False,
        stdin=subprocess.DEVNULL,
    )
    assert res.returncode == 0, res.stderr
    opened = Path(json.loads(calls.read_text().splitlines()[0])[0])
    assert "hello" in opened.read_text()
    assert shlex.split(entry["Desktop Action unseen"]["Exec"])[1:] == [
        "brief",
        "--unseen",
        "--open",
    ]


def test_a_broken_ledger_says_what_to_do_not_a_traceback(cli: Cli) -> None:
    cli.state.mkdir(parents=True)
    (cli.state / "ledger.db").write_bytes(b"not a database" * 100)
    for argv in (["cost"], ["list"], ["brief"], ["history", "x"]):
        res = cli(*argv)
        assert res.returncode == 1, argv
        assert "Traceback" not in res.stderr
        assert "the ledger is damaged (PRAGMA quick_check fails" in res.stderr, res.stderr
        assert "Move it aside" in res.stderr


def test_a_run_line_is_coloured_by_its_status_never_by_words_in_its_text() -> None:
    red = "\x1b[31m"
    # An ok run whose summary says "no failed logins" is not red (it was, by substring).
    ok = format_event("status", "ok · done: no failed logins", True, status="ok")
    assert red not in ok
    assert red not in format_event("end", "ok: 0 timeout errors", True, status="ok")
    for status in ("failed", "timeout", "interrupted"):
        assert red in format_event("status", f"{status}: exit 1", True, status=status)
        assert red in format_event("end", "anything", True, status=status)
    # A status that is not text (a damaged log line) is simply not red.
    assert red not in format_event("end", "failed", True, status=["failed"])


def test_run_and_enable_of_an_invalid_routine_name_its_errors(cli: Cli) -> None:
    cli.write("broken", "[routine]\nnope = 1\n")
    for argv, said in (
        (("run", "broken", "--no-daemon"), "broken is invalid:\n"),
        (("enable", "broken"), "broken is invalid; fix it first:\n"),
    ):
        res = cli(*argv)
        assert res.returncode == 1, res
        assert said in res.stderr and "nope" in res.stderr
    res = cli("run", "no-such-routine", "--no-daemon")
    assert res.returncode == 1 and "no-such-routine" in res.stderr
