"""What stops enabled routines from working on this machine, each with what to do about it:
no API key, an unreachable Ollama, no bubblewrap. `status` prints them.

Only what routines that are on need is checked; Ollama gets one short TCP connect.
"""

from __future__ import annotations

import os
import shutil
import socket
import stat
import urllib.parse
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from routines.safetext import redact_url
from routines.spec import Kind, Route, Routine
from routines.spec.paths import Paths
from routines.spec.providers import ProviderSettings

__all__ = ["local_provider_down", "premium_key_missing", "problems", "status_problems"]

KEY_ENV = "ANTHROPIC_API_KEY"
INSTALL_BWRAP = (
    "install bubblewrap (Debian/Ubuntu: apt install bubblewrap; Arch: pacman -S bubblewrap)"
)


def _key_file_state(path: Path) -> str | None:
    """None when the file holds a key readable only by you, else what is wrong."""
    try:
        st = path.stat()
    except FileNotFoundError:
        return "missing"
    except OSError as exc:
        return f"unreadable ({exc.strerror})"
    if st.st_size == 0:
        return "empty"
    if stat.S_IMODE(st.st_mode) & 0o077:
        return f"open to other users (mode {stat.S_IMODE(st.st_mode):04o}): chmod 600 {path}"
    return None


def _daemon_has_key(pid: int | None) -> bool | None:
    """Whether the running daemon's environment has the key (None: cannot tell)."""
    if pid is None:
        return None
    try:
        data = Path(f"/proc/{pid}/environ").read_bytes()
    except OSError:
        return None
    return any(
        item.startswith(KEY_ENV.encode() + b"=") and len(item) > len(KEY_ENV) + 1
        for item in data.split(b"\0")
    )


def _needs_anthropic(r: Routine) -> bool:
    # An auto route whose premium leg is a provider from config.toml needs no Anthropic key.
    a = r.agent
    return a is not None and (
        a.route is Route.ANTHROPIC or (a.route is Route.AUTO and a.premium_provider == "anthropic")
    )


def _anthropic_key_found(p: Paths, daemon_pid: int | None = None) -> bool:
    if _key_file_state(p.api_key_file) is None or os.environ.get(KEY_ENV, "").strip():
        return True
    return bool(_daemon_has_key(daemon_pid))


def premium_key_missing(
    p: Paths, r: Routine, providers: Mapping[str, ProviderSettings] | None = None
) -> str | None:
    """For `route = "auto"` that can escalate: what to do when its premium leg has no key
    (validate and status say it; a run keeps the local answer and needs attention)."""
    a = r.agent
    if a is None or a.route is not Route.AUTO or not a.escalation.possible:
        return None
    if a.premium_provider == "anthropic":
        if _anthropic_key_found(p):
            return None
        fix = f"set {KEY_ENV}, or write the key to {p.api_key_file} (chmod 600)"
    else:
        settings = (providers or {}).get(a.premium_provider)
        if settings is None or not settings.key_file:
            return None
        if _key_file_state(Path(settings.key_file)) is None:
            return None
        fix = f"write its key to {settings.key_file} (chmod 600)"
    return (
        f'route = "auto" may escalate to {a.premium_model}, but there is no premium '
        f"key ({fix}); until then a run that wants to escalate keeps the local answer and "
        "needs attention"
    )


def _declared_premium_keys(
    p: Paths, enabled: list[Routine], providers: Mapping[str, ProviderSettings] | None
) -> list[str]:
    """An auto route's declared premium leg without its key (Anthropic's is said apart)."""
    out = []
    for r in enabled:
        declared = r.agent is not None and r.agent.premium_provider != "anthropic"
        if declared and (missing := premium_key_missing(p, r, providers)):
            out.append(f"{r.name}: {missing}")
    return out


def _needs_ollama(r: Routine) -> bool:
    a = r.agent
    return a is not None and (
        a.route is Route.OLLAMA or (a.route is Route.AUTO and a.local_provider == "ollama")
    )


def _local_providers_down(
    enabled: list[Routine], providers: Mapping[str, ProviderSettings]
) -> list[str]:
    """A local provider from config.toml that routines use and that does not answer."""
    users: dict[str, list[Routine]] = {}
    for r in enabled:
        a = r.agent
        if a is None:
            continue
        name = a.provider if a.route is Route.PROVIDER else a.local_provider
        if name in providers and providers[name].local:
            users.setdefault(name, []).append(r)
    out = []
    for name, routines in users.items():
        if down := local_provider_down(name, providers[name], _names(routines)):
            out.append(down)
    return out


