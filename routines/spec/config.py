"""config.toml: the daemon's settings, all optional, validated as strictly as routine files.

max_concurrent = 2
ollama_url = "http://127.0.0.1:11434"
ollama_listener_users = ["ai"]       # on loopback, who besides you, root and `ollama` may serve it
gallery_url = "https://vinos.computer/routines/"
needs_you_timeout = "24 hours"       # how long a paused run waits for you ([routine] overrides)

[pricing."claude-sonnet-4-6"]        # $ per million tokens
input = 3.0
output = 15.0

[providers.lmstudio]                 # any OpenAI-compatible server (routines/spec/providers.py)
kind = "openai"
base_url = "http://127.0.0.1:1234/v1"
local = true

[sandbox]
never = ["~/.config/hub"]            # on the never-list besides the defaults (masks: the old name)
max_processes = 256
max_file_size_mb = 64
max_open_files = 256
max_address_space_mb = 2048
max_run_memory_mb = 2048              # a call's processes and /tmp (a run's, with a cgroup)
max_workspace_mb = 256                # its workspace and scratch dir together, during each call
bwrap = "/usr/bin/bwrap"              # absolute; refused unless root-owned, writable by no one else
lan = false                           # true: network = true reaches LAN addresses too

[ledger]
keep_runs_days = 90                   # older runs become one line per routine per day
keep_outputs_days = 90                # older outputs and run logs are deleted

[fleet]                               # several machines, one ledger (README "Several machines")
database = "postgresql://vinos@homeserver/vinos"   # or env VINOS_FLEET_DATABASE (it wins)
machine = "laptop"                    # default: the host name
local_when_unreachable = false        # true: run anyway while the database is unreachable
"""

from __future__ import annotations

import os
import re
import tomllib
import urllib.parse
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from routines.spec.checks import (
    Bad,
    Check,
    Problem,
    Reader,
    RoutineInvalid,
    boolean,
    expiry,
    found,
    machine_name,
    malformed,
    nonempty_string,
    positive_int,
    positive_number,
    string_list,
    table_value,
)
from routines.spec.paths import FLEET_DATABASE_ENV, fleet_database_env
from routines.spec.providers import ProviderSettings, listener_users, parse_providers

__all__ = [
    "DEFAULT_GALLERY_URL",
    "DEFAULT_OLLAMA_URL",
    "Config",
    "ConfigInvalid",
    "FleetSettings",
    "LedgerSettings",
    "SandboxSettings",
    "load_config",
    "load_config_or_default",
    "ollama_host_url",
]

DEFAULT_GALLERY_URL = "https://vinos.computer/routines/"
DEFAULT_OLLAMA_URL = "http://127.0.0.1:11434"
# The same default as sandbox.binaries.DEFAULT_BWRAP (routines/ imports nothing of sandbox/).
DEFAULT_BWRAP = "/usr/bin/bwrap"


@dataclass(frozen=True, slots=True)
class SandboxSettings:
    never: tuple[str, ...] = ()  # added to routines/spec/never.py's list
    masks: tuple[str, ...] = ()  # the old name of `never`, still read
    max_processes: int = 256
    max_file_size_mb: int = 64
    max_open_files: int = 256
    max_address_space_mb: int = 2048
    max_run_memory_mb: int = 2048
    max_workspace_mb: int = 256
    bwrap: str = DEFAULT_BWRAP
    # network = true means the internet: LAN addresses (10/8, 172.16/12, 192.168/16,
    # 100.64/10, fc00::/7) only with this, or for a host a routine's list names.
    lan: bool = False

    def as_dict(self) -> dict[str, Any]:
        """The form sent to a worker in `Job.sandbox`."""
        return {
            "never": list(self.never),
            "masks": list(self.masks),
            "max_processes": self.max_processes,
            "max_file_size_mb": self.max_file_size_mb,
            "max_open_files": self.max_open_files,
            "max_address_space_mb": self.max_address_space_mb,
            "max_run_memory_mb": self.max_run_memory_mb,
            "max_workspace_mb": self.max_workspace_mb,
            "bwrap": self.bwrap,
            "lan": self.lan,
        }


# -- [ledger]: retention (supervisor/engine/housekeeping.py) --------------------------------------


@dataclass(frozen=True, slots=True)
class LedgerSettings:
    keep_runs_days: int = 90  # whole runs; older ones are compacted into day rows
    keep_outputs_days: int = 90  # outputs and run logs under the state dir
    # Whole runs (and claims) per routine at most, older ones compacted even inside
    # keep_runs_days: 90 days for anything every 5 minutes or slower, ~3 weeks for a minutely
    # routine (what keeps a year of three of them under 20 MB; README "Files").
    keep_runs_max: int = 30_000


