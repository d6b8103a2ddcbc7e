"""Providers in config.toml ([providers.NAME]) and the routine keys that use them (route =
"<provider>", local_provider, premium_provider): parsing, exact errors, the legs a route
runs on (plan_route), and pricing for a declared provider."""

from __future__ import annotations

import dataclasses
import textwrap
from pathlib import Path

import pytest

from ipc.messages import Job
from routines import pricing
from routines.spec import AgentSpec, Route
from routines.spec.config import Config, ConfigInvalid, load_config
from routines.spec.loader import RoutineInvalid, load_file
from routines.spec.paths import paths
from routines.spec.providers import (
    Leg,
    ProviderKind,
    ProviderSettings,
    RouteInvalid,
    from_job,
    plan_route,
    to_job,
)

CONFIG = """
[providers.lmstudio]
kind = "openai"
base_url = "http://127.0.0.1:1234/v1"
local = true

[providers.openrouter]
kind = "openai"
base_url = "https://openrouter.ai/api/v1/"
key_file = "~/.vinos/secrets/openrouter-key"
prices = { "anthropic/claude-sonnet-4" = { input = 3.0, output = 15.0 } }
"""


@pytest.fixture
def cfg(vinos_env: Path) -> Path:
    return paths().config_file


def config_errors(path: Path, text: str) -> list[str]:
    path.write_text(textwrap.dedent(text))
    with pytest.raises(ConfigInvalid) as info:
        load_config(path)
    return [str(p) for p in info.value.errors]


def test_the_issue_example_parses(cfg: Path) -> None:
    cfg.write_text(CONFIG)
    c = load_config(cfg)
    assert c.providers == {
        "lmstudio": ProviderSettings(
            "lmstudio", ProviderKind.OPENAI, "http://127.0.0.1:1234/v1", local=True
        ),
        "openrouter": ProviderSettings(
            "openrouter",
            ProviderKind.OPENAI,
            "https://openrouter.ai/api/v1",
            local=False,
            key_file=str(Path.home() / ".vinos/secrets/openrouter-key"),
            prices={"anthropic/claude-sonnet-4": (3.0, 15.0)},
        ),
    }
    assert from_job(to_job(c.providers)) == c.providers
    assert "sk-" not in repr(to_job(c.providers))  # paths and prices only, never a key


def test_no_providers_means_none(cfg: Path) -> None:
    cfg.write_text("max_concurrent = 3\n")
    assert load_config(cfg).providers == {}


@pytest.mark.parametrize(
    ("table", "message"),
    [
        (
            'kind = "anthropic"\nbase_url = "http://h/v1"',
            '[providers.p].kind: expected "openai", found "anthropic" (a string)',
        ),
        ('kind = "openai"', "[providers.p].base_url: required, e.g. base_url = "),
        (
            'kind = "openai"\nbase_url = "127.0.0.1:1234"',
            "[providers.p].base_url: expected an http:// or https:// URL",
        ),
        (
            'kind = "openai"\nbase_url = "http://h/v1"\nlocal = "yes"',
            '[providers.p].local: expected true or false, found "yes" (a string)',
        ),
        (
            'kind = "openai"\nbase_url = "http://h/v1"\nkey_file = "secrets/k"',
            '[providers.p].key_file: expected a path starting with "~/" or "/"',
        ),
        (
            'kind = "openai"\nbase_url = "http://h/v1"\napi_key = "sk-live"',
            "[providers.p].api_key: a key never goes in config.toml: write it to a file",
        ),
        (
            'kind = "openai"\nbase_url = "http://h/v1"\nlocal = true\n'
            'prices = { "m" = { input = 1.0, output = 2.0 } }',
            "[providers.p].prices: a local provider costs $0",
        ),
        (
            'kind = "openai"\nbase_url = "http://h/v1"\nprices = { "m" = { input = 1.0 } }',
            '[providers.p].prices."m": expected both input and output',
        ),
        (
            'kind = "openai"\nbase_url = "http://h/v1"\n'
            'prices = { "m" = { input = -1, output = 2 } }',
            '[providers.p].prices."m".input: expected a positive number, found -1 (an integer)',
        ),
        (
            'kind = "openai"\nbase_url = "https://u:pw@h/v1"\nkey_file = "/k"',
            "[providers.p].base_url: expected a URL without user:password@ when key_file is set",
        ),
        (
            'kind = "openai"\nbase_url = "http://h/v1"\nbase_ulr = "x"',
            "[providers.p].base_ulr: unknown key (did you mean base_url?)",
        ),
        (
            'kind = "openai"\nbase_url = "http://h/v1"\nmax_output_tokens = 0',
            "[providers.p].max_output_tokens: expected a positive integer, found 0",
        ),
    ],
)
def test_provider_errors_name_file_key_expected_found(cfg: Path, table: str, message: str) -> None:
    errors = config_errors(cfg, f"[providers.p]\n{table}\n")
    assert any(e.startswith(f"config.toml: {message}") for e in errors), errors


