"""One run's state: the job, the parsed routine, the clock, the spend so far, and the
providers (created on first use, so a local-only run never loads the Anthropic SDK).

Which provider each leg runs on is `plan` (routines.spec.providers.plan_route over the job's
[providers.NAME] settings): Ollama and Anthropic unless the routine names a declared one."""

from __future__ import annotations

import dataclasses
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING

from ipc.messages import EventKind, Job, Outcome
from routines import pricing
from routines.spec import Permissions, Routine
from routines.spec import paths as paths_mod
from routines.spec.providers import RoutePlan, Target, from_job, plan_route
from worker import connector, keys
from worker.budget import PremiumAllowance, Spent
from worker.channel import Channel
from worker.providers.base import NoPremiumKey, Provider, ProviderError

if TYPE_CHECKING:
    from collections.abc import Mapping

    from sandbox import ShellPolicy
    from worker.mcptools import McpTools

__all__ = ["Deadline", "RunContext", "ollama_url"]


def ollama_url(from_job: str) -> str:
    """The job's URL (config.toml or OLLAMA_HOST, resolved by the supervisor); if it sent
    none, OLLAMA_HOST as Ollama itself reads it, else the default. config.toml's module is
    imported only then, not before a local run's first request whenever the supervisor sent
    the URL (its start to that request is timed: bench/bench_worker.py)."""
    if from_job.strip():
        return from_job.strip()
    from routines.spec.config import DEFAULT_OLLAMA_URL, ollama_host_url

    return ollama_host_url() or DEFAULT_OLLAMA_URL


class Deadline:
    """The run's wall clock (run_timeout_sec), less a margin to report before the
    supervisor's own timeout ends the process.

    `elapsed` is the time already gone since the supervisor started the run (the worker's
    own start-up and imports): the supervisor's timer started then, not when this
    object was made. An `elapsed` outside [0, seconds) says the two clocks disagree (a
    stepped clock, a test's fake one) and is ignored rather than trusted."""

    def __init__(
        self, seconds: float, clock: Callable[[], float] = time.monotonic, elapsed: float = 0.0
    ) -> None:
        self._clock = clock
        margin = min(3.0, seconds * 0.1)
        already = elapsed if 0.0 <= elapsed < seconds else 0.0
        self.end = self._clock() + seconds - margin - already

    def remaining(self) -> float:
        return self.end - self._clock()


