"""Messages between supervisor, worker and CLI, and their newline-JSON framing.

from ipc import Job, Result, encode, decode, LineReader, read_message, write_message
"""

from ipc.framing import (
    MAX_LINE,
    LineReader,
    ProtocolError,
    decode,
    encode,
    read_line_async,
    read_message,
    write_message,
    write_message_async,
)
from ipc.messages import (
    PROTOCOL,
    Event,
    EventKind,
    Hello,
    Job,
    Message,
    MessageError,
    Outcome,
    Proposal,
    Request,
    Response,
    Result,
    RunStatus,
    Trigger,
    Usage,
    from_dict,
    to_dict,
)

__all__ = [
    "MAX_LINE",
    "PROTOCOL",
    "Event",
    "EventKind",
    "Hello",
    "Job",
    "LineReader",
    "Message",
    "MessageError",
    "Outcome",
    "Proposal",
    "ProtocolError",
    "Request",
    "Response",
    "Result",
    "RunStatus",
    "Trigger",
    "Usage",
    "decode",
    "encode",
    "from_dict",
    "read_line_async",
    "read_message",
    "to_dict",
    "write_message",
    "write_message_async",
]
