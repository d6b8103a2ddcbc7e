"""`vinos-routine sandbox NAME -- CMD` through a real daemon's warm forkserver
(supervisor/control/sandboxsock.py) against the same call without a daemon (the exec path):
the same output and exit status, the caller's environment and not the daemon's, signals of
the client reaching the sandbox, nothing left once the client is gone, and no other user.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from supervisor.control.sandboxsock import SOCKET_NAME
from tests.dashboard.squatkit import SecondUser
from tests.supervisor.daemonkit import (
    DaemonProcess,
    command_routine,
    processes_with_cmdline,
    reap_daemons,
    wait_for,
    write_routine,
)

pytestmark = pytest.mark.slow  # real daemons and sandboxes

REPO = Path(__file__).resolve().parents[2]
# As a shell starts a foreground job: ^C's default disposition, whatever the test runner's is
# (a runner under a shell's background job inherits it ignored), then the interpreter.
_FOREGROUND = [
    sys.executable,
    "-c",
    "import os, signal, sys; signal.signal(signal.SIGINT, signal.SIG_DFL); "
    "os.execv(sys.executable, [sys.executable, *sys.argv[1:]])",
]


@pytest.fixture
def daemon(tmp_path: Path, not_root: None) -> Iterator[DaemonProcess]:
    write_routine("probe", command_routine("true", enabled=False))
    d = DaemonProcess(tmp_path, extra_env={"TERM": "daemon-term", "X": "daemon"}).start()
    wait_for(lambda: "forkserver up" in d.log(), what="the forkserver up")
    yield d
    try:
        d.stop()
    finally:
        reap_daemons()


def _env(daemon: DaemonProcess | None) -> dict[str, str]:
    env = dict(os.environ, PYTHONPATH=str(REPO), TERM="client-term", X="client")
    if daemon is not None:
        env["VINOS_DEBUG_TIMINGS"] = daemon.env["VINOS_DEBUG_TIMINGS"]
    return env


def _sandbox(daemon: DaemonProcess | None, *words: str, stdin: str = "") -> tuple[str, str, int]:
    done = subprocess.run(
        [sys.executable, "-m", "supervisor", "sandbox", "probe", "--", *words],
        check=False,
        env=_env(daemon),
        input=stdin,
        capture_output=True,
        text=True,
        timeout=60,
    )
    return done.stdout, done.stderr, done.returncode


def _calls(daemon: DaemonProcess) -> int:
    return daemon.log().count("sandbox probe: forked as pid")


def _fallback(tmp_path: Path, *words: str, stdin: str = "") -> tuple[str, str, int]:
    write_routine("probe", command_routine("true", enabled=False))
    assert not (Path(os.environ["XDG_RUNTIME_DIR"]) / "vinos-routine" / SOCKET_NAME).exists()
    return _sandbox(None, *words, stdin=stdin)


def test_a_call_through_the_daemon_prints_and_exits_as_without_one(
    tmp_path: Path, not_root: None
) -> None:
    # The sandbox's TERM is the caller's (sandbox/policy.py takes it from sandboxcli's
    # environment), never the daemon's; X, like every other variable, stays out of it.
    words = ("sh", "-c", "'echo \"$TERM [$X]\"; exit 3'")
    alone = _fallback(tmp_path, *words)
    assert alone[0] == "client-term []\n" and alone[2] == 3, alone
    d = DaemonProcess(tmp_path, extra_env={"TERM": "daemon-term", "X": "daemon"}).start()
    try:
        wait_for(lambda: "forkserver up" in d.log(), what="the forkserver up")
        warm = _sandbox(d, *words)
        assert _calls(d) == 1, d.log()
        assert warm == alone
    finally:
        d.stop()
        reap_daemons()


def test_stdin_reaches_the_call_as_without_a_daemon(tmp_path: Path, not_root: None) -> None:
    # sandboxcli runs the command as the shell tool does, whose stdin is empty
    # (sandbox/runner.py): the client's stdin goes to sandboxcli, which gives the command none.
    alone = _fallback(tmp_path, "cat; echo end", stdin="hello\n")
    d = DaemonProcess(tmp_path).start()
    try:
        wait_for(lambda: "forkserver up" in d.log(), what="the forkserver up")
        warm = _sandbox(d, "cat; echo end", stdin="hello\n")
        assert _calls(d) == 1, d.log()
        assert warm == alone == ("end\n", "", 0)
    finally:
        d.stop()
        reap_daemons()


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM, signal.SIGKILL])
@pytest.mark.parametrize("through", ["daemon", "exec"])
def test_a_signal_to_the_client_ends_the_sandbox(
    tmp_path: Path, not_root: None, sig: signal.Signals, through: str
) -> None:
    write_routine("probe", command_routine("true", enabled=False))
    d: DaemonProcess | None = None
    if through == "daemon":
        d = DaemonProcess(tmp_path).start()
        wait_for(lambda: "forkserver up" in d.log(), what="the forkserver up")
    marker = f"sleep {4000 + os.getpid() % 1000}"
    try:
        client = subprocess.Popen(
            [*_FOREGROUND, "-m", "supervisor", "sandbox", "probe", "--", marker],
            env=_env(d),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        # The command itself, not bwrap still setting up (a parent killed before bwrap's
        # PR_SET_PDEATHSIG leaves it behind: a window of the exec path, not what is tested).
        wait_for(
            lambda: any(p.info["cmdline"][:1] == ["sleep"] for p in _sandboxed(marker)),
            what="the sandbox running",
        )
        sleeping = _sandboxed(marker)
        client.send_signal(sig)
        _, err = client.communicate(timeout=30)
        # The client dies of the signal, as the exec'd interpreter does without a daemon.
        assert client.returncode == -sig, err
        psutil.wait_procs(sleeping, timeout=15)
        assert not _sandboxed(marker)
        if d is not None:
            assert _calls(d) == 1, d.log()
            # Nothing of the call is left under the forkserver either.
            wait_for(lambda: "worker.sandboxcli" not in _tree(d), what="the call gone")
    finally:
        if d is not None:
            d.stop()
            reap_daemons()


def _sandboxed(marker: str) -> list[psutil.Process]:
    """The sandbox's processes running `marker` (not the client, nor sandboxcli, whose command
    lines name it too)."""
    return [
        p
        for p in processes_with_cmdline(marker)
        if not any(w in " ".join(p.info["cmdline"]) for w in ("supervisor", "sandboxcli"))
    ]


def _tree(d: DaemonProcess) -> str:
    out = []
    for p in psutil.Process(d.pid).children(recursive=True):
        try:
            out.append(" ".join(p.cmdline()))
        except psutil.Error:
            continue
    return "\n".join(out)


def test_another_user_cannot_call_the_sandbox_socket(
    daemon: DaemonProcess, second_user: SecondUser
) -> None:
    # The socket file is 0600 in a 0700 directory; opened up here as a lax runtime dir
    # would be, the daemon's SO_PEERCRED check is what is left, and it answers nothing.
    runtime = daemon.paths.runtime_dir
    sock = runtime / SOCKET_NAME
    assert sock.stat().st_mode & 0o777 == 0o600
    for folder in (runtime.parent, runtime):
        folder.chmod(0o711)
    sock.chmod(0o666)
    request = {
        "name": "probe",
        "argv": False,
        "words": ["touch", "/tmp/pwned"],
        "env": {"PATH": "/usr/bin:/bin"},
        "rlimits": [],
    }
    got = second_user.call(sock, json.dumps(request))
    assert got["connected"] is True, got
    assert got["received"] == "", got
    assert "sandbox probe: forked" not in daemon.log()
    # And the daemon serves its own user still.
    assert _sandbox(daemon, "echo", "ok")[0] == "ok\n"
