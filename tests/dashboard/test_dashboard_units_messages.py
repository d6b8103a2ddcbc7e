"""The redirect's words (dashboard.messages): fixed codes in, fixed sentences out, and
`next=` only ever a path of the dashboard."""

from __future__ import annotations

import pytest

from dashboard.messages import NOTES, PROBLEMS, problem_code, query, safe_next, shown


@pytest.mark.parametrize(
    "target",
    [
        "//evil.test",
        "/\\evil.test",
        "/\\/evil.test",
        "/\t/evil.test",
        "/ /evil.test",
        "/\n/evil.test",
        "https://evil.test/",
        "http:evil.test",
        "javascript:alert(1)",
        "evil.test",
        "/routine//evil",
        "/a?b=1",
        "",
    ],
)
def test_next_outside_the_dashboard_becomes_the_overview(target: str) -> None:
    assert safe_next(target) == "/"


@pytest.mark.parametrize("target", ["/", "/routine/tidy", "/run/r-1.2:3", "/cost", "/brief"])
def test_next_inside_the_dashboard_is_kept(target: str) -> None:
    assert safe_next(target) == target


def test_codes_become_the_fixed_sentences() -> None:
    assert shown({"note": "enabled", "routine": "tidy"}) == ("tidy enabled", "")
    assert shown({"note": "queued", "routine": "tidy", "run": "r1"}) == ("tidy queued as r1", "")
    assert shown({"problem": "daemon_down"})[1] == PROBLEMS["daemon_down"]
    assert shown({"note": "reloaded"}) == (NOTES["reloaded"], "")


@pytest.mark.parametrize(
    "params",
    [
        {"note": "Log in again at evil.test"},
        {"problem": "Log in again at evil.test"},
        {"note": "enabled"},  # the sentence needs a routine
        {"note": "enabled", "routine": "Evil Corp"},
        {"note": "queued", "routine": "tidy", "run": "<b>"},
        {"note": "__class__"},
    ],
)
def test_free_text_and_bad_fields_show_nothing(params: dict[str, str]) -> None:
    assert shown(params) == ("", "")


def test_the_daemons_codes_map_to_known_problems() -> None:
    assert problem_code("unknown_routine") == "unknown_routine"
    assert problem_code("something new") == "refused"
    assert problem_code("daemon_down") == "refused"  # only the dashboard says the daemon is down
    assert query("queued", routine="tidy", run="r1") == "note=queued&routine=tidy&run=r1"
    assert query("busy", problem=True, routine="tidy") == "problem=busy&routine=tidy"