def _days(value: object) -> int:
    # At least 2: a budget counts today's runs in the routine's own zone, which may start
    # up to a day before the machine's; those runs must still be whole.
    if isinstance(value, bool) or not isinstance(value, int) or value < 2:
        from routines.spec.checks import Bad

        raise Bad("a number of days, at least 2")
    return value


KEEP_RUNS_MAX_MIN = 5_000


def _runs(value: object) -> int:
    # A budget sums its routine's day from whole runs (up to two days back, see _days): at
    # least two days of a minutely routine (2,880 runs) must stay whole.
    if isinstance(value, bool) or not isinstance(value, int) or value < KEEP_RUNS_MAX_MIN:
        from routines.spec.checks import Bad

        raise Bad(f"a number of runs, at least {KEEP_RUNS_MAX_MIN}")
    return value


_LEDGER_SCHEMA: dict[str, Check] = {
    "keep_runs_days": _days,
    "keep_outputs_days": _days,
    "keep_runs_max": _runs,
}


# -- [fleet]: several machines, one PostgreSQL ledger (supervisor/fleet/member.py) ----------------


@dataclass(frozen=True, slots=True)
class FleetSettings:
    database: str  # a libpq connection string or postgresql:// URL (password via ~/.pgpass)
    machine: str
    # While the database is unreachable, run this machine's fleet routines anyway (risking a
    # double run); synced in when it is back (supervisor/fleet/offline.py).
    local_when_unreachable: bool = False


def _database(value: object) -> str:
    text = nonempty_string(value)
    if "\n" in text:
        raise Bad('a connection string such as "postgresql://vinos@homeserver/vinos"')
    return text


def default_machine() -> str:
    """The host name up to its first dot, made a valid machine name."""
    import socket  # only a fleet needs it: every command reads config.toml

    host = socket.gethostname().split(".", 1)[0]
    cleaned = re.sub(r"[^A-Za-z0-9._-]", "-", host).strip("-._")[:63]
    return cleaned or "machine"


_FLEET_SCHEMA: dict[str, Check] = {
    "database": _database,
    "machine": machine_name,
    "local_when_unreachable": boolean,
}


# -- [notify.ntfy]: a push to the person's phone when a run needs them (worker/ntfy.py) ------


@dataclass(frozen=True, slots=True)
class NtfySettings:
    url: str  # the topic's URL, e.g. https://ntfy.sh/my-topic (token: secrets/ntfy-token)
    dashboard_url: str | None = None  # where the phone reaches the dashboard: the push's link


def _topic_url(value: object) -> str:
    """An ntfy topic URL: http(s), a host, one path segment (the topic), nothing else; the
    token goes in the secrets file, never in the URL (config.toml is no secret)."""
    expected = 'a topic URL such as "https://ntfy.sh/my-topic"'
    if not isinstance(value, str):
        raise Bad(expected)
    text = value.strip()
    try:
        parts = urllib.parse.urlsplit(text)
        parts.port  # noqa: B018 -- raises ValueError on a bad port
    except ValueError:
        raise Bad(f"{expected} (the token goes in ~/.vinos/secrets/ntfy-token)") from None
    topic = parts.path.strip("/")
    if (
        parts.scheme not in ("http", "https")
        or not parts.hostname
        or parts.username is not None
        or parts.password is not None
        or parts.query
        or parts.fragment
        or not re.fullmatch(r"[A-Za-z0-9_-]{1,64}", topic.rsplit("/", 1)[-1])
        or any(c.isspace() for c in text)
    ):
        raise Bad(f"{expected} (the token goes in ~/.vinos/secrets/ntfy-token)")
    return text.rstrip("/")


def _dashboard_url(value: object) -> str:
    text = _url(value)
    if any(c.isspace() or ord(c) < 32 for c in text):
        raise Bad('a URL such as "https://laptop.tailnet.ts.net:8742"')
    return text


_NTFY_SCHEMA: dict[str, Check] = {"url": _topic_url, "dashboard_url": _dashboard_url}


