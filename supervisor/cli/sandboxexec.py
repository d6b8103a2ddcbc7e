"""`vinos-routine sandbox NAME [--argv] -- CMD`'s one step on this side: hand the call to the
daemon's warm forkserver when a daemon of ours is up (`through_daemon`), else replace this
process with `python -P -m worker.sandboxcli`, which does the work (the supervisor package
never imports the worker or the sandbox: the import contracts in pyproject.toml).

The thin client (supervisor/cli/thinclient.py) execs from here before argparse or any command
module is imported, for the exact form `sandbox NAME [--argv] -- CMD...`; any other form
(`--help`, a missing `--`) goes through the full parser (supervisor/cli/commands/sandbox.py),
which execs through here too. Only os and sys are imported: this is the whole of the CLI's
share of `sandbox`'s start (bench/bench_sandboxcli.py).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence

from supervisor.engine.pkgroot import package_root

TYPE_CHECKING = False  # typing's own flag, without importing typing at start-up
if TYPE_CHECKING:
    import _socket

__all__ = ["exact_form", "exec_sandboxcli", "through_daemon"]

_FORWARDED = (2, 3, 1, 15)  # SIGINT SIGQUIT SIGHUP SIGTERM: what the daemon relays to the call


def exact_form(words: Sequence[str]) -> tuple[str, bool, list[str]] | None:
    """(NAME, --argv given, CMD words) for `NAME [--argv] -- CMD...` (the words after
    `sandbox`), or None: the full parser reads it."""
    if not words or words[0].startswith("-"):
        return None
    name, rest = words[0], list(words[1:])
    show_argv = rest[:1] == ["--argv"]
    if show_argv:
        rest = rest[1:]
    if rest[:1] != ["--"] or len(rest) < 2:
        return None
    return name, show_argv, rest[1:]


def through_daemon(name: str, show_argv: bool, words: Sequence[str]) -> int | None:
    """Run the call in a fork of the daemon's warm forkserver (supervisor/control/sandboxsock.py)
    with this process's stdin, stdout, stderr, cwd, environment and rlimits, relaying the
    signals a terminal sends here; the call's exit status (a signal: this process dies of it,
    as the exec'd interpreter would have). None when no daemon of ours takes it, with nothing
    run: the caller execs the call itself."""
    from supervisor.cli.daemonsock import daemon_running, home_of_env, peer_is_us, socket_path

    control = socket_path()
    path = os.path.join(os.path.dirname(control), "sandbox.sock")
    if home_of_env() is None or len(os.fsencode(path)) > 107 or not os.path.exists(path):
        return None
    if not daemon_running(control):
        return None
    import _socket

    sock = _socket.socket(_socket.AF_UNIX, _socket.SOCK_SEQPACKET | _socket.SOCK_CLOEXEC)
    try:
        sock.connect(path)
        if not peer_is_us(sock):
            return None  # another user's socket in the daemon's place: nothing is sent
        return _call(sock, name, show_argv, words)
    except OSError:
        return None
    finally:
        sock.close()


def _call(sock: _socket.socket, name: str, show_argv: bool, words: Sequence[str]) -> int | None:
    import _socket
    import contextlib
    import json
    import resource
    import signal

    limits = [
        [r, *resource.getrlimit(r)]
        for r in (getattr(resource, n) for n in dir(resource) if n.startswith("RLIMIT_"))
    ]
    req = {
        "name": name,
        "argv": show_argv,
        "words": list(words),
        "env": dict(os.environ),
        "rlimits": limits,
    }
    got: list[int] = []  # signals: relayed to the call once it runs

    def relay(signum: int, _frame: object) -> None:
        got.append(signum)
        with contextlib.suppress(OSError):
            sock.send(b'{"signal": %d}' % signum)

    previous = {sig: signal.signal(sig, relay) for sig in _FORWARDED}
    cwd = os.open(".", os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        fds = b"".join(fd.to_bytes(4, sys.byteorder) for fd in (0, 1, 2, cwd))
        sock.sendmsg([json.dumps(req).encode()], [(_socket.SOL_SOCKET, _socket.SCM_RIGHTS, fds)])
    finally:
        os.close(cwd)
    first = _answer(sock)
    if first is None or "pid" not in first:
        if got:  # a ^C before anything ran: as the exec'd interpreter would have died of it
            _die_of(got[0])
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        return None  # nothing ran: the caller runs the call itself
    last = _answer(sock)
    if last is None or "exit" not in last:
        print("vinos-routine: the daemon stopped during the call", file=sys.stderr)
        return 1
    code = int(last["exit"])
    if code < 0:
        _die_of(-code)
        return 128 - code
    return code


def _answer(sock: _socket.socket) -> dict[str, int] | None:
    import json

    data = sock.recv(65536)  # retried after a relayed signal's handler (PEP 475)
    try:
        msg = json.loads(data) if data else None
    except ValueError:
        return None
    return msg if isinstance(msg, dict) else None


def _die_of(signum: int) -> None:
    import signal

    signal.signal(signum, signal.SIG_DFL)
    os.kill(os.getpid(), signum)


def exec_sandboxcli(name: str, show_argv: bool, words: Sequence[str]) -> None:
    """Replace this process with worker.sandboxcli for NAME and CMD; never returns (OSError
    if the interpreter cannot be executed)."""
    # -P: keep the current directory off sys.path, or a `worker` package there would run.
    argv = [sys.executable, "-P", "-m", "worker.sandboxcli", name]
    if show_argv:
        argv.append("--argv")
    argv += ["--", *words]
    # What main() sets for every command (supervisor/cli/main.py), which this path skips: the
    # scratch dir and what the command writes are the user's alone, as in a worker's run.
    os.umask(0o077)
    root = package_root()
    env = dict(os.environ)
    rest = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p and p != root]
    env["PYTHONPATH"] = os.pathsep.join([root, *rest])
    sys.stdout.flush()
    sys.stderr.flush()
    os.execve(sys.executable, argv, env)
