"""Untrusted text made safe to show: what models, commands, routine files and file names wrote.

One home for the rule, used by the worker (log lines, events), the supervisor (CLI output,
notifications) and any other view: a string from outside never reaches a terminal, a log line or
a notification able to move the cursor, retitle the window, forge a line or reorder itself.
"""

from __future__ import annotations

import unicodedata

TYPE_CHECKING = False  # typing's own flag
if TYPE_CHECKING:
    import re

__all__ = ["one_line", "redact_url", "shortened", "visible"]


# What is shown escaped, besides control characters (Cc) and line breaks:
# - Every format character (category Cf): they draw nothing but change what is drawn. Bidi
#   embeddings, overrides and isolates (U+202A-202E, U+2066-2069, U+061C, U+200E/F) make
#   text display in another order than it runs ("Trojan Source"), hiding part of a command
#   shown for review; zero-width space and joiners (U+200B-200D), word joiner and invisible
#   operators (U+2060-2064), the byte-order mark (U+FEFF), the soft hyphen, the Mongolian
#   vowel separator and the deprecated shaping controls (U+206A-206F) hide a character or
#   split a word where the eye sees none; tag characters (U+E0001, U+E0020-E007F) spell
#   invisible ASCII that some models read. An emoji joined with U+200D shows as its parts
#   plus \u200d: legible, and nothing hides in it.
# - Lone surrogates (Cs): from undecodable bytes; printing one raises.
# - Letters that draw as blank space (the Hangul fillers), used as invisible "names" (in
#   _HIDDEN below, with the other code points that draw nothing).
# Kept: an emoji's presentation selector, private use (icon fonts), unassigned.
_ESCAPED_CATEGORIES = frozenset({"Cc", "Cf", "Cs", "Zl", "Zp"})
# Line and paragraph separators end a line in some viewers: a forged log line otherwise.
_BREAKS = frozenset("\u2028\u2029\x85")
# Unicode's default-ignorable code points (DerivedCoreProperties.txt) that are not Cf: they
# draw nothing either. The combining grapheme joiner, Khmer inherent vowels, Mongolian
# free variation selectors, unassigned ones kept for the purpose, and the 256 variation
# selectors, which spell any byte after a visible character (one selector per byte, the
# channel tag characters also give). Plus the braille blank, a "letter" drawn as a space.
# One U+FE0E/U+FE0F right after a shown character stays: it is how an emoji is written.
# tests/routines/test_redteam_safetext.py holds these. None is ASCII: ASCII text is shown as
# it is without compiling this, so `list` answered by the daemon loads no re (~4 ms).
_HIDDEN_CLASS = (
    "[\u034f\u17b4\u17b5\u180b-\u180f\u2065\ufe00-\ufe0f\ufff0-\ufff8\u2800"
    "\U000e0000-\U000e0fff\u115f\u1160\u3164\uffa0]"
)
_hidden: re.Pattern[str] | None = None


def _hidden_pattern() -> re.Pattern[str]:
    global _hidden
    if _hidden is None:
        import re

        _hidden = re.compile(_HIDDEN_CLASS)
    return _hidden


_PRESENTATION = frozenset("\ufe0e\ufe0f")


def _escape(ch: str) -> str:
    if ord(ch) < 0x100:
        return f"\\x{ord(ch):02x}"
    return f"\\u{ord(ch):04x}" if ord(ch) < 0x10000 else f"\\U{ord(ch):08x}"


def visible(text: str, *, newlines: bool = True) -> str:
    """`text` safe to print on a terminal: control characters (escape sequences), format
    characters (bidi overrides, zero-width and tag characters) and blank letters are shown
    as \\x1b / \\u202e / \\U000e0041 instead of acting or hiding. Tabs stay; newlines stay
    unless `newlines=False`, when they are shown as \\n (a line that must stay one line)."""
    if text.isprintable() and (text.isascii() or not _hidden_pattern().search(text)):
        return text
    hidden = _hidden_pattern()
    out = []
    shown = False  # the last character was shown as itself (an emoji a selector may follow)
    for ch in text:
        if ch == "\n":
            out.append("\n" if newlines else "\\n")
            shown = False
        elif ch == "\t" or (
            unicodedata.category(ch) not in _ESCAPED_CATEGORIES
            and not hidden.match(ch)
            and ch not in _BREAKS
        ):
            out.append(ch)
            shown = True
        elif ch in _PRESENTATION and shown:
            out.append(ch)
            shown = False  # a second selector is a hidden one
        else:
            out.append(_escape(ch))
            shown = False
    return "".join(out)


def one_line(text: str) -> str:
    """`text` as one safe line: for a log line, a table cell, a notification title."""
    return visible(text, newlines=False)


def redact_url(url: str) -> str:
    """A URL without what may be a credential: `https://hooks.example.com/…`.

    Webhook URLs carry their token in the path or the query (Slack, Discord, ntfy), and the
    userinfo part is a password: only the scheme, host and port are kept."""
    from urllib.parse import urlsplit

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


def shortened(text: str, limit: int = 80) -> str:
    """`text` for an error message: whole when short, else its start and how long it was, so
    a 100,000-character argument is named in one readable line, not echoed back; bytes that
    are no UTF-8 (surrogate escapes, as a non-UTF-8 argv arrives) shown as \\xNN."""
    shown = one_line(text.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace"))
    if len(shown) <= limit:
        return shown
    return f"{shown[: limit - 20]}… ({len(text)} characters)"
