#!/usr/bin/env python3
"""Write the shell completions in packaging/completions/ from the CLI's argparse parser.

    .venv/bin/python scripts/gen-completions.py          # regenerate the three files
    .venv/bin/python scripts/gen-completions.py --check  # exit 1 when they are out of date

The text comes from supervisor/cli/completions.py (which `vinos-routine setup` also uses).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from supervisor.cli.completions import render  # noqa: E402

OUT = REPO / "packaging" / "completions"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="only report stale files (exit 1)")
    parser.add_argument("--out", type=Path, default=OUT, help=f"directory (default {OUT})")
    args = parser.parse_args()
    stale = []
    for name, text in render().items():
        path = args.out / name
        try:
            current = path.read_text(encoding="utf-8")
        except FileNotFoundError:
            current = None
        if current == text:
            continue
        stale.append(name)
        if not args.check:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text, encoding="utf-8")
    if args.check and stale:
        print(
            f"out of date in {args.out}: {', '.join(stale)}; regenerate them with "
            ".venv/bin/python scripts/gen-completions.py",
            file=sys.stderr,
        )
        return 1
    for name in stale:
        print(f"wrote {args.out / name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
