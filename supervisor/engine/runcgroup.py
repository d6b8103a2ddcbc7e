"""One cgroup v2 per run, where the kernel gives this user a cgroup subtree of its own.

Under the user unit (supervisor/units/vinos-routined.service, `Delegate=yes`), or in any
cgroup v2 subtree this user may write with the memory and pids controllers in it, the daemon
makes one cgroup per run and the worker runs in it:

    <delegated>/daemon/            the daemon (a leaf: cgroup v2 lets no process sit in a
                                   cgroup whose controllers are enabled for its children)
    <delegated>/run-<id>/worker/   the worker (trusted code, no limit of its own here)
    <delegated>/run-<id>/sandbox/  every sandboxed process of the run: shell calls, actions,
                                   MCP servers, a command routine's command

The sandbox cgroup's memory.max is max_run_memory_mb and its pids.max max_processes, kept by
the kernel for all of them together. cgroup v2 charges a cgroup for socket buffers, pipe
buffers, tmpfs pages and the kernel memory its processes make it allocate, which no per-process
limit and no sampling of process memory sees (tests/sandbox/test_cgroup.py). The worker puts
each bwrap it starts into the sandbox cgroup before it execs (sandbox/cgroup.py), so no
process of a sandbox ever runs outside it.

Where there is no such subtree (a plain ssh session, a container, a host that binds the
memory controller to cgroup v1), the per-call limits of sandbox/limits.py are all there is:
the watchdog samples each call's processes, and kernel memory is not counted. `support()`
says which of the two is in force and why; `doctor` and the capability card print it.
"""

from __future__ import annotations

import contextlib
import errno
import os
import re
import time
from dataclasses import dataclass
from enum import StrEnum

__all__ = [
    "CONTROLLERS",
    "DAEMON_LEAF",
    "SANDBOX_ENV",
    "CgroupFacts",
    "Enforcement",
    "RunCgroup",
    "Support",
    "decide",
    "describe",
    "facts",
    "host_limits",
    "prepare",
    "support",
]

# The worker's: the run's sandbox cgroup, which sandbox/cgroup.py joins (the daemon imports
# nothing of sandbox/; tests/sandbox/test_cgroup.py holds the two names equal).
SANDBOX_ENV = "VINOS_SANDBOX_CGROUP"
DAEMON_LEAF = "daemon"
CONTROLLERS = ("memory", "pids")
_RUN_PREFIX = "run-"
_REMOVE_SEC = 5.0  # the kernel emptying a killed cgroup before it can be removed


class Enforcement(StrEnum):
    CGROUP = "cgroup"  # memory.max and pids.max of the run's cgroup, kept by the kernel
    SAMPLED = "sampled"  # the watchdog samples each call's processes (sandbox/limits.py)


@dataclass(frozen=True, slots=True)
class CgroupFacts:
    """What `decide` needs, read from /proc and the cgroup filesystem by `facts`."""

    mount: str | None  # where the cgroup v2 hierarchy is mounted; None: not mounted
    own: str | None  # the process's cgroup in it ("/user.slice/…"); None: none
    root: str = ""  # the candidate delegated cgroup (its absolute dir): own, or own's parent
    writable: bool = False  # root, its cgroup.procs and cgroup.subtree_control are ours to write
    controllers: frozenset[str] = frozenset()  # root's cgroup.controllers
    # Other processes share it (a terminal's scope, say): not the daemon's to rearrange.
    shared: bool = False


@dataclass(frozen=True, slots=True)
class Support:
    enforcement: Enforcement
    root: str  # the delegated cgroup runs are made under; "" when sampled
    why: str  # the line doctor and the card print


