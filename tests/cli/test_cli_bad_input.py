"""No traceback for any bad input, anywhere in the CLI: every argument of every command, read
from the argparse parsers themselves (a new command or option is walked without being listed
here), gets each kind of bad value a person or a script can type, and the CLI answers with a
short error and a non-zero exit, never a traceback.

Real CLI in-process (tests/cli/inprocess.py), a real VINOS_HOME with one valid routine, real
files (missing, unreadable, bad TOML, non-UTF-8), no daemon.
"""

from __future__ import annotations

import argparse
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from supervisor.cli.main import build_parser
from tests.cli.cli_helpers import COMMAND, Cli

HUGE = "x" * 100_000
GOOD_ROUTINE = COMMAND.format(
    description="echo", cron="0 7 * * *", zone="UTC", run="echo hi", notify="false",
    on_login="false",
)  # fmt: skip
NOT_UTF8 = "caf\udce9"  # b"caf\xe9" as Python hands a non-UTF-8 argv to the program


@dataclass(frozen=True)
class Slot:
    """One value-taking argument of one command."""

    command: tuple[str, ...]  # ("schedule", "explain")
    dest: str
    option: str | None  # "--tz"; None: a positional
    nargs: object

    @property
    def id(self) -> str:
        return f"{' '.join(self.command)} {self.option or self.dest.upper()}"


def slots(parser: argparse.ArgumentParser, prefix: tuple[str, ...] = ()) -> Iterator[Slot]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from slots(sub, (*prefix, name))
        elif action.nargs != 0 and action.dest != argparse.SUPPRESS:
            option = max(action.option_strings, key=len) if action.option_strings else None
            yield Slot(prefix, action.dest, option, action.nargs)


ALL = list(slots(build_parser()))

# A positional the slot under test needs beside it, filled with a good value so that the bad
# value is the one the command trips on.
GOOD = {
    "name": "good",
    "cron": "0 7 * * *",
    "id": "1",
    "run_id": "1",
    "text": "hello",
    "command": "true",
    "source": "good",
    "pubkey": "me.pub",  # the `home` fixture's public key, in the cwd (VINOS_HOME)
}
# A command whose fill is not the one above: `create` makes a new routine.
GOOD_FOR = {("create", "name"): "fresh"}

# Bad values that are good ones for a slot: a name that may be new (create makes it), text that
# may be anything (a reason, a reply, a signer's name), a command line to run in the sandbox.
# Each is a value the command rightly accepts: it may exit 0, but never with a traceback.
ACCEPTED = {
    ("create NAME", "no-such-routine"),
    ("create NAME", "2026-13-45"),
    ("create NAME", "9" * 30),
    ("deny --why", "*"),
    ("fire --input", "*"),
    ("reply TEXT", "*"),
    ("sandbox COMMAND", "*"),
    ("trust --as", "*"),
}
# Slots whose command stops at a precondition before it reads the value: the message is that
# precondition's (still one clear error, and no traceback), so it need not name the value.
PRECONDITION = {
    "fleet leave MACHINE": "no fleet is configured in this home",
    "sandbox NAME": "-5 reaches the worker's own parser as an option, which prints its usage",
}


def bad_values(tmp: Path) -> dict[str, str]:
    missing = tmp / "missing.toml"
    unreadable = tmp / "unreadable.toml"
    unreadable.write_text(GOOD_ROUTINE)
    unreadable.chmod(0)
    bad_toml = tmp / "bad.toml"
    bad_toml.write_text("[routine\nkind = \n")
    latin1 = tmp / "latin1.toml"
    latin1.write_bytes(b'[routine]\ndescription = "caf\xe9"\n')
    return {
        "zone": "Mars/Olympus",
        "date": "2026-13-45",
        "missing file": str(missing),
        "unreadable file": str(unreadable),
        "bad TOML": str(bad_toml),
        "non-UTF-8 file": str(latin1),
        "unknown name": "no-such-routine",
        "huge": HUGE,
        "too long for a file name": "y" * 300,
        "huge number": "9" * 30,
        "non-UTF-8": NOT_UTF8,
        "negative": "-5",
    }


def argv(slot: Slot, value: str) -> list[str]:
    positionals = [
        a
        for a in _parser_of(slot.command)._actions
        if not a.option_strings and a.nargs not in (0, argparse.PARSER)
        and not isinstance(a, argparse._SubParsersAction)
    ]  # fmt: skip
    out = list(slot.command)
    tail: list[str] = []
    for a in positionals:
        if a.dest == slot.dest and slot.option is None:
            word = [value]
        elif a.nargs in ("?", "*") and not (
            slot.command == ("schedule", "explain") and slot.dest not in ("oncalendar", "every")
        ):
            word = []  # optional: left out (`explain --every X` takes no CRON beside it)
        else:
            word = [GOOD_FOR.get((slot.command[0], a.dest), GOOD[a.dest])]
        if a.nargs == argparse.REMAINDER:
            tail = ["--", *word]
        else:
            out += word
    if slot.option is not None:
        out += [slot.option, value] if not value.startswith("-") else [f"{slot.option}={value}"]
    return out + tail


def _parser_of(command: tuple[str, ...]) -> argparse.ArgumentParser:
    parser = build_parser()
    for word in command:
        sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
        parser = sub.choices[word]
    return parser


@pytest.fixture
def home(cli: Cli) -> Cli:
    cli.routines.mkdir(parents=True, exist_ok=True)
    (cli.routines / "good.toml").write_text(GOOD_ROUTINE)
    key = cli.home / "me"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(key)], check=True)
    # The gallery is a closed port here: `install` must fail fast and say so, not hang.
    (cli.routines / "config.toml").write_text('gallery_url = "http://127.0.0.1:9/"\n')
    return cli


