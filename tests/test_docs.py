"""The documentation holds: the README stays a first screen whose links resolve, the CLI page
is what the parsers print, every test docs/design.md names exists, and the site builds with
mkdocs --strict (a broken link or a page missing from the nav fails)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
README = REPO / "README.md"
TEST_REF = re.compile(r"`(tests/[\w/]+\.py)::(test_\w+)`")


def test_the_cli_page_is_what_the_parsers_print() -> None:
    done = subprocess.run(
        [sys.executable, str(REPO / "scripts" / "gen-cli-docs.py"), "--check"],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr


def test_every_test_the_design_page_names_exists() -> None:
    refs = TEST_REF.findall((REPO / "docs" / "design.md").read_text())
    assert len(refs) > 40  # the page names a test for each invariant
    missing = [
        f"{path}::{name}"
        for path, name in refs
        if not (REPO / path).is_file()
        or not re.search(rf"^\s*(async )?def {name}\(", (REPO / path).read_text(), re.M)
    ]
    assert missing == []


def test_the_readme_is_a_first_screen_whose_links_resolve() -> None:
    text = README.read_text()
    assert len(text.splitlines()) <= 250
    assert "make demo" in text and "make test" in text
    for step in ("vinos-routine setup", "vinos-routine create", "vinos-routine run",
                 "vinos-routine enable", "systemctl --user enable --now vinos-routined",
                 "vinos-routine brief"):  # fmt: skip
        assert step in text, step
    targets = re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", text)
    local = [t for t in targets if "://" not in t]
    assert local, "the README links its pages"
    assert [t for t in local if not (REPO / t).exists()] == []


def test_the_site_builds_strict(tmp_path: Path) -> None:
    done = subprocess.run(
        # Not --quiet: it silences the warnings --strict counts, and a broken link passes.
        [sys.executable, "-m", "mkdocs", "build", "--strict",
         "--config-file", str(REPO / "mkdocs.yml"), "--site-dir", str(tmp_path / "site")],
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    assert "WARNING" not in done.stderr, done.stderr
    assert (tmp_path / "site" / "design" / "index.html").is_file()
    assert not (tmp_path / "site" / "incoming").exists()


def test_a_broken_link_fails_the_strict_build(tmp_path: Path) -> None:
    # The same configuration over a copy of docs/ with one link to a page that does not exist.
    import shutil

    docs = tmp_path / "docs"
    shutil.copytree(REPO / "docs", docs)
    (docs / "index.md").write_text((docs / "index.md").read_text() + "\n[gone](no-such-page.md)\n")
    config = tmp_path / "mkdocs.yml"
    config.write_text((REPO / "mkdocs.yml").read_text())
    done = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--config-file", str(config),
         "--site-dir", str(tmp_path / "site")],
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )  # fmt: skip
    assert done.returncode != 0
    assert "no-such-page.md" in done.stderr


WORDS = ("zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten")
NUMBERS = {word: n for n, word in enumerate(WORDS)}
# Every page a newcomer reads that may count or list the starters.
COUNTED = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md")), REPO / "scripts/demo.py"]


def test_the_starters_counted_and_listed_in_the_docs_are_the_ones_that_ship() -> None:
    # The README counted five when six shipped (repo-digest was added after it was written).
    starters = {p.stem for p in (REPO / "routines/starters").glob("*.toml")}
    wrong = []
    for page in COUNTED:
        text = " ".join(page.read_text().split())  # a count may be split over two lines
        for word in re.findall(r"\b(\w+) starter(?:s| routines)\b", text, re.I):
            if word.lower() in NUMBERS and NUMBERS[word.lower()] != len(starters):
                wrong.append(f"{page.name}: {word} starters, but {len(starters)} ship")
        # A list of them: "starters: `a`, `b`" or "starters ship with the program (`a`, `b`)".
        for listed in re.findall(r"[Ss]tarters(?::| ship with the program \() ((?:`[a-z-]+`,? ?)+)",
                                 text):  # fmt: skip
            names = set(re.findall(r"`([a-z-]+)`", listed))
            if names != starters:
                wrong.append(f"{page.name}: lists {sorted(names)}, ships {sorted(starters)}")
    assert not wrong, "\n".join(wrong)
