"""`python -P -m worker.ntfy`: one push to the person's phone through ntfy, started by the
daemon (supervisor/engine/phone.py) when a run pauses as "needs you" or such a pause expires.

The daemon never imports httpx2 or the worker, so this small process sends it, through the
worker's one HTTP client and its connector (worker/webclient.py, worker/connector.py): a
topic URL that lands on a port of this machine another user holds is refused, a self-hosted
ntfy on the LAN or ntfy.sh goes ahead.

Its stdin is one JSON object, `Push` (what the push says, decided by the daemon: the
routine's name and the dashboard's link, never the request's content), plus the topic URL
and the token file's path. The token is read here, from ~/.vinos/secrets/ntfy-token (optional;
refused when group or others may read it), and goes only in the Authorization header: never
in an error, a log line or the daemon's memory. Exit 0: sent; 1: not, and one line on stderr
says why (the daemon logs it once); 2: bad input.
"""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass
from pathlib import Path

import orjson

from routines.safetext import redact_url
from worker.connector import Trust
from worker.keys import read_key_file

__all__ = ["NTFY", "TIMEOUT", "Push", "headers", "main", "send"]

NTFY = Trust("ntfy")  # no setting widens it: an ntfy server on this machine runs as the person
_HEADER_SAFE = re.compile(r"[!-~]{1,512}")  # printable ASCII, no space: ntfy's tk_… tokens
TIMEOUT = 10.0  # seconds for the whole request; the daemon waits a little longer


@dataclass(frozen=True, slots=True)
class Push:
    url: str  # the topic's URL ([notify.ntfy].url)
    title: str
    message: str
    tags: str  # ntfy's emoji tags, comma-separated
    click: str | None  # the dashboard's URL, or None (no link)
    token_file: str


def headers(push: Push, token: str | None) -> dict[str, str]:
    """ntfy's publish headers for `push` (pure). Header values are ASCII: a character
    outside it becomes '?' (a routine's name is ASCII already)."""
    out = {"Title": _ascii(push.title), "Tags": _ascii(push.tags)}
    if push.click:
        out["Click"] = _ascii(push.click)
    if token:
        out["Authorization"] = f"Bearer {token}"
    return out


def _ascii(text: str) -> str:
    return "".join(c if " " <= c <= "~" else "?" for c in text)


def send(push: Push) -> str | None:
    """Publish `push`; None when ntfy took it, else why not (never the token)."""
    from worker import webclient

    problems: list[str] = []
    token = read_key_file(Path(push.token_file), problems.append)
    if problems:
        return f"the ntfy token is not used: {problems[0]}"
    if token is not None and not _HEADER_SAFE.fullmatch(token):
        # An HTTP library's refusal of a bad header value quotes the value: say it here.
        return (
            f"the ntfy token in {push.token_file} has a space or a character outside "
            "printable ASCII, which no header carries: write the token alone on one line"
        )
    where = f"ntfy at {redact_url(push.url)}"
    try:
        got = webclient.WebClient().post(
            push.url,
            push.message.encode(),
            "text/plain; charset=utf-8",
            timeout=TIMEOUT,
            headers=headers(push, token),
            max_body=64 << 10,
            trust=NTFY,
        )
    except webclient.Refused as exc:
        return str(exc)  # it names the URL's scheme, host and port itself
    except webclient.HttpError as exc:
        return f"{where}: {exc}"
    if not 200 <= got.status < 300:
        return f"{where} answered {got.status} {got.reason}"
    return None


def main() -> int:
    try:
        raw = orjson.loads(sys.stdin.buffer.read(64 << 10))
        push = Push(**raw)
    except (ValueError, TypeError) as exc:
        print(f"worker.ntfy: bad input: {exc}", file=sys.stderr)
        return 2
    try:
        why = send(push)
    except Exception as exc:  # a bug here: its type only, never a traceback (the token)
        why = f"worker.ntfy failed ({type(exc).__name__})"
    if why is not None:
        print(why, file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
