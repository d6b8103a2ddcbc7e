"""Red team, invisible text: `visible` escaped the format characters (Cf), but Unicode's
other default-ignorable code points draw nothing too and passed: the combining grapheme
joiner, the Khmer inherent vowels, the Mongolian variation selectors, and the 256 variation
selectors, which can spell any bytes after one visible character (a byte per selector:
"emoji smuggling", the same hidden channel as tag characters). Also the braille blank,
which draws as a space like the Hangul fillers. A lone emoji presentation selector after a
character stays: it is how "❤️" is written, and it carries one bit."""

from __future__ import annotations

import pytest

from routines.safetext import one_line, visible


def smuggle(carrier: str, data: bytes) -> str:
    """`data` hidden after `carrier`, one variation selector per byte."""
    return carrier + "".join(chr(0xFE00 + b) if b < 16 else chr(0xE0100 + b - 16) for b in data)


def test_bytes_hidden_in_variation_selectors_are_shown() -> None:
    hidden = smuggle("ok", b"To: attacker@evil.test")
    shown = visible(hidden)
    assert shown.startswith("ok") and len(shown) > len(hidden)
    assert all(ord(c) < 0xFE00 or ord(c) > 0xFE0F for c in shown)
    assert all(not 0xE0100 <= ord(c) <= 0xE01EF for c in shown)


@pytest.mark.parametrize(
    "ch",
    [
        "\u034f",
        "\u17b4",
        "\u17b5",
        "\u180b",
        "\u180f",
        "\u2065",
        "\ufff0",
        "\U000e0100",
        "\U000e0fff",
        "\u2800",
    ],
)
def test_what_draws_nothing_is_escaped(ch: str) -> None:
    assert one_line(f"rm{ch}x") != f"rm{ch}x"
    assert "\\u" in one_line(f"rm{ch}x") or "\\U" in one_line(f"rm{ch}x")


def test_an_emoji_keeps_its_presentation_selector() -> None:
    for text in ("\u2764\ufe0f", "\u263a\ufe0e", "caf\u00e9 \u2705"):
        assert visible(text) == text
    assert visible("\ufe0f") == "\\ufe0f"  # with nothing before it, it selects nothing
    assert visible("\u2764\ufe0f\ufe0f") == "\u2764\ufe0f\\ufe0f"
