"""The routine's shape as data (routines/spec/shape.py): how a title and a summary are tidied,
and what is refused."""

from __future__ import annotations

import pytest

from routines.spec.shape import ShapeProblem, missing_shape, tidy_summary, tidy_title


@pytest.mark.parametrize(
    ("given", "tidied"),
    [
        ("  weekly   repo digest. ", "Weekly repo digest"),
        ("Inbox\ttriage...", "Inbox triage"),
        ("x" * 60, "X" + "x" * 59),
    ],
)
def test_titles_are_tidied(given: str, tidied: str) -> None:
    assert tidy_title(given) == tidied


@pytest.mark.parametrize(
    ("given", "tidied"),
    [
        ("you get today's commits", "You get today's commits."),
        ("A digest of ~/src/site.  ", "A digest of ~/src/site."),
        ("Is the build green?", "Is the build green?"),
        ("Version 1.2 notes in one page", "Version 1.2 notes in one page."),
    ],
)
def test_summaries_are_tidied_to_one_sentence(given: str, tidied: str) -> None:
    assert tidy_summary(given) == tidied


@pytest.mark.parametrize(
    ("title", "summary", "why"),
    [
        ("x" * 61, "A.", "at most 60 characters, found 61"),
        (" . ", "A.", "expected a short title"),
        ("T", "", "expected one sentence saying"),
        ("T", "One. Two.", "expected one sentence, found more"),
        ("T", "a" * 201, "at most 200 characters"),
    ],
)
def test_what_cannot_be_tidied_is_refused(title: str, summary: str, why: str) -> None:
    with pytest.raises(ShapeProblem, match=why):
        tidy_title(title)
        tidy_summary(summary)


def test_validate_warns_for_each_missing_part() -> None:
    assert len(missing_shape("", "")) == 2
    assert missing_shape("Brief", "You get it.") == []
