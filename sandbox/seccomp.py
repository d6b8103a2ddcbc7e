"""The seccomp denylist, compiled with libseccomp (through pyseccomp) into BPF for bwrap.

Flatpak's list (common/flatpak-run.c, setup_seccomp), which came from linux-user-chroot and
Sandstorm, plus io_uring, userfaultfd, bpf, kcmp, the file-handle calls, memory no process
maps (memfd, SysV shared memory) and Unix sockets (each with why).
Everything else is allowed: this narrows the kernel surface a whitelisted command can reach;
the namespaces and mounts do the confining. Only the native
architecture is in the filter, so a syscall made through another ABI (int 0x80, x32) hits
libseccomp's bad-arch action and the thread is killed.
"""

from __future__ import annotations

import base64
import contextlib
import errno
import functools
import hashlib
import importlib.util
import os
import tempfile
from dataclasses import dataclass
from typing import Any

from sandbox import hostcache

__all__ = ["SeccompUnavailable", "bpf", "write_fd"]


class SeccompUnavailable(RuntimeError):
    """libseccomp (or its Python binding) cannot be loaded: fail closed, run nothing."""


@dataclass(frozen=True, slots=True)
class Rule:
    syscall: str
    errnum: int
    # (argument index, op name, value, mask); op "masked_eq" compares (arg & mask) == value.
    arg: tuple[int, str, int, int] | None = None


_CLONE_NEWNS = 0x00020000
_CLONE_NEWCGROUP = 0x02000000
_CLONE_NEWUTS = 0x04000000
_CLONE_NEWIPC = 0x08000000
_CLONE_NEWUSER = 0x10000000
_CLONE_NEWPID = 0x20000000
_CLONE_NEWNET = 0x40000000
_TIOCSTI = 0x5412
_TIOCLINUX = 0x541C
# socket() families kept (Flatpak's list): AF_UNSPEC, AF_UNIX, AF_INET, AF_INET6, AF_NETLINK;
# AF_UNIX then refused with EPERM by a rule of its own (RULES).
_AF_UNIX = 1
_ALLOWED_FAMILIES = (0, _AF_UNIX, 2, 10, 16)
_SOCK_DGRAM = 2
_SOCK_RAW = 3
_SOCK_TYPE_MASK = 0xF

_EPERM = errno.EPERM
_ENOSYS = errno.ENOSYS

