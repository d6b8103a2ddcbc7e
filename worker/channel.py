"""The worker's side of the pipe: messages to the supervisor on the private stdout, log lines
on stderr.

Every message goes out at once (flushed), so the supervisor sees each model call as it
happens and can stop a run that overspends. Exactly one `Result` is ever sent.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable
from typing import IO, Any

from ipc.framing import ProtocolError, encode
from ipc.messages import Event, EventKind, Message, Result, Usage
from routines.safetext import one_line

__all__ = ["PREVIEW_CHARS", "Channel", "preview"]

PREVIEW_CHARS = 2000  # of a tool result or reply in an event: the run log is not the output


def preview(text: str, limit: int = PREVIEW_CHARS) -> str:
    return text if len(text) <= limit else text[:limit] + f"… ({len(text) - limit:,} more)"


class Channel:
    def __init__(self, out: IO[bytes], name: str, err: IO[str] | None = None) -> None:
        self._out = out
        self._err = err if err is not None else sys.stderr
        self.name = name
        self.result_sent = False
        # One message at a time: the lease's dead-man switch (worker/lease.py) sends its
        # result from its own thread.
        self._lock = threading.Lock()

    def send(self, msg: Message) -> None:
        with self._lock:
            if isinstance(msg, Result):
                if self.result_sent:
                    raise RuntimeError("a second result for one run")
                self.result_sent = True
            self._out.write(encode(msg))
            self._out.flush()

    def last_word(self, result: Callable[[], Result]) -> None:
        """Call `result()`, send what it returns unless a result went already, and send
        nothing more: the lock is
        taken first and kept (the caller exits the process next, a lapsed lease), so that
        what `result()` does (kill the run's process tree) cannot make the main thread report
        the killed command as a failure first (tests/fleet/test_fleet_chaos.py)."""
        self._lock.acquire()
        final = result()
        if not self.result_sent:
            self.result_sent = True
            self._out.write(encode(final))
            self._out.flush()

    def event(self, kind: EventKind, text: str, /, **data: Any) -> None:
        """One event; its text becomes one safe line (a model's newline or terminal escape
        in it cannot forge a line of `run` or `logs`). `data` keeps the raw values, as JSON."""
        text = one_line(text)
        try:
            self.send(Event(kind=kind, text=text, data=data))
        except ProtocolError:
            # Text from a model or a tool that is not valid UTF-8 (a lone surrogate): the
            # event goes out with it replaced rather than the run breaking on a log line.
            self.send(Event(kind=kind, text=_clean(text), data=_clean(data)))

    def log(self, text: str) -> None:
        """A line for the run log only (stderr), made one safe line."""
        print(one_line(text), file=self._err, flush=True)

    def warn(self, text: str, /, **data: Any) -> None:
        self.log(f"[{self.name}] WARN: {text}")
        self.event(EventKind.WARN, text, **data)

    def usage(self, usage: Usage) -> None:
        self.send(usage)

    def result(self, result: Result) -> None:
        self.send(result)


def _clean(value: Any) -> Any:
    if isinstance(value, str):
        return value.encode("utf-8", "surrogatepass").decode("utf-8", "replace")
    if isinstance(value, dict):
        return {str(_clean(k)): _clean(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_clean(v) for v in value]
    return value
