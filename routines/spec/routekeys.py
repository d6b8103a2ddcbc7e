"""The routine keys that name a model provider: `route = "<provider>"`, `local_provider`,
`premium_provider`, checked as the loader reads [agent] (routines.spec.loader calls these).

A routine file is read without config.toml, except when it names a provider that is neither
Ollama nor Anthropic: then config.toml's [providers.NAME] are read once (`Declared`), or
taken from the caller (a worker passes its job's), and the route is checked against them
(routines.spec.providers.check_agent), so a typo is an error where the file is read, not a
failed run.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from routines.spec.checks import Bad, Reader, RoutineInvalid
from routines.spec.providers import (
    PROVIDER_NAME,
    RESERVED,
    ProviderSettings,
    check_agent,
    uses_declared,
)
from routines.spec.routine import AgentSpec, BudgetSpec, Route

__all__ = [
    "Declared",
    "leg_checks",
    "named_route",
    "provider_checks",
    "provider_name",
    "route_value",
]


def route_value(value: object) -> Route | str:
    """A built-in route, or the name of a provider declared in config.toml (which
    `routines.spec.providers.plan_route` checks: a routine file is read without config.toml)."""
    if isinstance(value, str) and value in Route._value2member_map_ and value != "provider":
        return Route(value)
    if isinstance(value, str) and PROVIDER_NAME.fullmatch(value) and value not in RESERVED:
        return value
    raise Bad('"auto" | "ollama" | "anthropic", or a provider declared in config.toml')


def provider_name(value: object) -> str:
    if not isinstance(value, str) or not PROVIDER_NAME.fullmatch(value):
        raise Bad("a provider's name from config.toml [providers.NAME]")
    return value


class Declared:
    """config.toml's providers, read at most once and only when a routine names one."""

    def __init__(self, given: Mapping[str, ProviderSettings] | None) -> None:
        self._given = given

    def get(self, r: Reader) -> Mapping[str, ProviderSettings] | None:
        if self._given is None:
            from routines.spec.config import load_config
            from routines.spec.paths import paths

            file = paths().config_file
            try:
                self._given = load_config(file).providers
            except RoutineInvalid as exc:
                first = exc.errors[0] if exc.errors else ""
                r.error("[agent].route", f"cannot check its provider: {file} is invalid: {first}")
                return None
        return self._given


def provider_checks(
    r: Reader, agent: AgentSpec | None, budget: BudgetSpec, declared: Declared
) -> None:
    """A route on a provider from config.toml, checked against it (routines.spec.providers)."""
    if agent is None or not uses_declared(agent) or any(not p.warning for p in r.problems):
        return
    known = declared.get(r)
    if known is not None:
        check_agent(r, agent, budget, known)


def named_route(
    r: Reader, t: dict[str, Any], raw: dict[str, Any], name: str, fields: dict[str, Any]
) -> None:
    """route = "<provider>": `model` names the model on it (required: no default fits every
    server); the auto-only keys do not apply."""
    fields.update(route=Route.PROVIDER, provider=name)
    if "model" in t:
        fields["model"] = t["model"]
    elif "model" not in raw:  # (an invalid one is reported already)
        r.error("[agent].model", f'required with route = "{name}": the model\'s name there')
    for key in ("local_model", "premium_model", "local_provider", "premium_provider"):
        if key in t:
            r.error(f"[agent].{key}", f'only with route = "auto"; route = "{name}" uses model')


def leg_checks(r: Reader, t: dict[str, Any]) -> None:
    """local_provider / premium_provider: only with auto, the built-in on its own leg only,
    and a declared provider's model named (the defaults are Ollama's and Anthropic's)."""
    route = t.get("route", Route.AUTO)
    for key, model_key, builtin, other in (
        ("local_provider", "local_model", "ollama", "anthropic"),
        ("premium_provider", "premium_model", "anthropic", "ollama"),
    ):
        if key not in t or not isinstance(route, Route):
            continue
        if route is not Route.AUTO:
            r.error(f"[agent].{key}", f'only with route = "auto", found route = "{route}"')
        elif t[key] == other:
            leg = key.split("_")[0]
            r.error(f"[agent].{key}", f'"{other}" cannot be the {leg} leg')
        elif t[key] != builtin and model_key not in t:
            r.error(
                f"[agent].{model_key}",
                f'required with {key} = "{t[key]}": the model\'s name on that provider',
            )
