"""Sums a `pytest -p tests.cpuprofile` run (tests/cpuprofile.py): CPU and wall per test file,
the largest first, and the totals.

    python scripts/cpu-profile.py DIR [--top N] [--tests]
"""

from __future__ import annotations

import argparse
import json
from collections import defaultdict
from pathlib import Path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("dir", type=Path)
    parser.add_argument("--top", type=int, default=30)
    parser.add_argument("--tests", action="store_true", help="per test, not per file")
    args = parser.parse_args()
    cpu: dict[str, float] = defaultdict(float)
    wall: dict[str, float] = defaultdict(float)
    count: dict[str, int] = defaultdict(int)
    for path in sorted(args.dir.glob("*.jsonl")):
        for line in path.read_text().splitlines():
            row = json.loads(line)
            key = row["test"] if args.tests else row["test"].split("::")[0]
            cpu[key] += row["cpu"] + row["children"]
            wall[key] += row["wall"]
            count[key] += 1
    print(f"{'cpu s':>8} {'wall s':>8} {'tests':>6}  file")
    for key in sorted(cpu, key=cpu.__getitem__, reverse=True)[: args.top]:
        print(f"{cpu[key]:8.1f} {wall[key]:8.1f} {count[key]:6d}  {key}")
    print(f"{sum(cpu.values()):8.1f} {sum(wall.values()):8.1f} {sum(count.values()):6d}  total")


if __name__ == "__main__":
    main()
