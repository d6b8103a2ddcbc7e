"""The output file: its title template, its name, its markdown."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

from routines.spec.outputs import output_name
from worker.output import render_markdown, render_title


def test_titles_and_file_names() -> None:
    started = datetime(2026, 1, 2, 3, 4, tzinfo=timezone(timedelta(hours=5, minutes=30)))
    assert render_title(
        "Today · {{date}} {{time}} {{name}} {{other}}", name="n", started=started
    ) == ("Today · 2026-01-02 03:04 n {{other}}")
    assert output_name(started) == "2026-01-02-0304.md"
    assert render_markdown("A  title\n", "\n\nbody\n\n") == "# A title\n\nbody\n"
