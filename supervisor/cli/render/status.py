"""`status`'s text, from the status alone: the daemon's reply (ipc.StatusReply, as on the
wire) or the one built from the files when no daemon answers, with its "problems"
(tests/cli/test_render.py).
"""

from __future__ import annotations

from datetime import datetime

TYPE_CHECKING = False  # typing's own flag: `status` answered by the daemon loads no typing
if TYPE_CHECKING:
    from typing import Any

__all__ = ["lines"]


def lines(st: dict[str, Any], now: datetime, c: bool, start_hint: str) -> list[str]:
    """What `status` prints of the status `st` (with its "problems"); `start_hint`: how to
    start the daemon, shown when it is not running."""
    from routines.safetext import one_line
    from supervisor.cli.present import color, when

    out = []
    if st["daemon"]:
        out.append(f"daemon: {color('running', 'green', c)} (pid {st['pid']}) · {st['status']}")
    else:
        out.append(f"daemon: {color('not running', 'yellow', c)}; {start_hint}")
    out.append(f"routines: {st['routines']} ({st['enabled']} enabled)")
    for r in st["running"]:
        since = f" since {r['started_at'][11:19]}" if r.get("started_at") else ""
        out.append(f"  running  {one_line(r['routine'])}{since}")
    for r in st["queued"]:
        out.append(f"  queued   {one_line(r['routine'])}")
    for item in st["next"][:5]:
        at = datetime.fromisoformat(item["at"])
        out.append(f"  next     {one_line(item['routine'])} {when(at, now)}")
    stale = set(st.get("stale", []))
    for name in st["invalid"]:
        still = "; its last good version still runs" if name in stale else ""
        line = f"  invalid  {one_line(name)}{still} (see 'vinos-routine validate')"
        out.append(color(line, "yellow", c))
    for problem in st["problems"]:
        out.append(color(f"  problem  {one_line(problem)}", "red", c))
    return out
