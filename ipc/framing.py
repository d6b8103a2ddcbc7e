"""Newline-delimited JSON framing: one message per line, at most `MAX_LINE` bytes.

A line that is not valid JSON, is not a known message, has a field of the wrong type, is
longer than `MAX_LINE`, or ends without its newline at EOF raises `ProtocolError`. Readers
never buffer more than about `MAX_LINE` bytes, whatever the peer sends: an endless line
without a newline is an error as soon as it passes the limit, not an out-of-memory.

After a `ProtocolError` the stream is out of step: end that connection (or run).
"""

from __future__ import annotations

from typing import IO, TYPE_CHECKING

import msgspec
import orjson

from ipc.messages import Message, MessageError, from_dict, from_line, to_dict

if TYPE_CHECKING:  # asyncio costs a worker ~40 ms to import and it never uses it
    import asyncio

__all__ = [
    "MAX_LINE",
    "LineReader",
    "ProtocolError",
    "decode",
    "encode",
    "read_message",
    "write_message",
    "write_message_async",
]

MAX_LINE = 1 << 20  # bytes of JSON on one line, the newline not counted


class ProtocolError(ValueError):
    """The peer broke the protocol: malformed, oversized, truncated or unknown message."""


def encode(msg: Message) -> bytes:
    """One line of wire form, newline included; ProtocolError if it would exceed MAX_LINE."""
    try:
        data = orjson.dumps(to_dict(msg))
    except TypeError as exc:  # orjson.JSONEncodeError: a field holds something not JSON
        raise ProtocolError(f"{msg.TYPE}: cannot encode: {exc}") from None
    if len(data) > MAX_LINE:
        raise ProtocolError(f"{msg.TYPE}: {len(data)} bytes is over the {MAX_LINE}-byte limit")
    return data + b"\n"


def decode(line: bytes) -> Message:
    """Parse one line (with or without its newline) into a message; raises ProtocolError."""
    if line.endswith(b"\n"):
        line = line[:-1]
    if len(line) > MAX_LINE:
        raise ProtocolError(f"line of {len(line)} bytes is over the {MAX_LINE}-byte limit")
    try:
        return from_line(line)
    except (msgspec.DecodeError, RecursionError):
        # Not a valid message (RecursionError: nested deeper than msgspec goes, where orjson
        # stops at 1,024 with an error of its own): the slow way below says what is wrong.
        pass
    try:
        obj = orjson.loads(line)
    except orjson.JSONDecodeError as exc:
        raise ProtocolError(f"not JSON: {exc}") from None
    try:
        msg = from_dict(obj)
    except MessageError as exc:
        raise ProtocolError(str(exc)) from None
    return msg


class LineReader:
    """Reads messages from a blocking binary stream that has `readline(limit)`.

    (`sys.stdin.buffer`, a pipe opened with `open(fd, "rb")`, `socket.makefile("rb")`.)
    """

    def __init__(self, stream: IO[bytes]) -> None:
        self._stream = stream

    def read_line(self) -> bytes | None:
        """One raw line with its newline, None at a clean EOF; ProtocolError otherwise."""
        line = self._stream.readline(MAX_LINE + 1)
        if not line:
            return None
        if not line.endswith(b"\n"):
            if len(line) > MAX_LINE:
                raise ProtocolError(f"line longer than the {MAX_LINE}-byte limit")
            raise ProtocolError(f"stream ended inside a line ({len(line)} bytes, no newline)")
        return line

    def read(self) -> Message | None:
        """The next message, None at a clean EOF (between lines)."""
        line = self.read_line()
        return None if line is None else decode(line)


async def read_line_async(reader: asyncio.StreamReader) -> bytes | None:
    """One raw line with its newline from `reader`, whatever the reader's own `limit`.

    asyncio.StreamReader refuses lines longer than its limit (64 KiB by default); this reads
    past it in bounded steps, so 1 MiB lines work with any reader, and stops at MAX_LINE.
    """
    import asyncio

    buf = bytearray()
    while True:
        try:
            chunk = await reader.readuntil(b"\n")
        except asyncio.LimitOverrunError as exc:
            # No newline within the reader's limit: take what it holds and look further.
            buf += await reader.readexactly(exc.consumed)
            if len(buf) > MAX_LINE:
                raise ProtocolError(f"line longer than the {MAX_LINE}-byte limit") from None
            continue
        except asyncio.IncompleteReadError as exc:
            if not buf and not exc.partial:
                return None
            size = len(buf) + len(exc.partial)
            raise ProtocolError(f"stream ended inside a line ({size} bytes, no newline)") from None
        buf += chunk
        if len(buf) > MAX_LINE + 1:
            raise ProtocolError(f"line longer than the {MAX_LINE}-byte limit")
        return bytes(buf)


async def read_message(reader: asyncio.StreamReader) -> Message | None:
    """The next message from an asyncio stream, None at a clean EOF; ProtocolError otherwise."""
    line = await read_line_async(reader)
    return None if line is None else decode(line)


def write_message(stream: IO[bytes], msg: Message) -> None:
    """Write one message and flush (a blocking binary stream)."""
    stream.write(encode(msg))
    stream.flush()


async def write_message_async(writer: asyncio.StreamWriter, msg: Message) -> None:
    """Write one message and wait for the transport to drain."""
    writer.write(encode(msg))
    await writer.drain()
