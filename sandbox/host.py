"""The host layout the argv builder needs, read once by `Host.probe` so the builder stays pure."""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass
from enum import StrEnum

from sandbox.binaries import DEFAULT_BWRAP, check_binary
from sandbox.policy import ShellPolicy

__all__ = ["SYSTEM_DIRS", "Host", "MaskTarget", "PathKind", "SystemDir"]

# Bound read-only when they are directories, recreated with --symlink when they are symlinks
# (merged /usr: Arch, Debian 12, Fedora), skipped when missing. /usr and /etc are always bound.
SYSTEM_DIRS = ("/bin", "/sbin", "/lib", "/lib64")


class PathKind(StrEnum):
    DIR = "dir"
    FILE = "file"  # anything that is not a directory: masked with /dev/null
    SYMLINK = "symlink"
    MISSING = "missing"


@dataclass(frozen=True, slots=True)
class SystemDir:
    path: str  # one of SYSTEM_DIRS
    kind: PathKind  # DIR, SYMLINK or MISSING
    target: str = ""  # the link's text for SYMLINK, e.g. "usr/bin"


@dataclass(frozen=True, slots=True)
class MaskTarget:
    path: str  # the mask as the policy names it
    real: str  # what must be hidden: the path with every symlink resolved
    kind: PathKind  # DIR, FILE or MISSING (nothing to hide)


@dataclass(frozen=True, slots=True)
class Host:
    """What `build_argv` may know about the machine."""

    system: tuple[SystemDir, ...]
    masks: tuple[MaskTarget, ...] = ()  # one per mask of the policy it was probed for
    bwrap: str = DEFAULT_BWRAP  # checked by sandbox/binaries.py: never looked up on PATH
    bash: str = "/bin/bash"

    @classmethod
    def probe(cls, policy: ShellPolicy | None = None) -> Host:
        """Read the real host: system dirs, bwrap and bash, and the policy's mask targets.

        bwrap is the policy's configured path once check_binary accepts it (never PATH's);
        raises BinaryRefused otherwise.
        """
        system = tuple(_system_dir(p) for p in SYSTEM_DIRS)
        masks = tuple(_mask(m) for m in policy.masks) if policy is not None else ()
        bwrap = check_binary(policy.bwrap if policy is not None else DEFAULT_BWRAP)
        bash = next((b for b in ("/usr/bin/bash", "/bin/bash") if os.path.isfile(b)), "/bin/bash")
        return cls(system=system, masks=masks, bwrap=bwrap, bash=bash)


def _system_dir(path: str) -> SystemDir:
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return SystemDir(path, PathKind.MISSING)
    if stat.S_ISLNK(st.st_mode):
        return SystemDir(path, PathKind.SYMLINK, os.readlink(path))
    if stat.S_ISDIR(st.st_mode):
        return SystemDir(path, PathKind.DIR)
    return SystemDir(path, PathKind.MISSING)


def _mask(path: str) -> MaskTarget:
    # A symlinked ~/.ssh → ~/dotfiles/ssh must hide the target: mounting over the link path
    # would follow it anyway, and the target is reachable by its own name.
    real = os.path.realpath(path)
    try:
        st = os.stat(real)
    except OSError:
        return MaskTarget(path, real, PathKind.MISSING)
    return MaskTarget(path, real, PathKind.DIR if stat.S_ISDIR(st.st_mode) else PathKind.FILE)