def test_a_bad_base_url_with_a_password_is_not_echoed(cfg: Path) -> None:
    errors = config_errors(cfg, '[providers.p]\nkind = "openai"\nbase_url = "ftp://u:pw@h/v1"\n')
    assert errors == [
        "config.toml: [providers.p].base_url: expected an http:// or https:// URL such as "
        '"http://127.0.0.1:1234/v1", found "ftp://h/…" (a string)'
    ]


def test_reserved_and_malformed_provider_names(cfg: Path) -> None:
    errors = config_errors(cfg, '[providers.ollama]\nkind = "openai"\nbase_url = "http://h/v1"\n')
    assert errors == [
        "config.toml: [providers.ollama]: expected a name of lowercase letters, digits, '-' "
        "and '_', not one of anthropic, auto, local, ollama, premium, provider, found "
        '"ollama" (a string)'
    ]
    assert config_errors(cfg, "providers = 3\n") == [
        "config.toml: providers: expected a table, found 3 (an integer)",
        "config.toml: [providers]: expected a table of [providers.NAME] tables, found 3 "
        "(an integer)",
    ]


# -- routine files ---------------------------------------------------------------------------

ROUTINE = """
[schedule]
cron = "0 6 * * *"
timezone = "UTC"

[agent]
system = "You write the brief."
{agent}

[budget]
{budget}
"""


def routine(vinos_env: Path, agent: str, budget: str = "max_dollars_per_day = 1.0") -> Path:
    path = paths().routines_dir / "brief.toml"
    path.write_text(ROUTINE.format(agent=agent, budget=budget))
    return path


def problems(path: Path) -> list[str]:
    with pytest.raises(RoutineInvalid) as info:
        load_file(path)
    return [str(p).removeprefix(f"{path}: ") for p in info.value.errors]


@pytest.fixture
def declared(cfg: Path) -> Path:
    cfg.write_text(CONFIG)
    return cfg


def test_route_on_a_local_provider(declared: Path, vinos_env: Path) -> None:
    r = load_file(routine(vinos_env, 'route = "lmstudio"\nmodel = "qwen2.5-7b"', budget=""))
    assert r.agent is not None
    assert (r.agent.route, r.agent.provider, r.agent.model) == (
        Route.PROVIDER,
        "lmstudio",
        "qwen2.5-7b",
    )
    assert r.warnings == ()  # a local provider: no budget needed
    plan = plan_route(r.agent, load_config(declared).providers)
    assert (plan.only, plan.label, plan.local.provider, plan.local.model) == (
        Leg.LOCAL,
        "lmstudio",
        "lmstudio",
        "qwen2.5-7b",
    )


def test_auto_with_both_legs_declared(declared: Path, vinos_env: Path) -> None:
    agent = (
        'route = "auto"\nlocal_provider = "lmstudio"\nlocal_model = "qwen2.5-7b"\n'
        'premium_provider = "openrouter"\npremium_model = "anthropic/claude-sonnet-4"'
    )
    r = load_file(routine(vinos_env, agent))
    assert r.agent is not None
    plan = plan_route(r.agent, load_config(declared).providers)
    assert (plan.only, plan.label) == (None, "local")
    assert (plan.local.provider, plan.premium.provider) == ("lmstudio", "openrouter")
    assert plan.premium.model == "anthropic/claude-sonnet-4"


def test_an_unknown_provider_lists_the_declared_ones(declared: Path, vinos_env: Path) -> None:
    assert problems(routine(vinos_env, 'route = "lmstudo"\nmodel = "m"')) == [
        '[agent].route: expected one of "anthropic" | "ollama" | "auto" or a provider declared '
        'in config.toml [providers.NAME] (the providers in config.toml: "lmstudio" | '
        '"openrouter"), found "lmstudo" (a string) (did you mean lmstudio?)'
    ]
    assert problems(routine(vinos_env, 'local_provider = "llamacpp"\nlocal_model = "m"')) == [
        '[agent].local_provider: no provider "llamacpp" (declared in config.toml: lmstudio, '
        "openrouter)"
    ]


