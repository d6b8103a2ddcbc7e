"""The overlay maker: the writable dirs of a shell call as overlays on one sized tmpfs, in a
user and mount namespace that bwrap then joins.

Started once per runner process (sandbox/overlay.py, `python -I -S overlayholder.py SOCK_FD MNT`),
never imported (only built-in modules: it starts fast and trusts nothing on sys.path), with an
empty environment and nothing of the worker's memory, so it is dumpable as any exec'd process
is: writing a new user namespace's uid_map needs that, and the worker is not dumpable
(worker/process.py no_dumping; a fork of it gets EACCES on /proc/self/uid_map). It reads one
request per SOCK_SEQPACKET message, `MNT\0BYTES\0INODES\0PATH...` with the fds [REPLY, DIR...],
and forks a child for it, which

1. unshares a user and a mount namespace, mapping only our own uid and gid, and makes every
   mount in it private (nothing it mounts shows anywhere else);
2. mounts a tmpfs of BYTES bytes and INODES inodes on MNT (an empty dir the runner made);
3. for each PATH, opens it again here one component at a time with O_NOFOLLOW and checks it
   is the very dir the runner sent as DIR (overlayfs refuses a lower dir whose mount is in
   another namespace, so DIR itself cannot be the lower dir), and mounts an overlay on
   MNT/m/N: lower PATH, upper MNT/u/N, work MNT/w/N (`userxattr`: the only kind a user
   namespace may write; `metacopy=off`: every file changed is whole in the upper dir);
4. sends over REPLY a descriptor of the tmpfs (SCM_RIGHTS) and its pid, then waits until the
   runner closes REPLY (the call is over) and exits. The runner reads the upper dirs through
   the tmpfs fd once the sandbox is gone (sandbox/copyback.py); meanwhile this child keeps
   the namespaces alive, and the runner starts bwrap (or the network holder then bwrap) under
   nsenter joining them (/proc/PID/ns/user and mnt), so bwrap binds MNT/m/N where PATH
   shows. Closing the tmpfs fd frees the tmpfs and its memory.
   On a failure it sends `E` and the reason instead.

So what a call writes in its writable dirs lands in the tmpfs, and the kernel stops it at
BYTES and INODES: however many processes write at once, there is no race with a poll.
With no PATH (the probe), it mounts one overlay on a lower dir in the tmpfs and checks that
a folder removed and made again works (it needs user xattrs on tmpfs, Linux >= 6.6).
Why a maker started once rather than a holder per call: an interpreter's start was most of a
shell call's cost (bench_sandbox); a fork of this small process is a fraction of a ms.
"""

import _ctypes
import _signal  # type: ignore[import-not-found]  # built in, no stub
import _socket
import os
import sys

CLONE_NEWUSER = 0x10000000
CLONE_NEWNS = 0x00020000
MS_REC = 0x4000
MS_PRIVATE = 1 << 18
MS_NOSUID = 0x2
MS_NODEV = 0x4
MAX_LAYERS = 40  # the writable dirs of one call: the workspace, the scratch dir, write folders
OVERLAY_OPTIONS = "userxattr,metacopy=off"
_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


class _Int(_ctypes._SimpleCData):  # type: ignore[type-arg]  # not subscriptable at run time
    _type_ = "i"


class _ULong(_ctypes._SimpleCData):  # type: ignore[type-arg]
    _type_ = "L"


class _Func(_ctypes.CFuncPtr):
    _flags_ = _ctypes.FUNCFLAG_CDECL | _ctypes.FUNCFLAG_USE_ERRNO
    _restype_ = _Int


class _Libc:
    """libc's unshare and mount through _ctypes, the C module alone: importing the ctypes
    package costs several ms more of the maker's start."""

    _handle = _ctypes.dlopen(None, os.RTLD_NOW)  # type: ignore[arg-type]  # None: ourselves

    def __init__(self) -> None:
        # The stubs ask for a CDLL; CFuncPtr reads only `_handle` of it.
        self.unshare = _Func(("unshare", self))  # type: ignore[arg-type]
        self.mount = _Func(("mount", self))  # type: ignore[arg-type]


def _errno() -> int:
    return int(_ctypes.get_errno())


class _Failed(Exception):
    """Why the overlays could not be built (sent back to the runner)."""


def _fail(what: str, err: int) -> None:
    raise _Failed(f"vinos-overlay: {what}: {os.strerror(err)}" if err else f"vinos-overlay: {what}")


def _write(path: str, text: str) -> None:
    fd = os.open(path, os.O_WRONLY)
    try:
        os.write(fd, text.encode())
    finally:
        os.close(fd)


def _mount(libc: _Libc, source: str, target: str, fstype: str, flags: int, data: str) -> None:
    args = (source.encode(), target.encode(), fstype.encode(), _ULong(flags), data.encode())
    if libc.mount(*args) != 0:
        _fail(f"mount {fstype} on {target}", _errno())


def _open_nofollow(path: str) -> int:
    """PATH opened from / one component at a time, following no symlink."""
    fd = os.open("/", _DIR)
    for part in path.split("/")[1:]:
        try:
            nfd = os.open(part, _DIR, dir_fd=fd)
        finally:
            os.close(fd)
        fd = nfd
    return fd


