"""A shell call's network: none, or the egress proxy through a holder namespace.

`network = false`: bwrap's own `--unshare-net`, a namespace with only its own loopback, no
route out and no proxy. `network = true` or a host list: bwrap runs inside a holder
namespace made by sandbox/netholder.py (only `lo`, and the proxy listening on
127.0.0.1:PROXY_PORT), and the proxy variables point every HTTP client there
(sandbox/egress.py decides what passes). Either way the sandbox has a network namespace of its
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

import os
import sys

__all__ = [
    "PROXY_PORT",
    "PROXY_URL",
    "Network",
    "allowed_hosts",
    "holder_argv",
    "proxy_env",
    "uses_proxy",
]

# The fresh namespace is empty, so a fixed port cannot clash with anything.
PROXY_PORT = 3128
PROXY_URL = f"http://127.0.0.1:{PROXY_PORT}"

# False: off. True: any host through the proxy. A tuple: only those host names.
Network = bool | tuple[str, ...]

HOLDER = os.path.join(os.path.dirname(os.path.realpath(__file__)), "netholder.py")


def uses_proxy(network: Network) -> bool:
    return network is True or (isinstance(network, tuple) and bool(network))


def allowed_hosts(network: Network) -> tuple[str, ...] | None:
    """The proxy's host list: None for any host (network = true)."""
    return network if isinstance(network, tuple) else None


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