RULES: tuple[Rule, ...] = (
    Rule("syslog", _EPERM),  # dmesg
    Rule("uselib", _EPERM),
    Rule("acct", _EPERM),
    Rule("modify_ldt", _EPERM),  # 16-bit segments: a history of kernel info leaks
    Rule("quotactl", _EPERM),
    # The kernel keyring is shared across namespaces.
    Rule("add_key", _EPERM),
    Rule("keyctl", _EPERM),
    Rule("request_key", _EPERM),
    # NUMA and page migration.
    Rule("move_pages", _EPERM),
    Rule("mbind", _EPERM),
    Rule("get_mempolicy", _EPERM),
    Rule("set_mempolicy", _EPERM),
    Rule("migrate_pages", _EPERM),
    # No new namespaces and no changing the mount tree: remounting /usr read-write, or
    # unmounting a mask, starts with one of these.
    Rule("unshare", _EPERM),
    Rule("setns", _EPERM),
    Rule("mount", _EPERM),
    Rule("umount2", _EPERM),
    Rule("pivot_root", _EPERM),
    Rule("chroot", _EPERM),
    # clone() with a namespace flag; one rule per flag, since rules on one syscall are ORed.
    # (CLONE_NEWTIME overlaps the exit-signal byte of clone() and only exists for clone3.)
    *(
        Rule("clone", _EPERM, (0, "masked_eq", flag, flag))
        for flag in (
            _CLONE_NEWNS,
            _CLONE_NEWCGROUP,
            _CLONE_NEWUTS,
            _CLONE_NEWIPC,
            _CLONE_NEWUSER,
            _CLONE_NEWPID,
            _CLONE_NEWNET,
        )
    ),
    # seccomp cannot look inside clone3's struct: refuse it; ENOSYS makes libc use clone().
    Rule("clone3", _ENOSYS),
    # Faking input on a terminal (CVE-2017-5226) or a virtual console's copy/paste
    # (CVE-2023-28100). The mask ignores the upper 32 bits, which the kernel also ignores:
    # TIOCSTI | 1 << 32 is still TIOCSTI (CVE-2019-10063).
    Rule("ioctl", _EPERM, (1, "masked_eq", _TIOCSTI, 0xFFFFFFFF)),
    Rule("ioctl", _EPERM, (1, "masked_eq", _TIOCLINUX, 0xFFFFFFFF)),
    # The new mount API changes the mount tree too (CVE-2021-41133).
    Rule("open_tree", _ENOSYS),
    Rule("move_mount", _ENOSYS),
    Rule("fsopen", _ENOSYS),
    Rule("fsconfig", _ENOSYS),
    Rule("fsmount", _ENOSYS),
    Rule("fspick", _ENOSYS),
    Rule("mount_setattr", _ENOSYS),
    # Profiling and debugging other processes (perf is a long list of CVEs).
    Rule("perf_event_open", _EPERM),
    Rule("ptrace", _EPERM),
    Rule("process_vm_readv", _EPERM),
    Rule("process_vm_writev", _EPERM),
    Rule("personality", _EPERM, (0, "ne", 0, 0)),  # PER_LINUX only
    # io_uring performs I/O outside the syscall boundary seccomp sees, and is a steady
    # source of kernel bugs; ENOSYS makes programs fall back to plain syscalls.
    Rule("io_uring_setup", _ENOSYS),
    Rule("io_uring_enter", _ENOSYS),
    Rule("io_uring_register", _ENOSYS),
    # userfaultfd stalls a kernel copy_from_user() on a page the attacker controls: the usual
    # way to win a kernel race (a use-after-free made reliable). Every mode, UFFD_USER_MODE_ONLY
    # too: the vm.unprivileged_userfaultfd sysctl does not cover that flag. No command needs it.
    Rule("userfaultfd", _EPERM),
    # eBPF programs and maps: a verifier with a long CVE history, and unprivileged BPF is only
    # off where kernel.unprivileged_bpf_disabled says so; the sandbox must not depend on it.
    Rule("bpf", _EPERM),
    # kcmp compares kernel pointers of two processes' files and memory: an address oracle
    # (KASLR) for exploits, and the same-uid check is all that guards it.
    Rule("kcmp", _EPERM),
    # File handles bypass the path walk: open_by_handle_at can open any inode of a mounted
    # filesystem by number (the "shocker" container escape), so a file hidden by a mask or
    # outside every bind would be reachable. name_to_handle_at makes the handles.
    Rule("name_to_handle_at", _EPERM),
    Rule("open_by_handle_at", _EPERM),
    # Memory no process maps is in nobody's PSS, so the run's memory watchdog cannot count
    # it (sandbox/limits.py): six 60 MB memfds, never mapped, passed a 128 MB budget. None of
    # bash, coreutils, python or curl makes one (glibc's posix_spawn uses clone(CLONE_VFORK));
    # EPERM, not ENOSYS, so nothing mistakes it for an old kernel to work around.
    # test_escape_memory.py holds these.
    Rule("memfd_create", _EPERM),
    Rule("memfd_secret", _EPERM),
    # SysV shared memory likewise (the IPC namespace is ours, but a segment lives until it
    # ends, mapped or not). The other SysV calls go too: nothing we run uses them.
    Rule("shmget", _EPERM),
    Rule("shmat", _EPERM),
    Rule("shmctl", _EPERM),
    Rule("shmdt", _EPERM),
    # No Unix sockets of any type: a pathname socket inside a declared `home` folder is
    # reachable through a read-only bind (connect() needs no write access), so with the
    # network off a command could still talk to any service listening in there. A socket
    # pair made by socketpair() is a different syscall and stays: pipes between our own
    # processes (python's asyncio uses one). glibc's nscd lookup fails softly and falls back
    # to the files. Upper bits set in the family are caught by the family rules (>= 17).
    Rule("socket", _EPERM, (0, "eq", _AF_UNIX, 0)),
    # A datagram socket may change its peer (connect() again) or name one per message
    # (sendto/sendmsg), so a datagram pair from socketpair() reaches any pathname datagram
    # socket just as socket(AF_UNIX) would. Refused; stream and seqpacket pairs cannot be
    # re-aimed and stay. SOCK_RAW too: AF_UNIX makes it a datagram socket. The mask is the
    # kernel's SOCK_TYPE_MASK (SOCK_CLOEXEC and SOCK_NONBLOCK sit above it).
    # tests/sandbox/test_redteam_sockets.py holds it.
    Rule("socketpair", _EPERM, (1, "masked_eq", _SOCK_DGRAM, _SOCK_TYPE_MASK)),
    Rule("socketpair", _EPERM, (1, "masked_eq", _SOCK_RAW, _SOCK_TYPE_MASK)),
)


def _family_rules() -> list[tuple[int, str, int]]:
    """socket() families outside _ALLOWED_FAMILIES → EAFNOSUPPORT, as (family, op, value)."""
    rules: list[tuple[int, str, int]] = []
    last = -1
    for family in _ALLOWED_FAMILIES:
        rules += [(f, "eq", f) for f in range(last + 1, family)]
        last = family
    rules.append((last + 1, "ge", last + 1))  # and everything above, 64-bit compared
    return rules


