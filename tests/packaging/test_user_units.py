"""The systemd user units as installed: they pass `systemd-analyze verify --user`, keep the
contract the daemon relies on, and the daemon started through socket activation on the unit's
socket answers ping."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import struct
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from routines.spec.paths import paths
from supervisor.timings import Timings
from tests.packaging.archpkg import Installed, Pacman, require, run

# Slow: builds, installs and starts the package (make test-fast leaves these out). One xdist
# group, "archpkg": the package is built and installed once per worker (conftest.py's session
# fixtures), so its tests stay on one worker.
pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("archpkg")]

UNITS = (
    "vinos-routined.service",
    "vinos-routined.socket",
    "vinos-routine-dashboard.service",
    "vinos-routine-dashboard.socket",
)
USER_UNIT_DIR = "usr/lib/systemd/user"
WAIT = 60.0  # a bound on waits for events that must happen, never a speed assertion


def parse_unit(text: str) -> dict[str, list[str]]:
    """'Section.Key' → values, in order (systemd allows a key more than once)."""
    out: dict[str, list[str]] = {}
    section = ""
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith(("#", ";")):
            continue
        if line.startswith("["):
            section = line.strip("[]")
            continue
        key, _, value = line.partition("=")
        out.setdefault(f"{section}.{key.strip()}", []).append(value.strip())
    return out


def installed_units(root: Path, dest: Path) -> list[Path]:
    """Copies of the installed units where the sandbox can see them (names unchanged)."""
    dest.mkdir()
    return [Path(shutil.copy(root / USER_UNIT_DIR / u, dest / u)) for u in UNITS]


def seconds(value: str) -> float:
    m = re.fullmatch(r"(\d+)(s|min)?", value)
    assert m, f"unexpected time span {value!r}"
    return int(m[1]) * (60 if m[2] == "min" else 1)


@pytest.mark.usefixtures("not_root")
def test_units_pass_systemd_analyze_verify(installed: Installed, tmp_path: Path) -> None:
    require("systemd-analyze")
    units = [str(u) for u in installed_units(installed.root, tmp_path / "units")]
    # verify --user runs a user manager in test mode: it needs XDG_RUNTIME_DIR (the fixture's),
    # and it checks that ExecStart exists and is executable, so it runs in the sandbox where
    # /usr/bin/vinos-routine is the installed launcher.
    out = installed("systemd-analyze", "verify", "--user", *units, check=False)
    assert out.returncode == 0, out.stderr
    assert out.stderr == "", f"systemd-analyze warned:\n{out.stderr}"
    # The control: on the host, where nothing is installed, the same check fails on ExecStart.
    host = run(
        ["systemd-analyze", "verify", "--user", *units],
        env={**installed.env, "PATH": "/usr/bin:/bin"},
        check=False,
    )
    assert host.returncode != 0
    assert "/usr/bin/vinos-routine" in host.stderr


def test_unit_contract(installed_root: Pacman) -> None:
    """What the daemon and the sandbox rely on; each line says why in the unit's comments."""
    unit_dir = installed_root.root / USER_UNIT_DIR
    service = parse_unit((unit_dir / "vinos-routined.service").read_text())
    sock = parse_unit((unit_dir / "vinos-routined.socket").read_text())

    assert service["Service.Type"] == ["notify"]
    assert service["Service.ExecStart"] == ["/usr/bin/vinos-routine daemon"]
    assert service["Service.Restart"] == ["on-failure"]
    assert service["Service.KillMode"] == ["mixed"]  # SIGTERM to the daemon alone first
    # On SIGTERM the daemon waits stop_grace_sec for running workers, then ends them: SIGTERM, and
    # SIGKILL 5 s later (test_daemon_timeout.py::test_a_timeout_ends_the_whole_tree).
    assert seconds(service["Service.TimeoutStopSec"][0]) > Timings().stop_grace_sec + 5
    assert seconds(service["Service.WatchdogSec"][0]) >= 30
    assert "vinos-routined.socket" in service["Unit.Requires"]
    assert service["Install.Also"] == ["vinos-routined.socket"]
    # Anything that stops bwrap from making namespaces, mounting /proc or pivot_root-ing, or
    # that (in a user manager) implies PrivateUsers= and a mount namespace.
    forbidden = {
        "RestrictNamespaces", "PrivateUsers", "ProtectHome", "ProtectSystem", "PrivateTmp",
        "ProtectKernelTunables", "ProtectProc", "ProcSubset", "ProtectControlGroups",
        "ReadWritePaths", "ReadOnlyPaths", "InaccessiblePaths", "TemporaryFileSystem",
        "BindPaths", "BindReadOnlyPaths", "PrivateDevices", "PrivateMounts",
        "MemoryDenyWriteExecute", "CapabilityBoundingSet",
    }  # fmt: skip
    present = {key.split(".", 1)[1] for key in service}
    assert not forbidden & present
    for entry in service.get("Service.SystemCallFilter", []):
        assert entry.startswith("~"), "an allow-list would have to name all of bwrap's calls"
        denied = set(entry[1:].split())
        assert not denied & {"@mount", "@privileged", "@process", "unshare", "clone", "setns"}

    # The socket is the path the CLI and the daemon use (routines.spec.paths), private to the user.
    assert sock["Socket.ListenStream"] == ["%t/vinos-routine/control.sock"]
    assert sock["Socket.SocketMode"] == ["0600"]
    assert sock["Socket.DirectoryMode"] == ["0700"]
    p = paths()
    runtime = Path(os.environ["XDG_RUNTIME_DIR"])
    assert str(p.control_socket.relative_to(runtime)) == "vinos-routine/control.sock"


