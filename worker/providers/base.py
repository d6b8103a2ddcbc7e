"""What every provider speaks: a neutral conversation in, a neutral `Reply` out.

Each provider renders the `Conversation` into its own wire format (Anthropic content blocks
and `tool_result` blocks; Ollama `role: "tool"` messages; Chat Completions `tool_calls` and
`role: "tool"` messages with a `tool_call_id`) and parses its answer back, so a
run can move between providers mid-conversation (budget degrade-to-local).

Provider failures are raised as `ProviderError` with a message a user understands; the
translation from SDK and transport errors happens once, inside each provider.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Protocol

__all__ = [
    "AssistantTurn",
    "Conversation",
    "Image",
    "MalformedToolCall",
    "NoPremiumKey",
    "Provider",
    "ProviderError",
    "Reply",
    "Stop",
    "StoppedMidReply",
    "ToolCall",
    "ToolResult",
    "ToolResultsTurn",
    "ToolSpec",
    "ToolsDropped",
    "ToolsUnsupported",
    "Turn",
    "UserTurn",
    "clean",
]


class Stop(StrEnum):
    END = "end"  # a finished answer (Anthropic end_turn / stop_sequence, Ollama stop)
    TOOL_USE = "tool_use"  # the model asks for tools
    MAX_TOKENS = "max_tokens"  # cut at the output limit (Anthropic max_tokens, Ollama length)
    REFUSAL = "refusal"  # Anthropic's classifiers stopped the reply
    PAUSE = "pause_turn"  # Anthropic paused a long turn: send it back to continue
    CONTEXT = "context_window"  # Anthropic model_context_window_exceeded
    OTHER = "other"  # a stop reason this code does not know


@dataclass(frozen=True, slots=True)
class ToolSpec:
    name: str
    description: str
    parameters: dict[str, Any]  # JSON schema of the arguments object


@dataclass(frozen=True, slots=True)
class ToolCall:
    id: str
    name: str
    arguments: dict[str, Any] | None  # None when they were not a valid JSON object
    error: str | None = None  # why `arguments` is None


@dataclass(frozen=True, slots=True)
class Reply:
    text: str
    tool_calls: tuple[ToolCall, ...]
    stop: Stop
    stop_reason: str  # as the provider said it
    model: str
    input_tokens: int | None  # None: the provider did not say (unknown, not zero)
    output_tokens: int | None
    malformed: str | None = None  # the tool-call JSON was malformed: why (a router trigger)
    provider: str = ""  # "anthropic" | "ollama" | "openai": the wire format `native` is in
    native: Any = None  # the provider's own assistant message, sent back verbatim to it


@dataclass(frozen=True, slots=True)
class UserTurn:
    text: str


@dataclass(frozen=True, slots=True)
class AssistantTurn:
    reply: Reply


@dataclass(frozen=True, slots=True)
class Image:
    """An image a tool returned, for the providers that take images in a tool result."""

    mime: str  # image/png, image/jpeg, image/gif or image/webp
    data: str  # base64


@dataclass(frozen=True, slots=True)
class ToolResult:
    call: ToolCall
    content: str
    is_error: bool = False
    # Sent by the Anthropic route as image blocks after `content`; the other routes have
    # only `content`, which describes them (worker/mcptools.py).
    images: tuple[Image, ...] = ()


@dataclass(frozen=True, slots=True)
class ToolResultsTurn:
    results: tuple[ToolResult, ...]


Turn = UserTurn | AssistantTurn | ToolResultsTurn


@dataclass(slots=True)
class Conversation:
    system: str
    turns: list[Turn] = field(default_factory=list)

    def chars(self) -> int:
        """Rough size, for estimating prompt tokens when a provider does not report them."""
        n = len(self.system)
        for t in self.turns:
            if isinstance(t, UserTurn):
                n += len(t.text)
            elif isinstance(t, AssistantTurn):
                n += len(t.reply.text) + sum(len(str(c.arguments)) for c in t.reply.tool_calls)
            else:
                n += sum(len(r.content) for r in t.results)
        return n


def clean(text: str) -> str:
    """`text` with lone surrogates (a JSON "\\ud800" escape decodes to one) replaced: they
    cannot be written as UTF-8, to a file or to the pipe."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return text.encode("utf-8", "surrogatepass").decode("utf-8", "replace")
    return text


class ProviderError(Exception):
    """A provider call failed; `str(exc)` is the user-readable reason."""


class StoppedMidReply(ProviderError):
    """The call's time ran out while the reply was still streaming in. `output_tokens`: the
    pieces that had arrived (a streaming server sends about one token per piece), counted
    as the call's output instead of zero."""

    def __init__(self, message: str, *, output_tokens: int, text: str) -> None:
        super().__init__(message)
        self.output_tokens = output_tokens
        self.text = text


class NoPremiumKey(ProviderError):
    """The premium leg has no API key (Anthropic's, or a paid provider's key_file)."""


class ToolsUnsupported(ProviderError):
    """The (Ollama) model does not support tools: retry without them."""


class ToolsDropped(ToolsUnsupported):
    """The server says it would not show the model the tools (llama-server's chat template
    cannot, or it runs without --jinja; an Ollama model without the "tools" capability): a
    routine whose own tools it would drop cannot run there."""


class MalformedToolCall(ProviderError):
    """The provider could not parse the tool call the model wrote (Ollama answers 500)."""


class Provider(Protocol):
    name: str  # "anthropic" | "ollama" | a provider's name from config.toml
    premium: bool  # costs money: the budget applies

    def complete(
        self,
        conv: Conversation,
        tools: list[ToolSpec],
        *,
        model: str,
        max_tokens: int,
        timeout: float,
    ) -> Reply: ...
