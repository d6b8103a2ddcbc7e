"""The client of the read model (supervisor/cli/thinclient.py, supervisor/cli/reads.py): `list`
and `status` ask a real daemon for rows (data, never text) and render them here, printing what
the rows read here print; the quick path imports little, and a stopped daemon is never started."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from routines.ledger import Ledger
from routines.query import rowsnap
from routines.runs import Outcome, RunEnd, RunStatus, Trigger
from routines.spec import snapshot
from routines.spec.paths import paths
from tests.supervisor.daemonkit import REPO, DaemonProcess, command_routine, write_routine

# `list`/`status` as the console script runs them: rows asked of the daemon (exit 99 when it
# did not answer, so the daemon's rows were not the ones shown), or read here (LOCAL).
DAEMON = (
    "import sys\nfrom supervisor.cli import reads\n"
    "assert reads.request('list') is not None, 'the daemon did not answer'\n"
    "from supervisor.cli.thinclient import main\nsys.argv[0] = 'vinos-routine'\nsys.exit(main())\n"
)
LOCAL = (
    "import sys\nfrom supervisor.cli import daemonsock, thinclient\n"
    "daemonsock.ask = thinclient.ask = lambda *a, **k: None\nsys.exit(thinclient.main())\n"
)
IN_PROCESS = "import sys\nfrom supervisor.cli.main import main\nsys.exit(main(sys.argv[1:]))\n"


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
    if args == ("list", "--json"):
        # Only a daemon knows whether it runs an invalid file's last good version.
        rows = json.loads(out)
        for row in rows:
            row.pop("last_good_running", None)
        out = json.dumps(rows)
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
def test_the_daemons_rows_render_as_the_rows_read_here(tmp_path: Path, not_root: None) -> None:
    """The daemon answers rows, not text: rendered by the client in its own zone, they print
    what the rows it reads itself print, whatever the daemon's zone."""
    _populate()
    d = DaemonProcess(tmp_path).start()
    try:
        other = "Asia/Tokyo" if d.env.get("TZ") != "Asia/Tokyo" else "UTC"
        for env in ({**d.env, "NO_COLOR": ""}, {**d.env, "NO_COLOR": "", "TZ": other}):
            for args in (("list",), ("list", "--json")):
                # Relative times ("in 2h 13m") change at a minute's turn: the local output
                # before and after the daemon's agree unless one turned in between; then again.
                for _ in range(3):
                    before = _run(LOCAL, args, env)
                    answered = _run(DAEMON, args, env)
                    after = _run(LOCAL, args, env)
                    if before == after:
                        break
                assert "did not answer" not in answered[2], answered[2]
                assert answered == before, args
        st = json.loads(_run(DAEMON, ("status", "--json"), d.env)[1])
        assert st["daemon"] is True and isinstance(st["problems"], list)
        text = _run(DAEMON, ("status",), d.env)[1]
        assert text.startswith("daemon: running") and "invalid  broken" in text
    finally:
        d.stop()


@pytest.mark.slow  # a real daemon
def test_a_repeat_list_from_the_daemons_kept_rows_shows_each_ledger_write_at_once(
    tmp_path: Path, not_root: None
) -> None:
    """The daemon keeps the rows it answered (routines.query RowCache.keep) while its ledger
    does not move: a run another process recorded, and one the daemon ran and recorded itself
    (on its own connection: no data version moves), show in the very next `list`."""
    write_routine("spender", command_routine("true", schedule='cron = "0 3 * * *"'))
    write_routine("other", command_routine("true", schedule='cron = "0 4 * * *"'))
    d = DaemonProcess(tmp_path).start()
    try:

        def rows() -> dict[str, dict[str, object]]:
            code, out, err = _run(DAEMON, ("list", "--json"), d.env)
            assert code == 0, err
            return {r["name"]: r for r in json.loads(out)}

        first = rows()
        assert first == rows() and first["spender"]["last_status"] is None
        now = datetime.now(UTC)
        with Ledger(paths().ledger) as led:
            led.record_run(
                "spender", run_id="r1", trigger=Trigger.MANUAL, status=RunStatus.RUNNING, now=now
            )
            end = RunEnd(status=RunStatus.OK, outcome=Outcome.DONE, dollars=0.5)
            led.finish_run("r1", now=now, end=end)
        seen = rows()["spender"]
        assert (seen["last_status"], seen["today_dollars"]) == ("ok", 0.5)
        assert rows()["other"]["last_status"] is None
        code, _, err = _run(IN_PROCESS, ("run", "other"), d.env)
        assert code == 0, err
        assert rows()["other"]["last_status"] == "ok"
    finally:
        d.stop()


