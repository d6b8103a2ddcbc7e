"""One agent run: choose the route, drive the tool loop, escalate, then output and memory.

Routes and their ledger labels (what `history` and `cost` group by): `ollama` and `anthropic` when
the routine picks one (or the name of a provider from config.toml it picks); for `auto`, `local`
when the local model's answer stands and `local->premium` when the router escalated. Which provider
each leg runs on is the run's `plan` (routines.spec.providers.plan_route). An escalation re-runs the
same turn from the start on the premium model (the local attempt's tool results are not carried
over), so its input/output tokens are the premium attempt's and the local attempt's are in
local_input/local_output.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from msgspec.structs import replace

from ipc.messages import EventKind, Outcome, Result, RunStatus, Usage
from routines import pricing
from routines.spec import AgentSpec, Memory
from routines.spec.providers import (
    BUILTIN_LOCAL,
    BUILTIN_PREMIUM,
    Leg,
    RouteInvalid,
    RoutePlan,
    Target,
)
from worker import budget, memory, prompts, router
from worker.context import RunContext
from worker.loop import CHARS_PER_TOKEN, AttemptEnd, End, ToolLoop, stop_failure
from worker.providers.base import (
    Conversation,
    NoPremiumKey,
    ProviderError,
    Stop,
    StoppedMidReply,
    Turn,
    UserTurn,
)
from worker.results import first_line, run_failed

__all__ = ["SUMMARY_TIMEOUT", "run_agent"]

SUMMARY_TIMEOUT = 60.0


@dataclass
class _Route:
    label: str
    escalated: bool = False
    reason: str = ""
    escalations_left: int = 0
    # The router wanted the premium leg and could not have it: (trigger, why), and the run
    # keeps the local answer, needing attention.
    unreached: tuple[str, str] | None = None


def unreached_summary(trigger: str, why: str) -> str:
    """A run that wanted to escalate and could not (pure): its summary."""
    return f"wanted to escalate: {trigger}; {why}"


def run_agent(run: RunContext) -> Result:
    agent = run.routine.agent
    assert agent is not None
    return AgentRun(run, agent).go()


class AgentRun:
    def __init__(self, run: RunContext, agent: AgentSpec) -> None:
        self.run = run
        self.agent = agent
        self.tools = prompts.tool_specs(agent)
        self.pauses = run.pauses_at_actions
        self.system = prompts.system_prompt(
            agent, run.name, self.tools, self.pauses, run.writes_ask
        )
        # A reply continues its parent's conversation: the person's text is "the user turn"
        # the router reads, and the turns come from the parent's record (in go()).
        self.reply_turns: list[Turn] | None = None
        self.conv: Conversation | None = None  # the attempt's, kept for a later reply
        self.task = run.job.reply_text or prompts.task_text(run.started, run.job.trigger)
        for label, given in run.given():  # an event's input, the gate's stdout: as data
            self.task += "\n\n" + prompts.untrusted_text(label, given)
        remembered = "" if agent.memory is Memory.SESSION else memory.for_prompt(run.job.memory)
        decided = prompts.decisions_text(run.job.decisions)
        self.user = prompts.user_turn(self.task, remembered, decided)
        self.loop = ToolLoop(run, self.tools)
        self.route_error = ""
        try:
            self.plan = run.plan
        except RouteInvalid as exc:  # reported by go(), as the run's failure
            self.route_error = f"{exc.key}: {exc}"
            local, premium = Target(BUILTIN_LOCAL, agent.model), Target(BUILTIN_PREMIUM, "")
            self.plan = RoutePlan(local, premium, Leg.LOCAL, agent.provider or BUILTIN_LOCAL)
        self.route = _Route(
            self.plan.label, escalations_left=agent.escalation.max_escalations_per_run
        )

    def conversation(self) -> Conversation:
        first: list[Turn] = [UserTurn(self.user)]
        self.conv = Conversation(self.system, list(self.reply_turns or first))
        return self.conv

    def go(self) -> Result:
        if self.route_error:
            return self._failed(self.route_error, self.plan.local.model)
        if self._may_use_premium():
            try:
                self.run.premium_price()
            except pricing.UnknownModelPrice as exc:
                return self._failed(str(exc), self.plan.premium.model)
        if self.run.job.parent_run_id:
            from worker import replies  # a reply's alone before its first request (see _keep)

            try:
                if self.run.job.answer is not None:  # a paused run's person answered
                    self.reply_turns = replies.resumed_turns(self.run)
                    if self.run.job.answer.state != "done":  # refused by a person
                        self.run.refused += 1
                else:
                    self.reply_turns = replies.parent_turns(self.run)
            except replies.ReplyUnavailable as exc:
                return self._failed(str(exc), self._last_model())
        if self.agent.mcp_tools:
            self._offer_mcp()
        end: AttemptEnd | None = None
        try:
            end = self._drive()
        except ProviderError as exc:
            if self.run.deadline.remaining() <= 1:
                # The run's wall clock ran out (a slow model, or the loop's own check): that is
                # `timeout`, which counts as a strike like `failed` (test_reliability_timeout.py::
                # test_an_agent_out_of_run_timeout_sec_is_recorded_timeout).
                if isinstance(exc, StoppedMidReply):
                    return self._timed_out(
                        f"stopped at its time limit while the model was still answering "
                        f"(run_timeout_sec = {self.agent.run_timeout_sec}; "
                        f"{exc.output_tokens} tokens received)",
                        self._last_model(),
                        plain=True,
                    )
                return self._timed_out(str(exc), self._last_model())
            return self._failed(str(exc), self._last_model())
        finally:
            if self.conv is not None:  # kept however the run ended: a reply can retry it
                self._keep(end)
        return self._finish(end)

    def _keep(self, end: AttemptEnd | None) -> None:
        """Save the conversation for a later reply. Its modules (the conversation store,
        hashing) are imported here, after the model answered, not before a run's first
        request: bench/bench_worker.py times a local run's start to that request."""
        from worker import replies

        assert self.conv is not None
        final = end.reply if end is not None and end.end is End.FINAL else None
        replies.save_conversation(self.run, self.conv, final)

    def _offer_mcp(self) -> None:
        """Start the routine's MCP servers and offer their whitelisted tools (with their
        own schemas) before the first model call; worker.main ends them with the run."""
        from worker.mcptools import McpTools

        self.run.mcp = McpTools(self.run, self.agent.mcp, float(self.agent.shell_timeout_sec))
        self.tools[-1:-1] = self.run.mcp.specs(self.agent.mcp_tools)  # before report_outcome
        self.system = prompts.system_prompt(
            self.agent, self.run.name, self.tools, self.pauses, self.run.writes_ask
        )

    def _may_use_premium(self) -> bool:
        if self.plan.only is not None:
            return self.plan.only is Leg.PREMIUM
        return self.agent.escalation.possible

    def _last_model(self) -> str:
        premium = self.route.escalated or self.plan.only is Leg.PREMIUM
        return self.plan.premium.model if premium else self.plan.local.model

    # --- routing ---

    def _drive(self) -> AttemptEnd:
        if self.plan.only is not None:
            return self.loop.attempt(self.conversation(), premium=self.plan.only is Leg.PREMIUM)
        esc = self.agent.escalation
        gate = self._gate(
            router.before_local(
                esc, self.route.escalations_left, self.agent.system, self.task, self.agent.tags
            )
        )
        if gate is not None:
            if gate.end is not End.ESCALATE:
                return gate
            try:
                return self._escalate(gate)
            except ProviderError as exc:
                self._premium_unreached(gate.trigger, exc)  # the local model answers instead
        end = self.loop.attempt(
            self.conversation(),
            premium=False,
            on_malformed=lambda: self._gate(router.on_malformed(esc, self.route.escalations_left)),
        )
        if end.end is End.FINAL and end.reply is not None:
            prompt = end.prompt_tokens
            if end.reply.stop is Stop.CONTEXT:
                # The server refused the prompt as longer than its context (an OpenAI-
                # compatible one says so; Ollama cuts it silently): it filled the context.
                prompt = max(prompt or 0, self.agent.local_context_tokens)
            gate = self._gate(
                router.after_reply(
                    esc,
                    self.route.escalations_left,
                    end.reply.text,
                    prompt,
                    self.agent.local_context_tokens,
                )
            )
            if gate is not None and gate.end is End.ESCALATE:
                try:
                    return self._escalate(gate)
                except ProviderError as exc:
                    self._premium_unreached(gate.trigger, exc)
                    return end  # the local answer stands
            if gate is not None:
                return gate
        return self._escalate(end) if end.end is End.ESCALATE else end

    def _premium_unreached(self, trigger: str, exc: ProviderError) -> None:
        """An escalation that cannot happen (no premium key, the premium leg down): the run
        goes on with the local answer and ends needs-attention, not as a failure that counts
        as a strike (test_worker_openai_router.py::
        test_an_escalation_without_a_premium_key_keeps_the_local_answer). Out of time is
        still a timeout: re-raised."""
        if self.run.deadline.remaining() <= 1:
            raise exc
        why = (
            "no premium key" if isinstance(exc, NoPremiumKey) else f"the premium leg failed: {exc}"
        )
        self.route = _Route(
            self.plan.label, reason=trigger, escalations_left=0, unreached=(trigger, why)
        )
        self.run.channel.warn(
            f"router: {trigger} fired, but {self.plan.premium.model} cannot be reached ({why}):"
            " keeping the local answer",
            trigger=trigger,
        )

    def _gate(self, decision: router.RouteDecision) -> AttemptEnd | None:
        """Whether a router decision escalates: ESCALATE, BUDGET (the premium call is not
        affordable and on_exceed stops the run), or None to stay local."""
        if decision.trigger is None:
            return None
        trigger = decision.trigger.value
        if decision.capped:
            self.run.channel.event(
                EventKind.LOG,
                f"router: {trigger} fired, but max_escalations_per_run "
                f"({self.agent.escalation.max_escalations_per_run}) is reached: staying local",
                trigger=trigger,
                capped=True,
            )
            return None
        verdict, reason = budget.check(
            self.run.allowance, self.run.spent, self.run.routine.budget.on_exceed
        )
        if verdict is budget.SpendCheck.DEGRADE:
            self.run.channel.warn(
                f"router: {trigger} fired, but {reason}: staying on the local model ($0)",
                trigger=trigger,
            )
            return None
        if verdict is budget.SpendCheck.STOP:
            return AttemptEnd.budget_stop(reason or "", self.run.routine.budget.on_exceed)
        return AttemptEnd(End.ESCALATE, trigger=trigger)

    def _escalate(self, gate: AttemptEnd) -> AttemptEnd:
        if gate.end is not End.ESCALATE:
            return gate
        self.route = _Route(
            "local->premium",
            escalated=True,
            reason=gate.trigger,
            escalations_left=self.route.escalations_left - 1,
        )
        self.run.channel.event(
            EventKind.ESCALATED,
            f"escalating to {self.plan.premium.model}: {gate.trigger}",
            reason=gate.trigger,
            to=self.plan.premium.model,
        )
        return self.loop.attempt(self.conversation(), premium=True)

    # --- the result ---

    def _base(self, status: RunStatus, model: str) -> Result:
        return Result(
            status=status,
            route=self.route.label,
            model=model,
            escalated=self.route.escalated,
            escalated_reason=self.route.reason,
            tried_model=self.plan.premium.model if self.route.unreached else "",
            tool_calls=self.run.tool_calls,
            tools_used=list(self.run.tools_used),
            refused_calls=self.run.refused,
        )

    def _failed(self, message: str, model: str) -> Result:
        return run_failed(message, base=self._base(RunStatus.FAILED, model))

    def _timed_out(self, why: str, model: str, *, plain: bool = False) -> Result:
        limit = f"the run reached its time limit (run_timeout_sec = {self.agent.run_timeout_sec})"
        message = why if plain or why.startswith(limit) else f"{limit}: {why}"
        return run_failed(
            message, status=RunStatus.TIMEOUT, base=self._base(RunStatus.TIMEOUT, model)
        )

    def _finish(self, end: AttemptEnd) -> Result:
        if end.end is End.PAUSED:
            # The conversation is kept (go()'s finally) with the paused call's placeholder;
            # the supervisor records the request and ends the run needs_you.
            base = self._base(RunStatus.NEEDS_YOU, end.model or self._last_model())
            return _with(base, summary=f"waiting for you: {end.message}")
        if end.end is End.BUDGET:
            base = self._base(RunStatus.BUDGET, end.model or self._last_model())
            notify = f"{self.run.name} stopped: {end.message}" if end.notify else None
            return _with(base, summary=end.message, notify=notify)
        if end.end is not End.FINAL or end.reply is None:
            return self._failed(end.message or "the run ended without an answer", end.model)
        if end.reply.stop is Stop.CONTEXT:
            return self._failed(stop_failure(end.reply), end.model)
        if self.route.unreached is not None:
            self.run.outcome = Outcome.NEEDS_ATTENTION
            self.run.outcome_summary = unreached_summary(*self.route.unreached)
        if self.run.proposals:
            # Whatever the model reported: a proposal waits for the user
            # (test_cli_approvals.py::test_a_proposal_is_recorded_and_nothing_runs).
            n = self.run.proposals
            self.run.outcome = Outcome.NEEDS_ATTENTION
            self.run.outcome_summary = _proposed(n, self.run.routine.auto_approve)
        body = end.reply.text.strip() or self.run.outcome_summary
        if not body:
            return self._failed(f"{end.model} returned an empty reply", end.model)
        if end.reply.stop is Stop.MAX_TOKENS:
            # Only a local reply gets here cut (a premium one failed in the loop): a looping
            # model's text is not an answer to record as ok, so the run needs attention and
            # its output says where it was cut (test_worker_openai.py::
            # test_a_runaway_local_reply_is_cut_and_needs_attention).
            cut = cut_note(*self.loop.output_limit(premium=False))
            self.run.outcome = Outcome.NEEDS_ATTENTION
            self.run.outcome_summary = cut
            body = f"{body}\n\n[{cut}]"
        from worker.output import write_and_post  # after the model calls: off the start-up path

        delivery = write_and_post(self.run, body)
        if self.agent.memory is not Memory.SESSION and self.run.job.memory_path:
            self._remember(body)
        status = RunStatus.FAILED if delivery.webhook_error else RunStatus.OK
        base = self._base(status, end.model)
        return _with(
            base,
            outcome=self.run.outcome,
            summary=self.run.outcome_summary or first_line(body),
            output_file=delivery.output_file,
            error=delivery.error,
        )

    def _remember(self, body: str) -> None:
        """Append a 2-3 sentence summary from one local call; any failure is a WARN only."""
        run = self.run
        timeout = min(SUMMARY_TIMEOUT, run.deadline.remaining())
        if timeout <= 1:
            run.channel.warn("memory not updated: the run is out of time")
            return
        system, user = memory.summary_request(run.name, run.outcome, body)
        model = self.plan.local.model
        try:
            reply = run.local().complete(
                Conversation(system, [UserTurn(user)]),
                [],
                model=model,
                max_tokens=memory.SUMMARY_MAX_TOKENS,
                timeout=timeout,
            )
        except ProviderError as exc:
            run.channel.warn(f"memory not updated: {exc}")
            return
        run.channel.usage(
            Usage(
                local_input=reply.input_tokens or len(system + user) // CHARS_PER_TOKEN,
                local_output=reply.output_tokens or len(reply.text) // CHARS_PER_TOKEN,
                model=model,
            )
        )
        summary = reply.text.strip()
        if not summary:
            run.channel.warn(f"memory not updated: {model} wrote an empty summary")
            return
        path = Path(run.job.memory_path or "")
        try:
            memory.append(path, memory.entry(run.name, run.started, summary))
        except OSError as exc:
            run.channel.warn(f"memory not updated: cannot write {path}: {exc.strerror}")
            return
        run.channel.event(EventKind.LOG, f"memory updated: {path}", path=str(path))


def cut_note(limit: int, said: str) -> str:
    """What a run whose local reply was cut at its output limit says (pure)."""
    return (
        f"the reply was cut at max_output_tokens ({limit} tokens, {said}): the model was "
        "still writing"
    )


def _with(result: Result, **changes: object) -> Result:
    return replace(result, **changes)


def _proposed(n: int, auto_approve: bool) -> str:
    """The run's summary when it proposed actions. With auto_approve the supervisor runs them
    at once if the file's signature verifies (tests/cli/test_cli_approvals.py::
    test_a_signed_routine_with_auto_approve_runs_its_proposal_at_once): say that, not "waits"."""
    if not auto_approve:
        return "1 action waits for you" if n == 1 else f"{n} actions wait for you"
    if n == 1:
        return (
            "1 action proposed: auto_approve runs it now if the signature verifies, else it "
            "waits for you"
        )
    return (
        f"{n} actions proposed: auto_approve runs them now if the signature verifies, else "
        "they wait for you"
    )
