"""ipc framing: round trips, every kind of bad line, and readers that never hang or balloon."""

from __future__ import annotations

import asyncio
import io
import os
import socket
import subprocess
import sys
import threading

import msgspec
import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

import ipc
from ipc import (
    MAX_LINE,
    Event,
    Hello,
    Job,
    LineReader,
    Outcome,
    ProtocolError,
    Request,
    Response,
    Result,
    RunStatus,
    Trigger,
    Usage,
    decode,
    encode,
    read_message,
)

JOB = Job(
    run_id="r1",
    routine_name="day-brief",
    routine_path="/x/day-brief.toml",
    routine_toml="[routine]\n",
    routine_origin="user",
    trigger=Trigger.MANUAL,
    slot=None,
    started_at="2026-07-25T06:00:00-04:00",
    max_tokens=None,
    dollars_left=0.5,
    memory="",
    vinos_home="/h",
    state_dir="/h/s",
    scratch_dir="/h/s/.scratch/r1",
    memory_path=None,
    ollama_url="http://127.0.0.1:11434",
    pricing={"m": [1.0, 2.0]},
    sandbox={"masks": ["~/.x"]},
)
# A resumed run's job: its typed parts travel as JSON objects and come back as themselves.
RESUMED = msgspec.structs.replace(
    JOB,
    trigger=Trigger.RESUME,
    decisions=[ipc.Decision(3, "send-reply", "To Bob", "done", "cli", None, 0)],
    answer=ipc.Answer(4, "send-reply", "denied", "cli", "2026-07-25T06:01:00+00:00", "tone"),
    sandbox_probe=ipc.SandboxProbe("/usr/bin/bwrap", ok=True),
)
SAMPLES: list[ipc.Message] = [
    Hello(),
    JOB,
    RESUMED,
    Event(kind=ipc.EventKind.WARN, text="careful", data={"n": 1, "nested": {"a": [1, 2]}}),
    Usage(input=10, output=5, dollars=0.0001, model="claude-sonnet-4-6"),
    Result(status=RunStatus.OK, outcome=Outcome.DONE, tools_used=["run_shell"], tool_calls=1),
    Request(id=3, cmd="run", args={"name": "x"}),
    Response(id=3, ok=False, error={"code": "nope", "message": "no"}),
]


@pytest.mark.parametrize("msg", SAMPLES, ids=lambda m: m.TYPE)
def test_every_message_type_round_trips(msg: ipc.Message) -> None:
    line = encode(msg)
    assert line.endswith(b"\n") and line.count(b"\n") == 1
    assert decode(line) == msg
    assert decode(line.rstrip(b"\n")) == msg


def test_a_float_field_accepts_an_integer_and_a_message_field_must_have_its_type() -> None:
    assert decode(b'{"type": "usage", "dollars": 0}') == Usage(dollars=0)
    for bad in (
        b'{"type": "result", "status": 5}',
        b'{"type": "usage", "input": true}',
        b'{"type": "usage", "input": 1.5}',
        b'{"type": "result", "status": "ok", "tools_used": ["a", 1]}',
        b'{"type": "request", "id": 1, "cmd": "x", "args": []}',
    ):
        with pytest.raises(ProtocolError, match="expected"):
            decode(bad)


@pytest.mark.parametrize(
    ("line", "match"),
    [
        (b"", "not JSON"),
        (b"{", "not JSON"),
        (b"\xff\xfe", "not JSON"),
        (b"[1, 2]", "expected a JSON object"),
        (b'{"type": "nope"}', "unknown message type"),
        (b'{"protocol": 1}', "unknown message type"),
        (b'{"type": "hello", "protocol": 1, "extra": 2}', "unknown fields"),
        (b'{"type": "result"}', "status"),
    ],
)
def test_bad_lines_raise_protocol_error(line: bytes, match: str) -> None:
    with pytest.raises(ProtocolError, match=match):
        decode(line)


def test_encode_refuses_a_message_over_the_limit_and_one_that_is_not_json() -> None:
    with pytest.raises(ProtocolError, match="limit"):
        encode(Event(kind=ipc.EventKind.LOG, text="x" * MAX_LINE))
    with pytest.raises(ProtocolError, match="cannot encode"):
        encode(Event(kind=ipc.EventKind.LOG, text="x", data={"o": object()}))


