"""The thin client (supervisor/cli/thinclient.py, supervisor/control/answers.py): `list`, `status`,
`history` and `cost` asked of a real daemon print, byte for byte, what the same command
prints run in-process, and the client's start-up imports almost nothing."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from routines.ledger import Ledger
from routines.runs import Outcome, RunEnd, RunStatus, Trigger
from routines.spec.paths import paths
from supervisor.cli.thinclient import parse
from tests.supervisor.daemonkit import REPO, DaemonProcess, command_routine, write_routine

# Exit 99: the daemon did not answer, so the thin path was not the one measured.
THIN = (
    "import sys\nfrom supervisor.cli.thinclient import thin\n"
    "code = thin(sys.argv[1:])\nsys.exit(99 if code is None else code)\n"
)
IN_PROCESS = "import sys\nfrom supervisor.cli.main import main\nsys.exit(main(sys.argv[1:]))\n"

VERBS = [
    ("list",),
    ("list", "--json"),
    ("status",),
    ("status", "--json"),
    ("status", "--waybar"),
    ("history", "spender"),
    ("history", "spender", "--json"),
    ("history", "spender", "-n", "1"),
    ("history", "never-ran"),
    ("history", "nobody"),  # an unknown routine: the error on stderr, exit 1
    ("cost",),
    ("cost", "--json"),
    ("cost", "--week"),
    ("cost", "--days", "3", "--json"),
]


def _run(code: str, args: tuple[str, ...], env: dict[str, str]) -> tuple[int, str, str]:
    done = subprocess.run(
        [sys.executable, "-c", code, *args],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    out = done.stdout
    if args[:2] == ("status", "--json"):
        # The daemon's clock at the moment of asking: the one field two askings never share.
        st = json.loads(out)
        st.pop("now")
        out = json.dumps(st)
    return done.returncode, out, done.stderr


def _populate() -> None:
    write_routine("spender", command_routine("true", schedule='cron = "0 3 * * *"'))
    write_routine("never-ran", command_routine("true", schedule='cron = "30 4 * * 1"'))
    write_routine("broken", "[routine]\nkind = 'command'\n[schedule]\ncron = 'nope'\n")
    write_routine("off", command_routine("true", schedule='every = "2h"', enabled=False))
    now = datetime.now(UTC)
    with Ledger(paths().ledger) as led:
        for i, status in enumerate((RunStatus.OK, RunStatus.FAILED, RunStatus.OK)):
            at = now - timedelta(hours=3 - i)
            led.record_run(
                "spender", run_id=f"r{i}", trigger=Trigger.MANUAL, status=RunStatus.RUNNING, now=at
            )
            outcome = Outcome.DONE if status == RunStatus.OK else None
            end = RunEnd(status=status, outcome=outcome, dollars=0.25 * (i + 1))
            led.finish_run(f"r{i}", now=at + timedelta(seconds=5), end=end)


@pytest.mark.slow  # a real daemon
def test_each_verb_prints_the_same_bytes_from_the_daemon_as_in_process(
    tmp_path: Path, not_root: None
) -> None:
    _populate()
    d = DaemonProcess(tmp_path).start()
    try:
        env = {**d.env, "NO_COLOR": "", "VINOS_ROUTINE_DEBUG": "1"}
        for args in VERBS:
            # Relative times ("in 2h 13m") change at a minute's turn: the in-process output
            # before and after the thin one agree unless one turned in between; then again.
            for _ in range(3):
                before = _run(IN_PROCESS, args, env)
                thin = _run(THIN, args, env)
                after = _run(IN_PROCESS, args, env)
                if before == after:
                    break
            assert thin[0] != 99, f"{args}: the daemon did not answer: {thin[2]}"
            assert thin == before, args
        assert _run(THIN, ("history", "spender"), env)[1].count("\n") == 4  # header + 3 runs
    finally:
        d.stop()


@pytest.mark.slow  # a real daemon
def test_the_thin_path_loads_no_parser_toml_sqlite_or_dataclasses(
    tmp_path: Path, not_root: None
) -> None:
    _populate()
    d = DaemonProcess(tmp_path).start()
    try:
        # What the interpreter loaded before (a development install's import hook brings
        # pathlib and re with it; an installed package does not) is not the client's.
        code = "import sys\nbefore = set(sys.modules)\n" + THIN.replace(
            "sys.exit(", "print(' '.join(set(sys.modules) - before), file=sys.stderr)\nsys.exit("
        )
        done = subprocess.run(
            [sys.executable, "-c", code, "list"],
            cwd=REPO,
            env=d.env,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert done.returncode == 0, done.stderr
        assert "spender" in done.stdout
        loaded = set(done.stderr.split())
        heavy = {"argparse", "tomllib", "sqlite3", "dataclasses", "pathlib", "enum", "socket"}
        assert loaded & heavy == set()
        assert {m for m in loaded if m.split(".")[0] in ("routines", "ipc", "orjson")} == set()
        assert "supervisor.cli.main" not in loaded
    finally:
        d.stop()


@pytest.mark.slow  # a real daemon
def test_what_the_daemon_cannot_reproduce_runs_in_process(tmp_path: Path, not_root: None) -> None:
    _populate()
    d = DaemonProcess(tmp_path).start()
    try:
        other_zone = {**d.env, "TZ": "Asia/Tokyo" if d.env.get("TZ") != "Asia/Tokyo" else "UTC"}
        assert _run(THIN, ("list",), other_zone)[0] == 99  # times print in the client's zone
        assert _run(THIN, ("list",), d.env)[0] == 0
        # A bad value is the full parser's to report, in argparse's words.
        assert _run(THIN, ("cost", "--days", "0"), d.env)[0] == 99
        done = subprocess.run(
            [sys.executable, "-m", "supervisor", "cost", "--days", "0"],
            env=d.env,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert done.returncode == 2 and "--days" in done.stderr
    finally:
        d.stop()


def test_without_a_daemon_the_client_stats_one_file_and_goes_in_process(vinos_env: Path) -> None:
    code = (
        "import sys\nfrom supervisor.cli.thinclient import thin\nassert thin(['list']) is None\n"
        "assert '_socket' not in sys.modules and 'json' not in sys.modules\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code],
        cwd=REPO,
        env=dict(os.environ),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["list"], ("list", {})),
        (["list", "--json"], ("list", {"json": True})),
        (["status", "--waybar"], ("status", {"waybar": True})),
        (["history", "a", "-n", "5", "--json"], ("history", {"name": "a", "n": 5, "json": True})),
        (["history", "a", "-n7"], ("history", {"name": "a", "n": 7})),
        (["cost", "--week", "--json"], ("cost", {"period": "week", "json": True})),
        (["cost", "--month"], ("cost", {"month": "month:this"})),
        (["cost", "--month", "2026-01"], ("cost", {"month": "2026-01"})),
        (["cost", "--days", "30"], ("cost", {"days": "30"})),
    ],
)
def test_the_client_parses_what_it_sends(argv: list[str], expected: object) -> None:
    assert parse(argv) == expected


@pytest.mark.parametrize(
    "argv",
    [
        [],
        ["run", "a"],
        ["list", "--help"],
        ["list", "--js"],  # an abbreviation argparse would accept: argparse decides
        ["status", "--json", "--waybar"],  # mutually exclusive: argparse says so
        ["history"],
        ["history", "a", "b"],
        ["history", "a", "--thread", "r1"],
        ["history", "a", "-n", "x"],
        ["history", "a", "-n", "-3"],
        ["cost", "--week", "--today"],
        ["cost", "--days"],
    ],
)
def test_what_the_client_does_not_parse_exactly_goes_to_the_full_parser(argv: list[str]) -> None:
    assert parse(argv) is None


def _next_line(proc: subprocess.Popen[bytes], timeout: float = 30) -> dict[str, object]:
    """The follower's next JSON line, waited for up to `timeout` seconds."""
    import select

    assert proc.stdout is not None
    ready, _, _ = select.select([proc.stdout], [], [], timeout)
    assert ready, "no line from the follower"
    line = proc.stdout.readline()
    assert line, "the follower ended"
    value: dict[str, object] = json.loads(line)
    return value


