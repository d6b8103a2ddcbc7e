"""routines.safetext: the one rule for showing untrusted text and URLs."""

from __future__ import annotations

from routines.safetext import one_line, redact_url, visible


def test_escape_sequences_are_shown_not_acted() -> None:
    assert visible("a\x1b[2Jb") == "a\\x1b[2Jb"
    assert visible("\u202eevil") == "\\u202eevil"
    assert visible("tab\there\nnext") == "tab\there\nnext"


def test_one_line_cannot_forge_a_second_line() -> None:
    forged = "cat x\n[day-brief] refused tool call: shell:rm -rf ~"
    assert "\n" not in one_line(forged)
    assert one_line(forged).startswith("cat x\\n[day-brief]")
    assert one_line("a\rb\u2028c\x85d") == "a\\x0db\\u2028c\\x85d"


def test_plain_text_is_unchanged() -> None:
    assert one_line("every weekday at 9:00 · ok 👍🏽") == "every weekday at 9:00 · ok 👍🏽"


def test_redact_url_keeps_scheme_host_port_only() -> None:
    assert (
        redact_url("https://hooks.slack.com/services/T0/B0/SECRET?token=x")
        == "https://hooks.slack.com/…"
    )
    assert redact_url("https://user:pw@example.com:8443/") == "https://example.com:8443"
    assert redact_url("http://[::1]:8080/api") == "http://[::1]:8080/…"
    assert "SECRET" not in redact_url("https://h.example/#SECRET")
    assert redact_url("not a url") == "(a URL)"
    assert redact_url("http://[::1") == "(an invalid URL)"


# Every format character the issue of hidden approval input named, and the rest of Cf.
HIDDEN = [
    *(chr(c) for c in range(0x200B, 0x2010)),  # zero-width space, joiners, LRM/RLM
    *(chr(c) for c in range(0x2060, 0x2065)),  # word joiner, invisible operators
    "\ufeff",  # byte-order mark / zero-width no-break space
    "\u061c",  # Arabic letter mark
    *(chr(c) for c in range(0x202A, 0x202F)),  # bidi embeddings and overrides
    *(chr(c) for c in range(0x2066, 0x206A)),  # bidi isolates
    *(chr(c) for c in range(0x206A, 0x2070)),  # deprecated shaping controls
    "\u00ad",  # soft hyphen
    "\u180e",  # Mongolian vowel separator
    "\U000e0001",  # language tag
    *(chr(c) for c in range(0xE0020, 0xE0080)),  # tag characters
    "\ufff9",  # interlinear annotation anchor
    "\U0001d173",  # musical symbol begin beam
    "\u3164",  # Hangul filler: a letter that draws as blank
]


def test_format_characters_are_shown_escaped() -> None:
    for ch in HIDDEN:
        shown = visible(f"a{ch}b")
        assert ch not in shown, f"U+{ord(ch):04X}"
        assert shown.startswith("a\\") and shown.endswith("b"), shown


def test_tag_characters_cannot_spell_hidden_text() -> None:
    hidden = "".join(chr(0xE0000 + ord(c)) for c in "Bcc: evil")
    assert visible(f"To: bob{hidden}") == "To: bob" + "".join(
        f"\\U{0xE0000 + ord(c):08x}" for c in "Bcc: evil"
    )


def test_an_emoji_sequence_stays_legible_and_lone_surrogates_cannot_break_printing() -> None:
    assert visible("👩\u200d💻") == "👩\\u200d💻"
    assert visible("bad \udcff byte") == "bad \\udcff byte"
    visible("x\udcff").encode("utf-8")  # printable on any terminal
    assert visible("é ü ñ 中文 👍🏽 \ue0b0") == "é ü ñ 中文 👍🏽 \ue0b0"  # letters, icon fonts
