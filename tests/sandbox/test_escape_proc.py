"""Escape suite, processes: host processes, signals, ptrace, inherited fds, the environment,
capabilities, and typing into the user's terminal (TIOCSTI, TIOCLINUX) on a real pty."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.sandbox.sandbox_testkit import REPO, Box, python_in_sandbox

# x86_64 numbers are used inside the sandbox's python3; resolve them for this machine.
import pyseccomp as sc  # isort: skip

NR = {n: sc.resolve_syscall(sc.Arch.NATIVE, n) for n in ("ioctl", "ptrace", "process_vm_readv")}


@pytest.fixture
def host_sleeper() -> Iterator[subprocess.Popen[bytes]]:
    """A host process the sandbox must not see, signal or trace."""
    proc = subprocess.Popen(["sleep", "987.654"])
    yield proc
    proc.kill()
    proc.wait()


def test_host_processes_are_invisible(box: Box, host_sleeper: subprocess.Popen[bytes]) -> None:
    r = box.run(
        "tr '\\0' ' ' < /proc/1/cmdline; echo;"
        " for p in /proc/[0-9]*; do tr '\\0' ' ' < $p/cmdline; echo; done;"
        f" kill -0 {host_sleeper.pid} && echo SIG''NALLED;"
        f" kill -0 {os.getpid()} && echo SIG''NALLED"
    )
    lines = r.stdout.splitlines()
    assert lines[0].startswith("/usr/bin/bwrap ")  # pid 1 is the sandbox's own init
    # Every process in sight is the sandbox's: its init, the shell, and tr.
    assert {line.split(" ")[0] for line in lines if line} <= {
        "/usr/bin/bwrap",
        "/usr/bin/bash",
        "tr",
    }
    assert "987.654" not in r.stdout
    assert "SIGNALLED" not in r.stdout
    assert "No such process" in r.stderr
    assert host_sleeper.poll() is None


def test_ptrace_and_process_vm_of_an_outside_process_fail(
    box: Box, host_sleeper: subprocess.Popen[bytes]
) -> None:
    code = f"""
import ctypes, errno
libc = ctypes.CDLL(None, use_errno=True)
def err(r):
    return "ok" if r >= 0 else errno.errorcode[ctypes.get_errno()]
print("attach-host", err(libc.syscall({NR["ptrace"]}, 16, {host_sleeper.pid}, 0, 0)))
print("attach-pid1", err(libc.syscall({NR["ptrace"]}, 16, 1, 0, 0)))
print("seize-self-parent", err(libc.syscall({NR["ptrace"]}, 0x4206, {os.getppid()}, 0, 0)))
print("vm-read", err(libc.syscall({NR["process_vm_readv"]}, 1, 0, 0, 0, 0, 0)))
"""
    r = box.run(python_in_sandbox(code) + "; cat /proc/1/environ /proc/1/mem 2>&1 | head -c 300")
    lines = r.stdout.splitlines()
    assert dict(line.split() for line in lines[:4]) == {
        "attach-host": "EPERM",
        "attach-pid1": "EPERM",
        "seize-self-parent": "EPERM",
        "vm-read": "EPERM",
    }
    assert box.marker not in r.stdout
    status = Path(f"/proc/{host_sleeper.pid}/status").read_text()
    assert "TracerPid:\t0" in status


def test_an_fd_the_caller_had_open_is_not_inherited(box: Box, tmp_path: Path) -> None:
    secret = tmp_path / "open-secret"
    secret.write_text(box.marker)
    fd = os.open(secret, os.O_RDONLY)
    os.set_inheritable(fd, True)  # even an inheritable fd must not reach the sandbox
    try:
        r = box.run(f"ls /proc/$$/fd; cat /proc/self/fd/{fd} <&{fd}; cat /dev/fd/{fd}")
    finally:
        os.close(fd)
    assert box.marker not in r.stdout + r.stderr
    assert r.stdout.split()[:3] == ["0", "1", "2"] and len(r.stdout.split()) == 3


def test_only_home_path_term_lang_reach_the_environment(
    box: Box, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", box.marker)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", box.marker)
    monkeypatch.setenv("SSH_AUTH_SOCK", "/run/user/1/ssh")
    monkeypatch.setenv("DBUS_SESSION_BUS_ADDRESS", "unix:path=/run/user/1/bus")
    r = box.run("tr '\\0' '\\n' < /proc/$$/environ; echo ---; tr '\\0' '\\n' < /proc/1/environ")
    own, init = r.stdout.split("---\n")
    names = {line.split("=", 1)[0] for line in own.splitlines() if line}
    # bash itself exports PWD, SHLVL and _ in every shell: they come from no one else.
    assert (
        {"HOME", "PATH", "TERM", "LANG"}
        <= names
        <= {
            "HOME",
            "PATH",
            "TERM",
            "LANG",
            "PWD",
            "SHLVL",
            "_",
        }
    )
    assert box.marker not in r.stdout
    assert "SSH_AUTH_SOCK" not in r.stdout and "DBUS" not in r.stdout
    # bwrap's own environ block (pid 1 inside) is just as clean.
    assert {line.split("=", 1)[0] for line in init.splitlines() if line} <= names


@pytest.mark.parametrize("network", [False, True])
def test_the_api_key_never_reaches_the_sandbox(
    box: Box, monkeypatch: pytest.MonkeyPatch, network: bool
) -> None:
    # The worker holds the key in its environment; no sandboxed command ever gets it, also
    # with network on (a routine from a gallery could otherwise send it anywhere).
    key = "sk-ant-" + box.marker
    monkeypatch.setenv("ANTHROPIC_API_KEY", key)
    r = box.run(
        "echo key=$ANTHROPIC_API_KEY; for p in /proc/[0-9]*; do cat $p/cmdline $p/environ; done",
        network=network,
    )
    assert r.stdout.startswith("key=\n")
    assert key not in r.stdout


def test_no_capabilities(box: Box) -> None:
    r = box.run(
        "grep -E '^(CapInh|CapPrm|CapEff|CapBnd|CapAmb|NoNewPrivs|Seccomp):' /proc/self/status"
    )
    fields = dict(line.split(":\t") for line in r.stdout.splitlines())
    for cap in ("CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"):
        assert int(fields[cap], 16) == 0, r.stdout
    assert fields["NoNewPrivs"] == "1"
    assert fields["Seccomp"] == "2"  # a filter is loaded


TIOC_PROBE = """
import ctypes, errno, os, sys
libc = ctypes.CDLL(None, use_errno=True)
def ioctl(fd, req):
    r = libc.syscall({nr}, fd, ctypes.c_ulong(req), ctypes.c_char_p(b"x"))
    return "ok" if r == 0 else errno.errorcode[ctypes.get_errno()]
