"""The egress proxy parses what a hostile sandbox sends, so it runs in a process of its own
that holds nothing of the worker's: no environment (the worker's holds the API key), no fd
beyond its stdin pipe, /dev/null, the log and the holder's channel. It ends with the call, by
its own exit path (EOF on its stdin), and when the worker dies."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import psutil
import pytest

from sandbox import run_shell
from sandbox.netns import PROXY, confined_argv
from tests.sandbox.sandbox_testkit import REPO, Box

SECRET = "sk-ant-api03-egress-test-secret"


def proxy_processes() -> list[psutil.Process]:
    found = []
    for child in psutil.Process().children(recursive=True):
        try:
            if PROXY in child.cmdline():
                found.append(child)
        except psutil.Error:
            continue
    return found


def proxy_python(pid: int) -> psutil.Process:
    """The interpreter that runs the proxy: `pid` (what Popen started: bwrap, which confines
    it) or the one of its descendants whose program is not bwrap."""
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        top = psutil.Process(pid)
        for p in (top, *top.children(recursive=True)):
            try:
                cmd = p.cmdline()
            except psutil.Error:
                continue
            if PROXY in cmd and os.path.basename(cmd[0]) != "bwrap":
                return p
        time.sleep(0.05)
    raise AssertionError(f"no proxy interpreter below {pid}")


def fd_kinds(pid: int) -> dict[int, str]:
    """Each open fd of `pid`: "socket", "pipe", "/dev/null" or its path."""
    kinds = {}
    for name in os.listdir(f"/proc/{pid}/fd"):
        try:
            link = os.readlink(f"/proc/{pid}/fd/{name}")
        except FileNotFoundError:
            continue  # closed since the listing: the interpreter still starting
        kinds[int(name)] = link.split(":")[0] if link.startswith(("socket:", "pipe:")) else link
    return kinds


WORKER = """
import os, socket, sys, time
sys.path.insert(0, sys.argv[1])
from sandbox.egress import EgressPolicy
from sandbox.netns import ProxyProcess
proxy = ProxyProcess(EgressPolicy(None))
holder = socket.socket(fileno=os.dup(proxy.start()))  # the holder's copy, as bwrap inherits it
proxy.handed_over()
# As the holder does: hand over a listener; the proxy starts once a connection is pending.
listener = socket.create_server(("127.0.0.1", 0))
address = listener.getsockname()
socket.send_fds(holder, [b"L"], [listener.fileno()])
holder.close()
listener.close()
client = socket.create_connection(address)
while proxy.pid is None:
    time.sleep(0.01)
print(proxy.pid, flush=True)
if sys.stdin.readline() == "eof\\n":  # the proxy's own way out: EOF on its stdin
    proxy._proc.stdin.close()
    print(proxy._proc.wait(), flush=True)
else:
    print(proxy.close(), flush=True)
