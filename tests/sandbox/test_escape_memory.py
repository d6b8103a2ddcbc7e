"""Escape suite, memory no process maps and sockets in declared folders: memfds, SysV shared
memory and a /tmp larger than the run's budget cannot be made; /dev/shm does not exist; a
Unix socket in a declared home folder cannot be reached (socket(AF_UNIX) is refused), while
socketpair() and the tools we run ourselves (bash, coreutils, python, getent, id) still work."""

from __future__ import annotations

import socket
import threading

from sandbox import Limits
from tests.sandbox.sandbox_testkit import Box, python_in_sandbox

MiB = 1024 * 1024


def test_six_60_mb_memfds_cannot_be_made(box: Box) -> None:
    """Never mapped, a memfd's pages are in no process's PSS: the watchdog would not see them,
    so seccomp refuses memfd_create (and memfd_secret) outright."""
    code = """
import errno, os
fds = []
try:
    for i in range(6):
        fd = os.memfd_create(f"hoard{i}")
        os.ftruncate(fd, 60 << 20)
        os.pwrite(fd, b"x" * (60 << 20), 0)
        fds.append(fd)
    print("MADE", len(fds))
except OSError as exc:
    print("refused", errno.errorcode[exc.errno], len(fds))
"""
    r = box.run(python_in_sandbox(code), limits=Limits(run_memory_mb=128))
    assert r.error is None, r.error
    assert r.stdout == "refused EPERM 0\n", r.stdout + r.stderr


def test_sysv_shared_memory_cannot_be_made(box: Box) -> None:
    code = """
import ctypes, errno
libc = ctypes.CDLL(None, use_errno=True)
IPC_PRIVATE, IPC_CREAT = 0, 0o1000
shmid = libc.shmget(IPC_PRIVATE, ctypes.c_size_t(60 << 20), IPC_CREAT | 0o600)
print("shmget", shmid, errno.errorcode.get(ctypes.get_errno(), "0"))
at = libc.shmat(0, None, 0)
print("shmat", errno.errorcode.get(ctypes.get_errno(), "0"))
"""
    r = box.run(python_in_sandbox(code), limits=Limits(run_memory_mb=128))
    assert r.stdout == "shmget -1 EPERM\nshmat EPERM\n", r.stdout + r.stderr


def test_tmp_is_sized_from_the_run_memory_budget(box: Box) -> None:
    """With max_run_memory_mb = 128, /tmp holds a quarter of it (32 MB), however large
    tmp_size_mb is: what /tmp holds is memory no process maps, so it comes out of the budget."""
    r = box.run(
        "head -c 200M /dev/zero > /tmp/big; echo rc=$?; wc -c < /tmp/big; stat -f -c '%b %S' /tmp",
        limits=Limits(run_memory_mb=128, tmp_size_mb=512),
        timeout=60,
    )
    rc, written, blocks, size = r.stdout.split()
    assert rc == "rc=1" and "No space left on device" in r.stderr
    assert int(written) <= 32 * MiB
    assert int(blocks) * int(size) == 32 * MiB


def test_memory_held_in_tmp_leaves_less_for_the_processes(box: Box) -> None:
    """The watchdog's cap for the processes is the budget less /tmp's size, kept for /tmp
    whether it is used or not: 30 MB in /tmp and a 100 MB process would pass 128 MB
    together, so the process is over the 96 MB left to it and the call is killed."""
    hog = "/usr/bin/python3 -c 'import time; b = b\"x\" * (100 << 20); time.sleep(60)'"
    r = box.run(
        f"head -c 30M /dev/zero > /tmp/a && {hog}; echo survived",
        limits=Limits(run_memory_mb=128, address_space_mb=1024),
        timeout=60,
    )
    assert r.error is not None and r.error.startswith("killed: the command's processes used")
    assert "over the 96 MB that max_run_memory_mb = 128 leaves beside /tmp's 32 MB" in r.error
    assert "survived" not in r.stdout


def test_dev_shm_does_not_exist(box: Box) -> None:
    r = box.run("ls -d /dev/shm; touch /dev/shm/x; echo rc=$?")
    assert r.stdout == "rc=1\n"
    assert "No such file or directory" in r.stderr


_CONNECT = """
import errno, socket
try:
    s = socket.socket(socket.AF_UNIX, socket.SOCK_{kind})
    s.connect({path!r})
    print("CONNECTED", s.recv(100))
except OSError as exc:
    print("refused", errno.errorcode[exc.errno])
"""


def test_a_unix_socket_in_a_declared_folder_is_unreachable(box: Box) -> None:
    """Read-only binds do not stop connect(): a pathname socket inside a declared `home`
    folder would be reachable with the network off. socket(AF_UNIX) is refused instead."""
    folder = box.home / "notes"
    folder.mkdir()
    path = folder / "app.sock"
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(str(path))
    listener.listen(4)
    accepted: list[bool] = []

    def serve() -> None:
        try:
            conn, _ = listener.accept()
        except OSError:
            return
        accepted.append(True)
        conn.sendall(b"hello from the host\n")
        conn.close()

    server = threading.Thread(target=serve, daemon=True)
    server.start()
    try:
        for kind in ("STREAM", "DGRAM", "SEQPACKET"):
            code = _CONNECT.format(kind=kind, path=str(path))
            r = box.run(python_in_sandbox(code), declared=("~/notes",))
            assert r.stdout in ("refused EPERM\n", "refused EACCES\n"), r.stdout + r.stderr
        assert accepted == []
        # Control: the folder is visible, and the socket reachable from the host.
        r = box.run(f"test -S {path} && echo visible", declared=("~/notes",))
        assert r.stdout == "visible\n"
        control = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        control.connect(str(path))
        assert control.recv(100) == b"hello from the host\n"
        control.close()
    finally:
        listener.close()
        server.join(5)


def test_socketpair_and_our_own_tools_still_work(box: Box) -> None:
    code = """
import asyncio, socket
a, b = socket.socketpair()
a.sendall(b"ping")
print(b.recv(4).decode())
asyncio.run(asyncio.sleep(0))  # the event loop's self-pipe is a socketpair
print("loop ok")
"""
    r = box.run(python_in_sandbox(code))
    assert r.stdout == "ping\nloop ok\n", r.stdout + r.stderr
    # glibc tries nscd over a Unix socket first and falls back to the files.
    r = box.run("getent passwd root | cut -d: -f1; id -un >/dev/null && echo id ok; echo x | sort")
    assert r.stdout == "root\nid ok\nx\n", r.stdout + r.stderr


def test_the_budget_splits_between_tmp_and_the_processes() -> None:
    """The arithmetic sandbox/limits.py states (the argv sizes /tmp with tmp_mb): a quarter of
    the budget at most, the processes get the rest, and the two never pass the budget."""
    from sandbox.limits import process_memory_mb, tmp_mb

    for budget, tmp_size, tmp in ((2048, 64, 64), (128, 512, 32), (128, 16, 16), (2, 64, 1)):
        limits = Limits(run_memory_mb=budget, tmp_size_mb=tmp_size)
        assert tmp_mb(limits) == tmp
        assert tmp_mb(limits) + process_memory_mb(limits) == budget