@pytest.mark.slow  # real daemons, a long-lived follower
def test_waybar_follow_gets_each_change_pushed_and_survives_a_restart(
    tmp_path: Path, not_root: None
) -> None:
    _populate()
    d = DaemonProcess(tmp_path).start()
    follower = subprocess.Popen(
        [sys.executable, "-m", "supervisor", "status", "--waybar", "--follow"],
        cwd=REPO,
        env=d.env,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
    )
    try:
        first = _next_line(follower)
        assert "2 routines" in str(first["text"])
        # What `status --waybar` prints now, in-process, is what was pushed.
        once = subprocess.run(
            [sys.executable, "-c", IN_PROCESS, "status", "--waybar"],
            cwd=REPO,
            env=d.env,
            capture_output=True,
            timeout=60,
            check=False,
        )
        assert json.loads(once.stdout) == first
        write_routine("added", command_routine("true", schedule='cron = "0 5 * * *"'))
        assert "3 routines" in str(_next_line(follower)["text"])  # pushed, not polled
        d.stop()
        assert _next_line(follower)["alt"] == "down"
        d2 = DaemonProcess(tmp_path).start()
        try:
            assert "3 routines" in str(_next_line(follower)["text"])  # connected again
        finally:
            d2.stop()
    finally:
        follower.kill()
        follower.wait(10)
        if d.proc is not None and d.proc.poll() is None:
            d.stop()


def test_a_read_never_starts_a_stopped_daemon(
    vinos_env: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With socket activation the control socket listens while the daemon is stopped, and
    the first connect starts it (a person's `systemctl --user stop` undone by a `list`, or by
    the waybar follower retrying every 2 s). No daemon holds the lock: nothing connects."""
    import socket

    from supervisor.cli import daemonsock, thinclient, waybarfollow

    monkeypatch.setenv("VINOS_CONTROL_TIMEOUT_SEC", "2")
    sock_path = paths().control_socket
    sock_path.parent.mkdir(parents=True, exist_ok=True)
    paths().daemon_lock.touch()  # a lock file left by a daemon that stopped
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as listener:
        listener.bind(str(sock_path))
        listener.listen(8)
        listener.setblocking(False)
        assert thinclient.thin(["list"]) is None
        assert not daemonsock.daemon_running(str(sock_path))
        monkeypatch.setattr(waybarfollow, "RETRY_SEC", 0)
        lines: list[bytes] = []

        class Seen(Exception):
            """The first line is enough: stop the follower's endless loop."""

        def write(line: bytes) -> None:
            lines.append(line)
            raise Seen

        monkeypatch.setattr(waybarfollow, "_write", write)
        with pytest.raises(Seen):
            waybarfollow.follow()
        assert b'"alt":"down"' in lines[0]
        with pytest.raises(BlockingIOError):
            listener.accept()  # nobody connected: the stopped daemon was never activated
