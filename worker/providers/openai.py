"""Any OpenAI-compatible server (llama.cpp, LM Studio, vLLM, OpenRouter, OpenAI) through the
official `openai` SDK (imported here only, so only runs whose route names such a provider load
it), on the httpx2 client worker.webclient builds: the one HTTP stack of the worker.

What the SDK is given, and why:
- `http_client`: webclient's, so a request has a total deadline (httpx2's timeouts bound each
  socket read only: a server dripping a byte at a time would otherwise hold a run past its
  limit), loopback is never proxied, and no redirect is followed;
- `max_retries=0`: retries are this route's (`retry_delay`): a `retry-after` longer than
  MAX_RETRY_AFTER is not waited for, a 429 for an exhausted quota is not retried, a timeout or
  a refused connection is not retried (the run's time is gone, or the server is down), and
  the waits are exact (the SDK adds jitter, retries all of these, and has no hook to stop a
  quota 429 the way the Anthropic route's middleware does);
- every request's credentials explicitly: the key from config.toml's key_file or no
  Authorization header at all, never the SDK's OPENAI_API_KEY, OPENAI_ORG_ID or
  OPENAI_PROJECT_ID from the environment (a local server must not receive the user's OpenAI
  key: test_worker_openai.py::test_the_sdks_environment_credentials_are_never_sent).

The reply streams (`stream_options: {"include_usage": true}` asks for a last chunk with the
token counts); the chunks are read as plain objects and `merge_stream` folds them into the one
completion a non-streaming call answers, each piece of text going to `on_text` as it arrives.
Not the SDK's ChatCompletionStreamState: it refuses a tool-call delta without `index`, which
some local servers send. A server that ignores `stream` and answers one JSON object
(`content-type: application/json`) is read as that object.

Failures, translated here once: a prompt the server says is longer than its context is a
reply with stop CONTEXT (the auto-router's context_overflow), a tool call it could not parse
is MalformedToolCall, and a server started without tool support is ToolsUnsupported (the loop
retries without tools). Before a local server is offered tools it is asked whether it would
show them (`tools_refusal`): llama-server with a chat template that cannot drops them
silently, and the run would be `ok` with no tool ever called (ToolsDropped).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterable
from typing import Any, NoReturn

import httpx2
import openai
import orjson

from routines.safetext import one_line, redact_url
from routines.spec.providers import ProviderSettings
from worker import webclient
from worker.connector import Refused, provider_trust
from worker.providers.base import (
    AssistantTurn,
    Conversation,
    MalformedToolCall,
    ProviderError,
    Reply,
    Stop,
    StoppedMidReply,
    ToolCall,
    ToolResultsTurn,
    ToolsDropped,
    ToolSpec,
    ToolsUnsupported,
    UserTurn,
    clean,
)
from worker.providers.shared import TextLines, TextSink, arguments, tool_call_in_content

__all__ = [
    "FORMAT",
    "MAX_RETRIES",
    "OpenAIProvider",
    "merge_stream",
    "parse_completion",
    "render",
    "retry_delay",
    "tools_refusal",
]

FORMAT = "openai"  # Reply.provider: the wire format `native` is in, shared by every such server
MAX_RETRIES = 2
CONNECT_TIMEOUT = 5.0
RETRY_STATUSES = frozenset({429, 500, 502, 503, 504, 529})
MAX_RETRY_AFTER = 60.0  # a longer retry-after is not waited for: the run fails, saying so
# The SDK wants a key to build a client; this one is never sent (see `_auth`).
_NO_KEY = "no-key"
_STOPS = {
    "stop": Stop.END,
    "eos": Stop.END,
    "tool_calls": Stop.TOOL_USE,
    "function_call": Stop.TOOL_USE,
    "length": Stop.MAX_TOKENS,
    "content_filter": Stop.REFUSAL,
}
_CONTEXT_WORDS = (
    "context length",
    "context_length_exceeded",
    "context size",
    "context window",
    "maximum context",
    "too many tokens",
)
NO_TEMPLATE_TOOLS = (
    "this model's chat template cannot show tools: start llama-server with `--jinja` and a "
    "template that supports tools (e.g. --chat-template-file, or a model whose GGUF has one)"
)
PROBE_TIMEOUT = 5.0
# What a local server said about tools, per (base_url, model), for this process: a worker is
# one run, so a server restarted with other flags is asked again by the next run.
_TOOLS_SEEN: dict[tuple[str, str], str | None] = {}
# No connection at all: the server is not running, or base_url is wrong.
_UNREACHABLE = (
    httpx2.ConnectError,
    httpx2.ProxyError,
    httpx2.UnsupportedProtocol,
    httpx2.InvalidURL,
)


def retry_delay(
    status: int, retry_after: str | None, attempt: int, now: float | None = None
) -> float | None:
    """Seconds to wait before retrying an answer with `status` (pure), or None: not retried.

    `retry-after` is seconds or an HTTP date; without it, 0.5 s doubling per attempt."""
    if status not in RETRY_STATUSES:
        return None
    if retry_after:
        text = retry_after.strip()
        try:
            return max(0.0, float(text))  # seconds
        except ValueError:
            pass
        import email.utils  # only for a date in retry-after: off the start-up path

        try:
            when: float | None = float(email.utils.parsedate_to_datetime(text).timestamp())
        except (TypeError, ValueError):
            when = None
        if when is not None:
            return max(0.0, when - (time.time() if now is None else now))
    return 0.5 * float(2**attempt)


class OpenAIProvider:
    def __init__(
        self,
        settings: ProviderSettings,
        *,
        api_key: str | None,
        on_text: TextSink | None = None,
        sleep: Callable[[float], None] = time.sleep,
        clock: Callable[[], float] = time.monotonic,
        max_retries: int = MAX_RETRIES,
    ) -> None:
        self.name = settings.name
        self.premium = not settings.local
        self.settings = settings
        # Where, as a user reads it: never the userinfo, path or query of base_url.
        self.where = f'"{settings.name}" at {redact_url(settings.base_url)}'
        # identity: the body's size on the wire is its size in memory, so the byte budget
        # below (`left`) bounds what the SDK buffers; a compressed reply is refused unread.
        http, self._deadline = webclient.deadline_client(
            provider_trust(settings), clock, headers={"Accept-Encoding": "identity"}
        )
        self._http = http
        self._auth_key = bool(api_key)
        self._client = openai.OpenAI(
            base_url=settings.base_url,
            api_key=api_key or _NO_KEY,
            max_retries=0,
            http_client=http,
        )
        self._auth = _auth(api_key)
        self.on_text = on_text
        self._sleep = sleep
        self._clock = clock
        self.max_retries = max_retries

    def complete(
        self,
        conv: Conversation,
        tools: list[ToolSpec],
        *,
        model: str,
        max_tokens: int,
        timeout: float,
    ) -> Reply:
        body: dict[str, Any] = {
            "model": model,
            "messages": render(conv),
            "max_tokens": max_tokens,
            "stream": True,
            "stream_options": {"include_usage": True},
        }
        if tools:
            body["tools"] = [
                {
                    "type": "function",
                    "function": {
                        "name": t.name,
                        "description": t.description,
                        "parameters": t.parameters,
                    },
                }
                for t in tools
            ]
        if tools and self.settings.local:
            refusal = self.tools_refusal(model)
            if refusal is not None:
                raise ToolsDropped(refusal)
        end = self._clock() + timeout
        attempt = 0
        while True:
            status, data, retry_after = self._post(body, end - self._clock())
            if status < 400:
                return parse_completion(data, model=model, tool_names={t.name for t in tools})
            detail = _detail(data)
            overflow = self._not_retried(status, detail, model)
            if overflow is not None:
                return overflow
            delay = retry_delay(status, retry_after, attempt)
            if status == 429 and _code(data) == "insufficient_quota":
                delay = None  # no quota left: waiting does not bring it back this month
            fits = delay is not None and delay <= MAX_RETRY_AFTER
            if fits and attempt < self.max_retries and self._clock() + (delay or 0) < end - 1:
                self._sleep(delay or 0)
                attempt += 1
                continue
            self._fail(status, detail, model, attempt, delay)

    def tools_refusal(self, model: str) -> str | None:
        """Why the server would not show `model` the tools, or None (it would, or it does not
        say): llama-server's `GET /props` (chat_template_caps.supports_tools), else Ollama's
        `POST /api/show` (capabilities). A server that answers neither (LM Studio, vLLM) is
        taken at its word when it refuses tools in a reply. Asked once per process."""
        key = (self.settings.base_url, model)
        if key not in _TOOLS_SEEN:
            root = self.settings.base_url.removesuffix("/v1")
            props = self._probe("GET", f"{root}/props", None)
            show = None if props is not None else self._probe("POST", f"{root}/api/show", model)
            _TOOLS_SEEN[key] = tools_refusal(props, show, model, self.where)
        return _TOOLS_SEEN[key]

    def _probe(self, method: str, url: str, model: str | None) -> Any:
        """One small JSON request to the server's own API; None when it is not that API."""
        self._deadline.deadline = self._clock() + PROBE_TIMEOUT
        self._deadline.left = 1 << 20
        headers = {"Authorization": self._auth["Authorization"]} if self._auth_key else {}
        try:
            resp = self._http.request(
                method,
                url,
                json=None if model is None else {"model": model},
                headers=headers,
                timeout=PROBE_TIMEOUT,
            )
            if resp.status_code != 200:
                return None
            return orjson.loads(resp.content)
        except Refused as exc:  # the connector's: it says why and the fix itself
            raise ProviderError(str(exc)) from None
        except (httpx2.HTTPError, ValueError):
            return None
        finally:
            self._deadline.deadline = None
            self._deadline.left = None

    def _post(self, body: dict[str, Any], timeout: float) -> tuple[int, Any, str | None]:
        """(status, the completion or error body, retry-after) of one request."""
        if timeout <= 0:
            raise ProviderError(f"{self.where} did not answer in the time the run had left")
        lines = TextLines(self.on_text)
        got: list[Any] = []  # the chunks that arrived, kept if the deadline cuts the stream
        self._deadline.deadline = self._clock() + timeout
        self._deadline.left = webclient.MAX_BODY
        try:
            with self._client.chat.completions.with_streaming_response.create(
                **body,
                timeout=httpx2.Timeout(timeout, connect=min(CONNECT_TIMEOUT, timeout)),
                extra_headers=self._auth,
            ) as resp:
                encoding = resp.headers.get("content-encoding", "identity").strip().lower()
                if encoding not in ("", "identity"):
                    raise ProviderError(
                        f"{self.where} sent a {encoding}-compressed reply, which is refused "
                        "(identity was asked for: a compressed reply's size is not bounded)"
                    )
                media = resp.headers.get("content-type", "").partition(";")[0].strip()
                if media == "application/json":
                    data: Any = orjson.loads(resp.read())  # a server that ignored `stream`
                else:
                    data = merge_stream(_chunks(resp.parse(to=openai.Stream[object]), lines, got))
        except Refused as exc:  # the connector's, raised through the SDK as it stands
            raise ProviderError(str(exc)) from None
        except openai.APIStatusError as exc:
            retry_after = exc.response.headers.get("retry-after")
            return exc.status_code, _error_body(exc.response), retry_after
        except openai.APITimeoutError:
            self._cut(got, timeout)
            raise ProviderError(f"{self.where} did not answer within {timeout:.0f} s") from None
        except (openai.APIConnectionError, httpx2.HTTPError) as exc:
            # Not connected, or the stream broke (or ran out of time) mid-way.
            cause = (exc.__cause__ if isinstance(exc, openai.APIConnectionError) else None) or exc
            if isinstance(cause, httpx2.TimeoutException):
                self._cut(got, timeout)
            self._unreachable(cause, timeout)
        except openai.APIError as exc:  # an error sent inside the stream: as the server's 500
            return 500, {"error": exc.body if exc.body is not None else exc.message}, None
        except ValueError:  # a body or an event that is not JSON
            data = None
        finally:
            lines.end()
            self._deadline.deadline = None
            self._deadline.left = None
        if isinstance(data, dict) and "error" in data:  # an error sent as the whole body
            return 500, data, None
        if not _is_completion(data):
            raise ProviderError(f"{self.where} sent a reply that is not a chat completion")
        return 200, data, None

    def _cut(self, got: list[Any], timeout: float) -> None:
        """Raise StoppedMidReply when the time ran out after the reply had begun to stream
        (test_worker_openai.py::test_a_stream_cut_by_the_time_limit_records_what_arrived);
        return when nothing had arrived (the server did not answer)."""
        pieces = sum(1 for chunk in got if _piece(chunk) or _has_call(chunk))
        if not pieces:
            return
        text = "".join(_piece(chunk) for chunk in got)
        raise StoppedMidReply(
            f"{self.where} was still answering after {timeout:.0f} s ({pieces} tokens received)",
            output_tokens=pieces,
            text=text,
        )

    def _unreachable(self, exc: BaseException, timeout: float) -> NoReturn:
        """No usable answer: why, in the words the user acts on."""
        if isinstance(exc, Refused):  # the connector's: it says why and the fix itself
            raise ProviderError(str(exc)) from None
        if isinstance(exc, httpx2.TimeoutException):
            raise ProviderError(f"{self.where} did not answer within {timeout:.0f} s") from None
        why = webclient.why(exc) if isinstance(exc, Exception) else type(exc).__name__
        if isinstance(exc, _UNREACHABLE):
            hint = (
                "is the server running?"
                if self.settings.local
                else "check base_url in ~/.vinos/routines/config.toml"
            )
            raise ProviderError(f"cannot reach {self.where} ({why}): {hint}") from None
        raise ProviderError(f"{self.where} failed: {why}") from None

    def _not_retried(self, status: int, detail: str, model: str) -> Reply | None:
        """Answers that say what went wrong with this request, so retrying cannot help: a
        prompt past the context (a reply with stop CONTEXT: the auto-router's
        context_overflow), no tool support, a tool call the server could not parse."""
        low = detail.lower()
        if status in (400, 413) and any(w in low for w in _CONTEXT_WORDS):
            return Reply(
                "",
                (),
                Stop.CONTEXT,
                f"HTTP {status}: {detail}",
                model,
                None,
                None,
                provider=FORMAT,
            )
        if "tool" in low and "--jinja" in low:
            raise ToolsDropped(f"{self.where}: {NO_TEMPLATE_TOOLS}")
        if "tool" in low and "not support" in low:
            raise ToolsUnsupported(f'the model "{model}" on {self.where} does not support tools')
        if "tool call" in low and "pars" in low:
            raise MalformedToolCall(
                f'the model "{model}" wrote a tool call {self.where} could not parse'
            )
        return None

    def _fail(
        self, status: int, detail: str, model: str, retries: int, delay: float | None
    ) -> NoReturn:
        """The one place an error answer becomes a sentence for the user."""
        where = self.where
        retried = f"after {retries} retries" if retries else "not retried"
        if status in (401, 403):
            key = self.settings.key_file or "(no key_file in config.toml)"
            raise ProviderError(f"{where} rejected the API key ({status}): check {key}: {detail}")
        if status == 402:
            raise ProviderError(f"{where}: payment required (402): {detail}")
        if status == 404:
            raise ProviderError(f'{where} does not know the model "{model}" (404): {detail}')
        if status == 429:
            if delay is not None and delay > MAX_RETRY_AFTER:
                retried = f"it asked to wait {delay:.0f} s"
            raise ProviderError(f"{where} rate limit (429), {retried}: {detail}")
        if status >= 500:
            raise ProviderError(f"{where} server error ({status}), {retried}: {detail}")
        raise ProviderError(f"{where} answered HTTP {status}: {detail}")


