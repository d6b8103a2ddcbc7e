"""What every benchmark returns, and how `make bench` prints it.

A benchmark measures its subject and, in the same run on the same machine, a baseline, so the
ratio means something on a noisy machine. Targets are printed, never asserted in tests.
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

__all__ = ["Row", "debug_timings", "median_seconds", "p50_p99", "print_table"]


@dataclass(frozen=True, slots=True)
class Row:
    name: str  # what was measured
    value: float  # NaN when not measured (the baseline says why)
    unit: str  # "ms", "ops/s", "MB", "%", …
    baseline: str = ""  # what it was compared with, e.g. "bash -c true: 1.2 ms"
    ratio: float | None = None  # value / baseline value, when a baseline was measured
    target: str = ""  # e.g. "< 15 ms added", "<= 1.5x"
    met: bool | None = None  # whether the target was met; None when there is none


def median_seconds(fn: Callable[[], object], repeat: int) -> float:
    """Median wall time of `repeat` calls of `fn`."""
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def p50_p99(samples: list[float]) -> tuple[float, float]:
    """The median and the 99th percentile (inclusive method: defined from two samples)."""
    q = statistics.quantiles(samples, n=100, method="inclusive")
    return statistics.median(samples), q[98]


def _value(r: Row) -> str:
    if math.isnan(r.value):
        return "—"  # not measured: the row's baseline says why
    return f"{r.value:,.3f} {r.unit}" if r.value < 100 else f"{r.value:,.0f} {r.unit}"


def print_table(rows: list[Row]) -> None:
    headers = ("benchmark", "value", "baseline", "ratio", "target", "met")
    cells = [
        (
            r.name,
            _value(r),
            r.baseline,
            "" if r.ratio is None else f"{r.ratio:.2f}x",
            r.target,
            "" if r.met is None else ("yes" if r.met else "NO"),
        )
        for r in rows
    ]
    widths = [max([len(h), *(len(c[i]) for c in cells)]) for i, h in enumerate(headers)]
    line = "  ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True))
    print(line)
    print("  ".join("-" * w for w in widths))
    for c in cells:
        print("  ".join(v.ljust(w) for v, w in zip(c, widths, strict=True)))


def debug_timings(**fields: Any) -> str:
    """A daemon's VINOS_DEBUG_TIMINGS (supervisor/timings.py) with these Timings fields."""
    from supervisor.timings import Timings

    return Timings(**fields).debug_env()
