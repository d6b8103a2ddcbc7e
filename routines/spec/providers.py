"""Model providers beyond Ollama and Anthropic, declared in config.toml, and which provider
each leg of a routine's route runs on.

    [providers.lmstudio]
    kind = "openai"                        # the Chat Completions protocol
    base_url = "http://127.0.0.1:1234/v1"
    local = true                           # the local leg: $0, no budget
    listener_users = ["lmstudio"]          # on loopback: who besides you and root may listen
    max_output_tokens = 1024               # per model call (a routine's own value wins)

    [providers.openrouter]
    kind = "openai"
    base_url = "https://openrouter.ai/api/v1"
    key_file = "~/.vinos/secrets/openrouter-key"
    prices = { "anthropic/claude-sonnet-4" = { input = 3.0, output = 15.0 } }

A routine names one as its route (`route = "lmstudio"`) or as a leg of `auto`
(`local_provider`, `premium_provider`). `plan_route` turns a routine's agent and the declared
providers into the two legs (pure): the worker and `validate` both call it, so a run refuses
exactly what validate refuses.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from routines.safetext import redact_url
from routines.spec.checks import (
    Bad,
    Check,
    Reader,
    boolean,
    found,
    nearest,
    positive_int,
    positive_number,
    string,
)
from routines.spec.routine import AgentSpec, BudgetSpec, Route

__all__ = [
    "BUILTIN_LOCAL",
    "BUILTIN_PREMIUM",
    "LOCAL_MAX_OUTPUT",
    "PREMIUM_MAX_OUTPUT",
    "PROVIDER_NAME",
    "RESERVED",
    "Leg",
    "ProviderKind",
    "ProviderSettings",
    "RouteInvalid",
    "RoutePlan",
    "Target",
    "check_agent",
    "from_job",
    "listener_users",
    "output_limit",
    "parse_providers",
    "plan_route",
    "to_job",
    "uses_declared",
]

# Output tokens per model call when neither the routine nor its provider says: a local model
# that loops writes until this cap (a 135M model fills 4096 tokens with repeated text in a
# minute of a laptop's CPU), so the local leg's is modest; the premium leg keeps the larger.
LOCAL_MAX_OUTPUT = 1024
PREMIUM_MAX_OUTPUT = 4096
BUILTIN_LOCAL = "ollama"
BUILTIN_PREMIUM = "anthropic"
PROVIDER_NAME = re.compile(r"[a-z0-9][a-z0-9_-]{0,62}")
# Route values and ledger labels a declared provider may not take (a provider named "local"
# would make the ledger's `local` label ambiguous).
RESERVED = frozenset({BUILTIN_LOCAL, BUILTIN_PREMIUM, "auto", "provider", "local", "premium"})


class ProviderKind(StrEnum):
    OPENAI = "openai"  # OpenAI's Chat Completions: llama.cpp, LM Studio, vLLM, OpenRouter, …


class Leg(StrEnum):
    LOCAL = "local"  # free, never budgeted; the auto-router's first try and memory summaries
    PREMIUM = "premium"  # costs money: the budget applies


@dataclass(frozen=True, slots=True)
class ProviderSettings:
    name: str
    kind: ProviderKind
    base_url: str  # as written, e.g. "http://127.0.0.1:1234/v1" (never logged unredacted)
    local: bool = False
    key_file: str | None = None  # absolute (~ expanded); the key itself is never in config
    prices: dict[str, tuple[float, float]] = field(default_factory=dict)  # $/MTok in, out
    # Who besides us and root may own the socket a loopback base_url reaches (worker/connector.py)
    listener_users: tuple[str, ...] = ()
    max_output_tokens: int | None = None  # per model call; None: the leg's default


def _base_url(value: object) -> str:
    text = string(value).strip()
    if not text.startswith(("http://", "https://")) or "\n" in text or " " in text:
        raise Bad('an http:// or https:// URL such as "http://127.0.0.1:1234/v1"')
    return text.rstrip("/")


USER_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,31}\$?")


def listener_users(value: object) -> tuple[str, ...]:
    """The local users trusted to serve a loopback model URL: their names, as in /etc/passwd
    (config.toml's ollama_listener_users and [providers.NAME].listener_users)."""
    if not isinstance(value, list) or not all(
        isinstance(v, str) and USER_NAME.fullmatch(v) for v in value
    ):
        raise Bad('an array of user names, e.g. ["ollama"]')
    return tuple(value)


def _key_file(value: object) -> str:
    text = string(value)
    if not text.startswith(("~/", "/")) or "\n" in text or "\0" in text:
        raise Bad('a path starting with "~/" or "/", e.g. "~/.vinos/secrets/openrouter-key"')
    return os.path.expanduser(text)


def _kind(value: object) -> ProviderKind:
    if value not in ProviderKind._value2member_map_:
        raise Bad(" | ".join(f'"{k.value}"' for k in ProviderKind))
    return ProviderKind(str(value))


SCHEMA: dict[str, dict[str, Check]] = {
    "provider": {
        "kind": _kind,
        "base_url": _base_url,
        "local": boolean,
        "key_file": _key_file,
        "prices": lambda v: v,  # checked entry by entry below
        "listener_users": listener_users,
        "max_output_tokens": positive_int,
    },
    "price": {"input": positive_number, "output": positive_number},
}


def parse_providers(r: Reader, raw: object) -> dict[str, ProviderSettings]:
    """config.toml's [providers.NAME] tables; problems go to `r` as `[providers.NAME].key`."""
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        r.error("[providers]", f"expected a table of [providers.NAME] tables, found {found(raw)}")
        return {}
    out: dict[str, ProviderSettings] = {}
    for name, table in raw.items():
        where = f"[providers.{name}]"
        if not PROVIDER_NAME.fullmatch(name) or name in RESERVED:
            r.error(
                where,
                "expected a name of lowercase letters, digits, '-' and '_', not one of "
                f"{', '.join(sorted(RESERVED))}, found {found(name)}",
            )
            continue
        if not isinstance(table, dict):
            r.error(where, f"expected a table, found {found(table)}")
            continue
        settings = _one(r, name, table)
        if settings is not None:
            out[name] = settings
    return out


def _one(r: Reader, name: str, table: dict[str, Any]) -> ProviderSettings | None:
    where = f"[providers.{name}]"
    before = len(r.problems)
    for secret in ("api_key", "key", "token"):
        if secret in table:
            r.error(
                f"{where}.{secret}",
                "a key never goes in config.toml: write it to a file (chmod 600) and set "
                'key_file = "~/.vinos/secrets/' + name + '-key"',
            )
    sub = Reader(r.file, SCHEMA)
    rest = {k: v for k, v in table.items() if k not in ("api_key", "key", "token")}
    checked = sub.table({"provider": rest}, "provider")
    raw_url = table.get("base_url")
    for problem in sub.problems:
        message = problem.message
        if isinstance(raw_url, str) and raw_url and "@" in raw_url:
            message = message.replace(raw_url[:80], redact_url(raw_url))  # never a password
        r.error(problem.key.replace("[provider]", where), message)
    for key, example in (("kind", '"openai"'), ("base_url", '"http://127.0.0.1:1234/v1"')):
        if key not in table:
            r.error(f"{where}.{key}", f"required, e.g. {key} = {example}")
    base = checked.get("base_url", "")
    if checked.get("key_file") and "@" in base.partition("://")[2].split("/", 1)[0]:
        # Both would be the request's Authorization header (Basic from the URL, Bearer from
        # the key file): which one the server wanted cannot be guessed.
        r.error(
            f"{where}.base_url",
            "expected a URL without user:password@ when key_file is set (both are the "
            "Authorization header), found one with credentials",
        )
    local = bool(checked.get("local", False))
    prices = _prices(r, where, table.get("prices"))
    if local and prices:
        r.error(f"{where}.prices", "a local provider costs $0: remove prices, or set local = false")
    if len(r.problems) != before:
        return None
    return ProviderSettings(
        name=name,
        kind=checked["kind"],
        base_url=checked["base_url"],
        local=local,
        key_file=checked.get("key_file"),
        prices=prices,
        listener_users=checked.get("listener_users", ()),
        max_output_tokens=checked.get("max_output_tokens"),
    )


def _prices(r: Reader, where: str, raw: object) -> dict[str, tuple[float, float]]:
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        r.error(
            f"{where}.prices",
            'expected a table such as { "model" = { input = 3.0, output = 15.0 } }, '
            f"found {found(raw)}",
        )
        return {}
    out: dict[str, tuple[float, float]] = {}
    for model, price in raw.items():
        key = f'{where}.prices."{model}"'
        if not isinstance(price, dict):
            r.error(key, f"expected a table {{ input = …, output = … }}, found {found(price)}")
            continue
        sub = Reader(r.file, SCHEMA)
        checked = sub.table({"price": price}, "price")
        for problem in sub.problems:
            r.error(problem.key.replace("[price]", key), problem.message)
        if not {"input", "output"} <= set(price):
            r.error(key, "expected both input and output ($ per million tokens)")
        elif not sub.problems:
            out[model] = (checked["input"], checked["output"])
    return out


# -- the wire form: config → Job.providers → the worker -------------------------------------


def to_job(providers: Mapping[str, ProviderSettings]) -> dict[str, dict[str, Any]]:
    """What a Job carries: the settings, never a key (the worker reads key_file itself)."""
    return {
        name: {
            "kind": p.kind.value,
            "base_url": p.base_url,
            "local": p.local,
            "key_file": p.key_file,
            "prices": {m: [pin, pout] for m, (pin, pout) in p.prices.items()},
            "listener_users": list(p.listener_users),
            "max_output_tokens": p.max_output_tokens,
        }
        for name, p in providers.items()
    }


def from_job(raw: Mapping[str, Any]) -> dict[str, ProviderSettings]:
    """The inverse of `to_job` (the supervisor built it from a validated config); ValueError
    for anything else."""
    try:
        return _from_job(raw)
    except (KeyError, TypeError, ValueError, IndexError, AttributeError) as exc:
        raise ValueError(f"the job's providers are malformed: {exc!r}") from None


def _from_job(raw: Mapping[str, Any]) -> dict[str, ProviderSettings]:
    return {
        name: ProviderSettings(
            name=name,
            kind=ProviderKind(d["kind"]),
            base_url=str(d["base_url"]),
            local=bool(d.get("local")),
            key_file=d.get("key_file"),
            prices={m: (float(p[0]), float(p[1])) for m, p in (d.get("prices") or {}).items()},
            listener_users=tuple(str(u) for u in d.get("listener_users") or ()),
            max_output_tokens=_positive_or_none(d.get("max_output_tokens")),
        )
        for name, d in raw.items()
    }


def _positive_or_none(value: object) -> int | None:
    if value is None:
        return None
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise ValueError(f"max_output_tokens {value!r}")
    return value


# -- which provider each leg runs on ---------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Target:
    provider: str  # "ollama", "anthropic" or a declared provider's name
    model: str
    settings: ProviderSettings | None = None  # None for the built-in two


@dataclass(frozen=True, slots=True)
class RoutePlan:
    local: Target  # the local leg (auto's first try; memory summaries)
    premium: Target  # the premium leg (escalations; route = "anthropic" or a paid provider)
    only: Leg | None  # the route is one provider, on this leg; None: auto
    label: str  # the ledger's route label while nothing escalated


class RouteInvalid(ValueError):
    """The routine's route names a provider config.toml does not declare, or uses one on the
    wrong leg; `key` is the routine key at fault."""

    def __init__(self, key: str, message: str) -> None:
        self.key = key
        super().__init__(message)


def _declared(providers: Mapping[str, ProviderSettings]) -> str:
    names = sorted(providers)
    return (
        "declared in config.toml: " + ", ".join(names)
        if names
        else "config.toml declares none ([providers.NAME])"
    )


def unknown_route(name: str, providers: Mapping[str, ProviderSettings]) -> str:
    names = " | ".join(f'"{n}"' for n in sorted(providers))
    declared = f"the providers in config.toml: {names}" if names else "none declared"
    hint = nearest(name, sorted(providers)) if providers else ""
    hint = f" ({hint})" if hint.startswith("did you") else ""
    return (
        'expected one of "anthropic" | "ollama" | "auto" or a provider declared in '
        f'config.toml [providers.NAME] ({declared}), found "{name}" (a string){hint}'
    )


def _lookup(
    key: str, name: str, leg: Leg, providers: Mapping[str, ProviderSettings]
) -> ProviderSettings:
    settings = providers.get(name)
    if settings is None:
        hint = nearest(name, sorted(providers)) if providers else ""
        hint = f"; {hint}" if hint.startswith("did you") else ""
        raise RouteInvalid(key, f'no provider "{name}" ({_declared(providers)}{hint})')
    if leg is Leg.PREMIUM and settings.local:
        raise RouteInvalid(
            key,
            f'"{name}" is a local provider (local = true in config.toml): it cannot be the '
            "premium leg; set local_provider instead, or a paid provider here",
        )
    if leg is Leg.LOCAL and not settings.local:
        raise RouteInvalid(
            key,
            f'"{name}" is not a local provider (config.toml has no local = true for it): the '
            "local leg is free and unbudgeted, so only a local provider may be it",
        )
    return settings


def plan_route(agent: AgentSpec, providers: Mapping[str, ProviderSettings]) -> RoutePlan:
    """The legs of `agent`'s route (pure); RouteInvalid when a provider is unknown or misused."""
    local = Target(BUILTIN_LOCAL, agent.local_model)
    premium = Target(BUILTIN_PREMIUM, agent.premium_model)
    if agent.route is Route.OLLAMA:
        return RoutePlan(local, premium, Leg.LOCAL, BUILTIN_LOCAL)
    if agent.route is Route.ANTHROPIC:
        return RoutePlan(local, premium, Leg.PREMIUM, BUILTIN_PREMIUM)
    if agent.route is Route.PROVIDER:
        name = agent.provider
        settings = providers.get(name)
        if settings is None:
            raise RouteInvalid("[agent].route", unknown_route(name, providers))
        target = Target(name, agent.model, settings)
        if settings.local:
            return RoutePlan(target, premium, Leg.LOCAL, name)
        return RoutePlan(local, target, Leg.PREMIUM, name)
    if agent.local_provider != BUILTIN_LOCAL:
        key = "[agent].local_provider"
        settings = _lookup(key, agent.local_provider, Leg.LOCAL, providers)
        local = Target(agent.local_provider, agent.local_model, settings)
    if agent.premium_provider != BUILTIN_PREMIUM:
        key = "[agent].premium_provider"
        settings = _lookup(key, agent.premium_provider, Leg.PREMIUM, providers)
        premium = Target(agent.premium_provider, agent.premium_model, settings)
    return RoutePlan(local, premium, None, "local")


def check_agent(
    r: Reader, agent: AgentSpec, budget: BudgetSpec, providers: Mapping[str, ProviderSettings]
) -> None:
    """What a routine file's route means against config.toml's providers, into `r`: an
    unknown provider or one on the wrong leg is an error; so is a paid leg on a declared
    provider with no price for its model whenever a budget is set (unknown cost is never
    counted as $0; without a budget it is a warning, and its runs are refused until priced)."""
    from routines import pricing

    try:
        plan = plan_route(agent, providers)
    except RouteInvalid as exc:
        r.error(exc.key, str(exc))
        return
    target = plan.premium
    if plan.only is Leg.LOCAL or target.settings is None:
        return
    if plan.only is Leg.PREMIUM and budget.max_dollars_per_day is None:
        # The loader's own warning skips named routes: it cannot tell paid from local.
        r.warn("[budget]", "no max_dollars_per_day: this routine's daily spend is unlimited")
    if pricing.is_priced(target.model, target.settings.prices, builtin=False):
        return
    key = "[agent].model" if plan.only is Leg.PREMIUM else "[agent].premium_model"
    message = str(pricing.UnknownModelPrice(target.model, provider=target.provider))
    if budget.max_dollars_per_day is not None or budget.max_tokens_per_run is not None:
        r.error(key, message)
    else:
        r.warn(key, message + " (its runs are refused until then)")


def uses_declared(agent: AgentSpec) -> bool:
    return (
        agent.route is Route.PROVIDER
        or agent.local_provider != BUILTIN_LOCAL
        or agent.premium_provider != BUILTIN_PREMIUM
    )


def output_limit(agent: AgentSpec, target: Target, leg: Leg) -> tuple[int, str]:
    """Output tokens per model call on `target` (pure), and the setting that said it (for the
    message when a reply is cut): the routine's [agent].max_output_tokens, else the
    provider's in config.toml, else the leg's default."""
    if agent.max_output_tokens is not None:
        return agent.max_output_tokens, "[agent].max_output_tokens"
    settings = target.settings
    if settings is not None and settings.max_output_tokens is not None:
        return settings.max_output_tokens, f"[providers.{settings.name}].max_output_tokens"
    if leg is Leg.LOCAL:
        return LOCAL_MAX_OUTPUT, "the local default"
    return PREMIUM_MAX_OUTPUT, "the default"