def tools_refusal(props: object, show: object, model: str, where: str) -> str | None:
    """What a local server's own API says about showing tools (pure): llama-server's /props
    `chat_template_caps.supports_tools`, Ollama's /api/show `capabilities`. None: it shows
    them, or neither answer says."""
    caps = props.get("chat_template_caps") if isinstance(props, dict) else None
    if isinstance(caps, dict) and caps.get("supports_tools") is False:
        return f"{where}: {NO_TEMPLATE_TOOLS}"
    listed = show.get("capabilities") if isinstance(show, dict) else None
    if isinstance(listed, list) and "tools" not in listed:
        return (
            f'{where}: the model "{model}" does not support tools (Ollama\'s capabilities for '
            'it have no "tools"): pick a model that does, e.g. qwen2.5 or llama3.1'
        )
    return None


def _auth(api_key: str | None) -> dict[str, Any]:
    """Headers every request carries, over what the SDK took from the environment: the key, or
    no Authorization at all; no OpenAI organization or project."""
    bearer: Any = f"Bearer {api_key}" if api_key else openai.Omit()
    return {
        "Authorization": bearer,
        "OpenAI-Organization": openai.Omit(),
        "OpenAI-Project": openai.Omit(),
    }


def _chunks(events: Iterable[object], lines: TextLines, out: list[Any]) -> list[Any]:
    """The streamed chunks as they arrive into `out`, each one's text shown at once."""
    for chunk in events:
        out.append(chunk)
        lines.feed(_piece(chunk))
    return out