class Notifications:
    """A NOTIFY_SOCKET for the daemon, as systemd would give it; collects what it says."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.sock.bind(str(path))
        self.seen: list[str] = []

    def wait_for(self, line: str, proc: subprocess.Popen[str]) -> None:
        deadline = time.monotonic() + WAIT
        while line not in self.seen:
            left = deadline - time.monotonic()
            if left <= 0 or proc.poll() is not None:
                out, err = proc.communicate(timeout=WAIT) if proc.poll() is not None else ("", "")
                pytest.fail(f"no {line} from the daemon; got {self.seen}\n{out}\n{err}")
            self.sock.settimeout(min(left, 1.0))
            try:
                data = self.sock.recv(4096)
            except TimeoutError:
                continue
            self.seen += data.decode().splitlines()

    def close(self) -> None:
        self.sock.close()


@contextmanager
def connected(path: Path) -> Iterator[tuple[socket.socket, Iterator[dict[str, object]]]]:
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    conn.settimeout(WAIT)
    conn.connect(str(path))
    lines = (json.loads(line) for line in conn.makefile("rb"))
    try:
        yield conn, lines
    finally:
        conn.close()


@pytest.mark.usefixtures("not_root")
def test_daemon_socket_activated_answers_ping(installed: Installed, tmp_path: Path) -> None:
    require("systemd-socket-activate")
    sock_unit = parse_unit((installed.root / USER_UNIT_DIR / "vinos-routined.socket").read_text())
    listen = sock_unit["Socket.ListenStream"][0].replace("%t", str(installed.runtime_dir))
    control = Path(listen)
    control.parent.mkdir(mode=0o700)  # what the socket unit's DirectoryMode= makes
    notes = Notifications(tmp_path / "notify.sock")
    # What the user manager gives the service: its environment, a notify socket and a
    # watchdog. systemd-socket-activate passes on only the variables named with -E.
    env = {**installed.env, "NOTIFY_SOCKET": str(notes.path), "WATCHDOG_USEC": "2000000"}
    passed = [arg for name in env for arg in ("-E", name)]
    daemon = installed.popen(
        ["systemd-socket-activate", "-l", listen, *passed, "/usr/bin/vinos-routine", "daemon"],
        **env,
    )
    try:
        deadline = time.monotonic() + WAIT
        while not control.exists():
            assert daemon.poll() is None, daemon.communicate()
            assert time.monotonic() < deadline, "systemd-socket-activate made no socket"
            time.sleep(0.05)
        # The first connection makes systemd-socket-activate exec the daemon on the socket.
        with connected(control) as (conn, lines):
            conn.sendall(b'{"type": "hello", "protocol": 1}\n')
            hello = next(lines)
            assert (hello["type"], hello["protocol"]) == ("hello", 1)
            conn.sendall(b'{"type": "request", "id": 1, "cmd": "ping", "args": {}}\n')
            reply = next(lines)
            assert reply["type"] == "response"
            assert reply["id"] == 1
            assert reply["ok"] is True, reply
            creds = conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
            daemon_pid, _, _ = struct.unpack("3i", creds)
        notes.wait_for("READY=1", daemon)
        notes.wait_for("WATCHDOG=1", daemon)
        # systemctl stop: SIGTERM to the daemon alone (KillMode=mixed).
        os.kill(daemon_pid, signal.SIGTERM)
        notes.wait_for("STOPPING=1", daemon)
        _, err = daemon.communicate(timeout=WAIT)
        assert daemon.returncode == 0, err
    finally:
        if daemon.poll() is None:
            daemon.kill()
            daemon.communicate()
        notes.close()


# Loads the seccomp filter systemd would build from the unit's SystemCallFilter= (deny list,
# EPERM) and RestrictAddressFamilies= (allow list), with no_new_privs, then execs the rest.
# This applies the unit's own values to the installed package's process tree (sandbox, launcher,
# worker, bwrap), with a control; test_systemd_user.py runs the unit under a real manager.
HARDEN = """
import errno, os, socket, sys
import pyseccomp as sc
denied, allowed = sys.argv[1].split(), {getattr(socket, f) for f in sys.argv[2].split()}
f = sc.SyscallFilter(sc.ALLOW)
for name in denied:
    try:
        f.add_rule(sc.ERRNO(errno.EPERM), name)
    except Exception:  # a call that does not exist on this architecture (e.g. s390_*)
        pass
