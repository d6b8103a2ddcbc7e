"""The forkserver (worker/forkserver.py, supervisor/engine/forkserver.py): a worker it forks starts
in
the state a spawned one would (every line of the invariant in worker/forkserver.py, compared
field by field against a real spawn made in the same test), its control socket answers only
the daemon that started it, it keeps no key, and the spawner falls back to a plain spawn, and
says why, when it is not up or breaks.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import resource
import signal
import socket
import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import psutil
import pytest

from routines.spec.routine import Kind
from sandbox.overlay import HOLDER, overlay_unavailable
from supervisor.engine.forkserver import (
    KEEP_WARM_SEC,
    ForkServer,
    ForkState,
    forkserver_env,
    needs_sdk,
    wanted,
)
from supervisor.engine.runlog import RunLog
from supervisor.engine.spawn import WorkerProcess, worker_env
from tests.supervisor.daemonkit import REPO
from tests.supervisor.test_spawn import BARE_FORKSERVER, FAKE, make_job, started_forkserver

STATE = str(REPO / "tests/supervisor/stateworker.py")
OVERLAY_RUN = str(REPO / "tests/supervisor/overlayworker.py")
NOW = datetime(2026, 12, 4, 9, 0, tzinfo=UTC)


@pytest.mark.parametrize(
    ("active", "due_in", "used_ago", "up"),
    [
        (1, None, None, True),  # a run running or queued
        (0, None, None, False),  # nothing scheduled, never used
        (0, 180, None, True),  # due within the window
        (0, 181, None, False),  # not yet
        (0, -5, None, True),  # overdue: about to be claimed
        (0, None, 0, True),  # the daemon just started, or was asked to run
        (0, None, 1800, True),  # used within the keep window
        (0, None, 1801, False),  # idle past it: closed, the daemon as small as before
        (0, 181, 1801, False),
    ],
)
def test_the_forkserver_is_wanted_while_a_run_is_due_soon_or_active_or_lately_used(
    active: int, due_in: int | None, used_ago: int | None, up: bool
) -> None:
    due = None if due_in is None else NOW + timedelta(seconds=due_in)
    used = None if used_ago is None else NOW - timedelta(seconds=used_ago)
    assert (
        wanted(active=active, next_due=due, now=NOW, ahead=180, last_use=used, keep=KEEP_WARM_SEC)
        is up
    )
    assert KEEP_WARM_SEC == 1800


@pytest.mark.parametrize(
    ("kinds", "sdk"),
    [
        ((), False),  # no routine yet: nothing would use the SDKs
        ((Kind.COMMAND, Kind.COMMAND), False),  # command runs import none of them
        ((Kind.COMMAND, Kind.AGENT), True),  # one agent routine: its runs are forked warm
        ((Kind.AGENT,), True),
    ],
)
def test_the_sdk_is_preloaded_only_for_a_daemon_with_an_agent_routine(
    kinds: tuple[Kind, ...], sdk: bool
) -> None:
    assert needs_sdk(kinds) is sdk


def test_the_forkservers_own_environment_keeps_no_key() -> None:
    env = {"PATH": "/bin", "PYTHONPATH": "/p", "LC_ALL": "C", "ANTHROPIC_API_KEY": "sk-x", "X": "1"}
    assert forkserver_env(env) == {"PATH": "/bin", "PYTHONPATH": "/p", "LC_ALL": "C"}


async def _read_state(proc: Any) -> dict[str, Any]:
    out = await proc.stdout.read()
    err = await proc.stderr.read()
    code = await proc.wait()
    assert code == 0, err.decode()
    state: dict[str, Any] = json.loads(out)
    return state


def test_a_forked_worker_starts_in_the_state_of_a_spawned_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def go() -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
        forks = await started_forkserver()
        assert forks.pid is not None
        # Not dumpable: no process of ours reads what passes through it (the runs' keys).
        with pytest.raises(PermissionError):
            Path(f"/proc/{forks.pid}/environ").read_bytes()
        with pytest.raises(PermissionError), Path(f"/proc/{forks.pid}/mem").open("rb"):
            pass
        # What the daemon's state is at the run, not at the forkserver's start: a forked
        # worker takes it from the request.
        monkeypatch.chdir(tmp_path)
        old_umask = os.umask(0o027)
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(soft, 200), hard))
        env = {**worker_env(), "ANTHROPIC_API_KEY": "sk-the-run-only", "TZ": "Asia/Tokyo"}
        argv = [sys.executable, STATE, "an-arg"]
        try:
            spawned = await asyncio.create_subprocess_exec(
                *argv,
                stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
                start_new_session=True,
                env=env,
                close_fds=True,
            )
            assert spawned.stdin is not None
            spawned.stdin.close()
            a = await _read_state(spawned)
            forked = await forks.spawn(argv, env)
            assert forked.stdin is not None
            forked.stdin.close()
            b = await _read_state(forked)
            again = await forks.spawn(argv, env)
            assert again.stdin is not None
            again.stdin.close()
            c = await _read_state(again)
        finally:
            os.umask(old_umask)
            resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
            await forks.close()
        return a, b, c

    spawned, forked, again = asyncio.run(go())
    assert forked["random"] != again["random"]  # re-seeded: no two runs draw alike
    for s in (spawned, forked, again):
        s.pop("random")
    assert forked == spawned, {
        k: (spawned[k], forked.get(k)) for k in spawned if spawned[k] != forked.get(k)
    }
    assert forked == again
    # The fields the comparison holds, spelled out for the invariant's lines:
    assert forked["fds"] == [0, 1, 2]  # no control socket, wake pipe or import leftovers
    assert set(forked["fd_targets"].values()) == {"pipe"}
    assert forked["session_leader"] and forked["group_leader"]
    assert (forked["umask"], forked["cwd"]) == (0o027, str(tmp_path))
    assert forked["rlimits"]["RLIMIT_NOFILE"][0] <= 200
    assert forked["env"]["ANTHROPIC_API_KEY"] == "sk-the-run-only"
    # As a fresh interpreter: Python's own handler, or SIG_IGN where this test's process was
    # started with SIGINT ignored (a background job of a non-interactive shell), as a spawn
    # inherits it.
    ignored = signal.getsignal(signal.SIGINT) is signal.SIG_IGN
    assert forked["signals"]["SIGINT"] == ("SIG_IGN" if ignored else "default_int_handler")
    assert forked["signals"]["SIGCHLD"] == "SIG_DFL"  # the forkserver's own handler is gone
    assert forked["threads"] == 1


def test_the_real_preload_leaves_no_thread_or_descriptor_and_keeps_no_key() -> None:
    """The daemon's forkserver, the SDK imported: `serve` refuses to start if an import
    left a thread running or a descriptor open, so UP here is that check passing."""

    async def go() -> tuple[dict[str, Any], ForkState]:
        forks = ForkServer()
        forks.keep(True, worker_env())
        for _ in range(1200):
            if forks.state is not ForkState.STARTING:
                break
            await asyncio.sleep(0.05)
        state = forks.state
        try:
            assert state is ForkState.UP, forks.why
            proc = await forks.spawn([sys.executable, STATE], worker_env())
            assert proc.stdin is not None
            proc.stdin.close()
            return await _read_state(proc), state
        finally:
            await forks.close()

    child, state = asyncio.run(go())
    assert state is ForkState.UP
    assert child["has_anthropic"]  # the SDK came with the fork: the point of it
    assert child["threads"] == 1
    only_the_overlay_makers_channel_beyond_stdio(child)


def only_the_overlay_makers_channel_beyond_stdio(child: dict[str, Any]) -> None:
    """A run forked by a preloading forkserver has stdio and, where this host builds overlays,
    one more descriptor: the channel to the forkserver's overlay maker, close-on-exec (no
    program the run starts inherits it). A bare forkserver's run has stdio alone
    (test_a_forked_worker_starts_in_the_state_of_a_spawned_one)."""
    extra = list(child["beyond_stdio"].values())
    if overlay_unavailable() is not None:
        assert child["fds"] == [0, 1, 2] and extra == []
        return
    assert len(child["fds"]) == 4 and child["fds"][:3] == [0, 1, 2]
    [channel] = extra
    assert channel["target"] == "socket" and not channel["inheritable"]


def overlay_makers(forks: ForkServer) -> list[psutil.Process]:
    """The forkserver's children running the overlay maker (python -I -S overlayholder.py)."""
    assert forks.pid is not None
    return [p for p in psutil.Process(forks.pid).children() if HOLDER in p.cmdline()]


