"""The units under a real `systemd --user` manager: enabled, started, socket-activated,
restarted, watched, reloaded and stopped by systemd itself, as on a user's machine.

The manager is started as root by scripts/user-manager.sh (scripts/as-user.sh does it in
`make test`); these tests run as the unprivileged user and drive it with `systemctl --user`.
The unit files are installed unchanged into the user's unit directory for installed packages
(~/.local/share/systemd/user, the per-user twin of /usr/lib/systemd/user where the PKGBUILD
copies them byte for byte); one drop-in points ExecStart at this test run's install of the
program, the state at a scratch VINOS_HOME, and stdout/stderr at files (there is no journald
here). Tests run in order and share the one service, as a user's session would.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
import tomllib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.packaging.archpkg import REPO, require, run

# Slow, and in the "user-manager" xdist group (with test_wheel.py's and test_cli_setup.py's
# tests of it): one user manager and one ~/.config/systemd/user.
pytestmark = [
    pytest.mark.slow,
    pytest.mark.xdist_group("user-manager"),
    pytest.mark.usefixtures("not_root"),
]

SERVICE = "vinos-routined.service"
SOCKET = "vinos-routined.socket"
WAIT = 90.0  # a bound on waits for events that must happen, never a speed assertion
# stop_grace_sec (VINOS_DEBUG_TIMINGS) in the drop-in: the unit's 30 s would only slow the test
GRACE_SEC = 10
# RestartSec= in the drop-in: the unit's 5 s before each restart (after kill -9, after the
# watchdog) would only slow the test; Restart=on-failure, what the tests hold, is the unit's.
RESTART_SEC = 1
VERSION = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["version"]
STATUS_LINE = re.compile(r"^\d+ running( · \d+ queued)? · (nothing scheduled|next \S+ .+)$")


def wait_for(what: str, cond: Callable[[], object], timeout: float = WAIT) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            pytest.fail(f"timed out waiting for {what}")
        time.sleep(0.1)


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return False
    return state != "Z"


@dataclass(frozen=True)
class Session:
    """The user's manager, the installed units and the program's state for this module."""

    runtime: Path  # the manager's XDG_RUNTIME_DIR, /run/user/UID
    home: Path  # the user's real HOME: where the manager looks for units
    work: Path
    vinos_home: Path
    program: Path  # the vinos-routine the drop-in's ExecStart runs

    @property
    def out_log(self) -> Path:
        return self.work / "daemon.out"

    @property
    def err_log(self) -> Path:
        return self.work / "daemon.err"

    @property
    def env(self) -> dict[str, str]:
        return {
            "HOME": str(self.home),
            "PATH": "/usr/bin:/bin",
            "LANG": "C.UTF-8",
            "XDG_RUNTIME_DIR": str(self.runtime),
            "VINOS_HOME": str(self.vinos_home),
            "VINOS_SYSTEM_DIR": str(self.work / "system"),
        }

    def systemctl(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        return run(["systemctl", "--user", *args], env=self.env, check=check, timeout=WAIT)

    def show(self, prop: str, unit: str = SERVICE) -> str:
        return self.systemctl("show", unit, "-p", prop, "--value").stdout.strip()

    def main_pid(self) -> int:
        return int(self.show("MainPID"))

    def cli(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        return run([self.program, *args], env=self.env, cwd=self.work, check=check, timeout=WAIT)

    def cgroup(self) -> str:
        """The service's cgroup, relative to the hierarchies' roots (empty when inactive)."""
        return self.show("ControlGroup")

    def cgroup_pids(self, group: str | None = None) -> set[int]:
        """Every process in the service's cgroup (or `group`), in every hierarchy systemd keeps
        it in; none when the cgroup is gone."""
        if group is None:
            group = self.cgroup()
            assert group, "the service has no cgroup (it is not running)"
        pids: set[int] = set()
        for root in ("/sys/fs/cgroup/systemd", "/sys/fs/cgroup/unified", "/sys/fs/cgroup"):
            d = Path(root + group)
            for procs in d.rglob("cgroup.procs") if d.is_dir() else ():
                pids |= {int(p) for p in procs.read_text().split()}
        return pids

    def routine(self, name: str, command: str, **extra: str) -> None:
        lines = ["[routine]", 'kind = "command"', "[schedule]", 'cron = "0 9 * * *"']
        lines += ["[command]", f"run = {json.dumps(command)}"]
        lines += [f"{k} = {v}" for k, v in extra.items()]
        (self.vinos_home / f"routines/{name}.toml").write_text("\n".join(lines) + "\n")

    def history(self, name: str) -> list[dict[str, object]]:
        out = self.cli("history", name, "-n", "50", "--json").stdout
        return [json.loads(line) for line in out.splitlines()]

    def running(self, name: str) -> list[dict[str, object]]:
        st = json.loads(self.cli("status", "--json").stdout)
        return [r for r in st.get("running", []) if r.get("routine") == name]


def manager_running(runtime: Path) -> str:
    if not (runtime / "systemd/private").exists():
        return f"no user manager: {runtime}/systemd/private does not exist"
    out = subprocess.run(
        ["systemctl", "--user", "is-system-running"],
        env={"PATH": "/usr/bin:/bin", "XDG_RUNTIME_DIR": str(runtime)},
        capture_output=True,
        text=True,
        check=False,
    )
    state = out.stdout.strip()
    return "" if state in ("running", "degraded") else f"the user manager says {state!r}"


def drop_in(home: Path, name: str, text: str) -> Path:
    d = home / ".config/systemd/user" / f"{SERVICE}.d"
    d.mkdir(parents=True, exist_ok=True)
    path = d / name
    path.write_text(text)
    return path


@pytest.fixture(scope="module")
def session(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Session]:
    require("systemctl")
    runtime = Path(f"/run/user/{os.getuid()}")
    problem = manager_running(runtime)
    if problem:
        how = "as root, scripts/user-manager.sh start $USER starts one (make test does)"
        if os.environ.get("CI"):
            pytest.fail(f"{problem}; {how}")
        pytest.skip(f"{problem} (not under CI); {how}")
    home = Path(os.path.expanduser("~"))
    work = tmp_path_factory.mktemp("systemd-user")
    vinos_home = work / "vinos-home"
    for d in (vinos_home / "routines", work / "system"):
        d.mkdir(parents=True)
    program = Path(sys.prefix) / "bin/vinos-routine"
    assert program.is_file(), f"{program}: run the tests with the project's venv"
    s = Session(runtime, home, work, vinos_home, program)

    units = home / ".local/share/systemd/user"
    config = home / ".config/systemd/user"
    for leftover in (units / SERVICE, units / SOCKET, config / f"{SERVICE}.d"):
        assert not leftover.exists(), f"{leftover} exists: another run's, or the user's own"
    units.mkdir(parents=True, exist_ok=True)
    for unit in (SERVICE, SOCKET):
        shutil.copyfile(REPO / "supervisor/units" / unit, units / unit)
    env = " ".join(f"{k}={v}" for k, v in s.env.items() if k.startswith("VINOS_"))
    drop_in(
        home,
        "50-test.conf",
        "[Service]\n"
        "ExecStart=\n"
        f"ExecStart={program} daemon\n"
        # Single quotes: systemd keeps the JSON's double quotes as they are.
        f"Environment={env} 'VINOS_DEBUG_TIMINGS={{\"stop_grace_sec\":{GRACE_SEC}}}'\n"
        f"RestartSec={RESTART_SEC}s\n"
        f"StandardOutput=append:{s.out_log}\n"
        f"StandardError=append:{s.err_log}\n",
    )
    s.systemctl("daemon-reload")
    try:
        yield s
    finally:
        s.systemctl("disable", "--now", SERVICE, SOCKET, check=False)
        shutil.rmtree(config / f"{SERVICE}.d", ignore_errors=True)
        for unit in (SERVICE, SOCKET):
            (units / unit).unlink(missing_ok=True)
        s.systemctl("daemon-reload", check=False)
        s.systemctl("reset-failed", check=False)


def test_enable_now_starts_the_daemon_ready(session: Session) -> None:
    s = session
    s.systemctl("enable", "--now", SERVICE)
    # Also= enabled the socket; both are wired where systemd starts them at login.
    assert s.systemctl("is-enabled", SERVICE).stdout.strip() == "enabled"
    assert s.systemctl("is-enabled", SOCKET).stdout.strip() == "enabled"
    wants = s.home / ".config/systemd/user"
    assert (wants / "default.target.wants" / SERVICE).is_symlink()
    assert (wants / "sockets.target.wants" / SOCKET).is_symlink()
    # Type=notify: `enable --now` returns once READY=1 arrived, so the service is active.
    assert s.show("ActiveState") == "active"
    assert s.show("SubState") == "running"
    assert s.show("ActiveState", SOCKET) == "active"
    status = s.show("StatusText")
    assert STATUS_LINE.match(status), f"StatusText={status!r}"
    pid = s.main_pid()
    assert Path(f"/proc/{pid}/cmdline").read_bytes().startswith(b"vinos-routined")
    assert (s.runtime / "vinos-routine/control.sock").is_socket()
    st = json.loads(s.cli("status", "--json").stdout)
    assert st["daemon"] is True and st["pid"] == pid, st


def test_a_sandboxed_command_runs_under_the_hardening(session: Session) -> None:
    s = session
    pid = s.main_pid()
    status = Path(f"/proc/{pid}/status").read_text()
    # What the unit's NoNewPrivileges= and SystemCallFilter= did to the daemon (and so to
    # its workers and their bwrap): the hardening is in force, not just written down.
    assert re.search(r"^NoNewPrivs:\s+1$", status, re.M), status
    assert re.search(r"^Seccomp:\s+2$", status, re.M), status
    s.routine("sd-hello", "echo sandboxed as $(id -u); ls -d /proc/1/ns; cat /proc/1/comm")
    fin = json.loads(s.cli("run", "sd-hello", "--json").stdout)
    assert fin["status"] == "ok", fin
    (output,) = (s.vinos_home / "routines/state/sd-hello").glob("*.md")
    text = output.read_text()
    assert f"sandboxed as {os.getuid()}" in text, text
    # bwrap's pid namespace: pid 1 in there is not the host's init (or systemd).
    assert "systemd" not in text.split("/proc/1/ns", 1)[1], text
    assert s.main_pid() == pid, "the run went through the daemon the unit started"


def test_the_unit_delegates_a_cgroup_and_doctor_says_how_run_limits_are_kept(
    session: Session,
) -> None:
    """Under a real user manager the service's cgroup is the daemon's to write (the unit's
    Delegate=yes tells systemd to leave its subtree to it: supervisor/engine/runcgroup.py). Where
    the host's cgroup v2 has the memory and pids controllers, the daemon sits in its `daemon`
    leaf and a run's cgroup is gone after the run; where it has not (a hybrid host binds
    memory to cgroup v1), the limits are sampled. Either way the daemon's log and `doctor`
    say which, and why."""
    from supervisor.engine import runcgroup

    s = session
    pid = s.main_pid()
    f = runcgroup.facts(pid)
    assert f.writable, f"the service's cgroup {f.own} is not the daemon's to write: {f}"
    limits = runcgroup.support(pid)
    said = runcgroup.describe(limits)
    wait_for("the daemon's run limits line", lambda: f"run limits: {said}" in s.err_log.read_text())
    doctor = json.loads(s.cli("doctor", "--json", check=False).stdout)
    [item] = [i for i in doctor["items"] if i["what"] == "run limits"]
    kernel = limits.enforcement is runcgroup.Enforcement.CGROUP
    assert (item["state"], item["detail"]) == ("ok" if kernel else "note", said)
    if kernel:
        assert f.own is not None and f.own.endswith(f"/{runcgroup.DAEMON_LEAF}"), f.own
        fin = json.loads(s.cli("run", "sd-hello", "--json").stdout)
        assert fin["status"] == "ok", fin
        assert not [n for n in os.listdir(limits.root) if n.startswith("run-")]
    else:
        assert "controller" in limits.why, limits.why


def test_status_text_follows_the_schedule(session: Session) -> None:
    s = session
    assert "nothing scheduled" in s.show("StatusText")
    s.routine("sd-scheduled", "true")
    s.cli("enable", "sd-scheduled")
    wait_for(
        "STATUS= naming the new routine's next run",
        lambda: "next sd-scheduled " in s.show("StatusText"),
    )
    assert STATUS_LINE.match(s.show("StatusText"))


def test_reload_rereads_the_config(session: Session) -> None:
    s = session
    pid = s.main_pid()
    mark = "config.toml is invalid; keeping the previous settings"
    config = s.vinos_home / "routines/config.toml"
    # config.toml is read at start and on reload only: an invalid one is reported on reload.
    config.write_text("max_concurrent = 'many'\n")
    try:
        assert mark not in s.err_log.read_text()
        s.systemctl("reload", SERVICE)
        wait_for(
            "the reload's complaint in the daemon's stderr", lambda: mark in s.err_log.read_text()
        )
    finally:
        config.unlink()
    s.systemctl("reload", SERVICE)
    assert s.main_pid() == pid, "reload restarted the daemon"
    assert s.show("ActiveState") == "active"


def test_the_cli_starts_the_stopped_service_through_the_socket(session: Session) -> None:
    s = session
    old = s.main_pid()
    s.systemctl("stop", SERVICE)
    assert s.show("ActiveState") == "inactive"
    assert s.show("ActiveState", SOCKET) == "active", "the socket keeps listening"
    assert (s.runtime / "vinos-routine/control.sock").is_socket()
    # The CLI connects to the socket systemd holds; systemd starts the service, which takes
    # the listening socket over (LISTEN_FDS) and answers.
    st = json.loads(s.cli("status", "--json").stdout)
    assert st["daemon"] is True, st
    assert s.show("ActiveState") == "active"
    assert st["pid"] == s.main_pid() != old


def start_long_run(s: Session, name: str) -> tuple[str, int]:
    """A detached run of a command that sleeps; its run id and its sandboxed sleep's pid."""
    s.routine(name, "exec sleep 600")
    out = s.cli("run", name, "--detach").stdout
    run_id = out.split("queued: ", 1)[1].split()[0]

    def sleeping() -> int | None:
        for pid in s.cgroup_pids():
            try:
                if Path(f"/proc/{pid}/cmdline").read_bytes() == b"sleep\x00600\x00":
                    return pid
            except FileNotFoundError:
                continue
        return None

    wait_for(f"{name}'s sandboxed sleep in the service's cgroup", sleeping)
    pid = sleeping()
    assert pid is not None
    return run_id, pid


