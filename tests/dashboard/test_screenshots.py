"""docs/screenshots/ is what the dashboard renders now: each page's visible text, rendered from
the screenshots' fixed data (tests/dashboard/shots.py), equals the NAME.txt committed beside
NAME.png. Text, not pixels: fonts and anti-aliasing differ between machines, words do not."""

from __future__ import annotations

import difflib
import os

import pytest

from tests.dashboard.shots import REPO, SHOTS, take

pytestmark = pytest.mark.slow

DOCS = REPO / "docs" / "screenshots"


@pytest.fixture(scope="module")
def rendered(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """The pages' text, rendered once for the module (a daemon, the dashboard, Chromium)."""
    if os.geteuid() == 0:  # as tests/conftest.py's not_root: fail, never skip
        pytest.fail("the screenshots run the daemon and must be taken unprivileged")
    return take(tmp_path_factory.mktemp("shots"), None)


def test_the_committed_screenshots_show_what_the_dashboard_renders_now(
    rendered: dict[str, str],
) -> None:
    assert sorted(rendered) == sorted(s.name for s in SHOTS)
    stale = []
    for name, text in rendered.items():
        committed = DOCS / f"{name}.txt"
        old = committed.read_text() if committed.exists() else ""
        if old != text:
            diff = difflib.unified_diff(
                old.splitlines(), text.splitlines(), f"committed {name}.txt", "rendered now", n=1
            )
            stale.append("\n".join(diff))
    assert not stale, (
        "docs/screenshots/ is stale: run `make screenshots` and commit the new PNG and text "
        "files\n" + "\n".join(stale)
    )


def test_the_pages_show_the_fixed_data_and_no_machine_path(rendered: dict[str, str]) -> None:
    """The data is what the pictures claim (the demo's routine beside the starters, a run's
    output rendered, the fixed day) and no path of the machine that took them shows."""
    assert "daemon up (pid N) · 0 running · 0 queued · 2 of 7 routines on" in rendered["overview"]
    assert "Hourly: load, disk, and what the sandbox lets a routine see" in rendered["overview"]
    assert "Tuesday, 10 March" in rendered["run"]
    assert "user file ~/.vinos/routines/day-brief.toml" in rendered["routine"]
    assert "Every Monday and Thursday at 8:00 AM" in rendered["schedule"]
    for name, text in rendered.items():
        assert str(REPO) not in text, name
        assert "/tmp/" not in text, name
