"""A routine's shape for a person reading a list of them: a short title, one plain sentence
saying what they get (`[routine].title`, `[routine].description`), and the instruction
(`[agent].system`). `draft_routine` requires the first two and tidies them here; `validate`
warns when a file has neither. Pure: text in, text or a problem out."""

from __future__ import annotations

import re

__all__ = ["TITLE_MAX", "ShapeProblem", "missing_shape", "tidy_summary", "tidy_title"]

TITLE_MAX = 60
SUMMARY_MAX = 200
_SPACE = re.compile(r"\s+")
# A sentence ends inside the text: ". Then", "! And", "? So".
_SENTENCE_BREAK = re.compile(r"[.!?]\s+\S")


class ShapeProblem(ValueError):
    """A title or summary that cannot be tidied into shape (what is expected, what was found)."""


def _tidy(text: str) -> str:
    text = _SPACE.sub(" ", text).strip()
    return text[:1].upper() + text[1:]


def tidy_title(text: str) -> str:
    """ "  weekly   repo digest. " → "Weekly repo digest": one line, single spaces, a capital
    first letter, no trailing period. Raises ShapeProblem when empty or too long."""
    title = _tidy(text).rstrip(".").rstrip()
    if not title:
        raise ShapeProblem("title: expected a short title, found nothing")
    if len(title) > TITLE_MAX:
        raise ShapeProblem(
            f"title: expected at most {TITLE_MAX} characters, found {len(title)}: shorten it; "
            "the summary says the rest"
        )
    return title


def tidy_summary(text: str) -> str:
    """ "you get  today's commits" → "You get today's commits.": one sentence, single spaces,
    a capital first letter, one final period. Raises ShapeProblem when empty, too long or
    more than one sentence."""
    summary = _tidy(text).rstrip(".").rstrip()
    if not summary:
        raise ShapeProblem("summary: expected one sentence saying what the person gets")
    if _SENTENCE_BREAK.search(summary):
        raise ShapeProblem(
            f"summary: expected one sentence, found more: {summary[:80]!r}; the instruction "
            "belongs in [agent].system"
        )
    if len(summary) > SUMMARY_MAX:
        raise ShapeProblem(
            f"summary: expected one sentence of at most {SUMMARY_MAX} characters, found "
            f"{len(summary)}"
        )
    if summary[-1] not in "!?":
        summary += "."
    return summary


def missing_shape(title: str, description: str) -> list[str]:
    """`validate`'s warnings for a routine written by hand without a title or a summary."""
    out = []
    if not title.strip():
        out.append(
            f"[routine].title: WARN missing: a short title (at most {TITLE_MAX} characters) "
            "names it in lists"
        )
    if not description.strip():
        out.append("[routine].description: WARN missing: one plain sentence saying what you get")
    return out
