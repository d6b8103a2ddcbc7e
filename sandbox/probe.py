"""Can this host sandbox at all? Probed once per process; a failure closes every shell call.

No bwrap, no libseccomp, running as root, or a bwrap that cannot build its namespaces here
(user namespaces off, Ubuntu 24.04's AppArmor restriction, a container without userns, a
/proc that cannot be mounted) each give a `Probe(ok=False)` with the cause and the fix. There
is no weaker fallback: nothing ever runs unsandboxed, with the host's /proc, or without /proc.
"""

from __future__ import annotations

import logging
import os
import shlex
import subprocess
import tempfile
import threading
from dataclasses import dataclass
from pathlib import Path

from sandbox import hostcache, seccomp
from sandbox.argv import build_argv
from sandbox.binaries import DEFAULT_BWRAP, BinaryRefused
from sandbox.host import Host
from sandbox.policy import ShellPolicy

__all__ = ["ROOT_REFUSAL", "Probe", "diagnose", "probe", "refuse_if_root", "seed", "warn_once"]

log = logging.getLogger("vinos.sandbox")

# The same text as routines/product.py's: this package imports nothing of ours
# (pyproject.toml's import contracts), and the supervisor may not import it;
# tests/sandbox/test_sandbox_probe.py pins the two equal.
ROOT_REFUSAL = (
    "vinos-routine refuses to run as root: as uid 0, bubblewrap keeps the host's file access "
    "even inside its namespaces, so a routine's shell tools could read /etc/shadow. Run it as "
    "your own user: systemctl --user enable --now vinos-routined"
)

_INSTALL_BWRAP = "install bubblewrap >= 0.8.0 (Debian/Ubuntu: apt install bubblewrap; Arch: "
_INSTALL_BWRAP += "pacman -S bubblewrap)"
_FIX_BWRAP = "point [sandbox].bwrap in ~/.vinos/routines/config.toml at the real bubblewrap, a "
_FIX_BWRAP += "root-owned file no one else can write (default /usr/bin/bwrap), or " + _INSTALL_BWRAP
_NOT_ISOLATED = "vinos-probe-not-isolated"
_INSTALL_SECCOMP = "install libseccomp (Debian/Ubuntu: apt install libseccomp2; Arch: pacman -S"
_INSTALL_SECCOMP += " libseccomp)"


@dataclass(frozen=True, slots=True)
class Probe:
    ok: bool
    reason: str = ""  # why shell calls cannot run here
    fix: str = ""  # what the user can do about it


def refuse_if_root() -> str | None:
    """ROOT_REFUSAL when this process runs as uid 0, else None."""
    return ROOT_REFUSAL if os.geteuid() == 0 else None


_lock = threading.Lock()
_cached: dict[str, Probe] = {}
_warned = False


def probe(bwrap: str = DEFAULT_BWRAP) -> Probe:
    """Whether sandboxed shell calls can run here with `bwrap`; computed once per process."""
    with _lock:
        if bwrap not in _cached:
            _cached[bwrap] = _probe(bwrap)
        return _cached[bwrap]


def seed(bwrap: str, result: Probe) -> None:
    """Take `result` as this process's probe for `bwrap`: a worker gets the one its daemon
    ran at start, instead of a bwrap run of its own."""
    with _lock:
        _cached.setdefault(bwrap, result)


def warn_once(result: Probe) -> None:
    """Log the first failing shell call's cause and fix, once per process."""
    global _warned
    with _lock:
        if _warned:
            return
        _warned = True
    log.warning("shell tools disabled: %s. Fix: %s", result.reason, result.fix)


def _probe(bwrap: str) -> Probe:
    if os.geteuid() == 0:
        return Probe(False, "running as root", ROOT_REFUSAL)
    if not os.path.lexists(bwrap) and bwrap == DEFAULT_BWRAP:
        return Probe(False, f"bubblewrap (bwrap) is not installed at {bwrap}", _INSTALL_BWRAP)
    try:
        host = Host.probe(ShellPolicy(ro_binds=(), rw_binds=(), masks=(), cwd="/", bwrap=bwrap))
    except BinaryRefused as exc:
        return Probe(False, str(exc), _FIX_BWRAP)
    try:
        seccomp.bpf()
    except seccomp.SeccompUnavailable as exc:
        return Probe(False, str(exc), _INSTALL_SECCOMP)
    # The trial run passed for this very bwrap (and bash) this boot: not run again per
    # process (sandbox/hostcache.py says why that is safe; failures are never kept).
    key = {"bwrap": hostcache.file_id(host.bwrap), "bash": hostcache.file_id(host.bash)}
    if hostcache.load("probe", key) == {"ok": True}:
        return Probe(True)
    result = _trial(bwrap, host)
    if result.ok:
        hostcache.store("probe", key, {"ok": True})
    return result


