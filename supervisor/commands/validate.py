"""`vinos-routine validate [PATH...]`: check routine files without running anything."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

__all__ = ["register"]

EXAMPLE = """example:
  vinos-routine validate ~/.vinos/routines/day-brief.toml
  vinos-routine validate            # every routine file, user and system
  vinos-routine validate --json a.toml b.toml
  vinos-routine validate ~/.vinos/routines/config.toml   # the daemon's settings
"""


def register(sub: Any) -> None:
    p = sub.add_parser(
        "validate",
        help="check routine files (or config.toml) and print OK or every error",
        epilog=EXAMPLE,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("paths", nargs="*", type=Path, help="routine files (default: all)")
    p.add_argument("--json", action="store_true", help="one JSON object per file")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from routines.checks import RoutineInvalid
    from routines.paths import paths
    from routines.registry import scan
    from supervisor.present import print_json_lines

    files: list[Path] = list(args.paths)
    if not files:
        p = paths()
        files = [e.path for e in scan(p).entries.values()]
        if not files and not args.json:
            print(f"no routine files in {p.routines_dir} or {p.system_dir}")
    results: list[dict[str, Any]] = []
    for path in files:
        try:
            warnings = _check(path)
        except RoutineInvalid as exc:
            results.append(
                {
                    "file": str(path),
                    "ok": False,
                    "errors": [str(p) for p in exc.errors],
                    "warnings": [str(p) for p in exc.problems if p.warning],
                }
            )
        else:
            results.append(
                {"file": str(path), "ok": True, "errors": [], "warnings": list(warnings)}
            )
    if args.json:
        print_json_lines(results)
    else:
        for res in results:
            for warning in res["warnings"]:
                print(warning)
            if res["ok"]:
                print(f"{res['file']}: OK")
            for error in res["errors"]:
                print(error)
    return 0 if all(r["ok"] for r in results) else 1


def _check(path: Path) -> tuple[str, ...]:
    """A routine file's warnings, or nothing for a valid config.toml; raises RoutineInvalid."""
    from routines.checks import Problem, RoutineInvalid
    from routines.config import load_config
    from routines.loader import load_file

    if path.name != "config.toml":
        return load_file(path).warnings
    if not path.is_file():  # load_config reads a missing file as all defaults
        raise RoutineInvalid([Problem(path.name, "", "cannot read: no such file")])
    load_config(path)
    return ()