@dataclass(frozen=True, slots=True)
class Config:
    max_concurrent: int = 2
    ollama_url: str = DEFAULT_OLLAMA_URL
    # Who besides us, root and the system user `ollama` may own the socket a loopback
    # ollama_url reaches (worker/connector.py); names, as in /etc/passwd.
    ollama_listener_users: tuple[str, ...] = ()
    gallery_url: str = DEFAULT_GALLERY_URL
    pricing: dict[str, tuple[float, float]] = field(default_factory=dict)
    sandbox: SandboxSettings = field(default_factory=SandboxSettings)
    ledger: LedgerSettings = field(default_factory=LedgerSettings)
    fleet: FleetSettings | None = None  # None: one machine, the SQLite ledger
    providers: dict[str, ProviderSettings] = field(default_factory=dict)  # [providers.NAME]
    mcp_expose: tuple[str, ...] = ()  # [mcp_server].expose: routines `vinos-routine mcp` shows
    needs_you_timeout: int = 24 * 3600  # seconds a paused run waits for its person
    ntfy: NtfySettings | None = None  # [notify.ntfy]: a push to the phone when a run needs you

    def pause_timeout(self, routine_timeout: int | None) -> int:
        """How long a paused run of a routine waits: its own needs_you_timeout, else ours."""
        return routine_timeout if routine_timeout is not None else self.needs_you_timeout


class ConfigInvalid(RoutineInvalid):
    """config.toml has errors; the daemon refuses to start on it rather than guess."""


def _url(value: object) -> str:
    text = nonempty_string(value)
    if not text.startswith(("http://", "https://")):
        raise Bad("an http:// or https:// URL")
    return text


def _absolute_path(value: object) -> str:
    if not isinstance(value, str) or not value.startswith("/") or "\n" in value:
        raise Bad('an absolute path such as "/usr/bin/bwrap" (never looked up on PATH)')
    return value


_SCHEMA: dict[str, dict[str, Check]] = {
    "": {
        "max_concurrent": positive_int,
        "ollama_url": _url,
        "ollama_listener_users": listener_users,
        "gallery_url": _url,
        "needs_you_timeout": expiry,
        "pricing": table_value,
        "sandbox": table_value,
        "ledger": table_value,
        "fleet": table_value,
        "providers": table_value,
        "mcp_server": table_value,
        "notify": table_value,
    },
    "notify": {"ntfy": table_value},
    "notify.ntfy": _NTFY_SCHEMA,
    "mcp_server": {"expose": string_list},  # `vinos-routine mcp`: whose outputs it may read
    "sandbox": {
        "never": string_list,
        "masks": string_list,
        "max_processes": positive_int,
        "max_file_size_mb": positive_int,
        "max_open_files": positive_int,
        "max_address_space_mb": positive_int,
        "max_run_memory_mb": positive_int,
        "max_workspace_mb": positive_int,
        "bwrap": _absolute_path,
        "lan": boolean,
    },
    "price": {"input": positive_number, "output": positive_number},
    "ledger": _LEDGER_SCHEMA,
    "fleet": _FLEET_SCHEMA,
}


def load_config(path: Path) -> Config:
    """Read config.toml (a missing file is all defaults); raises ConfigInvalid on errors.

    OLLAMA_HOST (Ollama's own variable) is used when config.toml sets no ollama_url.
    """
    from routines.spec.checks import RoutineInvalid
    from routines.spec.readfile import read_routine_file

    try:
        # The same caps as a routine file: a regular file of at most 256 KB, opened
        # O_NONBLOCK, so a FIFO or /dev/zero here cannot hang or swell the daemon.
        data = read_routine_file(path) if os.path.lexists(path) else b""
        text = data.decode("utf-8")
    except RoutineInvalid as exc:
        raise ConfigInvalid([Problem(path.name, "", p.message) for p in exc.problems]) from exc
    except UnicodeDecodeError as exc:
        raise ConfigInvalid([Problem(path.name, "", f"cannot read: {exc}")]) from exc
    r = Reader(path.name, _SCHEMA)
    try:
        doc = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigInvalid([Problem(path.name, "", malformed(exc, text))]) from exc
    top = r.table({"": doc}, "")
    sandbox = r.table(doc, "sandbox") if isinstance(doc.get("sandbox"), dict) else {}
    ledger = r.table(doc, "ledger") if isinstance(doc.get("ledger"), dict) else {}
    fleet_t = r.table(doc, "fleet") if isinstance(doc.get("fleet"), dict) else None
    pricing: dict[str, tuple[float, float]] = {}
    raw_pricing = doc.get("pricing")
    for model, price in raw_pricing.items() if isinstance(raw_pricing, dict) else ():
        where = f'[pricing."{model}"]'
        if not isinstance(price, dict):
            r.error(where, f"expected a table, found {found(price)}")
            continue
        # Its own Reader, so each problem names the model (a model name may contain dots).
        sub = Reader(r.file, _SCHEMA)
        checked = sub.table({"price": price}, "price")
        for problem in sub.problems:
            r.error(problem.key.replace("[price]", where), problem.message)
        if not {"input", "output"} <= set(price):
            r.error(where, "expected both input and output ($ per MTok)")
        elif not sub.problems:
            pricing[model] = (checked["input"], checked["output"])
    for key in ("never", "masks"):
        for i, entry in enumerate(sandbox.get(key, ())):
            if entry in ("~", "/", "~/") or not entry.startswith(("~/", "/")):
                r.error(
                    f"[sandbox].{key}[{i}]",
                    f'expected a path starting with "~/" or "/" (not all of ~ or /), '
                    f'found "{entry}"',
                )
    fleet = _fleet(r, fleet_t)
    providers = parse_providers(r, doc.get("providers"))
    mcp_t = r.table(doc, "mcp_server") if isinstance(doc.get("mcp_server"), dict) else {}
    ntfy = _ntfy(r, doc.get("notify"))
    errors = [p for p in r.problems if not p.warning]
    if errors:
        # Reader names top-level keys "[].key"; they are plain keys in the file.
        raise ConfigInvalid([Problem(p.file, p.key.replace("[].", ""), p.message) for p in errors])
    ollama = top.get("ollama_url") or ollama_host_url() or DEFAULT_OLLAMA_URL
    return Config(
        max_concurrent=top.get("max_concurrent", 2),
        ollama_url=ollama.rstrip("/"),
        ollama_listener_users=top.get("ollama_listener_users", ()),
        gallery_url=top.get("gallery_url", DEFAULT_GALLERY_URL),
        pricing=pricing,
        sandbox=_with_key_files(SandboxSettings(**sandbox), providers),
        ledger=LedgerSettings(**ledger),
        fleet=fleet,
        providers=providers,
        mcp_expose=mcp_t.get("expose", ()),
        needs_you_timeout=top.get("needs_you_timeout", 24 * 3600),
        ntfy=ntfy,
    )