def test_forked_runs_share_the_forkservers_overlay_maker() -> None:
    """Two runs forked by a commands forkserver build their first call's overlays through the
    maker the forkserver started (none starts its own: an interpreter's start saved on the
    way from a due slot to its command), and each writes into its overlay, not its folder;
    with that maker gone, the next run starts its own and its call still works."""
    if overlay_unavailable() is not None:
        pytest.skip(f"no overlays on this host: {overlay_unavailable()}")

    async def run(forks: ForkServer) -> dict[str, Any]:
        proc = await forks.spawn([sys.executable, OVERLAY_RUN], worker_env())
        assert proc.stdin is not None
        proc.stdin.close()
        return await _read_state(proc)

    async def go() -> tuple[list[dict[str, Any]], int | None, dict[str, Any]]:
        forks = ForkServer()
        try:
            forks.keep(True, worker_env(), sdk=False)
            assert await _up(forks) is ForkState.UP, forks.why
            runs = [await run(forks), await run(forks)]
            [maker] = overlay_makers(forks)
            assert maker.pid == runs[0]["maker"]
            maker.kill()
            maker.wait(30)
            return runs, forks.pid, await run(forks)
        finally:
            await forks.close()

    (a, b), _, after = asyncio.run(go())
    assert a["maker"] == b["maker"] and not a["own_maker"] and not b["own_maker"]
    for state in (a, b, after):
        assert state["wrote"] == 0 and not state["landed"]  # into the overlay, not the folder
    assert after["own_maker"] and after["maker"] != a["maker"]


