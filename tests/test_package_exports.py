"""routines.schedule and routines.spec export the names the rest of the tree imports, each the
very object of the module that defines it, and importing the package loads none of them."""

from __future__ import annotations

import importlib
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
PACKAGES = ["routines.schedule", "routines.spec"]


@pytest.mark.parametrize("name", PACKAGES)
def test_every_export_is_its_modules_object(name: str) -> None:
    package = importlib.import_module(name)
    exports: dict[str, str] = package._EXPORTS
    assert sorted(package.__all__) == sorted(exports)
    for export, module in exports.items():
        defining = importlib.import_module(f"{name}.{module}")
        assert getattr(package, export) is getattr(defining, export), export


@pytest.mark.parametrize("name", PACKAGES)
def test_an_unknown_name_is_an_attribute_error(name: str) -> None:
    package = importlib.import_module(name)
    with pytest.raises(AttributeError, match=f"module '{name}' has no attribute 'nosuch'"):
        package.nosuch  # noqa: B018


def test_the_packages_load_only_what_is_asked_for() -> None:
    # A fresh interpreter: this one has imported the whole tree.
    code = (
        "import sys\n"
        "import routines.schedule, routines.spec\n"
        "before = sorted(m for m in sys.modules if m.startswith('routines.'))\n"
        "from routines.spec import Routine\n"
        "print(' '.join(before))\n"
        "print(' '.join(sorted(m for m in sys.modules if m.startswith('routines.'))))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=True
    )
    before, after = done.stdout.splitlines()
    assert before.split() == ["routines.schedule", "routines.spec"]
    # The routine's type, and the schedule's typed table it holds (routines.schedule.written).
    assert after.split() == [
        "routines.schedule",
        "routines.schedule.written",
        "routines.spec",
        "routines.spec.routine",
    ]
