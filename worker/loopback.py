"""A model server on this machine is proven ours before anything is sent to it.

Another local user can bind 127.0.0.1:11434 while Ollama is stopped, or the port a
[providers.NAME] base_url names, and would then receive the prompts, what the read tool
returned and a provider's API key, and could play the model (its tool calls run in the
sandbox). So before a provider for a loopback URL is built, the kernel's socket tables
(routines/listeners.py: sock_diag, or /proc/net/tcp; read once per provider, sending nothing
to the listener) must show every socket a connection could reach owned by us, root, the
system user `ollama` (Ollama's Linux install runs the server as it), or a user config.toml
names. Anyone else: ProviderError, and the run
fails naming the port, the owner and the setting that trusts it; never a fallback. A URL off
this machine is not checked: the network decides who answers there.

The decision is routines.listeners' (pure, tests/test_listeners.py); the chain with a real
second user's listener is tests/worker/test_worker_squatter.py.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Collection

from routines.listeners import Listener, loopback_target, owners, read_listeners, untrusted
from routines.safetext import redact_url
from worker.providers.base import ProviderError

__all__ = ["OLLAMA_USER", "prove", "refusal", "user_name"]

OLLAMA_USER = "ollama"  # the system user of Ollama's official Linux install


def user_name(uid: int) -> str | None:
    import pwd

    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return None


def refusal(url: str, port: int, what: str, setting: str, uid: int, name: str | None) -> str:
    """Why the run stops, and the way out when the listener is the person's own (pure)."""
    who = f"uid {uid}, user {name}" if name else f"uid {uid}, no user name"
    trust = f'add "{name}" to {setting}'
    if name is None:
        trust = f"give uid {uid} a user name and add it to {setting}"
    return (
        f"{what} at {redact_url(url)}: port {port} of this machine is held by another user's "
        f"program ({who}), not yours, root's or a user you trust; nothing was sent to it. If "
        f"that server is yours, {trust} in ~/.vinos/routines/config.toml; otherwise stop it "
        "or use another port (ss -ltnp shows who listens)"
    )


def prove(
    url: str,
    trusted: Collection[str],
    what: str,
    setting: str,
    *,
    table: Callable[[], list[Listener]] = read_listeners,
    name_of: Callable[[int], str | None] = user_name,
    me: int | None = None,
) -> None:
    """Raise ProviderError unless whoever listens where `url` connects may be sent to. The
    table is read only for a loopback URL (bench/bench_worker.py times the start to the
    first request: sock_diag costs ~0.2 ms there, /proc/net/tcp could cost 10)."""
    where = loopback_target(url)
    if where is None:
        return
    found = owners(table(), where)
    me = os.getuid() if me is None else me
    bad = untrusted(found, me, {OLLAMA_USER, *trusted}, name_of)
    if bad:
        raise ProviderError(refusal(url, where.port, what, setting, bad[0], name_of(bad[0])))