def test_the_walk_reaches_every_command_and_known_option() -> None:
    # The parsers are walked, not a list: if this breaks, `slots` lost its way in argparse.
    ids = {s.id for s in ALL}
    for expected in ("schedule explain --tz", "schedule explain --from", "brief --date",
                     "cost --month", "validate PATHS", "install SOURCE", "trust PUBKEY",
                     "fleet leave MACHINE", "sandbox COMMAND"):  # fmt: skip
        assert expected in ids
    assert len(ALL) >= 38


@pytest.mark.parametrize("slot", ALL, ids=lambda s: s.id)
def test_every_argument_refuses_every_bad_value_in_one_line_without_a_traceback(
    home: Cli, tmp_path: Path, slot: Slot
) -> None:
    failures = []
    for kind, value in bad_values(tmp_path).items():
        args = argv(slot, value)
        env = {"EDITOR": "true", "VISUAL": None}
        # `sandbox` execs bwrap: a process of its own (inprocess.py refuses an exec).
        res = (home.spawn if slot.command == ("sandbox",) else home)(*args, env=env)
        shown = " ".join(a if len(a) < 60 else a[:20] + "…" for a in args)
        accepted = (slot.id, value) in ACCEPTED or (slot.id, "*") in ACCEPTED
        if accepted:
            problem = "a traceback" if "Traceback" in res.stdout + res.stderr else None
        else:
            problem = verdict(res.returncode, res.stdout, res.stderr)
            if problem is None and slot.id not in PRECONDITION:
                problem = unnamed(value, res.stderr + res.stdout)
        if problem:
            said = "\n".join(ln[:300] for ln in (res.stderr or res.stdout).splitlines()[-8:])
            report = f"{kind}: `{shown}`: {problem}\n{said}"
            failures.append(report.encode("utf-8", "backslashreplace").decode())
    assert not failures, "\n\n".join(failures)


def verdict(code: int, out: str, err: str) -> str | None:
    """What is wrong with how the CLI answered a bad value (None: nothing)."""
    if "Traceback" in out + err:
        return "a traceback"
    if code == 0:
        return "exit status 0"
    # The message: on stderr, or on stdout for a report (`validate` prints each file's verdict).
    said = err if err.strip() else out
    lines = [ln for ln in said.splitlines() if ln.strip() and not ln.startswith(("usage:", " "))]
    if not lines:
        return "no error message"
    if any(len(ln) > 1000 for ln in err.splitlines() + out.splitlines()):
        return "a line over 1000 characters (the huge value echoed back whole?)"
    return None


def commands(
    parser: argparse.ArgumentParser, prefix: tuple[str, ...] = ()
) -> Iterator[tuple[str, ...]]:
    """Every command, as the words that name it (a group's subcommands, not the group)."""
    subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    if not subs:
        yield prefix
        return
    for name, sub in subs[0].choices.items():
        yield from commands(sub, (*prefix, name))


# What serves until stopped (the dashboard serves on a broken config: it reads none of it).
# Their own tests start them (tests/supervisor/, tests/dashboard/, test_cli_mcp_server.py).
SERVERS = {("daemon",), ("dashboard",), ("mcp",)}


def good_argv(command: tuple[str, ...]) -> list[str]:
    """The command with a good value in each required positional."""
    out = list(command)
    tail: list[str] = []
    for a in _parser_of(command)._actions:
        if a.option_strings or a.nargs in ("?", "*") or a.dest == "help":
            continue
        if a.nargs == argparse.REMAINDER:
            tail = ["--", GOOD[a.dest]]
        else:
            out.append(GOOD[a.dest])
    return out + tail


BROKEN = {
    "bad TOML": b"[sandbox\nbwrap = \n",
    "non-UTF-8": b'gallery_url = "caf\xe9"\n',
    "a wrong type": b'keep_runs_days = "many"\n[sandbox]\nbwrap = 7\n',
}


# `sandbox` is a process of its own each time (it execs the worker): one broken kind will do.
CASES = [
    (command, broken)
    for command in commands(build_parser())
    if command not in SERVERS
    for broken in (*BROKEN, "unreadable")
    if command != ("sandbox",) or broken == "bad TOML"
]


@pytest.mark.parametrize(("command", "broken"), CASES, ids=[f"{' '.join(c)}-{b}" for c, b in CASES])
def test_every_command_on_a_broken_config_or_routine_file_answers_without_a_traceback(
    home: Cli, tmp_path: Path, command: tuple[str, ...], broken: str
) -> None:
    config = home.routines / "config.toml"
    if broken == "unreadable":
        config.chmod(0)
    else:
        config.write_bytes(BROKEN[broken])
    # Beside the good routine, one that is bad TOML and one that is not UTF-8.
    (home.routines / "broken.toml").write_bytes(b"[routine\n")
    (home.routines / "latin.toml").write_bytes(b'[routine]\ndescription = "caf\xe9"\n')
    env = {"EDITOR": "true", "VISUAL": None, "HOME": str(tmp_path)}
    args = good_argv(command)
    res = (home.spawn if command == ("sandbox",) else home)(*args, env=env)
    assert "Traceback" not in res.stdout + res.stderr, f"`{' '.join(args)}`:\n{res.stderr}"


def unnamed(value: str, said: str) -> str | None:
    """Whether the answer fails to name the bad value (its start, when it is long)."""
    from routines.safetext import shortened

    shown = shortened(value, 40)[:20]
    if shown in said or Path(value).name in said or value in said:
        return None
    return "the value is not named"
