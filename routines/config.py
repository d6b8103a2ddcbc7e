"""config.toml: the daemon's settings, all optional, validated as strictly as routine files.

max_concurrent = 2
ollama_url = "http://127.0.0.1:11434"
gallery_url = "https://vinos.computer/routines/"

[pricing."claude-sonnet-4-6"]        # $ per million tokens
input = 3.0
output = 15.0

[sandbox]
masks = ["~/.config/rclone"]          # hidden from every shell tool, besides the defaults
max_processes = 256
max_file_size_mb = 64
max_open_files = 256
max_address_space_mb = 2048
"""

from __future__ import annotations

import os
import tomllib
import urllib.parse
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from routines.checks import (
    Check,
    Problem,
    Reader,
    RoutineInvalid,
    found,
    malformed,
    nonempty_string,
    positive_int,
    positive_number,
    string_list,
    table_value,
)

__all__ = ["DEFAULT_GALLERY_URL", "Config", "ConfigInvalid", "SandboxSettings", "load_config"]

DEFAULT_GALLERY_URL = "https://vinos.computer/routines/"
DEFAULT_OLLAMA_URL = "http://127.0.0.1:11434"


@dataclass(frozen=True, slots=True)
class SandboxSettings:
    masks: tuple[str, ...] = ()
    max_processes: int = 256
    max_file_size_mb: int = 64
    max_open_files: int = 256
    max_address_space_mb: int = 2048

    def as_dict(self) -> dict[str, Any]:
        """The form sent to a worker in `Job.sandbox`."""
        return {
            "masks": list(self.masks),
            "max_processes": self.max_processes,
            "max_file_size_mb": self.max_file_size_mb,
            "max_open_files": self.max_open_files,
            "max_address_space_mb": self.max_address_space_mb,
        }


@dataclass(frozen=True, slots=True)
class Config:
    max_concurrent: int = 2
    ollama_url: str = DEFAULT_OLLAMA_URL
    gallery_url: str = DEFAULT_GALLERY_URL
    pricing: dict[str, tuple[float, float]] = field(default_factory=dict)
    sandbox: SandboxSettings = field(default_factory=SandboxSettings)


class ConfigInvalid(RoutineInvalid):
    """config.toml has errors; the daemon refuses to start on it rather than guess."""


def _url(value: object) -> str:
    text = nonempty_string(value)
    if not text.startswith(("http://", "https://")):
        from routines.checks import Bad

        raise Bad("an http:// or https:// URL")
    return text


_SCHEMA: dict[str, dict[str, Check]] = {
    "": {
        "max_concurrent": positive_int,
        "ollama_url": _url,
        "gallery_url": _url,
        "pricing": table_value,
        "sandbox": table_value,
    },
    "sandbox": {
        "masks": string_list,
        "max_processes": positive_int,
        "max_file_size_mb": positive_int,
        "max_open_files": positive_int,
        "max_address_space_mb": positive_int,
    },
    "price": {"input": positive_number, "output": positive_number},
}


def load_config(path: Path) -> Config:
    """Read config.toml (a missing file is all defaults); raises ConfigInvalid on errors.

    OLLAMA_HOST (Ollama's own variable) is used when config.toml sets no ollama_url.
    """
    from routines.loader import RoutineInvalid, read_routine_file

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
    errors = [p for p in r.problems if not p.warning]
    if errors:
        # Reader names top-level keys "[].key"; they are plain keys in the file.
        raise ConfigInvalid([Problem(p.file, p.key.replace("[].", ""), p.message) for p in errors])
    ollama = top.get("ollama_url") or _ollama_host() or DEFAULT_OLLAMA_URL
    return Config(
        max_concurrent=top.get("max_concurrent", 2),
        ollama_url=ollama.rstrip("/"),
        gallery_url=top.get("gallery_url", DEFAULT_GALLERY_URL),
        pricing=pricing,
        sandbox=SandboxSettings(**sandbox),
    )


def _ollama_host() -> str | None:
    host = os.environ.get("OLLAMA_HOST", "").strip().strip("\"'").strip()
    if not host:
        return None
    if "://" in host:
        return host
    # Ollama's own reading: no scheme means http, and no port means 11434 (not http's 80),
    # so OLLAMA_HOST=0.0.0.0, as servers are often configured, still finds the server.
    hostport = host.rstrip("/")
    try:
        port = urllib.parse.urlsplit("http://" + hostport).port
    except ValueError:
        port = None
    return f"http://{hostport}" if port is not None else f"http://{hostport}:11434"