@pytest.mark.parametrize(
    ("agent", "message"),
    [
        (
            'premium_provider = "lmstudio"\npremium_model = "m"',
            '[agent].premium_provider: "lmstudio" is a local provider (local = true in '
            "config.toml): it cannot be the premium leg",
        ),
        (
            'local_provider = "openrouter"\nlocal_model = "m"',
            '[agent].local_provider: "openrouter" is not a local provider',
        ),
        (
            'local_provider = "anthropic"',
            '[agent].local_provider: "anthropic" cannot be the local leg',
        ),
        (
            'premium_provider = "ollama"',
            '[agent].premium_provider: "ollama" cannot be the premium leg',
        ),
        (
            'route = "ollama"\nlocal_provider = "lmstudio"',
            '[agent].local_provider: only with route = "auto", found route = "ollama"',
        ),
        (
            'local_provider = "lmstudio"',
            '[agent].local_model: required with local_provider = "lmstudio"',
        ),
        ('route = "lmstudio"', '[agent].model: required with route = "lmstudio"'),
        (
            'route = "lmstudio"\nmodel = "m"\nlocal_model = "x"',
            '[agent].local_model: only with route = "auto"; route = "lmstudio" uses model',
        ),
        ('route = "provider"', '[agent].route: expected "auto" | "ollama" | "anthropic"'),
    ],
)
def test_legs_misused(declared: Path, vinos_env: Path, agent: str, message: str) -> None:
    found = problems(routine(vinos_env, agent))
    assert any(p.startswith(message) for p in found), found


def test_a_paid_leg_without_a_price_is_refused_when_a_budget_is_set(
    declared: Path, vinos_env: Path
) -> None:
    agent = 'route = "openrouter"\nmodel = "openai/gpt-5"'
    assert problems(routine(vinos_env, agent)) == [
        '[agent].model: no price known for model "openai/gpt-5" on provider "openrouter": '
        "add it to config.toml, e.g.\n  [providers.openrouter]\n"
        '  prices = { "openai/gpt-5" = { input = 3.0, output = 15.0 } }   # $ per million tokens'
    ]
    auto = 'premium_provider = "openrouter"\npremium_model = "openai/gpt-5"'
    assert problems(routine(vinos_env, auto))[0].startswith(
        '[agent].premium_model: no price known for model "openai/gpt-5" on provider "openrouter"'
    )
    # No budget: it loads, warned twice (unlimited spend, and runs refused until priced).
    r = load_file(routine(vinos_env, agent, budget=""))
    assert any("daily spend is unlimited" in w for w in r.warnings)
    assert any("its runs are refused until then" in w for w in r.warnings)


def test_a_priced_paid_route_loads(declared: Path, vinos_env: Path) -> None:
    r = load_file(routine(vinos_env, 'route = "openrouter"\nmodel = "anthropic/claude-sonnet-4"'))
    assert r.warnings == ()


def test_an_invalid_config_is_named_not_guessed(cfg: Path, vinos_env: Path) -> None:
    cfg.write_text("[providers.x]\nkind = 1\n")
    found = problems(routine(vinos_env, 'route = "lmstudio"\nmodel = "m"'))
    assert len(found) == 1 and found[0].startswith(
        f"[agent].route: cannot check its provider: {cfg} is invalid: config.toml: "
    )


def test_existing_routines_mean_what_they_meant(vinos_env: Path) -> None:
    # No config.toml at all: the built-in legs, and config.toml is never read for them.
    for agent, only, label in (
        ("", None, "local"),
        ('route = "ollama"', Leg.LOCAL, "ollama"),
        ('route = "anthropic"', Leg.PREMIUM, "anthropic"),
    ):
        r = load_file(routine(vinos_env, agent))
        assert r.agent is not None
        plan = plan_route(r.agent, {})
        assert (plan.only, plan.label) == (only, label)
        assert (plan.local.provider, plan.premium.provider) == ("ollama", "anthropic")
        assert (plan.local.model, plan.premium.model) == ("llama3.2:3b", "claude-sonnet-4-6")
        assert plan.local.settings is None and plan.premium.settings is None


def test_plan_route_refuses_what_the_job_does_not_declare() -> None:
    agent = AgentSpec(system="s", route=Route.PROVIDER, provider="vllm", model="m")
    with pytest.raises(RouteInvalid) as info:
        plan_route(agent, {})
    assert info.value.key == "[agent].route" and "none declared" in str(info.value)