for family in range(64):
    if family not in allowed:
        f.add_rule(sc.ERRNO(errno.EAFNOSUPPORT), "socket", sc.Arg(0, sc.EQ, family))
f.add_rule(sc.ERRNO(errno.EAFNOSUPPORT), "socket", sc.Arg(0, sc.GE, 64))
f.load()
os.execvp(sys.argv[3], sys.argv[3:])
"""


def syscalls(groups: list[str]) -> set[str]:
    """What `systemd-analyze syscall-filter` says the groups hold (nested groups expanded)."""
    out: set[str] = set()
    for line in run(["systemd-analyze", "syscall-filter", *groups]).stdout.splitlines():
        if not line.startswith(" "):
            continue  # a group's own name
        word = line.strip()
        if word.startswith("@"):
            out |= syscalls([word])
        elif word and not word.startswith("#"):
            out.add(word)
    return out


@pytest.mark.usefixtures("not_root")
def test_unit_hardening_leaves_the_sandbox_working(installed: Installed) -> None:
    require("systemd-analyze")
    service = parse_unit((installed.root / USER_UNIT_DIR / "vinos-routined.service").read_text())
    (filt,) = service["Service.SystemCallFilter"]
    denied = syscalls(filt.removeprefix("~").split())
    assert {"ptrace", "init_module", "reboot"} <= denied
    (families,) = service["Service.RestrictAddressFamilies"]
    (installed.vinos_home / "routines/pkg-hello.toml").write_text(
        '[routine]\nkind = "command"\n[schedule]\ncron = "0 9 * * *"\n[command]\nrun = "true"\n'
    )
    command = ["/usr/bin/vinos-routine", "sandbox", "pkg-hello", "--", "echo sandboxed"]

    def hardened(deny: set[str]) -> subprocess.CompletedProcess[str]:
        argv = [sys.executable, "-c", HARDEN, " ".join(sorted(deny)), families]
        return run([*argv, *installed.argv(command)], check=False)

    out = hardened(denied)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "sandboxed"
    # The control: the same harness with mount(2) denied too leaves bwrap unable to start.
    broken = hardened(denied | {"mount"})
    assert broken.returncode != 0
    assert "sandboxed" not in broken.stdout
