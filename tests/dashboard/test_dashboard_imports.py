"""Import boundaries (docs/design.md's package table): the dashboard loads ipc and routines of the
project, never supervisor or worker; its web libraries load in its own process only."""

from __future__ import annotations

import subprocess
import sys

from tests.dashboard.dashkit import REPO

WEB = ("starlette", "uvicorn", "jinja2", "markdown_it")


def loaded_after(code: str) -> set[str]:
    out = subprocess.run(
        [sys.executable, "-c", f"{code}\nimport sys\nprint(' '.join(sys.modules))"],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    ).stdout.split()
    return {m.split(".")[0] for m in out}


def test_dashboard_imports_no_supervisor_and_no_worker() -> None:
    top = loaded_after("import dashboard.app, dashboard.server")
    assert "dashboard" in top and "starlette" in top
    assert not top & {"supervisor", "worker", "sandbox", "anthropic", "httpx", "httpx2"}


def test_cli_loads_no_web_library() -> None:
    top = loaded_after(
        "from supervisor.cli.main import build_parser\nbuild_parser()\n"
        "import supervisor.cli.commands.dashboard, supervisor.daemon"
    )
    assert not top & {*WEB, "dashboard"}
