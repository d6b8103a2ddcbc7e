"""The worker's channel to the supervisor: one result only, and text that always encodes."""

from __future__ import annotations

import io

import pytest

from ipc import Event, Result
from routines.runs import RunStatus
from worker.channel import Channel


def test_the_channel_sends_one_result_only() -> None:
    out, err = io.BytesIO(), io.StringIO()
    ch = Channel(out, "x", err)
    ch.result(Result(status=RunStatus.OK))
    with pytest.raises(RuntimeError):
        ch.result(Result(status=RunStatus.OK))
    assert out.getvalue().count(b"\n") == 1


def test_a_lone_surrogate_from_a_model_never_breaks_the_pipe() -> None:
    from ipc import EventKind, decode
    from worker.providers import anthropic as anth

    out = io.BytesIO()
    Channel(out, "x", io.StringIO()).event(EventKind.LOG, "bad \ud800 text", reply="\udfff")
    sent = decode(out.getvalue())
    assert isinstance(sent, Event)
    # A log line's text is shown escaped (safetext.visible names a lone surrogate, as it does
    # every format character); the data field is replaced, never sent as invalid UTF-8.
    assert sent.text == "bad \\ud800 text"
    assert set(sent.data["reply"]) == {"\ufffd"}
    reply = anth.parse_message({"content": [{"type": "text", "text": "a\ud800b"}]}, model="m")
    assert reply.text.startswith("a\ufffd") and reply.text.endswith("b")
    reply.text.encode("utf-8")
