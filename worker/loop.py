"""The bounded tool loop, on one provider at a time:

1. send the messages and tool schemas;
2. a reply without tool calls is the answer: the loop ends;
3. each tool call is whitelist-checked and carried out (worker.tools);
4. the results go back in the provider's own format (tool_result blocks / role "tool");
5. again, at most MAX_ITERATIONS model calls per attempt.

Before every premium call the budget is checked (degrade-to-local switches the rest of the
attempt to the local model), and after every call a `usage` message goes to the supervisor.
Anthropic's stop reasons are handled one by one: pause_turn continues the turn; max_tokens,
refusal and an unknown reason end the attempt as failures (or as budget, when the budget set
the output cap). Provider failures propagate as ProviderError to worker.agent.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum
from typing import TYPE_CHECKING

from ipc.messages import EventKind, Usage
from routines.spec import OnExceed
from routines.spec.providers import PREMIUM_MAX_OUTPUT, Leg, output_limit
from worker import budget
from worker.channel import preview
from worker.context import RunContext
from worker.providers.base import (
    AssistantTurn,
    Conversation,
    MalformedToolCall,
    ProviderError,
    Reply,
    Stop,
    StoppedMidReply,
    ToolResult,
    ToolResultsTurn,
    ToolsDropped,
    ToolSpec,
    ToolsUnsupported,
)

if TYPE_CHECKING:
    from worker.tools import Toolbox

__all__ = [
    "CHARS_PER_TOKEN",
    "DEFAULT_MAX_OUTPUT",
    "MAX_ITERATIONS",
    "AttemptEnd",
    "End",
    "ToolLoop",
    "stop_failure",
]

MAX_ITERATIONS = 10
DEFAULT_MAX_OUTPUT = PREMIUM_MAX_OUTPUT  # output tokens per premium call, unless configured
PREMIUM_CALL_TIMEOUT_MAX = 600.0
CHARS_PER_TOKEN = 4  # for estimating tokens a provider did not report


class End(StrEnum):
    FINAL = "final"  # a reply without tool calls: the answer
    ESCALATE = "escalate"  # the router wants the premium model (auto route, local attempt)
    BUDGET = "budget"  # the allowance stops the run
    FAILED = "failed"  # the attempt cannot produce an answer
    CAP = "cap"  # MAX_ITERATIONS model calls and the model still wants tools
    PAUSED = "paused"  # a call waits for a person (worker/tools.py): the run ends needs_you


@dataclass(frozen=True, slots=True)
class AttemptEnd:
    end: End
    reply: Reply | None = None  # FINAL: the answer
    model: str = ""  # the model asked last
    prompt_tokens: int | None = None  # FINAL: prompt tokens of the answer (estimated if unknown)
    trigger: str = ""  # ESCALATE: the router trigger
    message: str = ""  # BUDGET / FAILED / CAP: why, for the user
    notify: bool = False  # BUDGET with on_exceed = notify

    @classmethod
    def budget_stop(cls, reason: str, on_exceed: OnExceed) -> AttemptEnd:
        """The allowance ends the run (on_exceed = stop or notify)."""
        return cls(End.BUDGET, message=f"budget: {reason}", notify=on_exceed is OnExceed.NOTIFY)


# What the auto-router says when the local model's tool JSON is malformed: None to carry on
# locally, or an AttemptEnd (ESCALATE, or BUDGET when escalating is not affordable).
MalformedHook = Callable[[], AttemptEnd | None]


class ToolLoop:
    def __init__(self, run: RunContext, tools: list[ToolSpec]) -> None:
        self.run = run
        self._toolbox: Toolbox | None = None
        self.tools = tools
        agent = run.routine.agent
        assert agent is not None
        self.agent = agent
        self.tools_on = bool(tools)

    def attempt(
        self, conv: Conversation, *, premium: bool, on_malformed: MalformedHook | None = None
    ) -> AttemptEnd:
        """Drive the loop on `conv` until an answer, an escalation or a stop."""
        self.tools_on = bool(self.tools)  # a local model without tools says nothing of premium's
        for _ in range(MAX_ITERATIONS):
            if premium:
                verdict, reason = budget.check(
                    self.run.allowance, self.run.spent, self.run.routine.budget.on_exceed
                )
                if verdict is budget.SpendCheck.STOP:
                    return self._budget_stop(reason or "")
                if verdict is budget.SpendCheck.DEGRADE:
                    self._degrade(reason or "")
                    premium = False
            model = self._model(premium)
            try:
                reply, prompt_tokens, capped = self._call(conv, premium)
            except MalformedToolCall as exc:
                decided = on_malformed() if on_malformed and not premium else None
                return decided or AttemptEnd(End.FAILED, model=model, message=str(exc))
            if premium and reply.stop is not Stop.TOOL_USE and reply.stop is not Stop.END:
                if reply.stop is Stop.PAUSE:
                    conv.turns.append(AssistantTurn(reply))  # sent back as is: the turn goes on
                    continue
                if reply.stop is Stop.MAX_TOKENS and capped:
                    # The allowance, not the default, set max_tokens: this is the budget.
                    why = "the reply was cut off where the run's allowance ran out"
                    if self._on_exceed is not OnExceed.DEGRADE:
                        return self._budget_stop(why)
                    self._degrade(why)
                    premium = False
                    continue
                limit = self.output_limit(premium=True)[0]
                return AttemptEnd(End.FAILED, model=model, message=stop_failure(reply, limit))
            self._warn_if_cut(reply, premium)
            if reply.malformed and on_malformed is not None and not premium:
                self.run.channel.event(
                    EventKind.LOG, f"malformed tool JSON from {model}: {reply.malformed}"
                )
                decided = on_malformed()
                if decided is not None:
                    return decided
            if not reply.tool_calls:
                return AttemptEnd(End.FINAL, reply=reply, model=model, prompt_tokens=prompt_tokens)
            conv.turns.append(AssistantTurn(reply))
            conv.turns.append(ToolResultsTurn(self._execute(reply)))
            if self.run.paused is not None:
                return AttemptEnd(End.PAUSED, model=model, message=self.run.paused)
        return AttemptEnd(
            End.CAP,
            model=self._model(premium),
            message=f"stopped after {MAX_ITERATIONS} model calls: the model was still calling "
            "tools without giving a final answer",
        )

    def _warn_if_cut(self, reply: Reply, premium: bool) -> None:
        if not premium and reply.stop is Stop.MAX_TOKENS and not reply.tool_calls:
            # Kept as the answer; worker.agent ends the run needs-attention, its output
            # marked as cut (test_worker_openai.py::test_a_runaway_local_reply_is_cut).
            limit, said = self.output_limit(premium=False)
            self.run.channel.warn(f"the local reply was cut at {limit} tokens ({said})")

    def _execute(self, reply: Reply) -> tuple[ToolResult, ...]:
        """The reply's calls in order; once one paused the run for a person, the rest are
        not run (their results say so: the resumed model may call them again)."""
        from worker.replies import NOT_RUN_RESULT

        results: list[ToolResult] = []
        for call in reply.tool_calls:
            if self.run.paused is not None:
                results.append(ToolResult(call, NOT_RUN_RESULT, is_error=True))
            else:
                results.append(self.toolbox.execute(call))
        return tuple(results)

    @property
    def toolbox(self) -> Toolbox:
        """Created at the first tool call: a run without one never imports the sandbox side."""
        if self._toolbox is None:
            from worker.tools import Toolbox

            self._toolbox = Toolbox(self.run)
        return self._toolbox

    @property
    def _on_exceed(self) -> OnExceed:
        return self.run.routine.budget.on_exceed

    def _budget_stop(self, reason: str) -> AttemptEnd:
        return AttemptEnd.budget_stop(reason, self._on_exceed)

    def _degrade(self, reason: str) -> None:
        self.run.channel.warn(
            f"budget: {reason}; continuing on the local model {self._model(False)} ($0)",
            budget="degrade-to-local",
        )

    def _own_tools(self) -> bool:
        """Tools besides report_outcome (which a reply without tools can stand in for)."""
        from worker.prompts import TOOL_OUTCOME

        return any(t.name != TOOL_OUTCOME for t in self.tools)

    def output_limit(self, *, premium: bool) -> tuple[int, str]:
        """Output tokens per call on this leg, and the setting that said it."""
        plan = self.run.plan
        if premium:
            return output_limit(self.agent, plan.premium, Leg.PREMIUM)
        return output_limit(self.agent, plan.local, Leg.LOCAL)

    def _model(self, premium: bool) -> str:
        plan = self.run.plan
        return plan.premium.model if premium else plan.local.model

    def _call(self, conv: Conversation, premium: bool) -> tuple[Reply, int | None, bool]:
        """One model call with its events and usage: (reply, prompt tokens, output capped by
        the budget). Retries once without tools if the local model does not support them."""
        try:
            return self._call_once(conv, premium)
        except ToolsUnsupported as exc:
            if premium or not self.tools_on:
                raise
            if isinstance(exc, ToolsDropped) and self._own_tools():
                # The routine's own tools would never be called: a run `ok` without them is a
                # lie (test_worker_openai.py::test_a_template_without_tools_fails_at_start).
                raise ProviderError(f"{exc}; this routine needs its tools") from None
            self.run.channel.warn(f"{exc}: running without tools; its reply is the output")
            self.tools_on = False
            return self._call_once(conv, premium)

    def _call_once(self, conv: Conversation, premium: bool) -> tuple[Reply, int | None, bool]:
        run = self.run
        remaining = run.deadline.remaining()
        if remaining <= 1:
            raise ProviderError(
                f"the run reached its time limit (run_timeout_sec = {self.agent.run_timeout_sec})"
            )
        if premium:
            provider = run.premium()
            model = self._model(True)
            _, out_price = run.premium_price()
            max_tokens, capped = budget.output_cap(
                run.allowance, run.spent, self.output_limit(premium=True)[0], out_price / 1_000_000
            )
            timeout = min(PREMIUM_CALL_TIMEOUT_MAX, remaining / 3)  # the SDK may try 3 times
        else:
            provider, model = run.local(), self._model(False)
            max_tokens, capped, timeout = self.output_limit(premium=False)[0], False, remaining
        tools = self.tools if self.tools_on else []
        run.channel.event(
            EventKind.MODEL_CALL,
            f"calling {model} ({provider.name})",
            provider=provider.name,
            model=model,
            premium=premium,
            max_tokens=max_tokens,
        )
        try:
            reply = provider.complete(
                conv, tools, model=model, max_tokens=max_tokens, timeout=timeout
            )
        except StoppedMidReply as exc:
            # What streamed in before the time ran out was generated: it is counted, not 0
            # (test_worker_openai.py::test_a_stream_cut_by_the_time_limit_records_what_arrived).
            cut = Reply(exc.text, (), Stop.OTHER, "time limit", model, None, exc.output_tokens)
            self._account(cut, conv, premium, model)
            raise
        prompt_tokens = self._account(reply, conv, premium, model)
        what = (
            f"{len(reply.tool_calls)} tool call(s)"
            if reply.tool_calls
            else f"{len(reply.text.split())} words"
        )
        run.channel.event(
            EventKind.MODEL_REPLY,
            f"{model}: {what} (stop: {reply.stop_reason or reply.stop.value})",
            provider=provider.name,
            model=model,
            stop_reason=reply.stop_reason,
            input_tokens=reply.input_tokens,
            output_tokens=reply.output_tokens,
            tool_calls=[c.name for c in reply.tool_calls],
            text=preview(reply.text),
        )
        return reply, prompt_tokens, capped

    def _account(self, reply: Reply, conv: Conversation, premium: bool, model: str) -> int:
        """Send the usage delta; return the prompt tokens (estimated when not reported)."""
        prompt = reply.input_tokens
        if prompt is None:  # unknown, not zero: estimate from the conversation's size
            prompt = conv.chars() // CHARS_PER_TOKEN
        out = reply.output_tokens
        if out is None:
            out = len(reply.text) // CHARS_PER_TOKEN
        if premium:
            dollars = self.run.premium_cost(model, prompt, out)
            self.run.add_premium(prompt + out, dollars)
            self.run.channel.usage(Usage(input=prompt, output=out, dollars=dollars, model=model))
        else:
            self.run.channel.usage(Usage(local_input=prompt, local_output=out, model=model))
        return prompt


def stop_failure(reply: Reply, limit: int = DEFAULT_MAX_OUTPUT) -> str:
    # Named for the model that answered: a premium leg may be any provider's.
    who = "Claude" if reply.provider == "anthropic" else reply.model or "the model"
    if reply.stop is Stop.MAX_TOKENS:
        return f"{who}'s reply was cut off at max_tokens ({limit} tokens) before it was finished"
    if reply.stop is Stop.CONTEXT:
        return "the conversation outgrew the model's context window"
    if reply.stop is Stop.REFUSAL:
        return f"{who} declined to carry out this routine (stop_reason: {reply.stop_reason})"
    return f"{who} stopped for a reason this version does not know: {reply.stop_reason!r}"