def serve(sock_fd: int, mnt: str) -> None:
    """Answer requests until the runner closes its end: a child per request. MNT, the empty
    dir the runner made for the tmpfs' mounts, is removed then, however the runner ended."""
    # The kernel reaps the children: none is left a zombie of ours once it has answered.
    _signal.signal(_signal.SIGCHLD, _signal.SIG_IGN)
    channel = _socket.socket(_socket.AF_UNIX, _socket.SOCK_SEQPACKET, 0, sock_fd)
    libc = _Libc()
    room = _socket.CMSG_SPACE(4 * (MAX_LAYERS + 1))
    while True:
        msg, anc, _, _ = channel.recvmsg(65536, room)
        fds = [
            int.from_bytes(data[i : i + 4], sys.byteorder)
            for level, kind, data in anc
            if level == _socket.SOL_SOCKET and kind == _socket.SCM_RIGHTS
            for i in range(0, len(data) - len(data) % 4, 4)
        ]
        if not msg and not fds:
            try:  # the runner is gone
                os.rmdir(mnt)
            finally:
                os._exit(0)
        if fds and os.fork() == 0:
            channel.close()
            _answer(libc, msg, fds)  # never returns
        for fd in fds:
            os.close(fd)


def answer_forked(msg: bytes, fds: list[int]) -> None:
    """In a fork of a runner that makes its overlays itself (sandbox/overlay.py
    make_overlays_in_process): close every fd but 0-2 and the request's (a pipe end kept
    open here would hold the runner's reads of bwrap open), then answer as a maker's child
    does. Never returns."""
    try:
        low = 3
        for fd in sorted(fds):
            os.closerange(low, fd)
            low = fd + 1
        os.closerange(low, 1 << 20)
        libc = _Libc()
    except BaseException:
        os._exit(1)
    _answer(libc, msg, fds)


def _answer(libc: _Libc, msg: bytes, fds: list[int]) -> None:
    """In the child: build the request's overlays, reply with the fds or why not, exit."""
    reply = _socket.socket(_socket.AF_UNIX, _socket.SOCK_SEQPACKET, 0, fds[0])
    try:
        try:
            words = msg.decode().split("\0")
            mnt, size, inodes, paths = words[0], int(words[1]), int(words[2]), words[3:]
            if len(paths) != len(fds) - 1:
                raise _Failed("vinos-overlay: a malformed request")
            root = _build(libc, mnt, size, inodes, list(zip(fds[1:], paths, strict=True)))
            data = root.to_bytes(4, sys.byteorder)
            pid = str(os.getpid()).encode()
            reply.sendmsg([b"T" + pid], [(_socket.SOL_SOCKET, _socket.SCM_RIGHTS, data)])
            os.close(root)
            reply.recv(1)  # EOF: the call is over, and so are its namespaces with this child
        except _Failed as exc:
            reply.sendmsg([b"E" + str(exc).encode()])
        except (OSError, ValueError, IndexError) as exc:
            reply.sendmsg([f"Evinos-overlay: overlay setup: {exc}".encode()])
    finally:
        os._exit(0)


def _build(libc: _Libc, mnt: str, size: int, inodes: int, layers: list[tuple[int, str]]) -> int:
    """Steps 1-3 in this process; a descriptor of the tmpfs."""
    uid, gid = os.getuid(), os.getgid()
    if libc.unshare(CLONE_NEWUSER | CLONE_NEWNS) != 0:
        _fail("unshare(user, mount)", _errno())
    try:
        _write("/proc/self/setgroups", "deny")
        _write("/proc/self/uid_map", f"{uid} {uid} 1")
        _write("/proc/self/gid_map", f"{gid} {gid} 1")
    except OSError as exc:
        _fail("user namespace setup", exc.errno or 0)
    if libc.mount(None, b"/", None, _ULong(MS_REC | MS_PRIVATE), None) != 0:
        _fail("make mounts private", _errno())
    # nosuid, nodev: nothing in the upper dirs acts as a device or a set-id program meanwhile.
    opts = f"size={size},nr_inodes={inodes},mode=0700"
    _mount(libc, "tmpfs", mnt, "tmpfs", MS_NOSUID | MS_NODEV, opts)
    try:
        os.chdir(mnt)  # the overlay options below name the layers relative to it: no ',' or ':'
        if not layers:
            _probe(libc)
        for i, (fd, path) in enumerate(layers):
            lower = _open_nofollow(path)
            a, b = os.fstat(lower), os.fstat(fd)
            if (a.st_dev, a.st_ino) != (b.st_dev, b.st_ino):
                _fail(f"{path} is no longer the dir the runner opened", 0)
            os.close(fd)
            for d in ("u", "w", "m"):
                os.makedirs(f"{d}/{i}", mode=0o700)
            data = f"lowerdir=/proc/self/fd/{lower},upperdir=u/{i},workdir=w/{i},{OVERLAY_OPTIONS}"
            _mount(libc, "overlay", f"m/{i}", "overlay", MS_NOSUID | MS_NODEV, data)
            os.close(lower)
        root = os.open(".", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        os.chdir("/")
    except OSError as exc:
        _fail("overlay setup", exc.errno or 0)
    return root


def _probe(libc: _Libc) -> None:
    """An overlay here that can remove a folder of its lower dir and make it again."""
    for d in ("l/d", "u/p", "w/p", "m/p"):
        os.makedirs(d, mode=0o700)
    data = f"lowerdir=l,upperdir=u/p,workdir=w/p,{OVERLAY_OPTIONS}"
    _mount(libc, "overlay", "m/p", "overlay", MS_NOSUID | MS_NODEV, data)
    os.rmdir("m/p/d")
    os.mkdir("m/p/d")


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.stderr.write("usage: overlayholder.py SOCK_FD MNT\n")
        os._exit(2)
    serve(int(sys.argv[1]), sys.argv[2])