def rows(s: Session, name: str, run_id: str) -> list[dict[str, object]]:
    return [r for r in s.history(name) if r["run_id"] == run_id]


def test_kill_9_restarts_and_records_the_interrupted_run_once(session: Session) -> None:
    s = session
    run_id, sleeper = start_long_run(s, "sd-killed")
    restarts = int(s.show("NRestarts"))
    old = s.main_pid()
    before = s.cgroup_pids()  # the old daemon, its worker, bwrap and the sleep
    os.kill(old, signal.SIGKILL)
    wait_for(
        "Restart=on-failure to start the daemon again",
        lambda: s.show("ActiveState") == "active" and s.main_pid() not in (0, old),
    )
    assert int(s.show("NRestarts")) == restarts + 1
    # The new daemon marks the run its predecessor left before READY=1.
    (row,) = rows(s, "sd-killed", run_id)
    assert row["status"] == "interrupted", row
    assert "not replayed" in str(row["detail"]), row
    assert s.running("sd-killed") == [], "the interrupted run was replayed"
    # Nothing of the killed daemon's run is left in the cgroup. The new daemon may have
    # children of its own by now (its sandbox probe), so the old processes are compared.
    wait_for("the old run's sandboxed sleep to be gone", lambda: not alive(sleeper))
    assert sleeper in before
    assert s.cgroup_pids() & before == set()
    assert s.main_pid() in s.cgroup_pids()
    assert "interrupted (its supervisor is gone)" in s.err_log.read_text()