def _error_body(response: httpx2.Response) -> Any:
    try:
        return orjson.loads(response.content)
    except ValueError:
        return {"error": {"message": response.text[:300]}}


def _obj(value: object) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _list(value: object) -> list[Any]:
    return value if isinstance(value, list) else []


def _is_completion(data: object) -> bool:
    if not isinstance(data, dict):
        return False
    choices = data.get("choices")
    return isinstance(choices, list) and bool(choices) and isinstance(choices[0], dict)


def _detail(data: object) -> str:
    err = data.get("error") if isinstance(data, dict) else None
    if isinstance(err, dict):
        err = err.get("message") or err.get("code") or err
    if err is None and isinstance(data, dict):
        err = data.get("message") or data.get("detail")
    return one_line(str(err if err is not None else data))[:300]


def _code(data: object) -> str:
    err = data.get("error") if isinstance(data, dict) else None
    return str(err.get("code") or err.get("type") or "") if isinstance(err, dict) else ""


def _piece(chunk: object) -> str:
    choices = chunk.get("choices") if isinstance(chunk, dict) else None
    first = choices[0] if isinstance(choices, list) and choices else None
    delta = first.get("delta") if isinstance(first, dict) else None
    content = delta.get("content") if isinstance(delta, dict) else None
    return content if isinstance(content, str) else ""