def local_provider_down(name: str, settings: ProviderSettings, users: str) -> str | None:
    """What to do when the local provider `name` (needed by `users`) does not answer a TCP
    connect (status, and doctor before it trusts a server's silence on tools), or None."""
    url = settings.base_url
    why = _ollama_unreachable(url)
    if not why:
        return None
    return (
        f'the local provider "{name}" is not reachable at {redact_url(url)} ({why}; '
        f"needed by {users}): start its server, or fix base_url in config.toml"
    )


def _needs_shell(r: Routine) -> bool:
    return r.kind is Kind.COMMAND or (r.agent is not None and bool(r.agent.shell_commands))


def _ollama_unreachable(url: str, timeout: float = 0.5) -> str | None:
    parts = urllib.parse.urlsplit(url)
    host = parts.hostname or "127.0.0.1"
    port = parts.port or (443 if parts.scheme == "https" else 80)
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return None
    except OSError as exc:
        return exc.strerror or type(exc).__name__


def _names(routines: list[Routine]) -> str:
    names = [r.name for r in routines]
    return ", ".join(names[:4]) + (f" and {len(names) - 4} more" if len(names) > 4 else "")


def problems(
    p: Paths,
    enabled: list[Routine],
    ollama_url: str,
    daemon_pid: int | None,
    providers: Mapping[str, ProviderSettings] | None = None,
    env: Mapping[str, str] = os.environ,
) -> list[str]:
    """One line per problem, naming the routines it affects and the fix; `env`: the asking
    shell's variables (PATH, the key's presence) when the daemon answers `status` for it."""
    out: list[str] = []
    out += _local_providers_down(enabled, providers or {})
    anthropic = [r for r in enabled if _needs_anthropic(r)]
    if anthropic:
        key_file = _key_file_state(p.api_key_file)
        in_env = bool(env.get(KEY_ENV, "").strip())
        daemon_env = _daemon_has_key(daemon_pid)
        if key_file is not None and key_file != "missing":
            out.append(f"the API key file {p.api_key_file} is {key_file}")
        elif key_file == "missing" and not in_env and not daemon_env:
            out.append(
                f"no Anthropic API key (needed by {_names(anthropic)}): set {KEY_ENV}, or write "
                f"the key to {p.api_key_file} (chmod 600)"
            )
        elif key_file == "missing" and daemon_env is False:
            out.append(
                f"the daemon does not see {KEY_ENV} (your shell has it, its environment does "
                f"not): write the key to {p.api_key_file} (chmod 600), which both read"
            )
    out += _declared_premium_keys(p, enabled, providers)
    ollama = [r for r in enabled if _needs_ollama(r)]
    if ollama:
        why = _ollama_unreachable(ollama_url)
        if why:
            out.append(
                f"Ollama is not reachable at {ollama_url} ({why}; needed by {_names(ollama)}): "
                "start it (ollama serve, or systemctl start ollama), or set ollama_url in "
                f"{p.config_file}"
            )
    shell = [r for r in enabled if _needs_shell(r)]
    if shell and shutil.which("bwrap", path=env.get("PATH")) is None:
        out.append(
            f"bubblewrap (bwrap) is not installed, so shell tools and command routines "
            f"({_names(shell)}) cannot run: {INSTALL_BWRAP}"
        )
    from supervisor.engine.notify import NOT_INSTALLED, wants_notifications

    notifying = [r for r in enabled if wants_notifications(r)]
    if notifying and shutil.which("notify-send") is None:
        out.append(f"{_names(notifying)} ask for desktop notifications, but {NOT_INSTALLED}")
    return out


def status_problems(
    p: Paths,
    routines: list[Routine],
    states: Mapping[str, Any],
    daemon_pid: int | None,
    env: Mapping[str, str] | None = None,
) -> list[str]:
    """`status`'s problems: what keeps the enabled `routines` from working here (key, Ollama,
    bwrap), with the fix; or that config.toml is invalid. Asked by the client without a daemon,
    and by the daemon when it answers `status` (with the client's `env`)."""
    from routines.ledger.model import is_enabled
    from routines.spec.config import ConfigInvalid, load_config

    try:
        config = load_config(p.config_file)
    except ConfigInvalid as exc:
        return [f"{p.config_file} is invalid: {exc}"]
    enabled = [r for r in routines if is_enabled(states, r)]
    shell = os.environ if env is None else env
    return problems(p, enabled, config.ollama_url, daemon_pid, config.providers, shell)