def test_declared_prices_only_never_the_builtin_list() -> None:
    prices = {"gpt-5": (1.25, 10.0)}
    assert pricing.price_of("gpt-5", prices, builtin=False) == (1.25, 10.0)
    # A name Anthropic's list knows does not borrow that price on another provider.
    with pytest.raises(pricing.UnknownModelPrice) as info:
        pricing.price_of("claude-sonnet-4-6", prices, builtin=False, provider="openrouter")
    assert "[providers.openrouter]" in str(info.value)
    assert pricing.price_of("claude-sonnet-4-6") == (3.0, 15.0)
    assert pricing.cost("gpt-5", 1_000_000, 100_000, prices, builtin=False) == pytest.approx(2.25)


def job_on(config: Config, home: Path) -> Job:
    """The job the supervisor builds for a routine on "lmstudio", as the worker decodes it."""
    from datetime import UTC, datetime

    from ipc.messages import from_dict, to_dict
    from routines.runs import Trigger
    from supervisor.engine.jobs import build_job

    r = load_file(routine(home, 'route = "lmstudio"\nmodel = "qwen"', budget=""))
    job = build_job(
        r,
        run_id="run-1",
        trigger=Trigger.MANUAL,
        slot=None,
        now=datetime(2026, 12, 2, 9, 0, tzinfo=UTC),
        max_tokens=None,
        dollars_left=None,
        paths=paths(),
        config=config,
    )
    back = from_dict(to_dict(job))
    assert isinstance(back, Job)
    return back


def test_the_job_carries_config_providers_and_never_a_key(declared: Path, vinos_env: Path) -> None:
    config = load_config(declared)
    back = job_on(config, vinos_env)
    assert from_job(back.providers) == config.providers
    assert back.providers["openrouter"]["key_file"].endswith("/.vinos/secrets/openrouter-key")


def test_the_capability_card_names_the_provider(declared: Path, vinos_env: Path) -> None:
    from supervisor.cli.commands.capabilities import capabilities

    r = load_file(routine(vinos_env, 'route = "lmstudio"\nmodel = "qwen2.5-7b"', budget=""))
    model = next(line for line in capabilities(r) if line.label == "model")
    assert model.text == "lmstudio: qwen2.5-7b (a provider in config.toml)"