def _has_call(chunk: object) -> bool:
    choices = chunk.get("choices") if isinstance(chunk, dict) else None
    first = choices[0] if isinstance(choices, list) and choices else None
    delta = first.get("delta") if isinstance(first, dict) else None
    return isinstance(delta, dict) and bool(delta.get("tool_calls"))


def merge_stream(chunks: list[Any]) -> Any:
    """Streamed chat.completion.chunk objects → the one chat.completion a non-streaming call
    answers (pure). Content pieces are joined; tool calls are gathered by `index`, their
    argument pieces concatenated; finish_reason and usage come from the chunk that has them.
    A chunk that is not an object (or an `error` chunk) ends the merge with it. None: none."""
    if not chunks:
        return None
    content: list[str] = []
    calls: dict[int, dict[str, Any]] = {}
    merged: dict[str, Any] = {"object": "chat.completion"}
    finish: Any = None
    for chunk in chunks:
        if not isinstance(chunk, dict) or "error" in chunk:
            return chunk
        for key in ("id", "model", "created"):
            if key in chunk and key not in merged:
                merged[key] = chunk[key]
        if isinstance(chunk.get("usage"), dict):
            merged["usage"] = chunk["usage"]
        for choice in chunk.get("choices") or ():
            if not isinstance(choice, dict):
                continue
            finish = choice.get("finish_reason") or finish
            delta = _obj(choice.get("delta"))
            if isinstance(delta.get("content"), str):
                content.append(delta["content"])
            for i, raw in enumerate(delta.get("tool_calls") or ()):
                if isinstance(raw, dict):
                    _merge_call(calls, i, raw)
    message: dict[str, Any] = {"role": "assistant", "content": "".join(content)}
    if calls:
        message["tool_calls"] = [calls[i] for i in sorted(calls)]
    merged["choices"] = [{"index": 0, "message": message, "finish_reason": finish}]
    return merged


