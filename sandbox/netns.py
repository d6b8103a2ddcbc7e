"""A shell call's network: none, or the egress proxy through a holder namespace.

`network = false`: bwrap's own `--unshare-net`, a namespace with only its own loopback, no
route out and no proxy. `network = true` or a host list: bwrap runs inside a holder
namespace made by sandbox/netholder.py (only `lo`, and the proxy listening on
127.0.0.1:PROXY_PORT), and the proxy variables point every HTTP client there. The proxy runs
in a process of its own (ProxyProcess, below; sandbox/egressserver.py), which holds no secret:
sandbox/egress.py decides what passes. Either way the sandbox has a network namespace of its
own, so the host's 127.0.0.1 services and its abstract Unix sockets (X11, D-Bus, …) are out of
reach.

Why a proxy rather than slirp4netns or pasta (the usual helpers): both need /dev/net/tun usable by
the user, and on this project's machines and CI it is root-only (crw------- root), so both fail
there ("open /dev/net/tun: Permission denied"); and both give the sandbox raw IP to every address
the host reaches, its LAN address included, where a host list needs names. The proxy needs nothing
but a user namespace, which bwrap needs anyway, and enforces a host list by name. What it gives up:
only HTTP(S) clients that honour the proxy variables get out (curl, git, pip, Python, Node with a
flag); no DNS, UDP, ICMP or ssh from inside.
"""

from __future__ import annotations

import contextlib
import os
import selectors
import socket
import subprocess
import sys
import threading
from collections.abc import Sequence

from sandbox.binaries import DEFAULT_BWRAP
from sandbox.egress import EgressPolicy, egress_policy, policy_argv

__all__ = [
    "PROXY_PORT",
    "PROXY_URL",
    "Network",
    "ProxyProcess",
    "confined_argv",
    "holder_argv",
    "proxy_argv",
    "proxy_env",
    "proxy_policy",
    "uses_proxy",
]

# The fresh namespace is empty, so a fixed port cannot clash with anything.
PROXY_PORT = 3128
PROXY_URL = f"http://127.0.0.1:{PROXY_PORT}"

# False: off. True: any internet host through the proxy. A tuple: only those host names,
# each "host" or "host:port" (routines/spec/hosts.py checked them).
Network = bool | tuple[str, ...]

_HERE = os.path.dirname(os.path.realpath(__file__))
HOLDER = os.path.join(_HERE, "netholder.py")
PROXY = os.path.join(_HERE, "egressd.py")


def uses_proxy(network: Network) -> bool:
    return network is True or (isinstance(network, tuple) and bool(network))


def proxy_policy(network: Network, lan: bool = False) -> EgressPolicy:
    """What the proxy lets through for a ShellPolicy's `network` and `lan`; ValueError for a
    host list entry routines/spec/hosts.py would have refused."""
    return egress_policy(network, lan)


def proxy_env() -> tuple[tuple[str, str], ...]:
    """The variables that send curl, git, pip, Python and Node clients through the proxy."""
    names = ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy")
    return tuple((name, PROXY_URL) for name in names)


def holder_argv(bwrap_argv: list[str], pass_fd: int) -> list[str]:
    """The argv that runs `bwrap_argv` inside a fresh holder namespace.

    The holder is this interpreter, isolated (-I: no PYTHON* variables, no user site, no
    script directory on sys.path; -S: no site-packages), running a stdlib-only script.
    """
    return [sys.executable, "-I", "-S", HOLDER, str(pass_fd), str(PROXY_PORT), "--", *bwrap_argv]


def proxy_argv(
    policy: EgressPolicy,
    listener_fd: int,
    prefix: Sequence[str] = (),
    bwrap: str = DEFAULT_BWRAP,
    die_with_parent: bool = False,
) -> list[str]:
    """The argv of the proxy process: isolated like the holder, its policy in its arguments
    (host names only: nothing secret), confined by `confined_argv`. `prefix` runs it under
    another command; the tests use it to put the proxy in a network namespace of theirs that
    stands for the host."""
    python = os.path.realpath(sys.executable)
    proxy = [python, "-I", "-S", PROXY, str(listener_fd), *policy_argv(policy)]
    return [*prefix, *confined_argv(proxy, bwrap, die_with_parent)]


