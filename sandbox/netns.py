"""A shell call's network: none, or the egress proxy through a holder namespace.

`network = false`: bwrap's own `--unshare-net`, a namespace with only its own loopback, no
route out and no proxy. `network = true` or a host list: bwrap runs inside a holder
namespace made by sandbox/netholder.py (only `lo`, and the proxy listening on
127.0.0.1:PROXY_PORT), and the proxy variables point every HTTP client there. The proxy runs
in a process of its own (ProxyProcess, below; sandbox/egressserver.py), which holds no secret:
sandbox/egress.py decides what passes. Either way the sandbox has a network namespace of its
own, so the host's 127.0.0.1 services and its abstract Unix sockets (X11, D-Bus, …) are out of
reach.

Why a proxy rather than slirp4netns or pasta (which DESIGN.md names): both need /dev/net/tun
usable by the user, and on this project's machines and CI it is root-only (crw------- root),
so both fail there ("open /dev/net/tun: Permission denied"); and both give the sandbox raw IP
to every address the host reaches, its LAN address included, where a host list needs names.
The proxy needs nothing but a user namespace, which bwrap needs anyway, and enforces a host
list by name. What it gives up: only HTTP(S) clients that honour the proxy variables get out
(curl, git, pip, Python, Node with a flag); no DNS, UDP, ICMP or ssh from inside.
"""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
from collections.abc import Sequence

from sandbox.egress import EgressPolicy, egress_policy, policy_argv

__all__ = [
    "PROXY_PORT",
    "PROXY_URL",
    "Network",
    "ProxyProcess",
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
# each "host" or "host:port" (routines/hosts.py checked them).
Network = bool | tuple[str, ...]

_HERE = os.path.dirname(os.path.realpath(__file__))
HOLDER = os.path.join(_HERE, "netholder.py")
PROXY = os.path.join(_HERE, "egressd.py")
_PROXY_EXIT_SEC = 5.0  # for the proxy to see its stdin's EOF and exit, before SIGKILL


def uses_proxy(network: Network) -> bool:
    return network is True or (isinstance(network, tuple) and bool(network))


def proxy_policy(network: Network, lan: bool = False) -> EgressPolicy:
    """What the proxy lets through for a ShellPolicy's `network` and `lan`; ValueError for a
    host list entry routines/hosts.py would have refused."""
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


def proxy_argv(policy: EgressPolicy, channel_fd: int, prefix: Sequence[str] = ()) -> list[str]:
    """The argv of the proxy process: isolated like the holder, its policy in its arguments
    (host names only: nothing secret). `prefix` runs it under another command; the tests
    use it to put the proxy in a network namespace of theirs that stands for the host."""
    proxy = [sys.executable, "-I", "-S", PROXY, str(channel_fd), *policy_argv(policy)]
    return [*prefix, *proxy]


class ProxyProcess:
    """One shell call's egress proxy, in a process of its own.

    The worker holds the API key in its environment; the proxy parses whatever the sandbox
    sends, so it gets none of the worker: an empty environment, stdin a pipe (its EOF ends
    the proxy: `close()`, or the worker's death), stdout /dev/null, stderr the worker's log
    (one line per refusal), and the socket the holder hands its listener over. Nothing it
    needs is an AF_UNIX socket inside the sandbox: the sandbox reaches it over TCP on its own
    127.0.0.1, and the socketpair is shared only by the holder (before it execs bwrap) and
    the proxy. tests/sandbox/test_egress_process.py holds all of this.
    """

    def __init__(self, policy: EgressPolicy, prefix: Sequence[str] = ()) -> None:
        self.policy = policy
        self._prefix = tuple(prefix)
        self._proc: subprocess.Popen[bytes] | None = None
        self._holder_end: socket.socket | None = None

    @property
    def pid(self) -> int | None:
        return None if self._proc is None else self._proc.pid

    def start(self) -> int:
        """Start the proxy; returns the fd the holder must inherit (until `handed_over`).
        Raises OSError when the process cannot be started."""
        holder_end, proxy_end = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        with proxy_end:
            try:
                self._proc = subprocess.Popen(
                    proxy_argv(self.policy, proxy_end.fileno(), self._prefix),
                    stdin=subprocess.PIPE,
                    stdout=subprocess.DEVNULL,
                    close_fds=True,  # nothing of the worker's beyond 0-2 and the channel
                    pass_fds=[proxy_end.fileno()],
                    env={},  # no API key, no variable of the worker's at all
                )
            except BaseException:
                holder_end.close()
                raise
        self._holder_end = holder_end
        return holder_end.fileno()

    def handed_over(self) -> None:
        """The holder has its copy: drop ours, so the proxy sees the holder's end alone."""
        if self._holder_end is not None:
            self._holder_end.close()
            self._holder_end = None

    def close(self) -> int | None:
        """End the proxy (EOF on its stdin, SIGKILL if it has not exited in seconds) and reap
        it; every connection it held ends with it. Its exit status (0: it ended itself)."""
        self.handed_over()
        proc, self._proc = self._proc, None
        if proc is None:
            return None
        assert proc.stdin is not None
        with contextlib.suppress(OSError):
            proc.stdin.close()
        try:
            return proc.wait(_PROXY_EXIT_SEC)
        except subprocess.TimeoutExpired:
            proc.kill()
            return proc.wait()
