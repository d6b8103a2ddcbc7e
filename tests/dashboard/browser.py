"""Headless Chromium from the distribution, driven by Playwright for Python.

Playwright's own browser download is not used (nor reachable here): `executable_path` is the
system's chromium, with its own sandbox on (the tests run unprivileged) and a fresh profile.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from playwright.sync_api import BrowserContext

REPO = Path(__file__).resolve().parents[2]
ARGS = [
    "--headless",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]


def chromium() -> str:
    path = shutil.which("chromium") or shutil.which("chromium-browser")
    if path is None:
        pytest.fail("chromium is not installed: run scripts/system-deps.sh as root")
    return path


@contextmanager
def browser(profile: Path) -> Iterator[BrowserContext]:
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        ctx = pw.chromium.launch_persistent_context(
            str(profile),
            executable_path=chromium(),
            headless=True,
            chromium_sandbox=True,
            args=ARGS,
            viewport={"width": 1280, "height": 900},
        )
        try:
            yield ctx
        finally:
            ctx.close()
