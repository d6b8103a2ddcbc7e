"""The overlay holder: the writable dirs of a shell call as overlays on one sized tmpfs.

Run as a script (`python -I -S overlayholder.py SEND_FD MNT BYTES INODES FD:PATH... -- ARGV…`),
never imported (only built-in modules: it starts fast and trusts nothing on sys.path). It

1. unshares a user and a mount namespace, mapping only our own uid and gid, and makes every
   mount in it private (nothing it mounts shows anywhere else);
2. mounts a tmpfs of BYTES bytes and INODES inodes on MNT (an empty dir the runner made);
3. for each FD:PATH, opens PATH again here one component at a time with O_NOFOLLOW and checks
   it is the very dir the runner holds as FD (overlayfs refuses a lower dir whose mount is in
   another namespace, so FD itself cannot be the lower dir), and mounts an overlay on
   MNT/m/N: lower PATH, upper MNT/u/N, work MNT/w/N (`userxattr`: the only kind a user
   namespace may write; `metacopy=off`: every file changed is whole in the upper dir);
4. hands a descriptor of the tmpfs over SEND_FD (SCM_RIGHTS) to the runner, which reads the
   upper dirs through it once the sandbox is gone (sandbox/copyback.py); the descriptor keeps
   the tmpfs alive after this namespace is gone, and closing it frees the memory;
5. execs ARGV (bwrap, or the network holder then bwrap), which binds MNT/m/N where PATH shows.

So what a call writes in its writable dirs lands in the tmpfs, and the kernel stops it at
BYTES and INODES: however many processes write at once, there is no race with a poll.
With no FD:PATH (the probe), it mounts one overlay on a lower dir in the tmpfs and checks that
a folder removed and made again works (it needs user xattrs on tmpfs, Linux >= 6.6).
"""

import _ctypes
import _socket
import os
import sys

CLONE_NEWUSER = 0x10000000
CLONE_NEWNS = 0x00020000
MS_REC = 0x4000
MS_PRIVATE = 1 << 18
MS_NOSUID = 0x2
MS_NODEV = 0x4
EXIT_SETUP = 125  # the holder could not build the overlays: nothing ran
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
    package costs several ms more of every shell call's start (bench_sandbox)."""

    _handle = _ctypes.dlopen(None, os.RTLD_NOW)  # type: ignore[arg-type]  # None: ourselves

    def __init__(self) -> None:
        # The stubs ask for a CDLL; CFuncPtr reads only `_handle` of it.
        self.unshare = _Func(("unshare", self))  # type: ignore[arg-type]
        self.mount = _Func(("mount", self))  # type: ignore[arg-type]


def _errno() -> int:
    return int(_ctypes.get_errno())


def _fail(what: str, err: int) -> None:
    sys.stderr.write(f"vinos-overlay: {what}: {os.strerror(err)}\n")
    sys.stderr.flush()
    os._exit(EXIT_SETUP)


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


def main(argv: list[str]) -> None:
    if "--" not in argv or argv.index("--") < 4:
        sys.stderr.write("usage: overlayholder.py SEND_FD MNT BYTES INODES FD:PATH... -- ARGV\n")
        os._exit(2)
    cut = argv.index("--")
    send_fd, mnt, size, inodes = int(argv[0]), argv[1], int(argv[2]), int(argv[3])
    layers = [(int(fd), path) for fd, _, path in (a.partition(":") for a in argv[4:cut])]
    command = argv[cut + 1 :]
    uid, gid = os.getuid(), os.getgid()
    libc = _Libc()
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
        channel = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM, 0, send_fd)
        fds = root.to_bytes(4, sys.byteorder)
        channel.sendmsg([b"T"], [(_socket.SOL_SOCKET, _socket.SCM_RIGHTS, fds)])
        channel.close()
        os.close(root)
    except OSError as exc:
        _fail("overlay setup", exc.errno or 0)
    try:
        os.execv(command[0], command)
    except OSError as exc:
        _fail(f"exec {command[0]}", exc.errno or 0)


def _probe(libc: _Libc) -> None:
    """An overlay here that can remove a folder of its lower dir and make it again."""
    for d in ("l/d", "u/p", "w/p", "m/p"):
        os.makedirs(d, mode=0o700)
    data = f"lowerdir=l,upperdir=u/p,workdir=w/p,{OVERLAY_OPTIONS}"
    _mount(libc, "overlay", "m/p", "overlay", MS_NOSUID | MS_NODEV, data)
    os.rmdir("m/p/d")
    os.mkdir("m/p/d")


if __name__ == "__main__":
    main(sys.argv[1:])
