"""Numbers and durations as people read them: shared by the CLI (supervisor/cli/present.py) and
the dashboard, which may not import supervisor."""

from __future__ import annotations

from datetime import timedelta

__all__ = ["money", "relative", "tokens"]


def money(dollars: float) -> str:
    """$0.04; amounts under a cent keep their digits ($0.0031), so a cheap run is not $0.00."""
    if dollars == 0:
        return "$0.00"
    if abs(dollars) < 0.01:
        return f"${dollars:.4f}"
    return f"${dollars:,.2f}"


def tokens(count: int) -> str:
    """950, 12.3k, 1.2M."""
    if count < 1000:
        return str(count)
    if count < 1_000_000:
        return f"{count / 1000:.1f}k".replace(".0k", "k")
    return f"{count / 1_000_000:.1f}M".replace(".0M", "M")


def relative(delta: timedelta) -> str:
    """A duration as "2h 13m", "45s", "3d 4h"; negative durations read "… ago"."""
    seconds = int(delta.total_seconds())
    ago = seconds < 0
    seconds = abs(seconds)
    days, rem = divmod(seconds, 86400)
    hours, rem = divmod(rem, 3600)
    minutes, secs = divmod(rem, 60)
    if days:
        text = f"{days}d {hours}h" if hours else f"{days}d"
    elif hours:
        text = f"{hours}h {minutes}m" if minutes else f"{hours}h"
    elif minutes:
        text = f"{minutes}m"
    else:
        text = f"{secs}s"
    return f"{text} ago" if ago else text