def _line_of_exactly(size: int) -> bytes:
    """An event line (newline included) whose JSON is exactly `size` bytes."""
    empty = len(orjson.dumps(ipc.to_dict(Event(kind=ipc.EventKind.LOG, text=""))))
    return (
        orjson.dumps(ipc.to_dict(Event(kind=ipc.EventKind.LOG, text="x" * (size - empty)))) + b"\n"
    )


def test_a_line_of_exactly_max_line_bytes_is_read_and_one_more_byte_is_refused() -> None:
    ok = _line_of_exactly(MAX_LINE)
    assert len(ok) == MAX_LINE + 1
    reader = LineReader(io.BytesIO(ok + encode(Hello())))
    first = reader.read()
    assert isinstance(first, Event) and len(first.text) > MAX_LINE - 100
    assert reader.read() == Hello()
    assert reader.read() is None
    too_long = _line_of_exactly(MAX_LINE + 1)
    with pytest.raises(ProtocolError, match="limit"):
        LineReader(io.BytesIO(too_long)).read()


def test_sync_reader_clean_eof_truncated_eof_and_blank_line() -> None:
    assert LineReader(io.BytesIO(b"")).read() is None
    with pytest.raises(ProtocolError, match="ended inside a line"):
        LineReader(io.BytesIO(encode(Hello()).rstrip(b"\n"))).read()
    with pytest.raises(ProtocolError, match="not JSON"):
        LineReader(io.BytesIO(b"\n")).read()


def _endless_pipe(chunk: bytes) -> tuple[io.BufferedReader, threading.Event]:
    """A real pipe whose writer sends `chunk` forever (until the read end closes)."""
    r, w = os.pipe()
    stop = threading.Event()

    def feed() -> None:
        with open(w, "wb", buffering=0) as out:
            try:
                while not stop.is_set():
                    out.write(chunk)
            except BrokenPipeError:
                pass

    threading.Thread(target=feed, daemon=True).start()
    return open(r, "rb"), stop


def test_sync_reader_stops_an_endless_line_at_the_limit() -> None:
    stream, stop = _endless_pipe(b"a" * 65536)
    with stream:
        with pytest.raises(ProtocolError, match="limit"):
            LineReader(stream).read()
        stop.set()


# --- asyncio ---


def _feed(chunks: list[bytes], eof: bool = True) -> asyncio.StreamReader:
    reader = asyncio.StreamReader()  # the default 64 KiB limit, as the supervisor's pipes have
    for c in chunks:
        reader.feed_data(c)
    if eof:
        reader.feed_eof()
    return reader


async def _read_all(reader: asyncio.StreamReader) -> list[ipc.Message]:
    out = []
    while (msg := await read_message(reader)) is not None:
        out.append(msg)
    return out


def test_async_reader_reads_a_1_mib_line_past_the_default_64_kib_limit() -> None:
    big = _line_of_exactly(MAX_LINE)

    async def go() -> list[ipc.Message]:
        reader = _feed([big[: 1 << 16], big[1 << 16 :], encode(Hello())])
        return await _read_all(reader)

    msgs = asyncio.run(go())
    assert len(msgs) == 2 and isinstance(msgs[0], Event) and msgs[1] == Hello()


def test_async_reader_errors_on_oversized_truncated_and_garbage() -> None:
    async def first(chunks: list[bytes]) -> ipc.Message | None:
        return await read_message(_feed(chunks))

    with pytest.raises(ProtocolError, match="limit"):
        asyncio.run(first([_line_of_exactly(MAX_LINE + 1)]))
    with pytest.raises(ProtocolError, match="ended inside a line"):
        asyncio.run(first([b'{"type": "hel']))
    with pytest.raises(ProtocolError, match="not JSON"):
        asyncio.run(first([b"garbage\n"]))
    assert asyncio.run(first([])) is None


