"""The bwrap argv: a pure function of a ShellPolicy and the Host layout (pinned whole, order
included, by tests/sandbox/test_sandbox_argv.py).

Every flag is here for a reason given beside it; tests/sandbox/test_sandbox_argv.py pins the
whole argv for a Debian-like and an Arch-like host, and the escape suite runs it for real.
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping, Sequence

from sandbox.host import Host, PathKind
from sandbox.limits import tmp_mb
from sandbox.netns import proxy_env, uses_proxy
from sandbox.policy import Limits, ShellPolicy, UnsafeValue, check_path

__all__ = ["ARGV0", "DEVICES", "argv_line", "build_argv", "build_exec_argv", "prelude", "script"]

# $0 of the shell that starts an MCP server, so a limit that cannot be set is reported under
# a clear name. A shell command's own shell keeps the $0 it always had (bash's path).
ARGV0 = "vinos-sandbox"
# The only device nodes in the sandbox's /dev.
DEVICES = ("null", "zero", "urandom")


def prelude(limits: Limits) -> str:
    """The shell line run first inside the sandbox: set every limit, or exit 126.

    The limits are set here, inside the sandbox, rather than on bwrap: RLIMIT_NPROC is then
    counted in the sandbox's own user namespace (kernel >= 5.14), where set on bwrap it would
    count every process the user runs on the desktop. Hard and soft limits both, so the
    command cannot raise them (tests/sandbox/test_escape_limits.py::
    test_limits_cannot_be_raised_and_no_core_dumps).
    """
    return (
        f"ulimit -c 0 -f {limits.file_size_mb * 1024} -n {limits.open_files}"
        f" -v {limits.address_space_mb * 1024} -u {limits.processes} || exit 126"
    )


def script(limits: Limits, command: str) -> str:
    """The text of `bash -c` for a shell command: the prelude's line, then CMD as the second
    and last line of the same shell, so one bash sets the limits and runs the command.

    Why this is the same as the shell that set the limits exec'ing `bash -c CMD`, as it once
    did (a second bash start, a few ms of every call):
    - bash reads and runs a -c text one line at a time. The prelude is a whole line (no open
      quote, heredoc or trailing backslash), so it has run, and the limits are on this very
      process and on everything it starts, before a byte of CMD is parsed; CMD can neither
      join nor reorder it. CMD holds no newline or carriage return (refused), so it is one
      line, the last (tests/sandbox/test_sandbox_runner.py::
      test_the_command_runs_in_the_shell_that_set_the_limits).
    - Nothing of ours runs after CMD in that shell, and the prelude leaves no variable,
      function, trap or option behind: CMD finds what a fresh `bash -c` would, and its exit
      status is the shell's, as before.
    - Being the last line, CMD gets bash's fork optimisations as `bash -c CMD` did: a simple
      command, or the last of an `&&`/`||`/`;` list, replaces the shell, so the process tree,
      the process group and the death by a signal are unchanged. `eval "$1"` would not: it
      forks every command and leaves the shell waiting (and reporting "Killed") above it.
    - $0 is still bash's path and there are no positional arguments
      (test_sandbox_runner.py::test_the_command_sees_a_fresh_shell_under_hard_limits). What
      differs is only what describes the shell's own input: $LINENO and bash's diagnostics
      count CMD as line 2, $BASH_EXECUTION_STRING holds both lines, and $_ starts as the
      prelude's last word.
    """
    return f"{prelude(limits)}\n{_one_line(command, 'command')}"


def argv_line(argv: Sequence[str]) -> str:
    """`argv` as one line that bash runs as it is, for a person or a log (the debug line, the
    run's event, `sandbox NAME --argv`, a dry run): shlex's quoting, except that a word with a
    newline (script()'s text) is written $'...'. Printed raw, that newline would end the line
    and the command, which a model chooses, would start the next one of the log.
    (tests/sandbox/test_sandbox_argv.py::test_an_argv_is_shown_on_one_line_bash_reads_back)"""
    return " ".join(_ansi_c(word) if "\n" in word else shlex.quote(word) for word in argv)


def _ansi_c(word: str) -> str:
    escaped = word.replace("\\", "\\\\").replace("'", "\\'").replace("\n", "\\n")
    return f"$'{escaped}'"


def build_exec_argv(
    policy: ShellPolicy,
    host: Host,
    seccomp_fd: int,
    program: Sequence[str],
    *,
    info_fd: int | None = None,
    rw_fds: Sequence[int] | None = None,
    overlays: Mapping[str, str] | None = None,
) -> list[str]:
    """As build_argv, for a program run with its own argv rather than a shell string (an MCP
    server): ends with `-- bash -c 'ulimit …; exec "$@"' vinos-sandbox PROGRAM...`, so the
    same limits are set first and the words reach the program as given, never parsed."""
    if not program:
        raise UnsafeValue("no program to run")
    for word in program:
        _one_line(word, "argument")
    head = build_argv(policy, host, seccomp_fd, info_fd=info_fd, rw_fds=rw_fds, overlays=overlays)
    bash = check_path(host.bash, "bash")
    return [*head, bash, "-c", f'{prelude(policy.limits)}; exec "$@"', ARGV0, *program]


def build_argv(
    policy: ShellPolicy,
    host: Host,
    seccomp_fd: int,
    command: str | None = None,
    *,
    info_fd: int | None = None,
    rw_fds: Sequence[int] | None = None,
    overlays: Mapping[str, str] | None = None,
) -> list[str]:
    """bwrap's argv for `policy` on `host`; ends with `-- bash -c 'PRELUDE<newline>CMD'`.

    Without `command` the argv ends at the bwrap options and "--". `info_fd` is a writable fd
    for bwrap's `--info-fd` JSON (the sandbox's pid-1 on the host). `rw_fds[i]` is a directory
    fd opened on `policy.rw_binds[i]` with O_NOFOLLOW, bound with `--bind-fd` (the runner
    always gives them; without, `--bind` by path, for showing an argv only). `overlays` maps a
    writable bind to the overlay bwrap binds there instead (a path in the overlay holder's
    mount namespace, sandbox/overlay.py).
    Raises UnsafeValue for a NUL or newline in any path or the command, or a relative path.
    """
    argv = [
        check_path(host.bwrap, "bwrap"),
        # A user namespace is what makes bwrap work unprivileged; the sandbox keeps our uid.
        "--unshare-user",
        # Without a pid namespace the command could see and signal the user's processes.
        "--unshare-pid",
        "--unshare-ipc",  # no SysV IPC or POSIX queues shared with the desktop
        "--unshare-uts",
        "--unshare-cgroup-try",
    ]
    if not uses_proxy(policy.network):
        # Only a loopback of its own: no internet, no 127.0.0.1 services of the host, and no
        # host abstract Unix sockets (they belong to the network namespace). With the network
        # on, the holder namespace bwrap is started in is just as fresh (sandbox/netns.py).
        argv.append("--unshare-net")
    argv += [
        "--disable-userns",  # no nested user namespace (with seccomp's unshare/clone rules)
        "--die-with-parent",  # the worker gone means the sandbox is gone
        "--new-session",  # setsid: no controlling tty, so no TIOCSTI into the user's terminal
        "--cap-drop",
        "ALL",
        "--clearenv",  # nothing of the worker's environment leaks in
    ]
    env = policy.env + (proxy_env() if uses_proxy(policy.network) else ())
    for name, value in env:
        _check_env(name, value)
        argv += ["--setenv", name, value]
    argv += ["--ro-bind", "/usr", "/usr"]
    for d in host.system:
        if d.kind is PathKind.DIR:
            argv += ["--ro-bind", d.path, d.path]
        elif d.kind is PathKind.SYMLINK:
            # Merged /usr (Arch's /bin -> usr/bin): recreate the link, do not bind its target.
            argv += ["--symlink", _one_line(d.target, "symlink target"), d.path]
    argv += ["--ro-bind", "/etc", "/etc"]
    argv += ["--proc", "/proc"]  # a fresh /proc of the new pid namespace, never the host's
    argv += ["--tmpfs", "/dev"]
    for dev in DEVICES:
        argv += ["--dev-bind", f"/dev/{dev}", f"/dev/{dev}"]
    for i, name in enumerate(("stdin", "stdout", "stderr")):
        argv += ["--symlink", f"/proc/self/fd/{i}", f"/dev/{name}"]
    argv += ["--symlink", "/proc/self/fd", "/dev/fd", "--remount-ro", "/dev"]
    # A fresh, bounded /tmp: filling it stops at the size, not at the machine's memory. The
    # size comes out of max_run_memory_mb (sandbox/limits.py: processes + /tmp <= budget).
    argv += ["--size", str(tmp_mb(policy.limits) * 1024 * 1024), "--tmpfs", "/tmp"]
    argv += _tree(policy, host, rw_fds, overlays or {})
    # The root tmpfs bwrap made holds only mount points and --dir's: read-only, so nothing
    # is written outside the workspace, the scratch dir and the sized /tmp.
    argv += ["--remount-ro", "/"]
    argv += ["--chdir", check_path(policy.cwd, "working directory")]
    if info_fd is not None:
        argv += ["--info-fd", str(info_fd)]
    # The denylist (sandbox/seccomp.py), loaded by bwrap just before it execs the command.
    argv += ["--seccomp", str(seccomp_fd)]
    argv.append("--")
    if command is None:
        return argv
    # One bash for every shell command, whoever asks (a run's shell call, a command routine,
    # the sandbox command, the probe, a dry run's argv): script() says why it is one.
    return [*argv, check_path(host.bash, "bash"), "-c", script(policy.limits, command)]


def _tree(
    policy: ShellPolicy, host: Host, rw_fds: Sequence[int] | None, overlays: Mapping[str, str]
) -> list[str]:
    """Dirs, binds and masks, parents before children so none hides another."""
    if rw_fds is not None and len(rw_fds) != len(policy.rw_binds):
        raise ValueError("one directory fd per writable bind is needed")
    # (source on the host, where it shows in the sandbox) of everything bound.
    shown = [(check_path(p, "bind"), p) for p in (*policy.ro_binds, *policy.rw_binds)]
    shown += [(check_path(s, "bind"), check_path(d, "bind")) for s, d in policy.declared]
    targets = {m.path: m for m in host.masks}
    ops: list[tuple[str, list[str]]] = []
    readonly: list[str] = []
    for d in policy.dirs:
        ops.append((check_path(d, "dir"), ["--dir", d]))
    for path in policy.ro_binds:
        ops.append((path, ["--ro-bind", path, path]))
    for source, dest in policy.declared:
        # -try: a declared path that does not exist (yet) is simply not there.
        ops.append((dest, ["--ro-bind-try", source, dest]))
    for mask in policy.masks:
        target = targets.get(mask)
        if target is None:
            raise ValueError(f"host was not probed for mask {mask!r}: use Host.probe(policy)")
        real = check_path(target.real, "mask")
        where = _shown_at(real, shown)
        if target.kind is PathKind.MISSING or where is None:
            continue  # nothing there, or not visible in the sandbox anyway
        if target.kind is PathKind.DIR:
            ops.append((where, ["--tmpfs", where]))
            readonly.append(where)
        else:
            # Opening it fails (bwrap binds it nodev): the contents stay out of reach.
            ops.append((where, ["--ro-bind", "/dev/null", where]))
    for i, path in enumerate(policy.rw_binds):
        ops.append((path, _writable_bind(policy, i, rw_fds, overlays)))
    ops.sort(key=lambda op: _depth(op[0]))  # stable: dirs, ro, masks, then rw at one depth
    out = [arg for _, op in ops for arg in op]
    for path in readonly:
        # After the binds below it exist: bwrap must still create their mount points.
        out += ["--remount-ro", path]
    return out


def _writable_bind(
    policy: ShellPolicy, i: int, rw_fds: Sequence[int] | None, overlays: Mapping[str, str]
) -> list[str]:
    """The bind of the writable dir `policy.rw_binds[i]`."""
    path = policy.rw_binds[i]
    if path in overlays:
        # The holder checked the overlay's lower dir is the very dir of rw_fds[i].
        return ["--bind", check_path(overlays[path], "overlay"), path]
    if rw_fds is None:  # an argv to read (dry run, the card's walk): writable, as it is shown
        return ["--bind", path, path]
    if path in policy.kept:
        # A person's write folder with no overlay to keep its copy-back (a kernel without
        # one, a live call): read-only, by its path (checked free of links by the policy;
        # its fd never reaches bwrap, which would leave it open in the sandbox).
        return ["--ro-bind", path, path]
    return ["--bind-fd", str(rw_fds[i]), path]


def _shown_at(real: str, shown: list[tuple[str, str]]) -> str | None:
    """Where the host path `real` appears in the sandbox, through the deepest bind holding it."""
    best: tuple[str, str] | None = None
    for source, dest in shown:
        if _under(real, source) and (best is None or len(source) > len(best[0])):
            best = (source, dest)
    if best is None:
        return None
    source, dest = best
    return dest + real[len(source) :] if real != source else dest


def _under(path: str, parent: str) -> bool:
    return path == parent or path.startswith(parent.rstrip("/") + "/")


def _depth(path: str) -> int:
    return 0 if path == "/" else path.count("/")


def _one_line(value: str, what: str) -> str:
    if "\0" in value or "\n" in value or "\r" in value:
        raise UnsafeValue(f"{what} holds a NUL, newline or carriage return")
    return value


def _check_env(name: str, value: str) -> None:
    if not name or "=" in name or "\0" in name or "\0" in value or "\n" in name + value:
        raise UnsafeValue(f"environment variable {name!r}: a NUL, newline or '=' in it")