@dataclass
class RunContext:
    job: Job
    routine: Routine
    channel: Channel
    started: datetime
    deadline: Deadline
    spent: Spent = field(default_factory=Spent)
    tool_calls: int = 0
    tools_used: list[str] = field(default_factory=list)
    outcome: Outcome | None = None
    outcome_summary: str = ""
    proposals: int = 0  # propose_action calls accepted
    paused: str | None = None  # the call the run paused at for a person (an action's name)
    refused: int = 0  # tool calls refused (whitelist, sandbox checks, a person's denial)
    mcp: McpTools | None = None  # the run's MCP servers, once its first use starts them
    gate_output: str = ""  # [gate]'s stdout when it said go (worker/gate.py), capped
    _local: Provider | None = None
    _premium: Provider | None = None
    _plan: RoutePlan | None = None
    _api_key: str | None = None
    _key_looked_up: bool = False

    @property
    def name(self) -> str:
        return self.routine.name

    @property
    def pauses_at_actions(self) -> bool:
        """Whether a proposed action pauses the run for the person's answer: under
        [routine].permissions "ask" and "files" (the job's, as the supervisor decided:
        routines/signing.py `effective_permissions`), not "everything"."""
        return self.job.permissions != "everything"

    @property
    def permissions(self) -> Permissions:
        """What this run may do unasked: the job's (routines/signing.py
        `effective_permissions`), never more than the file asks."""
        return Permissions(self.job.permissions)

    @property
    def writes_ask(self) -> bool:
        """Whether a write to the routine's `write` folders pauses the run ("ask")."""
        return self.permissions is Permissions.ASK

    @property
    def allowance(self) -> PremiumAllowance:
        return PremiumAllowance(self.job.max_tokens, self.job.dollars_left)

    @property
    def paths(self) -> paths_mod.Paths:
        """The project's paths, with VINOS_HOME as the job says."""
        return dataclasses.replace(paths_mod.paths(), home=Path(self.job.vinos_home))

    @property
    def sandbox_scratch(self) -> Path:
        """The run's scratch dir for its shell tools (their working directory)."""
        return self.paths.run_scratch(self.name, self.job.run_id)

    def shell_policy(self) -> ShellPolicy:
        """The sandbox of the routine's own shell calls in this run (its gate, its tools, a
        command routine's command): built the one way, from the job's sandbox settings.
        Raises sandbox.UnsafeValue (a ValueError) as worker.shellpolicy.shell_policy_for does."""
        from routines.spec.config import SandboxSettings
        from worker.shellpolicy import shell_policy_for

        return shell_policy_for(
            self.routine,
            paths=self.paths,
            scratch_dir=self.sandbox_scratch,
            settings=SandboxSettings(**self.job.sandbox),
            permissions=self.permissions,
        )

    def debug_argv(self) -> Callable[[list[str]], None] | None:
        """With VINOS_ROUTINE_DEBUG=1, a hook that shows each bwrap argv as an event, so
        `vinos-routine run` prints it on the terminal (and the run log keeps it)."""
        if os.environ.get("VINOS_ROUTINE_DEBUG") != "1" and not self.job.debug:
            return None
        from sandbox.argv import argv_line

        def show(argv: list[str]) -> None:
            self.channel.event(EventKind.LOG, f"sandbox argv: {argv_line(argv)}", argv=argv)

        return show

    def announce_copy_back(self) -> None:
        """Tell the supervisor a call's writes are being copied back: past the run's limit,
        its backstop then waits once more, a bounded while, rather than ending the worker
        mid-copy with the folders half changed (supervisor/engine/spawn.py)."""
        self.channel.event(EventKind.COPY_BACK, "copying back what the call wrote")

    def given(self) -> list[tuple[str, str]]:
        """What this run was handed from outside the routine, (label, text) each: the event
        that started it, the gate's stdout. The prompt shows each as untrusted data."""
        out: list[tuple[str, str]] = []
        if self.job.event_label or self.job.event_text:
            out.append((self.job.event_label or "the event's input", self.job.event_text))
        if self.gate_output:
            out.append(("the output of this routine's [gate] check", self.gate_output))
        return out

    def api_key(self) -> str | None:
        if not self._key_looked_up:
            self._key_looked_up = True
            self._api_key = keys.find_api_key(self.paths.api_key_file, self.channel.warn)
        return self._api_key

    def add_premium(self, tokens: int, dollars: float) -> None:
        self.spent = Spent(self.spent.tokens + tokens, self.spent.dollars + dollars)

    @property
    def plan(self) -> RoutePlan:
        """The route's two legs; routines.spec.providers.RouteInvalid when the routine names a
        provider the job's config.toml does not declare (worker.agent reports it)."""
        if self._plan is None:
            assert self.routine.agent is not None
            self._plan = plan_route(self.routine.agent, from_job(self.job.providers))
        return self._plan

    def _show_text(self, text: str) -> None:
        self.channel.event(EventKind.MODEL_TEXT, text)

    def local(self) -> Provider:
        if self._local is None:
            target = self.plan.local
            if target.settings is not None:
                self._local = self._declared(target)
            else:
                from worker.providers.ollama import OllamaProvider

                ctx = self.routine.agent.local_context_tokens if self.routine.agent else 4096
                url = ollama_url(self.job.ollama_url)
                trust = connector.ollama_trust(self.job.ollama_listener_users)
                # Before any client exists: a port of this machine must be held by a user we
                # trust (and again as each connection is made, webclient's backend).
                _checked(url, trust)
                self._local = OllamaProvider(
                    url, context_tokens=ctx, on_text=self._show_text, trust=trust
                )
        return self._local

    def premium(self) -> Provider:
        """The premium leg's provider; ProviderError when there is no API key."""
        if self._premium is None:
            target = self.plan.premium
            if target.settings is not None:
                self._premium = self._declared(target)
                return self._premium
            key = self.api_key()
            if key is None:
                raise NoPremiumKey(keys.MISSING_KEY)
            from worker.providers.anthropic import AnthropicProvider

            provider = AnthropicProvider(key)
            # ANTHROPIC_BASE_URL may name a port of this machine (tests/worker/
            # test_worker_squatter.py): checked before the first request, as every provider.
            _checked(provider.base_url, connector.ANTHROPIC)
            self._premium = provider
        return self._premium

    def _declared(self, target: Target) -> Provider:
        """A provider from config.toml; its key is read here, from key_file, and goes only
        into the request's Authorization header."""
        from worker.providers.openai import OpenAIProvider

        settings = target.settings
        assert settings is not None
        # Before the key is read or a client built: a base_url on this machine must be held
        # by a user we trust (tests/worker/test_worker_squatter.py).
        _checked(settings.base_url, connector.provider_trust(settings))
        key = None
        if settings.key_file:
            key = keys.read_key_file(Path(settings.key_file), self.channel.warn)
            if key is None:
                raise (NoPremiumKey if not settings.local else ProviderError)(
                    f'no API key for provider "{settings.name}": write it to '
                    f"{settings.key_file} (chmod 600), as config.toml's key_file says"
                )
        return OpenAIProvider(settings, api_key=key, on_text=self._show_text)

    def premium_prices(
        self,
    ) -> tuple[Mapping[str, tuple[float, float] | list[float]], bool, str | None]:
        """The premium leg's price table: (prices, whether the built-in Anthropic list counts,
        the provider to name in an error)."""
        settings = self.plan.premium.settings
        if settings is None:
            return self.job.pricing, True, None
        return settings.prices, False, settings.name

    def premium_price(self) -> tuple[float, float]:
        """($/MTok in, out) of the premium leg's model; pricing.UnknownModelPrice if none."""
        prices, builtin, provider = self.premium_prices()
        return pricing.price_of(self.plan.premium.model, prices, builtin=builtin, provider=provider)

    def premium_cost(self, model: str, input_tokens: int, output_tokens: int) -> float:
        prices, builtin, provider = self.premium_prices()
        return pricing.cost(
            model, input_tokens, output_tokens, prices, builtin=builtin, provider=provider
        )

    def record_tool(self, name: str) -> None:
        self.tool_calls += 1
        if name not in self.tools_used:
            self.tools_used.append(name)


def _checked(url: str, trust: connector.Trust) -> None:
    """The connector's verdict on `url` before a provider is built: ProviderError, saying
    why and the fix, when a connection there would be refused."""
    try:
        connector.default().check(url, trust)
    except connector.Refused as exc:
        raise ProviderError(str(exc)) from None