async def _up(forks: ForkServer) -> ForkState:
    for _ in range(1200):
        if forks.state is not ForkState.STARTING:
            break
        await asyncio.sleep(0.05)
    return forks.state


def test_a_commands_forkserver_is_replaced_for_the_sdk() -> None:
    """A daemon with command routines only preloads no SDK (a command run imports none); the
    first agent routine replaces its forkserver with one that does, and a run forked after
    has the SDK in it. The light preload, too, leaves no thread or descriptor (UP)."""

    async def fork_state(forks: ForkServer) -> dict[str, Any]:
        proc = await forks.spawn([sys.executable, STATE], worker_env())
        assert proc.stdin is not None
        proc.stdin.close()
        return await _read_state(proc)

    async def go() -> tuple[dict[str, Any], dict[str, Any], int | None, int | None]:
        forks = ForkServer()
        try:
            forks.keep(True, worker_env(), sdk=False)
            assert await _up(forks) is ForkState.UP, forks.why
            light, light_pid = await fork_state(forks), forks.pid
            # Its one overlay maker, whose channel is the run's one descriptor beyond stdio.
            assert len(overlay_makers(forks)) == (overlay_unavailable() is None)
            forks.keep(True, worker_env(), sdk=False)  # still commands only: kept as it is
            assert forks.pid == light_pid
            forks.keep(True, worker_env(), sdk=True)
            assert forks.pid != light_pid  # replaced at once, not once the first is idle
            assert await _up(forks) is ForkState.UP, forks.why
            return light, await fork_state(forks), light_pid, forks.pid
        finally:
            await forks.close()

    light, full, light_pid, full_pid = asyncio.run(go())
    assert not light["has_anthropic"]
    assert light["threads"] == 1
    only_the_overlay_makers_channel_beyond_stdio(light)
    assert full["has_anthropic"]
    assert light_pid != full_pid


