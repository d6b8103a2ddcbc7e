"""Argument types the commands' parsers share: a bad value is refused by argparse, which names
the option and exits 2, before any command sees it (tests/cli/test_cli_bad_input.py)."""

from __future__ import annotations

import argparse
from collections.abc import Callable

__all__ = ["seconds", "whole_number"]


def whole_number(what: str, low: int, high: int) -> Callable[[str], int]:
    """An argparse type for a whole number of `what` in [low, high]. The upper bound keeps a
    typo of thirty nines out of SQLite (an integer has 64 bits there) and out of date
    arithmetic, where it was an OverflowError traceback."""

    def parse(text: str) -> int:
        try:
            n = int(text)
        except ValueError:
            n = None
        if n is None or not low <= n <= high:
            from routines.safetext import shortened

            raise argparse.ArgumentTypeError(
                f"expected {what} from {low} to {high}, found {shortened(text)!r}"
            )
        return n

    parse.__name__ = what.replace(" ", "_")  # argparse names the type in some messages
    return parse


def seconds(low: float, high: float) -> Callable[[str], float]:
    """An argparse type for a number of seconds in (low, high]: a timeout of -5 or of 1e30
    is a typo, not a wait."""

    def parse(text: str) -> float:
        try:
            n = float(text)
        except ValueError:
            n = float("nan")
        if not low < n <= high:  # NaN fails both
            from routines.safetext import shortened

            raise argparse.ArgumentTypeError(
                f"expected seconds, more than {low:g} and at most {high:g}, found "
                f"{shortened(text)!r}"
            )
        return n

    parse.__name__ = "seconds"
    return parse