# What name resolution reads (the proxy resolves the names a sandbox asks for), and the
# dynamic loader's cache; no other file of /etc.
_ETC = (
    "/etc/resolv.conf",
    "/etc/hosts",
    "/etc/nsswitch.conf",
    "/etc/gai.conf",
    "/etc/host.conf",
    "/etc/services",
    "/etc/protocols",
    "/etc/ld.so.cache",
)


def confined_argv(
    program: Sequence[str], bwrap: str = DEFAULT_BWRAP, die_with_parent: bool = False
) -> list[str]:
    """`program` under bwrap as the egress proxy runs: the host's network (it connects out
    for the sandbox) and nothing else of the user's. Read-only /usr (and the interpreter's
    prefix when it lives elsewhere), this package's own folder, the few /etc files name
    resolution reads; a /proc of its own pid namespace, a minimal /dev, an empty /tmp. No
    $HOME, so no ~/.vinos: code run in the proxy by a hostile sandbox's bytes cannot read the
    API key file, or the worker's environment through /proc
    (tests/sandbox/test_egress_process.py::test_the_proxy_cannot_open_the_api_key_file).

    `die_with_parent`: bwrap's --die-with-parent, which fires when the spawning *thread*
    ends; ProxyProcess spawns from a thread it keeps until close (see `_wait`).
    --new-session: its stderr may be the worker's terminal, and no TIOCSTI may reach it."""
    argv = [bwrap, "--unshare-all", "--share-net", "--new-session"]
    argv += ["--die-with-parent"] if die_with_parent else []
    # The empty /tmp first: a bind below it (an interpreter there) must come after.
    argv += ["--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp"]
    argv += ["--ro-bind", "/usr", "/usr"]
    for top in ("/bin", "/sbin", "/lib", "/lib32", "/lib64"):
        if os.path.islink(top):
            argv += ["--symlink", os.readlink(top), top]
        elif os.path.isdir(top):
            argv += ["--ro-bind", top, top]
    prefix = os.path.realpath(sys.base_prefix)
    if prefix != "/usr" and not prefix.startswith("/usr/"):
        argv += ["--ro-bind", prefix, prefix]  # a Python built elsewhere (/opt, pyenv)
    program_file = os.path.realpath(program[0])
    if not any(program_file.startswith(d + "/") for d in ("/usr", prefix)):
        # A venv made with --copies: its interpreter is a file of its own, bound alone
        # (tests/sandbox/test_egress_process.py::test_a_copied_interpreter_runs_confined).
        argv += ["--ro-bind", program_file, program_file]
    argv += ["--ro-bind", _HERE, _HERE]
    for path in _ETC:
        if os.path.exists(path):  # a link (resolv.conf → /run/…) bound as its target's file
            argv += ["--ro-bind", os.path.realpath(path), path]
    argv += ["--chdir", "/"]
    return [*argv, "--", *program]