def test_the_watchdog_restarts_a_stopped_daemon(session: Session) -> None:
    s = session
    # A short watchdog; the rest is the unit's: systemd sends SIGABRT (and SIGCONT, so that a
    # stopped process acts on it), and Restart=on-failure starts a new daemon.
    conf = drop_in(s.home, "60-watchdog.conf", "[Service]\nWatchdogSec=8s\n")
    try:
        s.systemctl("daemon-reload")
        s.systemctl("restart", SERVICE)
        assert s.show("WatchdogUSec") == "8s"
        restarts = int(s.show("NRestarts"))
        old = s.main_pid()
        os.kill(old, signal.SIGSTOP)
        wait_for(
            "the watchdog to have the daemon restarted",
            lambda: (
                int(s.show("NRestarts")) == restarts + 1
                and s.show("ActiveState") == "active"
                and s.main_pid() not in (0, old)
            ),
        )
        assert not alive(old)
    finally:
        conf.unlink()
        s.systemctl("daemon-reload")
        s.systemctl("restart", SERVICE)
    assert s.show("WatchdogUSec") == "1min"  # the unit's own again


def test_stop_during_a_run_gives_the_grace_then_records_interrupted(session: Session) -> None:
    s = session
    run_id, sleeper = start_long_run(s, "sd-stopped")
    worker = s.running("sd-stopped")[0]["pid"]
    assert isinstance(worker, int)
    group = s.cgroup()
    assert {worker, sleeper} <= s.cgroup_pids(group)
    s.systemctl("stop", "--no-block", SERVICE)
    wait_for(
        "the daemon to say it is stopping", lambda: s.show("StatusText").startswith("stopping")
    )
    # KillMode=mixed: SIGTERM went to the daemon alone; its run is still going in the grace.
    assert s.show("ActiveState") == "deactivating"
    assert alive(sleeper) and alive(worker)
    wait_for("the service to stop", lambda: s.show("ActiveState") == "inactive")
    left = int(s.show("ActiveExitTimestampMonotonic"))
    stopped = int(s.show("InactiveEnterTimestampMonotonic"))
    assert stopped - left >= GRACE_SEC * 1_000_000, "the grace was not given"
    assert s.show("Result") == "success", "the daemon did not exit cleanly within TimeoutStopSec"
    (row,) = rows(s, "sd-stopped", run_id)
    assert row["status"] == "interrupted", row
    assert not alive(sleeper) and not alive(worker)
    assert s.cgroup_pids(group) == set(), "processes left in the stopped service's cgroup"
    s.systemctl("start", SERVICE)


def test_output_goes_where_the_unit_says(session: Session) -> None:
    s = session
    s.systemctl("restart", SERVICE)
    pid = s.main_pid()
    started = f"vinos-routine daemon {VERSION} started for {s.vinos_home} (pid {pid})"
    wait_for(
        "the daemon's start line in StandardError='s file", lambda: started in s.err_log.read_text()
    )
    # Every daemon systemd started in this module logged there, with the drop-in's state dir.
    starts = re.findall(
        r"^INFO vinos\.daemon: vinos-routine daemon .* started for (.+) \(pid",
        s.err_log.read_text(),
        re.M,
    )
    assert len(starts) > 1 and set(starts) == {str(s.vinos_home)}, starts
    # The daemon writes nothing on stdout (its log is stderr); systemd made the file the unit
    # names, and no stderr line went there.
    assert s.out_log.is_file(), "StandardOutput= was not applied"
    assert "vinos.daemon" not in s.out_log.read_text()
