"""The auto-router's decisions, as pure functions. Hedges and regex live here only.

`route = "auto"` runs the local model first and escalates the same turn to the premium model
when one of four triggers fires and its toggle is on:

- low_confidence: the reply holds a hedge phrase, or is under 40 whitespace tokens;
- reasoning_task: the system prompt or the user turn matches REASONING_RE, or the routine's
  tags include "reasoning";
- context_overflow: the local reply is empty and the prompt took >= 90% of the context;
- malformed_tool_json: the local model's tool-call arguments did not parse.

`max_escalations_per_run` caps escalations; a fired trigger over the cap is reported, not
acted on. reasoning_task depends only on the prompt, so it is decided before the local call
(running the local model first would only burn time on an answer that is thrown away).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import StrEnum

from routines.spec import Escalation

__all__ = [
    "HEDGE_PHRASES",
    "OVERFLOW_FRACTION",
    "REASONING_RE",
    "SHORT_REPLY_WORDS",
    "RouteDecision",
    "RouterTrigger",
    "after_reply",
    "before_local",
    "context_overflow",
    "low_confidence",
    "on_malformed",
    "reasoning_task",
]

HEDGE_PHRASES = (
    "i don't know",
    "i do not know",
    "not sure",
    "unable to",
    "i'm not certain",
    "i am not certain",
    "i'm unsure",
    "i am unsure",
    "no idea",
    "hard to say",
    "cannot determine",
    "can't determine",
)
REASONING_RE = re.compile(
    r"\b(reasoning|prove|derive|chain of thought|step by step|deduce|explain why)\b",
    re.IGNORECASE,
)
SHORT_REPLY_WORDS = 40
OVERFLOW_FRACTION = 0.9


class RouterTrigger(StrEnum):
    LOW_CONFIDENCE = "low_confidence"
    REASONING_TASK = "reasoning_task"
    CONTEXT_OVERFLOW = "context_overflow"
    MALFORMED_TOOL_JSON = "malformed_tool_json"


@dataclass(frozen=True, slots=True)
class RouteDecision:
    trigger: RouterTrigger | None  # what fired (with its toggle on); None: nothing did
    escalate: bool  # fired and under the cap

    @property
    def capped(self) -> bool:
        return self.trigger is not None and not self.escalate


_QUIET = RouteDecision(None, False)


def _normalise(text: str) -> str:
    return text.replace("\u2019", "'").replace("\u2018", "'").casefold()


def low_confidence(text: str) -> bool:
    """A hedge phrase anywhere, or fewer than SHORT_REPLY_WORDS whitespace tokens."""
    plain = _normalise(text)
    return any(p in plain for p in HEDGE_PHRASES) or len(text.split()) < SHORT_REPLY_WORDS


def reasoning_task(system: str, user_turn: str, tags: tuple[str, ...]) -> bool:
    return (
        "reasoning" in tags
        or REASONING_RE.search(system) is not None
        or REASONING_RE.search(user_turn) is not None
    )


def context_overflow(text: str, prompt_tokens: int | None, context_tokens: int) -> bool:
    """An empty reply after a prompt that filled >= 90% of the context.

    `prompt_tokens` None means Ollama did not report it: the caller passes an estimate
    instead, never zero (which would hide a real overflow).
    """
    if text.strip() or prompt_tokens is None:
        return False
    return prompt_tokens >= OVERFLOW_FRACTION * context_tokens


def _decide(trigger: RouterTrigger, escalations_left: int) -> RouteDecision:
    return RouteDecision(trigger, escalations_left > 0)


def before_local(
    esc: Escalation, escalations_left: int, system: str, user_turn: str, tags: tuple[str, ...]
) -> RouteDecision:
    """Before the first local call: only reasoning_task can fire."""
    if esc.on_reasoning_task and reasoning_task(system, user_turn, tags):
        return _decide(RouterTrigger.REASONING_TASK, escalations_left)
    return _QUIET


def on_malformed(esc: Escalation, escalations_left: int) -> RouteDecision:
    """The local model's tool-call JSON was malformed, during the tool loop."""
    if esc.on_malformed_tool_json:
        return _decide(RouterTrigger.MALFORMED_TOOL_JSON, escalations_left)
    return _QUIET


def after_reply(
    esc: Escalation,
    escalations_left: int,
    text: str,
    prompt_tokens: int | None,
    context_tokens: int,
) -> RouteDecision:
    """On the local model's final reply: context_overflow first (it is the more specific)."""
    if esc.on_context_overflow and context_overflow(text, prompt_tokens, context_tokens):
        return _decide(RouterTrigger.CONTEXT_OVERFLOW, escalations_left)
    if esc.on_low_confidence and low_confidence(text):
        return _decide(RouterTrigger.LOW_CONFIDENCE, escalations_left)
    return _QUIET