time.sleep(600)
"""


def start_worker(env: dict[str, str]) -> tuple[subprocess.Popen[str], int]:
    """A stand-in worker (its environment may hold the API key) that starts one proxy."""
    worker = subprocess.Popen(
        [sys.executable, "-c", WORKER, str(REPO)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env=env,
    )
    assert worker.stdout is not None
    return worker, int(worker.stdout.readline())


def test_the_proxy_process_holds_no_secret_of_the_worker(not_root: None) -> None:
    worker, started = start_worker({**os.environ, "ANTHROPIC_API_KEY": SECRET})
    pid = proxy_python(started).pid
    try:
        assert worker.stdin is not None and worker.stdout is not None
        with open(f"/proc/{worker.pid}/environ", "rb") as f:
            assert SECRET.encode() in f.read()  # the worker holds one
        assert pid != worker.pid
        with open(f"/proc/{started}/environ", "rb") as f:
            assert f.read() == b""  # what the worker gave: nothing
        with open(f"/proc/{pid}/environ", "rb") as f:
            assert f.read() in (b"", b"PWD=/\0")  # bwrap adds where it starts the proxy
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            assert SECRET.encode() not in f.read()

        def beyond_stdio() -> list[str]:
            return sorted(v for k, v in fd_kinds(pid).items() if k > 2)

        # The interpreter holds its script open while it starts: wait that out.
        deadline = time.monotonic() + 30
        while beyond_stdio().count("socket") < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        kinds = fd_kinds(pid)
        # 0: the pipe whose EOF ends it; 1: /dev/null; 2: the log; the holder's listener, and
        # the one connection the stand-in worker's client opened. Nothing else.
        assert kinds[0] == "pipe" and kinds[1] == "/dev/null"
        assert beyond_stdio() == ["socket", "socket"], kinds
        worker.stdin.write("close\n")
        worker.stdin.flush()
        # The call's end: EOF and SIGKILL, whichever ends it first; either way reaped.
        assert worker.stdout.readline() in ("0\n", "-9\n")
        assert not psutil.pid_exists(started)
        with contextlib.suppress(psutil.NoSuchProcess):
            psutil.Process(pid).wait(timeout=30)  # the confined interpreter ends with it
    finally:
        worker.kill()
        worker.wait()


def test_the_proxy_cannot_open_the_api_key_file(not_root: None, tmp_path: Path) -> None:
    """Code run inside the proxy (a parser bug a sandbox's bytes reach) sees the files its
    own root shows: no home, so no ~/.vinos/secrets/anthropic-key, no file of the user's
    elsewhere, and no /proc entry of the worker. Read through /proc/PID/root, the proxy's own
    view of the file system."""
    key = tmp_path / ".vinos/secrets/anthropic-key"
    key.parent.mkdir(parents=True)
    key.write_text(SECRET)
    home_key = Path.home() / ".vinos/secrets/anthropic-key"
    worker, started = start_worker(dict(os.environ))
    try:
        proxy = proxy_python(started)
        root = f"/proc/{proxy.pid}/root"
        assert os.path.exists(f"{root}/usr/bin")  # its root is readable to us
        assert not os.path.exists(f"{root}{key}")
        assert not os.path.exists(f"{root}{home_key}")
        assert not os.path.exists(f"{root}{Path.home()}")
        assert not os.path.exists(f"{root}{REPO}/pyproject.toml")  # only its own package
        assert os.path.exists(f"{root}{PROXY}")
        assert not os.path.exists(f"{root}/proc/{worker.pid}/environ")
        # Its /tmp is empty but for the way to its own package, when that lives under /tmp (as
        # in `make test`'s copy of the tree, /tmp/vinos-routine.*): the bind's mount point.
        inside = Path(PROXY).relative_to("/tmp").parts[:1] if PROXY.startswith("/tmp/") else ()
        assert os.listdir(f"{root}/tmp") == list(inside)
    finally:
        worker.kill()
        worker.wait()


def test_the_proxy_ends_itself_on_eof(not_root: None) -> None:
    worker, pid = start_worker(dict(os.environ))
    try:
        assert worker.stdin is not None and worker.stdout is not None
        psutil.Process(pid)  # it is running
        worker.stdin.write("eof\n")
        worker.stdin.flush()
        assert worker.stdout.readline() == "0\n"  # it exited by itself, with 0
    finally:
        worker.kill()
        worker.wait()


def test_the_proxy_ends_when_the_worker_dies(not_root: None) -> None:
    worker, pid = start_worker(dict(os.environ))
    try:
        proxy = psutil.Process(pid)
        inner = proxy_python(pid)  # the confined interpreter (bwrap's child) ends too
        assert proxy.is_running() and inner.is_running()
    finally:
        worker.kill()
        worker.wait()
    proxy.wait(timeout=30)  # raises psutil.TimeoutExpired if it outlived the worker
    with contextlib.suppress(psutil.NoSuchProcess):
        inner.wait(timeout=30)


def test_a_networked_call_runs_its_proxy_apart_and_ends_it(
    box: Box, monkeypatch: pytest.MonkeyPatch
) -> None:
    """During a real call with network = true: the proxy is a process of its own without the
    worker's API key, the sandbox holds no socket of ours, and the proxy is gone after."""
    monkeypatch.setenv("ANTHROPIC_API_KEY", SECRET)
    # A read-only declared folder: the sandbox sees the host's change at once. (A file made
    # in the scratch dir during the call would not show: it is an overlay's lower layer.)
    gate = box.home / ".config" / "gate"
    seen: dict[str, object] = {}

    def inspect() -> None:
        deadline = time.monotonic() + 60
        try:
            while not (found := proxy_processes()) and time.monotonic() < deadline:
                time.sleep(0.05)
            if found:
                pid = found[0].pid
                seen["pid"] = pid
                with open(f"/proc/{pid}/environ", "rb") as f:
                    seen["environ"] = f.read()
        finally:
            gate.touch()

    watcher = threading.Thread(target=inspect)
    watcher.start()
    result = run_shell(
        # A first connection starts the proxy; then the shell closes it and waits.
        "exec 3<>/dev/tcp/127.0.0.1/3128; exec 3>&-; "
        f"while [ ! -e {gate} ]; do sleep 0.05; done; ls -l /proc/self/fd/; env",
        box.policy(network=True),
        timeout_sec=120,
    )
    watcher.join()
    assert result.exit_code == 0, result
    assert "pid" in seen, "no egress proxy process ran during the call"
    assert seen["pid"] != os.getpid()
    assert seen["environ"] == b""
    assert "socket:" not in result.stdout  # the holder's channel stays outside the sandbox
    assert SECRET not in result.stdout
    assert proxy_processes() == []


def test_the_sandbox_reaches_the_proxy_over_tcp_on_its_own_loopback(box: Box) -> None:
    """No AF_UNIX socket is needed inside the sandbox (seccomp may refuse socket(AF_UNIX))."""
    result = run_shell(
        "exec 3<>/dev/tcp/127.0.0.1/3128; printf 'CONNECT 127.0.0.1:443 HTTP/1.1\\r\\n\\r\\n' >&3;"
        " head -c 12 <&3",
        box.policy(network=True),
        timeout_sec=60,
    )
    assert result.stdout == "HTTP/1.1 403", result


def test_an_unstartable_proxy_is_a_clear_error(box: Box, tmp_path: Path) -> None:
    result = run_shell(
        "exec 3<>/dev/tcp/127.0.0.1/3128 && cat <&3",
        box.policy(network=True),
        timeout_sec=30,
        proxy_prefix=[str(tmp_path / "none")],
    )
    assert result.error is not None
    assert result.error.startswith("the egress proxy could not be started: ")
    assert proxy_processes() == []


def test_a_copied_interpreter_runs_confined(tmp_path: Path, not_root: None) -> None:
    """A worker in a venv made with --copies runs an interpreter outside /usr and outside
    Python's prefix: the confinement binds that file, or no networked call could start its
    proxy."""
    venv = tmp_path / "venv"
    subprocess.run(
        [os.path.realpath(sys.executable), "-m", "venv", "--copies", "--without-pip", venv],
        check=True,
    )
    python = str(venv / "bin/python")
    argv = confined_argv([python, "-I", "-S", "-c", "print('confined ok')"])
    out = subprocess.run(argv, check=False, capture_output=True, text=True, env={}, timeout=60)
    assert out.stdout == "confined ok\n", out.stderr