class ProxyProcess:
    """One shell call's egress proxy, in a process of its own, started on first use.

    The worker holds the API key in its environment; the proxy parses whatever the sandbox
    sends, so it gets none of the worker: an empty environment, stdin a pipe (its EOF ends
    the proxy, so it cannot outlive a worker that died), stdout /dev/null, stderr the
    worker's log (one line per refusal), and the holder's listener. The worker's side only
    receives that listener from the holder and waits until a connection is pending on it; it
    never accepts one or reads a byte the sandbox sent. A call that opens no connection (most
    do not) so starts no proxy at all.

    Nothing here is an AF_UNIX socket inside the sandbox: the sandbox reaches the proxy over
    TCP on its own 127.0.0.1, and the socketpair the listener travels on is shared only by
    the holder (which closes it before it execs bwrap) and the worker.
    tests/sandbox/test_egress_process.py holds all of this.
    """

    def __init__(
        self, policy: EgressPolicy, prefix: Sequence[str] = (), bwrap: str = DEFAULT_BWRAP
    ) -> None:
        self.policy = policy
        self._prefix = tuple(prefix)
        self._bwrap = bwrap
        self._lock = threading.Lock()
        self._proc: subprocess.Popen[bytes] | None = None
        self._closed = False
        self.failed: str | None = None  # why the proxy could not be started, if it could not
        self._ours, self._theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        self._wake_r, self._wake_w = os.pipe2(os.O_CLOEXEC)
        self._waiter: threading.Thread | None = None

    @property
    def pid(self) -> int | None:
        with self._lock:
            return None if self._proc is None else self._proc.pid

    def start(self) -> int:
        """Wait for the holder's listener; returns the fd the holder must inherit (until
        `handed_over`)."""
        self._waiter = threading.Thread(target=self._wait, name="vinos-egress", daemon=True)
        self._waiter.start()
        return self._theirs.fileno()

    def handed_over(self) -> None:
        """The holder has its copy: drop ours, so its exit ends the wait for a listener."""
        with contextlib.suppress(OSError):
            self._theirs.close()

    def close(self) -> int | None:
        """End the proxy and reap it; every connection it held ends with it. Returns its
        exit status (negative: the signal that ended it), None if it never started.

        EOF on its stdin is the proxy's own way out (it is how a dead worker ends it), but a
        proxy still starting would notice it only once its interpreter is up; the call is
        over, so SIGKILL ends it at once.
        """
        with self._lock:
            if self._closed:
                return None  # closed already: once is enough
            self._closed = True
            proc = self._proc
        os.write(self._wake_w, b"x")
        if self._waiter is not None:
            self._waiter.join()
        for s in (self._ours, self._theirs):
            s.close()
        os.close(self._wake_r)
        os.close(self._wake_w)
        if proc is None:
            return None
        assert proc.stdin is not None
        with contextlib.suppress(OSError):
            proc.stdin.close()
        proc.kill()
        return proc.wait()

    def _wait(self) -> None:
        """The listener, then a first pending connection on it: then start the proxy."""
        with selectors.DefaultSelector() as sel:
            sel.register(self._wake_r, selectors.EVENT_READ)
            sel.register(self._ours, selectors.EVENT_READ)
            if not any(key.fileobj is self._ours for key, _ in sel.select()):
                return  # the call is over
            try:
                _, fds, _, _ = socket.recv_fds(self._ours, 16, 1)
            except OSError:
                return
            if not fds:
                return  # the holder failed before it listened, or is gone
            for extra in fds[1:]:  # the holder sends one; anything more is not ours to keep
                os.close(extra)
            with socket.socket(fileno=fds[0]) as listener:
                sel.unregister(self._ours)
                sel.register(listener, selectors.EVENT_READ)
                if not any(key.fileobj is listener for key, _ in sel.select()):
                    return
                self._spawn(listener)
                sel.unregister(listener)
            # The proxy's bwrap dies with this thread (--die-with-parent is per thread):
            # keep it until close, so a worker that dies takes the proxy with it.
            sel.select()

    def _spawn(self, listener: socket.socket) -> None:
        with self._lock:
            if self._closed:
                return
            try:
                self._proc = subprocess.Popen(
                    # --die-with-parent: with this thread, kept until close (see `_wait`)
                    proxy_argv(self.policy, listener.fileno(), self._prefix, self._bwrap, True),
                    stdin=subprocess.PIPE,
                    stdout=subprocess.DEVNULL,
                    close_fds=True,  # nothing of the worker's beyond 0-2 and the listener
                    pass_fds=[listener.fileno()],
                    env={},  # no API key, no variable of the worker's at all
                )
            except OSError as exc:
                self.failed = f"the egress proxy could not be started: {exc}"
