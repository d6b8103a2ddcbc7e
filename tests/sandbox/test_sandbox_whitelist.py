"""The whitelist is exact string equality: every variant of a declared command is refused."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sandbox import check_read, check_shell

DECLARED = (
    "gh api /notifications --paginate 2>/dev/null | head -c 8000",
    "gcalcli agenda today",
    "echo 'a  b'",
)
READS = ("~/Notes/*.md", "~/.vinos/routines/state/day-brief/*.md", "/etc/hostname")


@pytest.mark.parametrize("command", DECLARED)
def test_a_declared_command_is_allowed(command: str) -> None:
    assert check_shell(DECLARED, command) is None


@pytest.mark.parametrize(
    "variant",
    [
        "gcalcli agenda today\n",  # trailing newline
        "gcalcli agenda today\r",  # trailing CR
        "gcalcli agenda today\r\n",
        "gcalcli agenda today\0",  # NUL
        "gcalcli agenda today; cat ~/.ssh/id_rsa",
        "gcalcli agenda today ",  # trailing space
        " gcalcli agenda today",  # leading space
        "gcalcli  agenda today",  # doubled space
        "gcalcli\tagenda today",  # tab
        "gcalcli agenda\u00a0today",  # no-break space
        "gcalcli agenda\u2003today",  # em space
        "gcalcli agenda today\u200b",  # zero-width space
        "gcalcli аgenda today",  # Cyrillic а
        "ｇcalcli agenda today",  # fullwidth g
        "GCALCLI AGENDA TODAY",  # case
        "gcalcli agenda",  # prefix
        "gcalcli agenda today | tee /tmp/x",  # extension
        "echo 'a b'",  # whitespace inside quotes
        'echo "a  b"',  # other quotes
        "echo 'a  b'\n",
        "gh api /notifications --paginate 2>/dev/null | head -c 8000 ",
        "gh api /notifications --paginate",  # a prefix of an allowed command is not allowed
        "",
    ],
)
def test_every_variant_of_a_declared_command_is_refused(variant: str) -> None:
    reason = check_shell(DECLARED, variant)
    assert reason is not None and reason.strip()


def test_a_refusal_says_why_and_points_at_a_near_miss() -> None:
    assert "whitespace" in (check_shell(DECLARED, "gcalcli  agenda today") or "")
    assert "look-alike" in (check_shell(DECLARED, "ｇcalcli agenda today") or "")
    assert "newline" in (check_shell(DECLARED, "gcalcli agenda today\n") or "")
    assert "NUL" in (check_shell(DECLARED, "gcalcli\0") or "")


def test_nothing_is_allowed_when_nothing_is_declared() -> None:
    assert check_shell((), "true") is not None
    assert check_read((), "~/Notes/*.md") is not None


def test_a_non_string_argument_is_refused() -> None:
    assert check_shell(DECLARED, ["gcalcli", "agenda", "today"]) is not None  # type: ignore[arg-type]


@given(st.text(max_size=80))
def test_any_string_not_declared_is_refused(text: str) -> None:
    if text in DECLARED:
        assert check_shell(DECLARED, text) is None
    else:
        assert check_shell(DECLARED, text) is not None


@given(st.sampled_from(DECLARED), st.text(min_size=1, max_size=3))
def test_appending_anything_to_a_declared_command_is_refused(command: str, extra: str) -> None:
    candidate = command + extra
    if candidate not in DECLARED:
        assert check_shell(DECLARED, candidate) is not None


def test_read_patterns_must_match_verbatim() -> None:
    assert check_read(READS, "~/Notes/*.md") is None
    for variant in (
        "~/Notes/today.md",  # a file the glob would match: not the declared pattern
        "~/Notes/*",
        "~/Notes/../.ssh/*",
        "/home/someone/Notes/*.md",  # ~ spelled out
        "~/Notes/*.md ",
        "~/Notes/*.md\n",
        "~/notes/*.md",
        "~//Notes/*.md",
    ):
        assert check_read(READS, variant) is not None, variant