@pytest.mark.slow  # a real daemon
def test_a_list_answered_by_the_daemon_loads_no_parser_toml_sqlite_or_registry(
    tmp_path: Path, not_root: None
) -> None:
    _populate()
    d = DaemonProcess(tmp_path).start()
    try:
        # What the interpreter loaded before (a development install's import hook brings
        # pathlib and re with it; an installed package does not) is not the client's.
        code = "import sys\nbefore = set(sys.modules)\n" + DAEMON.replace(
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
        heavy = {"argparse", "tomllib", "sqlite3", "socket", "supervisor.cli.main"}
        assert loaded & heavy == set()
        # Nor typing, the json package or urllib: `list`'s 2.5x `python -c pass` has no room
        # for them (routines/query/rowclass.py, supervisor/cli/wirejson.py, routines.safetext).
        assert loaded & {"typing", "json", "urllib.parse", "ipaddress"} == set()
        assert {m for m in loaded if m.startswith(("routines.spec", "routines.ledger"))} == set()
        assert "supervisor.overview" not in loaded  # the rows came from the daemon
    finally:
        d.stop()


def test_without_a_daemon_the_client_stats_one_file_and_reads_itself(vinos_env: Path) -> None:
    code = (
        "import sys\nfrom supervisor.cli.daemonsock import ask\n"
        "assert ask('list', {}) is None\n"
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


# `list` as the full path reads it: every file parsed, no row snapshot (supervisor.overview
# `collect`), through argparse.
FULL = (
    "from supervisor import overview\n"
    "overview.list_rows = lambda now=None: overview.collect(now)\n" + IN_PROCESS
)


def test_without_a_daemon_list_skips_the_parser_and_prints_what_the_full_path_prints(
    vinos_env: Path,
) -> None:
    """The console script's `list` with no daemon reads the files itself (its row snapshot,
    routines/query/rowsnap.py) without argparse, and prints byte for byte what every file
    parsed anew prints: cold, then from the snapshot, then after an edit."""
    _populate()
    time.sleep(snapshot.RACY_NS / 1e9 + 0.1)  # the files settled: their rows may be kept
    env = {**os.environ, "NO_COLOR": ""}
    quick = "import sys\nfrom supervisor.cli.thinclient import main\nrc = main()\n" + (
        "assert 'argparse' not in sys.modules, 'the parser was loaded'\nsys.exit(rc)\n"
    )
    kept = paths().state_dir / rowsnap.FILE_NAME
    for step in ("cold", "kept", "edited"):
        if step == "edited":
            write_routine("off", command_routine("true", schedule='every = "3h"', enabled=False))
        for args in (("list",), ("list", "--json")):
            for _ in range(3):  # a minute's turn between the two changes "in 2h 13m"
                got = _run(quick, args, env)
                full = _run(FULL, args, env)
                if got == full:
                    break
            assert got == full, (step, args)
            assert got[0] == 0, got[2]
        assert kept.exists() or step == "edited"


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

    from supervisor.cli import daemonsock, waybarfollow

    monkeypatch.setenv("VINOS_CONTROL_TIMEOUT_SEC", "2")
    sock_path = paths().control_socket
    sock_path.parent.mkdir(parents=True, exist_ok=True)
    paths().daemon_lock.touch()  # a lock file left by a daemon that stopped
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as listener:
        listener.bind(str(sock_path))
        listener.listen(8)
        listener.setblocking(False)
        assert daemonsock.ask("list", {}) is None
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


@pytest.mark.slow  # a real daemon, 2,500 routine files
def test_a_list_longer_than_a_wire_line_comes_whole_in_batches(
    tmp_path: Path, not_root: None
) -> None:
    """2,500 rows are ~1.5 MB of JSON, over the 1 MiB a line may hold (ipc.MAX_LINE): the
    daemon sends them in ROWS batches and the client renders every one, from the daemon."""
    from ipc import MAX_LINE

    for i in range(2500):
        write_routine(f"r{i:04d}", command_routine("true", schedule='cron = "0 3 * * *"'))
    d = DaemonProcess(tmp_path).start()
    try:
        code, out, err = _run(DAEMON, ("list", "--json"), d.env)
        assert code == 0, err
        assert len(out.encode()) > MAX_LINE
        assert [r["name"] for r in json.loads(out)] == [f"r{i:04d}" for i in range(2500)]
    finally:
        d.stop()


def test_wire_json_reads_and_writes_what_json_does() -> None:
    """The quick client's JSON (supervisor/cli/wirejson.py: json's own C code, without the json
    package) reads what json.loads reads and writes what json.dumps writes, and refuses what
    json refuses."""
    from supervisor.cli import wirejson

    value = {
        "a": [1, -2.5, 1e300, None, True, False, 'é\n"\\\u202e', {"": []}],
        "big": 10**30,
        "path": "/usr/bin:/home/x y/ü",
    }
    text = json.dumps(value, separators=(",", ":"))
    assert wirejson.dumps(value) == text.encode()
    assert wirejson.loads(text.encode()) == json.loads(text) == value
    assert wirejson.loads(b' \n{"a": [1, 2] }\r\n') == {"a": [1, 2]}
    assert wirejson.loads(b"NaN") != wirejson.loads(b"NaN")  # as json.loads: a float nan
    for bad in (b"", b"{", b'{"a":1} x', b"[1,]", b'"\xff"', b"{'a': 1}", b'"\x01"'):
        with pytest.raises(ValueError):
            json.loads(bad)
        with pytest.raises(ValueError):
            wirejson.loads(bad)
    with pytest.raises(TypeError):
        wirejson.dumps({"a": object()})