def _ntfy(r: Reader, notify: object) -> NtfySettings | None:
    """[notify.ntfy], or None when it is absent (no push)."""
    if not isinstance(notify, dict):
        return None
    r.table({"notify": notify}, "notify")
    if not isinstance(notify.get("ntfy"), dict):
        return None
    before = len(r.problems)
    checked = r.table({"notify": notify}, "notify.ntfy")
    if "url" not in checked and "url" not in notify["ntfy"]:
        r.error("[notify.ntfy].url", 'expected a topic URL such as "https://ntfy.sh/my-topic"')
    if len(r.problems) > before or "url" not in checked:
        return None
    return NtfySettings(checked["url"], checked.get("dashboard_url"))


def _with_key_files(
    sandbox: SandboxSettings, providers: dict[str, ProviderSettings]
) -> SandboxSettings:
    """A provider's key_file on the never-list, wherever it lives: no routine may show it to
    a shell tool or read it (tests/routines/spec/test_providers.py holds this)."""
    keys = tuple(p.key_file for p in providers.values() if p.key_file)
    extra = tuple(k for k in keys if k not in sandbox.never)
    return replace(sandbox, never=(*sandbox.never, *extra)) if extra else sandbox


def _fleet(r: Reader, table: dict[str, Any] | None) -> FleetSettings | None:
    """[fleet], or None for one machine. VINOS_FLEET_DATABASE gives (or overrides) the database
    and turns the fleet on by itself."""
    env = fleet_database_env()
    if table is None and not env:
        return None
    table = table or {}
    database = env or table.get("database")
    if not database:
        r.error(
            "[fleet].database",
            f"expected a PostgreSQL connection string (or set {FLEET_DATABASE_ENV}), found nothing",
        )
        return None
    return FleetSettings(
        database=database,
        machine=table.get("machine") or default_machine(),
        local_when_unreachable=bool(table.get("local_when_unreachable", False)),
    )


def ollama_host_url(value: str | None = None) -> str | None:
    """OLLAMA_HOST (or `value`) as Ollama itself reads it, as a URL; None when unset.

    No scheme means http, and no port means 11434 (not http's 80), so OLLAMA_HOST=0.0.0.0, as
    servers are often configured, still finds the server; an explicit scheme keeps its own
    default port. A path after the host is kept.
    """
    host = os.environ.get("OLLAMA_HOST", "") if value is None else value
    host = host.strip().strip("\"'").strip().rstrip("/")
    if not host:
        return None
    if "://" in host:
        return host
    hostport, slash, path = host.partition("/")
    try:  # urlsplit knows "[::1]" from "[::1]:8080"; counting colons does not
        port = urllib.parse.urlsplit("http://" + hostport).port
    except ValueError:
        port = None
    if port is None:
        hostport += ":11434"
    return f"http://{hostport}{slash}{path}"


def load_config_or_default(path: Path) -> Config:
    """config.toml at `path`, or the defaults when it is invalid: for readers (the CLI's read
    commands, the dashboard), where the commands that need it report the file."""
    try:
        return load_config(path)
    except ConfigInvalid:
        return Config()
