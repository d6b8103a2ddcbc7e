"""Run every benchmark module (bench/bench_*.py) and print one table.

    python -m bench            # all
    python -m bench ledger     # only bench_ledger.py
    VINOS_BENCH_QUICK=1 ...    # fewer repetitions (for a smoke run)

Each module has `run(quick: bool) -> list[Row]`.
"""

from __future__ import annotations

import importlib
import os
import pkgutil
import sys
import time

import bench
from bench.common import Row, print_table


def main(argv: list[str]) -> int:
    quick = bool(os.environ.get("VINOS_BENCH_QUICK"))
    names = sorted(
        m.name for m in pkgutil.iter_modules(bench.__path__) if m.name.startswith("bench_")
    )
    known = [n.removeprefix("bench_") for n in names]
    if unknown := [a for a in argv if a not in known]:
        print(
            f"bench: no benchmark {', '.join(unknown)}; they are: {' '.join(known)}",
            file=sys.stderr,
        )
        return 2
    if argv:
        names = [n for n in names if n.removeprefix("bench_") in argv]
    rows: list[Row] = []
    failed = []
    for name in names:
        t0 = time.monotonic()
        print(f"bench: {name} …", file=sys.stderr, flush=True)
        try:
            rows.extend(importlib.import_module(f"bench.{name}").run(quick))
        except Exception as exc:
            failed.append(f"{name}: {type(exc).__name__}: {exc}")
        print(f"bench: {name} done in {time.monotonic() - t0:.1f}s", file=sys.stderr, flush=True)
    print()
    print_table(rows)
    for f in failed:
        print(f"FAILED {f}", file=sys.stderr)
    return 1 if failed else 0


sys.exit(main(sys.argv[1:]))