def test_async_reader_on_a_real_subprocess_pipe_with_big_lines() -> None:
    """The supervisor's case: asyncio subprocess pipes, default limit, 1 MiB lines."""
    big = _line_of_exactly(MAX_LINE)
    code = (
        "import sys; data = sys.stdin.buffer.read(); "
        "sys.stdout.buffer.write(data); sys.stdout.buffer.write(b'x' * 3000000)"
    )

    steps: list[str] = []

    async def go() -> tuple[list[ipc.Message], str]:
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "-c",
            code,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
        )
        steps.append(f"started {proc.pid}")
        assert proc.stdin is not None and proc.stdout is not None
        proc.stdin.write(big + encode(Hello()))
        proc.stdin.close()
        got = [await read_message(proc.stdout)]
        steps.append("read 1")
        got.append(await read_message(proc.stdout))
        steps.append("read 2")
        try:
            await read_message(proc.stdout)
        except ProtocolError as exc:
            err = str(exc)
        steps.append("read 3")
        proc.kill()
        await proc.wait()
        return [m for m in got if m is not None], err

    async def bounded() -> tuple[list[ipc.Message], str]:
        # It hung once in a full run (never alone): say where, and in what state the child
        # was, instead of pytest-timeout's stack of the event loop.
        try:
            return await asyncio.wait_for(go(), 60)
        except TimeoutError:
            pid = steps[0].split()[1] if steps else ""
            try:
                status = open(f"/proc/{pid}/status").read().splitlines()[:3]  # noqa: SIM115
                wchan = open(f"/proc/{pid}/wchan").read()  # noqa: SIM115
            except OSError as exc:
                status, wchan = [str(exc)], ""
            raise AssertionError(f"hung after {steps}; the child: {status} {wchan}") from None

    msgs, err = asyncio.run(bounded())
    assert [m.TYPE for m in msgs] == ["event", "hello"]
    assert "limit" in err