fds = [int(a) for a in sys.argv[1:]] or [os.open("/dev/null", os.O_RDWR)]
for fd in fds:
    # TIOCSTI, TIOCSTI with the upper bits set (CVE-2019-10063), TIOCLINUX
    print(fd, ioctl(fd, 0x5412), ioctl(fd, 0x100005412), ioctl(fd, 0x541C))
"""


def test_tiocsti_and_tioclinux_are_denied_by_seccomp(box: Box) -> None:
    """On /dev/null the kernel says ENOTTY; EPERM can only come from the filter."""
    code = TIOC_PROBE.format(nr=NR["ioctl"])
    r = box.run(python_in_sandbox(code))
    assert r.exit_code == 0, r.stderr
    assert r.stdout.split()[1:] == ["EPERM", "EPERM", "EPERM"]
    # Control: the same probe outside the sandbox gets the kernel's answer.
    host = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout
    assert host.split()[1:] == ["ENOTTY", "ENOTTY", "ENOTTY"]


PTY_DRIVER = """
import fcntl, json, os, select, subprocess, sys, termios, traceback, tty
sys.path.insert(0, {repo!r})
import sandbox
from sandbox import seccomp
from sandbox.argv import build_argv
from sandbox.host import Host

out = {{}}
try:
    # A new session whose controlling terminal is the pty slave, as a terminal emulator's.
    os.setsid()
    slave = os.open({slave!r}, os.O_RDWR)
    fcntl.ioctl(slave, termios.TIOCSCTTY, 0)
    tty.setraw(slave)  # so any injected byte would be readable at once
    for fd in (0, 1, 2):
        os.dup2(slave, fd)
    policy = sandbox.routine_policy(
        home={home!r}, workspace={workspace!r}, scratch_dir={scratch!r}, network=False
    )
    # 1. The runner, called from this terminal: the command gets no tty fd and no /dev/tty.
    res = sandbox.run_shell({attack!r}, policy, timeout_sec=30)
    out["runner"], out["runner_err"] = res.stdout, res.stderr
    # 2. bwrap with the slave as the command's stdin, which the runner never does: the
    #    seccomp filter alone stands between the command and the terminal.
    fd = seccomp.write_fd()
    argv = build_argv(policy, Host.probe(policy), fd, {attack_fd0!r})
    proc = subprocess.run(
        argv, stdin=slave, capture_output=True, pass_fds=(fd,), env=dict(policy.env)
    )
    out["direct"] = (proc.stdout + proc.stderr).decode()
    # Anything injected would now wait in the terminal's input queue.
    ready, _, _ = select.select([slave], [], [], 0.3)
    out["injected"] = os.read(slave, 1024).decode("latin-1") if ready else ""
except BaseException:
    out["crash"] = traceback.format_exc()
with open({report!r}, "w") as f:
    json.dump(out, f)
"""


def test_no_tiocsti_or_tioclinux_into_a_real_controlling_pty(box: Box, tmp_path: Path) -> None:
    master, slave = os.openpty()
    slave_name = os.ttyname(slave)
    os.close(slave)
    probe = TIOC_PROBE.format(nr=NR["ioctl"])
    attack = (
        python_in_sandbox(probe) + " 0 1 2; : </dev/tty && echo HAVE-TTY;"
        " ls -l /proc/$$/fd | grep -c pts"
    )
    report = tmp_path / "report.json"
    driver = textwrap.dedent(PTY_DRIVER).format(
        repo=str(REPO),
        slave=slave_name,
        home=str(box.home),
        workspace=str(box.workspace),
        scratch=str(box.scratch),
        attack=attack,
        attack_fd0=python_in_sandbox(probe) + " 0",
        report=str(report),
    )
    try:
        subprocess.run([sys.executable, "-c", driver], timeout=60, check=False)
    finally:
        os.close(master)
    out = json.loads(report.read_text())
    assert "crash" not in out, out["crash"]
    runner = out["runner"].splitlines()
    assert [line.split()[1:] for line in runner[:3]] == [["EPERM", "EPERM", "EPERM"]] * 3
    assert "HAVE-TTY" not in out["runner"]
    assert "/dev/tty: No such file" in out["runner_err"]
    assert runner[-1].strip() == "0"  # no fd of the command is a pty
    # The fd really is the terminal here, and the filter refuses every form of the ioctl.
    assert out["direct"].split() == ["0", "EPERM", "EPERM", "EPERM"], out["direct"]
    assert out["injected"] == ""