def decide(f: CgroupFacts) -> Support:
    """Pure: whether runs get a cgroup of their own here, and why (not)."""
    sampled = Enforcement.SAMPLED
    if f.mount is None or f.own is None:
        return Support(sampled, "", "no cgroup v2 hierarchy is mounted")
    if f.own == "/" or not f.writable:
        return Support(
            sampled,
            "",
            f"the cgroup {f.own} is not delegated to this user (run the daemon under the "
            "user unit, which has Delegate=yes)",
        )
    if f.shared:
        return Support(
            sampled,
            "",
            f"the cgroup {f.own} holds other processes than the daemon (run it under the user "
            "unit, which gives it a cgroup of its own)",
        )
    missing = [c for c in CONTROLLERS if c not in f.controllers]
    if missing:
        return Support(
            sampled,
            "",
            f"the delegated cgroup {f.root} has no {' or '.join(missing)} controller "
            "(bound to cgroup v1 on this host, or not delegated)",
        )
    return Support(Enforcement.CGROUP, f.root, f"a cgroup per run under {f.root}")


def describe(s: Support) -> str:
    """The run limits as the card and doctor say them."""
    if s.enforcement is Enforcement.CGROUP:
        return (
            "kept by the kernel: max_run_memory_mb (socket buffers and kernel memory included) "
            f"and max_processes hold all of a run's sandboxed processes together ({s.why})"
        )
    return (
        "sampled: max_run_memory_mb is checked per shell call by sampling its processes, and "
        f"kernel memory such as socket buffers is not counted ({s.why})"
    )


def _mount() -> str | None:
    try:
        with open("/proc/self/mountinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                fields = line.split()
                sep = fields.index("-")
                if fields[sep + 1] == "cgroup2":
                    return fields[4].replace("\\040", " ")
    except (OSError, ValueError, IndexError):
        return None
    return None


def _own(pid: int | None) -> str | None:
    try:
        with open(f"/proc/{pid or 'self'}/cgroup", encoding="utf-8") as f:
            for line in f:
                if line.startswith("0::"):
                    return line[3:].rstrip("\n")
    except OSError:
        return None
    return None


def _read(path: str) -> str:
    try:
        with open(path, encoding="ascii", errors="replace") as f:
            return f.read()
    except OSError:
        return ""


def facts(pid: int | None = None) -> CgroupFacts:
    """The cgroup facts of `pid` (default: this process). A process in a `daemon` leaf is a
    daemon that prepared its subtree: the subtree is the leaf's parent."""
    mount, own = _mount(), _own(pid)
    if mount is None or own is None or own.endswith(" (deleted)"):
        return CgroupFacts(mount, None if own is None else own.removesuffix(" (deleted)"))
    root = os.path.normpath(mount + own)
    shared = False
    if os.path.basename(root) == DAEMON_LEAF:
        root = os.path.dirname(root)  # prepared already: the leaf and what it starts are ours
    else:
        me = pid or os.getpid()
        shared = not all(_descends(int(p), me) for p in _read(f"{root}/cgroup.procs").split())
    writable = all(
        os.access(p, os.W_OK)
        for p in (root, f"{root}/cgroup.procs", f"{root}/cgroup.subtree_control")
    )
    controllers = frozenset(_read(f"{root}/cgroup.controllers").split())
    return CgroupFacts(mount, own, root, writable, controllers, shared)


def _descends(pid: int, ancestor: int) -> bool:
    """Whether `pid` is `ancestor` or one of its descendants (the daemon's forkserver, say)."""
    while pid > 1:
        if pid == ancestor:
            return True
        stat = _read(f"/proc/{pid}/stat")
        try:
            pid = int(stat.rsplit(")", 1)[1].split()[1])
        except (IndexError, ValueError):
            return False  # exited meanwhile
    return False


def support(pid: int | None = None) -> Support:
    """Which run limits are in force for the daemon `pid` (default: this process)."""
    return decide(facts(pid))


def host_limits() -> tuple[bool, str]:
    """The run limits with no daemon running: what this host allows one under the user unit
    (supervisor/cli/commands/capabilities.py in_force)."""
    mount = _mount()
    host = frozenset(_read(f"{mount}/cgroup.controllers").split()) if mount else frozenset()
    missing = [c for c in CONTROLLERS if c not in host]
    if mount is None:
        return False, describe(Support(Enforcement.SAMPLED, "", "no cgroup v2 is mounted"))
    if missing:
        why = f"cgroup v2 on this host has no {' or '.join(missing)} controller"
        return False, describe(Support(Enforcement.SAMPLED, "", why))
    return False, (
        "kept by the kernel once the daemon runs under the user unit (Delegate=yes gives each "
        "run a cgroup); sampled per shell call when it is started another way"
    )


def _write(path: str, text: str) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CLOEXEC)
    try:
        os.write(fd, text.encode())
    finally:
        os.close(fd)