def test_async_writer_and_unix_socket_round_trip() -> None:
    async def go() -> list[ipc.Message]:
        got: list[ipc.Message] = []
        done = asyncio.Event()

        async def serve(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
            got.extend(await _read_all(r))
            w.close()
            done.set()

        a, b = socket.socketpair()
        server_r, server_w = await asyncio.open_connection(sock=a)
        _client_r, client_w = await asyncio.open_connection(sock=b)
        task = asyncio.create_task(serve(server_r, server_w))
        for m in SAMPLES:
            await ipc.write_message_async(client_w, m)
        client_w.close()
        await done.wait()
        await task
        return got

    assert asyncio.run(go()) == SAMPLES


# --- hypothesis: nothing a peer sends may crash (other than ProtocolError) or hang a reader ---


def _split(data: bytes, cuts: list[int]) -> list[bytes]:
    points = sorted({c % (len(data) + 1) for c in cuts})
    pieces, last = [], 0
    for p in [*points, len(data)]:
        pieces.append(data[last:p])
        last = p
    return [p for p in pieces if p]


def _sync_outcome(data: bytes) -> tuple[list[ipc.Message], str]:
    reader = LineReader(io.BytesIO(data))
    msgs: list[ipc.Message] = []
    try:
        while (m := reader.read()) is not None:
            msgs.append(m)
    except ProtocolError:
        return msgs, "error"
    return msgs, "eof"


def _async_outcome(chunks: list[bytes]) -> tuple[list[ipc.Message], str]:
    async def go() -> tuple[list[ipc.Message], str]:
        reader = _feed(chunks)
        msgs: list[ipc.Message] = []
        try:
            while (m := await read_message(reader)) is not None:
                msgs.append(m)
        except ProtocolError:
            return msgs, "error"
        return msgs, "eof"

    return asyncio.run(go())


@given(st.binary(max_size=4096), st.lists(st.integers(min_value=0), max_size=8))
def test_random_bytes_never_crash_or_hang_either_reader(data: bytes, cuts: list[int]) -> None:
    sync = _sync_outcome(data)
    assert sync == _async_outcome(_split(data, cuts))


def _lines() -> st.SearchStrategy[bytes]:
    junk = st.binary(max_size=64).map(lambda b: b.replace(b"\n", b"") + b"\n")
    good = st.sampled_from([encode(m) for m in SAMPLES])
    return st.lists(st.one_of(good, good, junk), max_size=6).map(b"".join)


@given(_lines(), st.lists(st.integers(min_value=0), max_size=12), st.booleans())
def test_valid_lines_split_anywhere_read_the_same_and_junk_is_an_error(
    data: bytes, cuts: list[int], chop: bool
) -> None:
    if chop and data:
        data = data[:-1]  # the last line loses its newline: truncated at EOF
    msgs, how = _sync_outcome(data)
    assert (msgs, how) == _async_outcome(_split(data, cuts))
    expected: list[ipc.Message] = []
    for line in data.split(b"\n")[:-1] if data.endswith(b"\n") else data.split(b"\n"):
        try:
            expected.append(decode(line))
        except ProtocolError:
            break
    assert msgs == expected[: len(msgs)]
    if how == "eof":
        assert msgs == expected


def test_ipc_exports() -> None:
    assert set(ipc.__all__) >= {
        "encode",
        "decode",
        "LineReader",
        "read_message",
        "write_message",
        "write_message_async",
        "ProtocolError",
        "MAX_LINE",
    }


def test_status_outcome_and_trigger_arrive_as_their_enums() -> None:
    msg = decode(b'{"type": "result", "status": "ok", "outcome": "nothing-to-do"}')
    assert isinstance(msg, Result)
    assert msg.status is RunStatus.OK and msg.outcome is Outcome.NOTHING_TO_DO
    job = decode(encode(JOB))
    assert isinstance(job, Job) and isinstance(job.trigger, Trigger)
    with pytest.raises(ProtocolError, match=r"result\.status: expected one of .*found 'weird'"):
        decode(b'{"type": "result", "status": "weird"}')
    with pytest.raises(ProtocolError, match=r"result\.outcome: expected one of"):
        decode(b'{"type": "result", "status": "ok", "outcome": "fine"}')


def test_an_event_kind_arrives_as_its_enum_and_an_unknown_kind_is_refused() -> None:
    msg = decode(b'{"type": "event", "kind": "tool_call", "text": "shell: ls"}')
    assert isinstance(msg, Event) and msg.kind is ipc.EventKind.TOOL_CALL
    with pytest.raises(ProtocolError, match=r"event\.kind: expected one of .*found 'tool_cal'"):
        decode(b'{"type": "event", "kind": "tool_cal", "text": "shell: ls"}')


def test_the_wire_bytes_are_the_fields_in_order_then_the_type() -> None:
    # What every version so far wrote and read: a peer of another version reads these lines.
    assert encode(Usage(input=1, dollars=0.5, model="m")) == (
        b'{"input":1,"output":0,"local_input":0,"local_output":0,"dollars":0.5,"model":"m",'
        b'"type":"usage"}\n'
    )
    assert encode(Event(ipc.EventKind.LOG, "hi", {"n": [1]})) == (
        b'{"kind":"log","text":"hi","data":{"n":[1]},"run_id":"","type":"event"}\n'
    )


@pytest.mark.parametrize(
    ("line", "message"),
    [
        (b'{"type": "usage", "input": true}', "usage.input: expected int, found bool"),
        (b'{"type": "result", "status": "ok", "tools_used": ["a", 1]}', "result.tools_used[1]:"),
        (b'{"type": "result"}', "result: Object missing required field `status`"),
        (b'{"type": "request", "id": 1, "cmd": "x", "args": []}', "request.args: expected object"),
    ],
)
def test_a_field_error_names_the_message_and_the_field(line: bytes, message: str) -> None:
    with pytest.raises(ProtocolError) as caught:
        decode(line)
    assert str(caught.value).startswith(message)


def test_a_line_nested_too_deep_is_a_protocol_error_not_a_crash() -> None:
    deep = b"[" * 200_000 + b"]" * 200_000
    with pytest.raises(ProtocolError, match="not JSON"):
        decode(b'{"type": "event", "kind": "log", "text": "", "data": {"a": ' + deep + b"}}")
    with pytest.raises(ProtocolError, match="not JSON"):
        decode(b"[" * 500_000)
