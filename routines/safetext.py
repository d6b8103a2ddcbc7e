"""Untrusted text made safe to show: what models, commands, routine files and file names wrote.

One home for the rule, used by the worker (log lines, events), the supervisor (CLI output,
notifications) and any other view: a string from outside never reaches a terminal, a log line or
a notification able to move the cursor, retitle the window, forge a line or reorder itself.
"""

from __future__ import annotations

import unicodedata
from urllib.parse import urlsplit

__all__ = ["one_line", "redact_url", "visible"]

# Bidirectional overrides and isolates: they can make text display in another order than it
# runs ("Trojan Source"), e.g. hide part of a shell command shown for review.
_BIDI = frozenset("\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069\u200e\u200f")
# Line and paragraph separators end a line in some viewers: a forged log line otherwise.
_BREAKS = frozenset("\u2028\u2029\x85")


def _escape(ch: str) -> str:
    return f"\\x{ord(ch):02x}" if ord(ch) < 0x100 else f"\\u{ord(ch):04x}"


def visible(text: str, *, newlines: bool = True) -> str:
    """`text` safe to print on a terminal: control characters (escape sequences) and bidi
    overrides are shown as \\x1b / \\u202e instead of acting. Tabs stay; newlines stay unless
    `newlines=False`, when they are shown as \\n (a line that must stay one line)."""
    if text.isprintable():
        return text
    out = []
    for ch in text:
        if ch == "\n":
            out.append("\n" if newlines else "\\n")
        elif ch == "\t" or (
            unicodedata.category(ch) not in ("Cc", "Zl", "Zp")
            and ch not in _BIDI
            and ch not in _BREAKS
        ):
            out.append(ch)  # a joiner in an emoji, a soft hyphen: harmless, kept
        else:
            out.append(_escape(ch))
    return "".join(out)


def one_line(text: str) -> str:
    """`text` as one safe line: for a log line, a table cell, a notification title."""
    return visible(text, newlines=False)


def redact_url(url: str) -> str:
    """A URL without what may be a credential: `https://hooks.example.com/…`.

    Webhook URLs carry their token in the path or the query (Slack, Discord, ntfy), and the
    userinfo part is a password: only the scheme, host and port are kept."""
    try:
        parts = urlsplit(url)
        host = parts.hostname or ""
        port = parts.port
    except ValueError:
        return "(an invalid URL)"
    if not parts.scheme or not host:
        return "(a URL)"
    shown_host = f"[{host}]" if ":" in host else host
    netloc = f"{shown_host}:{port}" if port else shown_host
    rest = "/…" if (parts.path not in ("", "/") or parts.query or parts.fragment) else ""
    return one_line(f"{parts.scheme}://{netloc}{rest}")