def _trial(bwrap: str, host: Host) -> Probe:
    """Run a check in a real sandbox: is it one?"""
    with (
        tempfile.TemporaryDirectory(prefix="vinos-probe-") as tmp,
        tempfile.TemporaryDirectory(prefix="vinos-probe-unseen-") as unseen,
    ):
        real = os.path.realpath(tmp)
        policy = ShellPolicy(ro_binds=(), rw_binds=(real,), masks=(), cwd=real, bwrap=bwrap)
        # Is it really a sandbox? A path it was not given, and the host's network namespace,
        # must both be invisible from inside; a fake or broken bwrap that runs the command
        # as is fails here, and nothing runs.
        marker = os.path.join(os.path.realpath(unseen), "must-not-be-visible")
        open(marker, "w").close()
        hostnet = os.readlink("/proc/self/ns/net")
        check = (
            f"if [ -e {shlex.quote(marker)} ] || "
            f'[ "$(readlink /proc/self/ns/net)" = {shlex.quote(hostnet)} ]; '
            f"then echo {_NOT_ISOLATED}; exit 3; fi"
        )
        fd = seccomp.write_fd()
        try:
            argv = build_argv(policy, host, fd, check)
            proc = subprocess.run(
                argv,
                stdin=subprocess.DEVNULL,
                capture_output=True,
                pass_fds=(fd,),
                env={"PATH": "/usr/bin:/bin"},
                timeout=30,
                check=False,
            )
        except (OSError, subprocess.TimeoutExpired) as exc:
            return Probe(False, f"bubblewrap could not be started: {exc}", _INSTALL_BWRAP)
        finally:
            os.close(fd)
    if proc.returncode == 0:
        return Probe(True)
    if _NOT_ISOLATED in proc.stdout.decode("utf-8", "replace"):
        return Probe(
            False,
            f"{host.bwrap} does not isolate: a path outside the sandbox, or the host's network, "
            "was visible from inside",
            _FIX_BWRAP,
        )
    return diagnose(proc.stderr.decode("utf-8", "replace").strip())


def diagnose(stderr: str) -> Probe:
    """Turn a failed trial run's bwrap message into a cause and a fix (pure, for tests)."""
    msg = stderr.splitlines()[-1] if stderr else "no message"
    low = stderr.lower()
    if "unknown option" in low or "unrecognized option" in low:
        return Probe(False, f"bubblewrap is too old ({msg})", _INSTALL_BWRAP)
    if "proc" in low and "mount" in low:
        return Probe(
            False,
            f"bubblewrap cannot mount a fresh /proc here ({msg})",
            "run vinos-routine on the host, or in a container that may mount /proc in a user "
            "namespace (e.g. podman/docker with --security-opt seccomp=unconfined and without "
            "masked /proc paths); a sandbox with the host's /proc is never used instead",
        )
    if any(w in low for w in ("namespace", "uid map", "uid_map", "setting up uid", "userns")):
        return Probe(False, f"bubblewrap cannot create user namespaces ({msg})", _userns_fix())
    return Probe(False, f"bubblewrap failed a trial run ({msg})", _userns_fix())


def _userns_fix() -> str:
    apparmor = Path("/proc/sys/kernel/apparmor_restrict_unprivileged_userns")
    if _read_int(apparmor) == 1:
        return (
            "AppArmor restricts unprivileged user namespaces (Ubuntu 23.10+): install a profile "
            "for bwrap, e.g. /etc/apparmor.d/bwrap with 'abi <abi/4.0>, include <tunables/global> "
            "profile bwrap /usr/bin/bwrap flags=(unconfined) { userns, }', then "
            "sudo apparmor_parser -r /etc/apparmor.d/bwrap"
        )
    if _read_int(Path("/proc/sys/kernel/unprivileged_userns_clone")) == 0:
        return "enable user namespaces: sudo sysctl -w kernel.unprivileged_userns_clone=1"
    if _read_int(Path("/proc/sys/user/max_user_namespaces")) == 0:
        return "enable user namespaces: sudo sysctl -w user.max_user_namespaces=15000"
    return (
        "make sure unprivileged user namespaces work (`bwrap --unshare-user --ro-bind / / true` "
        "must succeed as your user); in a container, allow them or run on the host"
    )


def _read_int(path: Path) -> int | None:
    try:
        return int(path.read_text().strip())
    except (OSError, ValueError):
        return None
