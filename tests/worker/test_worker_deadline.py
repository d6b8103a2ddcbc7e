"""The worker's deadline counts from when the supervisor started the run, not from when the
worker finished importing, so the worker reports its own timeout before the supervisor's
timer (which started at spawn) ends the process."""

from __future__ import annotations

from worker.context import Deadline


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_the_time_gone_before_the_worker_started_is_taken_off() -> None:
    clock = Clock()
    fresh = Deadline(5, clock=clock)
    late = Deadline(5, clock=clock, elapsed=1.5)
    assert fresh.remaining() == 4.5  # 5 s less the 10 % margin
    assert late.remaining() == 3.0


def test_an_elapsed_time_the_clocks_disagree_on_is_ignored() -> None:
    clock = Clock()
    # A fake or stepped supervisor clock: minus an hour, or more than the whole limit.
    assert Deadline(5, clock=clock, elapsed=-3600).remaining() == 4.5
    assert Deadline(5, clock=clock, elapsed=86_400).remaining() == 4.5


def test_the_margin_is_capped_at_three_seconds() -> None:
    clock = Clock()
    assert Deadline(600, clock=clock).remaining() == 597.0
    clock.now += 97.0
    assert Deadline(600, clock=clock, elapsed=10).remaining() == 587.0