def prepare() -> Support:
    """Daemon side, once at start: this process into the `daemon` leaf, the controllers
    enabled for the subtree, runs left by a daemon that died removed. Whatever fails, the
    answer is SAMPLED and says why; nothing raises."""
    s = support()
    if s.enforcement is not Enforcement.CGROUP:
        return s
    root = s.root
    try:
        leaf = f"{root}/{DAEMON_LEAF}"
        with contextlib.suppress(FileExistsError):
            os.mkdir(leaf)
        _write(f"{leaf}/cgroup.procs", "0")  # "0": this process (`facts`: it is alone there)
        _enable(root)
        for name in os.listdir(root):
            if name.startswith(_RUN_PREFIX):
                _remove(f"{root}/{name}")
    except OSError as exc:
        return Support(Enforcement.SAMPLED, "", f"the cgroup {root} could not be set up: {exc}")
    return s


@dataclass(frozen=True, slots=True)
class RunCgroup:
    """One run's cgroup: `worker` for the worker, `sandbox` for all it sandboxes."""

    path: str

    @property
    def worker(self) -> str:
        return f"{self.path}/worker"

    @property
    def sandbox(self) -> str:
        return f"{self.path}/sandbox"

    @classmethod
    def create(cls, root: str, run_id: str) -> RunCgroup:
        """Make it under the prepared `root`. Raises OSError."""
        path = f"{root}/{_RUN_PREFIX}{re.sub(r'[^A-Za-z0-9._-]', '_', run_id)[:100]}"
        if os.path.isdir(path):
            _remove(path)  # a leftover of the same run id (a retried run)
        os.mkdir(path)
        run = cls(path)
        try:
            _enable(path)
            os.mkdir(run.worker)
            os.mkdir(run.sandbox)
        except OSError:
            run.remove()
            raise
        return run

    def enter(self, pid: int) -> None:
        """Move the worker `pid` in; before it starts anything. Raises OSError."""
        _write(f"{self.worker}/cgroup.procs", str(pid))

    def remove(self) -> None:
        """Kill whatever is left in it and remove it; never raises."""
        with contextlib.suppress(OSError):
            _remove(self.path)


def _enable(cgroup: str) -> None:
    """The controllers for the children of `cgroup` (one with no process of its own)."""
    _write(f"{cgroup}/cgroup.subtree_control", " ".join(f"+{c}" for c in CONTROLLERS))


def _remove(path: str) -> None:
    """Kill every process under `path` (cgroup.kill, Linux >= 5.14) and remove its cgroups,
    deepest first. Raises OSError when one stays."""
    with contextlib.suppress(OSError):
        _write(f"{path}/cgroup.kill", "1")
    dirs = [d for d, _, _ in os.walk(path)]
    for d in reversed(dirs):
        deadline = time.monotonic() + _REMOVE_SEC
        while True:
            try:
                os.rmdir(d)
                break
            except FileNotFoundError:
                break
            except OSError as exc:  # EBUSY: its killed processes are still exiting
                if exc.errno != errno.EBUSY or time.monotonic() > deadline:
                    raise
                time.sleep(0.01)