def test_the_forkserver_refuses_a_control_socket_whose_peer_is_not_its_parent() -> None:
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    with ours, theirs:
        # Started through a shell, so its parent is the shell, not us (the socket's peer).
        cmd = " ".join([*BARE_FORKSERVER, str(theirs.fileno())]) + "; true"
        done = subprocess.run(
            ["sh", "-c", cmd],
            check=False,
            pass_fds=(theirs.fileno(),),
            capture_output=True,
            text=True,
            timeout=60,
            env={**os.environ, "PYTHONPATH": str(REPO)},
        )
        assert "the control socket's peer is pid" in done.stderr
        theirs.close()
        ours.settimeout(5)
        assert ours.recv(100) == b""  # never "ready"


def _run_fake(tmp_path: Path, forks: ForkServer) -> WorkerProcess:
    wp = WorkerProcess(
        make_job(tmp_path),
        log=RunLog(tmp_path / "run.jsonl"),
        timeout_sec=60,
        argv=[sys.executable, FAKE, "ok"],
        forks=forks,
    )
    return wp


def test_a_run_is_spawned_and_says_why_when_the_forkserver_is_not_up(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    async def go() -> tuple[WorkerProcess, str | None]:
        wp = _run_fake(tmp_path, ForkServer(BARE_FORKSERVER))
        out = await wp.run()
        return wp, out.result.status if out.result else out.error

    caplog.set_level(logging.INFO, "vinos.spawn")
    wp, status = asyncio.run(go())
    assert (wp.forked, status) == (False, "ok")
    assert "spawning the worker (the forkserver is not started: no run was due)" in caplog.text


def test_a_run_asked_for_while_the_forkserver_starts_waits_for_it_and_is_forked(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A typed run that starts the forkserver (the daemon idle past the keep window) waits
    for it instead of spawning a second cold interpreter beside it."""

    async def go() -> tuple[WorkerProcess, str | None, ForkState]:
        forks = ForkServer(BARE_FORKSERVER)
        forks.keep(True, worker_env())
        starting = forks.state
        wp = _run_fake(tmp_path, forks)
        out = await wp.run()
        await forks.close()
        assert starting is ForkState.STARTING
        return wp, out.result.status if out.result else out.error, forks.state

    caplog.set_level(logging.INFO)
    wp, status, state = asyncio.run(go())
    assert (wp.forked, status) == (True, "ok"), caplog.text
    assert "forked by the forkserver" in caplog.text
    assert "forkserver stopped (pid" in caplog.text
    assert state is ForkState.DOWN


def test_a_forkserver_that_fails_to_start_leaves_runs_to_a_plain_spawn(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    async def go() -> tuple[WorkerProcess, str | None, ForkState]:
        forks = ForkServer([sys.executable, "-c", "import sys; sys.exit(3)"])
        forks.keep(True, worker_env())
        for _ in range(600):
            if forks.state is not ForkState.STARTING:
                break
            await asyncio.sleep(0.05)
        wp = _run_fake(tmp_path, forks)
        out = await wp.run()
        await forks.close()
        return wp, out.result.status if out.result else out.error, forks.state

    caplog.set_level(logging.INFO)
    wp, status, state = asyncio.run(go())
    assert (wp.forked, status) == (False, "ok")
    assert "forkserver failed: ConnectionError: it exited while importing" in caplog.text
    assert "spawning the worker (the forkserver is failed: ConnectionError" in caplog.text
    assert state is ForkState.DOWN


def test_a_worker_of_a_forkserver_that_dies_ends_with_it(tmp_path: Path) -> None:
    """Workers die with their supervisor: through the forkserver, whose PDEATHSIG follows the
    daemon, and the worker's own against the forkserver."""

    async def go() -> int | None:
        forks = await started_forkserver()
        wp = WorkerProcess(
            make_job(tmp_path),
            log=RunLog(tmp_path / "run.jsonl"),
            timeout_sec=60,
            argv=[sys.executable, "-P", "-m", "worker"],  # the real worker: it sets PDEATHSIG
            forks=forks,
        )
        task = asyncio.ensure_future(wp.run())
        for _ in range(600):
            if wp.pid is not None:
                break
            await asyncio.sleep(0.05)
        assert wp.forked and forks.pid is not None
        os.kill(forks.pid, 9)
        out = await asyncio.wait_for(task, 60)
        await forks.close()
        return out.returncode

    assert asyncio.run(go()) == -9


@pytest.mark.slow
def test_a_daemon_forks_a_run_while_one_is_due_and_still_never_loads_the_sdk(
    tmp_path: Path, not_root: None
) -> None:
    """Through a real daemon and the real worker on the Anthropic route: a routine due every
    minute keeps the forkserver up; a run then is forked (the daemon's log says so)
    and talks to the fake Anthropic server; the daemon still has neither the SDK nor `worker`
    loaded (its `ping` report and /proc/PID/maps, as test_daemon_agent.py checks them)."""
    from tests.fakes import FakeAnthropic
    from tests.fakes import anthropic_replies as A
    from tests.supervisor.daemonkit import DaemonProcess, command_routine, write_routine
    from tests.supervisor.test_daemon_agent import API_KEY, agent_routine

    with FakeAnthropic() as claude:
        claude.add(A.text("# Report\n\nAll quiet today."))
        write_routine("looker", agent_routine())
        write_routine("ticker", command_routine("true"))  # due each minute: keeps it wanted
        env = {"ANTHROPIC_BASE_URL": claude.url, "ANTHROPIC_API_KEY": API_KEY}
        d = DaemonProcess(tmp_path, extra_env=env, timings={"forkserver": True}).start()
        deadline = time.monotonic() + 60
        while "forkserver up" not in d.log() and time.monotonic() < deadline:
            time.sleep(0.1)
        assert "forkserver up" in d.log(), d.log()
        assert ", for commands)" not in d.log()  # an agent routine: the SDKs preloaded
        fin = d.request("run", {"name": "looker"})
        assert fin["status"] == "ok", fin
        assert len(claude.messages) == 1
        run_id = fin["run_id"]
        assert f"{run_id}: worker pid" in d.log() and "forked by the forkserver" in d.log()
        assert d.request("ping")["loaded_modules"] == []
        maps = Path(f"/proc/{d.pid}/maps").read_text()
        for lib in ("pydantic_core", "jiter"):
            assert lib not in maps
        forkservers = [
            p for p in psutil.Process(d.pid).children() if "forkserver" in " ".join(p.cmdline())
        ]
        assert len(forkservers) == 1
        with pytest.raises(PermissionError):  # not dumpable: the keys in transit stay there
            Path(f"/proc/{forkservers[0].pid}/environ").read_bytes()
        assert d.stop() == 0
        assert not forkservers[0].is_running()


@pytest.mark.slow
def test_a_typed_run_with_the_daemon_up_and_nothing_due_is_forked(
    tmp_path: Path, not_root: None
) -> None:
    """The daemon's start counts as a use: its forkserver comes up with nothing due, so the
    run a person types next starts as a scheduled one does (forked), not from a cold spawn.
    Its routines are commands only: the forkserver preloads no SDK (`--commands`)."""
    from tests.supervisor.daemonkit import DaemonProcess, command_routine, write_routine

    # Due at 06:00 only, once a year: nothing is due within FORK_AHEAD_SEC of the test.
    write_routine("hello", command_routine("echo hi", schedule='cron = "0 6 1 1 *"'))
    d = DaemonProcess(tmp_path, timings={"forkserver": True}).start()
    deadline = time.monotonic() + 60
    while "forkserver up" not in d.log() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert "forkserver up" in d.log(), d.log()
    assert ", for commands)" in d.log()
    fin = d.request("run", {"name": "hello"})
    assert fin["status"] == "ok", fin
    assert f"{fin['run_id']}: worker pid" in d.log() and "forked by the forkserver" in d.log()
    assert d.stop() == 0