def _binding() -> Any:
    """PyPI's pyseccomp (ctypes, any Python), else libseccomp's own binding, which Arch's
    python-libseccomp installs as `seccomp`; both have the same API."""
    try:
        import pyseccomp

        return pyseccomp
    except ImportError:
        import seccomp  # type: ignore[import-not-found]

        return seccomp


@functools.cache
def bpf() -> bytes:
    """The compiled filter for this machine's architecture (cached in the process, and this
    boot in sandbox/hostcache.py). Raises SeccompUnavailable."""
    key = _cache_key()
    kept = hostcache.load("seccomp", key)
    if kept is not None:
        with contextlib.suppress(ValueError, TypeError):
            data = base64.b64decode(kept["bpf"], validate=True)
            if data and not len(data) % 8:
                return data
    data = _bpf()
    hostcache.store("seccomp", key, {"bpf": base64.b64encode(data).decode("ascii")})
    return data


def _cache_key() -> dict[str, object]:
    """What the compiled filter depends on: our rules, the binding's file and libseccomp (a
    library upgrade runs ldconfig, which rewrites /etc/ld.so.cache), and the architecture.
    Loading the binding is what runs `ldconfig -p` (twice: ctypes finds libc and libseccomp),
    so a kept filter saves it (tests/sandbox/test_hostcache.py)."""
    origins = []
    for name in ("pyseccomp", "seccomp"):
        with contextlib.suppress(ImportError, ValueError):
            spec = importlib.util.find_spec(name)
            if spec is not None and spec.origin:
                origins.append(hostcache.file_id(spec.origin))
    rules = hashlib.sha256(repr((RULES, _family_rules())).encode()).hexdigest()
    return {
        "rules": rules,
        "binding": origins,
        "ld.so.cache": hostcache.file_id("/etc/ld.so.cache"),
        "machine": os.uname().machine,
    }


def _bpf() -> bytes:
    try:
        sc = _binding()
    except Exception as exc:  # the binding raises RuntimeError/OSError without libseccomp.so.2
        raise SeccompUnavailable(f"cannot load libseccomp: {exc}") from exc
    try:
        return _compile(sc)
    except (OSError, ValueError, AttributeError) as exc:
        raise SeccompUnavailable(f"libseccomp could not build the filter: {exc}") from exc


def _compile(sc: Any) -> bytes:
    ops = {"eq": sc.EQ, "ne": sc.NE, "ge": sc.GE, "masked_eq": sc.MASKED_EQ}
    f = sc.SyscallFilter(sc.ALLOW)
    # s390 passes clone()'s flags second (CONFIG_CLONE_BACKWARDS2).
    clone_flags_arg = 1 if sc.system_arch() in (sc.Arch.S390, sc.Arch.S390X) else 0
    for rule in RULES:
        nr = sc.resolve_syscall(sc.Arch.NATIVE, rule.syscall)
        if nr < 0:
            continue  # not a syscall on this architecture (e.g. modify_ldt off x86)
        if rule.arg is None:
            f.add_rule(sc.ERRNO(rule.errnum), nr)
        else:
            index, op, value, mask = rule.arg
            if rule.syscall == "clone":
                index = clone_flags_arg
            # MASKED_EQ takes (mask, value); the others take (value).
            a, b = (mask, value) if op == "masked_eq" else (value, 0)
            f.add_rule(sc.ERRNO(rule.errnum), nr, sc.Arg(index, ops[op], a, b))
    socket_nr = sc.resolve_syscall(sc.Arch.NATIVE, "socket")
    for _family, op, value in _family_rules():
        f.add_rule(sc.ERRNO(errno.EAFNOSUPPORT), socket_nr, sc.Arg(0, ops[op], value))
    fd = _anonymous_fd()
    try:
        with os.fdopen(os.dup(fd), "wb") as out:
            f.export_bpf(out)
        size = os.fstat(fd).st_size
        data = os.pread(fd, size, 0)
    finally:
        os.close(fd)
    if not data or len(data) % 8:
        raise ValueError(f"libseccomp exported {len(data)} bytes, not a BPF program")
    return data


def _anonymous_fd() -> int:
    """A memfd, or where memfd_create is refused (inside our own sandbox, whose filter
    refuses it: tests/sandbox/test_sandbox_runner.py probes from there) an unlinked file."""
    try:
        return os.memfd_create("vinos-seccomp", os.MFD_CLOEXEC)
    except OSError:
        with tempfile.TemporaryFile() as f:
            return os.dup(f.fileno())  # dup'd fds are not inheritable either


def write_fd() -> int:
    """A new readable, inheritable-by-pass_fds fd holding the BPF program (the caller closes)."""
    data = bpf()
    fd = _anonymous_fd()
    try:
        os.write(fd, data)
        os.lseek(fd, 0, os.SEEK_SET)
    except BaseException:
        os.close(fd)
        raise
    return fd
