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