def test_status_does_not_ask_for_ollama_or_anthropic_when_both_legs_are_declared(
    declared: Path, vinos_env: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from supervisor.hostcheck import problems as host_problems

    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    both = load_file(
        routine(
            vinos_env,
            'local_provider = "lmstudio"\nlocal_model = "q"\npremium_provider = "openrouter"\n'
            'premium_model = "anthropic/claude-sonnet-4"',
        )
    )
    builtin = dataclasses.replace(both, name="builtin", agent=AgentSpec(system="s"))
    dead = "http://127.0.0.1:9"
    assert host_problems(paths(), [both], dead, None) == []
    found = host_problems(paths(), [builtin], dead, None)
    assert any("no Anthropic API key (needed by builtin)" in line for line in found), found
    assert any("Ollama is not reachable" in line for line in found), found


def test_declaring_the_provider_later_makes_the_routine_valid_on_the_next_scan(
    cfg: Path, vinos_env: Path
) -> None:
    import os

    from routines.spec.registry import scan

    routine(vinos_env, 'route = "lmstudio"\nmodel = "qwen"', budget="")
    first = scan(paths())
    entry = first.get("brief")
    assert entry is not None and not entry.valid
    assert "(none declared)" in str(entry.errors[0])
    cfg.write_text(CONFIG)
    os.utime(cfg, ns=(1, 1))  # a stamp unlike "no file", whatever the clock's resolution
    second = scan(paths(), first)  # the routine file itself did not change
    entry = second.get("brief")
    assert entry is not None and entry.valid and entry.routine is not None
    assert entry.routine.agent is not None and entry.routine.agent.provider == "lmstudio"


def test_a_key_file_is_on_the_never_list(cfg: Path, vinos_env: Path) -> None:
    from routines.spec.never import home_problem, never_paths

    cfg.write_text(
        '[sandbox]\nnever = ["~/.config/hub"]\n\n[providers.openrouter]\nkind = "openai"\n'
        'base_url = "https://openrouter.ai/api/v1"\nkey_file = "~/.config/openrouter/key"\n'
    )
    c = load_config(cfg)
    key = str(Path.home() / ".config/openrouter/key")
    assert c.sandbox.never == ("~/.config/hub", key)
    assert c.sandbox.as_dict()["never"] == ["~/.config/hub", key]  # what the worker masks
    home = str(Path.home())
    never = never_paths(home, str(vinos_env), c.sandbox.never)
    assert home_problem("~/.config/openrouter/key", home, never) is not None
    # (A declared parent, ~/.config/openrouter, is allowed: the sandbox masks the key in it.)


def test_a_malformed_job_providers_is_a_value_error() -> None:
    with pytest.raises(ValueError, match="the job's providers are malformed"):
        from_job({"x": {"kind": "grpc", "base_url": "http://h"}})
    with pytest.raises(ValueError):
        from_job({"x": 3})


def test_status_names_a_local_provider_that_does_not_answer(
    declared: Path, vinos_env: Path
) -> None:
    import socket

    from supervisor.hostcheck import problems as host_problems

    r = load_file(routine(vinos_env, 'route = "lmstudio"\nmodel = "qwen"', budget=""))
    with socket.socket() as listening:
        listening.bind(("127.0.0.1", 0))
        listening.listen()
        port = listening.getsockname()[1]
        up = {
            "lmstudio": ProviderSettings(
                "lmstudio", ProviderKind.OPENAI, f"http://127.0.0.1:{port}/v1", local=True
            )
        }
        assert host_problems(paths(), [r], "http://127.0.0.1:9", None, up) == []
    down = {"lmstudio": dataclasses.replace(up["lmstudio"], base_url="http://u:pw@127.0.0.1:9/v1")}
    [line] = host_problems(paths(), [r], "http://127.0.0.1:9", None, down)
    assert line.startswith(
        'the local provider "lmstudio" is not reachable at http://127.0.0.1:9/… ('
    )
    assert "needed by brief" in line and "pw" not in line


def test_listener_users_reach_the_job_and_garbage_is_refused(cfg: Path, vinos_env: Path) -> None:
    # Who besides us, root and `ollama` may serve a loopback model URL (worker/connector.py):
    # named in config.toml, carried by the job to the worker that checks it.
    cfg.write_text(
        'ollama_listener_users = ["ai"]\n'
        + CONFIG.replace("local = true\n", 'local = true\nlistener_users = ["lms", "svc-1"]\n')
    )
    config = load_config(cfg)
    assert config.ollama_listener_users == ("ai",)
    assert config.providers["lmstudio"].listener_users == ("lms", "svc-1")
    assert config.providers["openrouter"].listener_users == ()
    back = job_on(config, vinos_env)
    assert back.ollama_listener_users == ["ai"]
    assert from_job(back.providers) == config.providers
    for bad in ('"ai"', '["a b"]', "[1]", '[""]'):
        errors = config_errors(cfg, f"ollama_listener_users = {bad}\n")
        assert errors == [
            "config.toml: ollama_listener_users: expected an array of user names, "
            f'e.g. ["ollama"], found {errors[0].split("found ", 1)[1]}'
        ]
    errors = config_errors(
        cfg, '[providers.p]\nkind = "openai"\nbase_url = "http://h/v1"\nlistener_users = "x"\n'
    )
    assert errors[0].startswith("config.toml: [providers.p].listener_users: expected an array")


def test_max_output_tokens_the_routines_then_the_providers_then_the_legs(
    cfg: Path, vinos_env: Path
) -> None:
    from routines.spec.providers import LOCAL_MAX_OUTPUT, PREMIUM_MAX_OUTPUT, output_limit

    cfg.write_text(CONFIG.replace("local = true\n", "local = true\nmax_output_tokens = 300\n"))
    providers = load_config(cfg).providers
    assert providers["lmstudio"].max_output_tokens == 300
    assert from_job(to_job(providers)) == providers  # the job carries it to the worker
    agent = AgentSpec(system="s", route=Route.PROVIDER, provider="lmstudio", model="m")
    plan = plan_route(agent, providers)
    said = "[providers.lmstudio].max_output_tokens"
    assert output_limit(agent, plan.local, Leg.LOCAL) == (300, said)
    own = dataclasses.replace(agent, max_output_tokens=120)
    assert output_limit(own, plan.local, Leg.LOCAL) == (120, "[agent].max_output_tokens")
    builtin = AgentSpec(system="s")
    plan = plan_route(builtin, providers)
    assert output_limit(builtin, plan.local, Leg.LOCAL) == (LOCAL_MAX_OUTPUT, "the local default")
    assert output_limit(builtin, plan.premium, Leg.PREMIUM) == (PREMIUM_MAX_OUTPUT, "the default")