def _merge_call(calls: dict[int, dict[str, Any]], i: int, raw: dict[str, Any]) -> None:
    """One streamed tool-call piece into the call at its `index`."""
    index = raw.get("index", i) if isinstance(raw.get("index", i), int) else i
    empty = {"id": "", "type": "function", "function": {"name": "", "arguments": ""}}
    call = calls.setdefault(index, empty)
    call["id"] = call["id"] or str(raw.get("id") or "")
    fn = _obj(raw.get("function"))
    call["function"]["name"] += str(fn.get("name") or "")
    piece = fn.get("arguments")
    if isinstance(piece, str) and isinstance(call["function"]["arguments"], str):
        call["function"]["arguments"] += piece
    elif piece is not None:  # an object in one piece (some servers send that)
        call["function"]["arguments"] = piece


def render(conv: Conversation) -> list[dict[str, Any]]:
    """The conversation as Chat Completions messages."""
    out: list[dict[str, Any]] = [{"role": "system", "content": conv.system}]
    for turn in conv.turns:
        if isinstance(turn, UserTurn):
            out.append({"role": "user", "content": turn.text})
        elif isinstance(turn, AssistantTurn):
            r = turn.reply
            if r.provider == FORMAT and isinstance(r.native, dict):
                out.append(r.native)
                continue
            msg: dict[str, Any] = {"role": "assistant", "content": r.text or None}
            if r.tool_calls:
                msg["tool_calls"] = [_call_out(c) for c in r.tool_calls]
            out.append(msg)
        else:
            assert isinstance(turn, ToolResultsTurn)
            for res in turn.results:
                out.append({"role": "tool", "tool_call_id": res.call.id, "content": res.content})
    return out


