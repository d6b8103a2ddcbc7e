"""What a change's redirect may say: fixed message codes, never free text in the URL.

A redirect after a POST carries `?note=CODE` or `?problem=CODE` (with `routine=NAME` and
`run=ID` when the message names them); the page shows the fixed sentence for the code. A
link someone else made (`/?problem=Your+session+expired,+log+in+at+evil.test`) therefore
shows nothing: an unknown code is dropped. `next=` is a path inside this dashboard or `/`.
Pure; tests/dashboard/test_dashboard_units_messages.py holds it.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from urllib.parse import urlencode

from dashboard.files import NAME, RUN_ID

__all__ = ["NOTES", "PROBLEMS", "problem_code", "query", "safe_next", "shown"]

NOTES = {
    "enabled": "{routine} enabled",
    "disabled": "{routine} disabled",
    "queued": "{routine} queued as {run}",
    "fired": "{routine} fired: its run starts now, or when its current run ends",
    "reloaded": "routine files re-read",
    "approved": "{routine}'s proposal approved: its action runs now (a paused run goes on after)",
    "denied": "{routine}'s proposal denied: its run is told",
}
PROBLEMS = {
    "daemon_down": "the daemon is not running: start it (vinos-routine daemon, or "
    "systemctl --user start vinos-routined), then try again",
    "unknown_routine": "no routine named {routine} (removed? see vinos-routine list)",
    "invalid_routine": "{routine} is invalid: see vinos-routine validate {routine}",
    "busy": "{routine} cannot start now: it is running or waits its turn",
    "disk_full": "the disk is full: the daemon cannot record a run",
    "ledger_lost": "the daemon lost its ledger: see vinos-routine status",
    "stopping": "the daemon is stopping; try again when it is back",
    "not_fireable": "{routine} takes no fire calls: add fire = true to its [trigger] table",
    "input_too_large": "the input is too large: a fire call takes at most 16 KB",
    "no_proposal": "no such proposal (see vinos-routine pending)",
    "not_waiting": "that proposal no longer waits: decided, expired or invalidated",
    "changed": "that proposal's input is not the one the page showed: nothing ran; look again",
    "not_started": "the action could not start: see the daemon's log",
    "refused": "the daemon refused the change: see vinos-routine status",
}
# A path of this dashboard: one leading slash, then no second one, no backslash (browsers read
# `/\host` as `//host`), no whitespace or control character (stripped by browsers, so
# `/\t/host` is `//host` too), no scheme, no query.
_PATH = re.compile(r"/(?:[A-Za-z0-9._~%:-][A-Za-z0-9._~%:/-]*)?")


def safe_next(target: str) -> str:
    """`target` when it is a path inside the dashboard, else "/" (pure)."""
    return target if _PATH.fullmatch(target) and "//" not in target else "/"


def problem_code(daemon_code: str) -> str:
    """The PROBLEMS code for an error code the daemon sent (pure)."""
    return daemon_code if daemon_code in PROBLEMS and daemon_code != "daemon_down" else "refused"


def query(code: str, *, problem: bool = False, routine: str = "", run: str = "") -> str:
    """The query string of the redirect that shows `code` (pure)."""
    params = {"problem" if problem else "note": code}
    if routine:
        params["routine"] = routine
    if run:
        params["run"] = run
    return urlencode(params)


def shown(params: Mapping[str, str]) -> tuple[str, str]:
    """(note, problem) to show for a request's query parameters: the fixed sentences, or ""
    for a missing or unknown code or a name or run id that is not one (pure)."""
    routine = params.get("routine", "")
    run = params.get("run", "")
    fields = {
        "routine": routine if NAME.fullmatch(routine) else "",
        "run": run if RUN_ID.fullmatch(run) else "",
    }

    def sentence(table: Mapping[str, str], code: str) -> str:
        template = table.get(code, "")
        needs = [k for k in fields if "{" + k + "}" in template]
        if not template or any(not fields[k] for k in needs):
            return ""
        return template.format(**fields)

    return sentence(NOTES, params.get("note", "")), sentence(PROBLEMS, params.get("problem", ""))
