"""FakeAnthropic answers a streaming request as the API streams it, so a client that streams
(Claude Code's CLI in bench_worker_anthropic) makes one request, not a second one after it
fails to read the first reply as server-sent events. The real `anthropic` SDK reads the stream
back into the very message the fake would have sent whole."""

from __future__ import annotations

from typing import Any

import anthropic
import pytest

from tests.fakes import FakeAnthropic, Reply
from tests.fakes import anthropic_replies as A

HI: Any = [{"role": "user", "content": "hi"}]


def _both_ways(reply: Reply) -> tuple[dict[str, Any], dict[str, Any], list[str]]:
    """The message read whole, the message read from the stream, and the streamed events'
    types, for the same scripted reply."""
    with FakeAnthropic([reply, reply]) as fake:
        client = anthropic.Anthropic(base_url=fake.url, api_key="sk-test", max_retries=0)
        whole = client.messages.create(model="m", max_tokens=64, messages=HI)
        with client.messages.stream(model="m", max_tokens=64, messages=HI) as stream:
            kinds: list[str] = [event.type for event in stream]
            final = stream.get_final_message()
        assert [r.body.get("stream") for r in fake.messages] == [None, True]
    return whole.model_dump(), final.model_dump(), kinds


def test_a_streamed_text_reply_reads_back_as_the_whole_message() -> None:
    whole, final, kinds = _both_ways(A.text("Good morning. The brief is short today."))
    assert final == whole
    assert final["content"][0]["text"] == "Good morning. The brief is short today."
    assert kinds[0] == "message_start" and kinds[-1] == "message_stop"
    assert kinds.count("text") > 1  # the text came in pieces, not as one delta


def test_a_streamed_tool_use_reply_reads_back_as_the_whole_message() -> None:
    reply = A.tool_use(("run_shell", {"command": "date -u"}), preface="Checking.")
    whole, final, _ = _both_ways(reply)
    assert final == whole
    assert final["stop_reason"] == "tool_use"
    assert final["content"][1]["input"] == {"command": "date -u"}


def test_an_error_to_a_streaming_request_is_plain_json() -> None:
    with FakeAnthropic([A.bad_key()]) as fake:
        client = anthropic.Anthropic(base_url=fake.url, api_key="sk-test", max_retries=0)
        with (
            pytest.raises(anthropic.AuthenticationError) as raised,
            client.messages.stream(model="m", max_tokens=64, messages=HI) as stream,
        ):
            stream.get_final_message()
    assert isinstance(raised.value.body, dict)
    assert raised.value.body["error"]["type"] == "authentication_error"