def _call_out(call: ToolCall) -> dict[str, Any]:
    return {
        "id": call.id,
        "type": "function",
        "function": {"name": call.name, "arguments": json.dumps(call.arguments or {})},
    }


def parse_completion(data: dict[str, Any], *, model: str, tool_names: set[str]) -> Reply:
    """A chat.completion object → Reply (pure; `tool_names` are the tools offered)."""
    choice = data["choices"][0]
    msg = _obj(choice.get("message"))
    content = clean(msg["content"]) if isinstance(msg.get("content"), str) else ""
    raw_calls = _list(msg.get("tool_calls"))
    calls, malformed = _calls(raw_calls)
    native: dict[str, Any] | None = {"role": "assistant", "content": content or None}
    if raw_calls:
        # A malformed call is rebuilt from what was parsed (its arguments `{}`): llama-server
        # answers 500 to a request carrying arguments that are not JSON, and the model would
        # never get the "call it again" reply (test_worker_openai.py::
        # test_malformed_tool_json_off_the_auto_route_is_an_error_result).
        tool_calls = [c if isinstance(c, dict) else {} for c in raw_calls]
        native = None if malformed else {**(native or {}), "tool_calls": tool_calls}
    if not calls and tool_names:
        found = tool_call_in_content(content, tool_names)
        if found is not None:
            calls.append(found)
            malformed = "the model wrote its tool call as JSON text instead of using tool_calls"
            native = None  # rendered from the call, so the tool results have a call to answer
    finish = choice.get("finish_reason")
    stop = Stop.TOOL_USE if calls else _STOPS.get(str(finish or "stop"), Stop.OTHER)
    usage = _obj(data.get("usage"))
    return Reply(
        text=content,
        tool_calls=tuple(calls),
        stop=stop,
        stop_reason=str(finish or "stop"),
        model=str(data.get("model") or model),
        input_tokens=_count(usage.get("prompt_tokens")),
        output_tokens=_count(usage.get("completion_tokens")),
        malformed=malformed,
        provider=FORMAT,
        native=native,
    )


def _calls(raw_calls: list[Any]) -> tuple[list[ToolCall], str | None]:
    """The message's tool calls, and why their arguments were malformed (None: they were
    not)."""
    calls: list[ToolCall] = []
    malformed: str | None = None
    for i, entry in enumerate(raw_calls):
        raw = entry if isinstance(entry, dict) else {}
        fn = _obj(raw.get("function"))
        args, error = arguments(fn.get("arguments"))
        if error:
            malformed = f"tool call arguments failed json.loads(): {error}"
        calls.append(
            ToolCall(str(raw.get("id") or f"call_{i}"), str(fn.get("name") or ""), args, error)
        )
    return calls, malformed


def _count(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None
