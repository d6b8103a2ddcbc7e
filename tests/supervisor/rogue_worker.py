"""A worker that ignores its allowance: the real worker (`python -m worker`) with its budget check
before each premium call patched to always say "go on". It keeps calling the model after the day's
dollars are spent, which is what the supervisor's backstop is for (it sums the worker's usage and
ends a worker that overspends). Run as `python -P rogue_worker.py`."""

from __future__ import annotations

import sys

from worker import budget
from worker.main import main


def _always_proceed(*args: object, **kwargs: object) -> tuple[budget.SpendCheck, None]:
    return budget.SpendCheck.PROCEED, None


budget.check = _always_proceed
sys.exit(main())
