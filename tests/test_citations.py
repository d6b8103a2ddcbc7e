"""Every test a comment, docstring or page cites exists: a maintainer who follows a cited test file,
with or without a function's name after `::`, finds that file and that function. And nothing cites
what a cloner cannot read: the old upper-case design file, a tracker's numbered issues, or the
numbered spec files the project started from.

Scanned: every .py file's comments and docstrings, every shell script's and Makefile's
comments, every Markdown page whole, in the tree as cloned (no virtualenv, caches or build
output). A citation is a path under tests/ ending in .py, optionally with `::` and a name; a
test function's name on its own (or a prefix with `*`) must be defined somewhere under tests/.
"""

from __future__ import annotations

import ast
import io
import os
import re
import tokenize
from collections.abc import Iterator
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
SKIP_DIRS = {".git", ".venv", "build", "dist", "site", "node_modules", "__pycache__"}
SKIP_DIR_SUFFIXES = (".egg-info", "_cache")

# A test file's path, then maybe `::` and a name (a docstring may wrap after the `::`).
PATH_REF = re.compile(r"\b(tests/[\w/.-]*?\w\.py)(?:::\s*(?:#\s*)?(\w+))?")
# A test's name on its own: `test_` then a word, not part of a path or a longer identifier.
NAME_REF = re.compile(r"(?<![\w/.:-])(test_\w+)(?:(\*)(?:\.py)?|(?![\w/*]|\.py))")
FORBIDDEN = {
    "the upper-case design file": re.compile(r"\bDESIGN\.md\b"),
    "a numbered issue": re.compile(r"\bissues?\s+#?\d+", re.IGNORECASE),
    "a numbered seed file": re.compile(r"\bseed\s+0\d\d\b", re.IGNORECASE),
}


def _files(top: Path) -> Iterator[Path]:
    for root, dirs, names in os.walk(top):
        dirs[:] = sorted(
            d for d in dirs if d not in SKIP_DIRS and not d.endswith(SKIP_DIR_SUFFIXES)
        )
        for name in sorted(names):
            if name.endswith((".py", ".sh", ".md")) or name == "Makefile":
                yield Path(root) / name


def _python_prose(source: str) -> Iterator[tuple[int, str]]:
    """The comments (consecutive lines joined) and docstrings of a module, with their lines."""
    docs: set[int] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            first = node.body[0] if node.body else None
            if (
                isinstance(first, ast.Expr)
                and isinstance(first.value, ast.Constant)
                and isinstance(first.value.value, str)
            ):
                docs.add(first.lineno)
                yield first.lineno, first.value.value
    block: list[str] = []
    start = last = 0
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        if tok.type != tokenize.COMMENT:
            continue
        line = tok.start[0]
        if block and line != last + 1:
            yield start, "\n".join(block)
            block = []
        if not block:
            start = line
        block.append(tok.string.lstrip("#").strip())
        last = line
    if block:
        yield start, "\n".join(block)


def _shell_prose(text: str) -> Iterator[tuple[int, str]]:
    for number, line in enumerate(text.splitlines(), 1):
        if "#" in line:
            yield number, line[line.index("#") + 1 :]


def prose(path: Path) -> Iterator[tuple[int, str]]:
    """Where `path` talks to its reader: (line, text) pairs."""
    text = path.read_text(encoding="utf-8")
    if path.suffix == ".py":
        yield from _python_prose(text)
    elif path.suffix == ".md":
        yield 1, text
    else:
        yield from _shell_prose(text)


def _defined(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    return {
        n.name
        for n in ast.walk(tree)
        if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef)
    }


def _all_tests(root: Path) -> set[str]:
    names: set[str] = set()
    for path in (root / "tests").rglob("*.py"):
        names |= _defined(path)
        names.add(path.stem)
    return names


# Between a cited file and a test's name that belongs to it: a comma, a semicolon, "and", "or".
# A name cited so must be defined in that file; any other, somewhere under tests/.
NEXT_TO = re.compile(r"[\s,;]*(?:(?:and|or)\s+)?")


def _names_in_scope(
    root: Path, text: str, pos: int, cited: list[tuple[int, int, str]], known: set[str]
) -> tuple[set[str], str]:
    """The names a test's name at `pos` may be, and where (" in FILE", or "" for anywhere)."""
    before = [(end, path) for _, end, path in cited if end <= pos]
    if before:
        end, path = before[-1]
        if NEXT_TO.fullmatch(text, end, pos) and (root / path).is_file():
            return _defined(root / path), f" in {path}"
    return known, ""


def broken_citations(path: Path, root: Path, known: set[str]) -> Iterator[str]:
    """Each citation in `path` that does not resolve under `root`, as `file:line: what`."""
    rel = path.relative_to(root)
    for first, text in prose(path):

        def where(pos: int) -> str:
            return f"{rel}:{first + text.count(chr(10), 0, pos)}"  # noqa: B023 (called at once)

        cited: list[tuple[int, int, str]] = []
        for match in PATH_REF.finditer(text):
            cited.append((match.start(), match.end(), match.group(1)))
            file, name = match.group(1), match.group(2)
            if not (root / file).is_file():
                yield f"{where(match.start())}: {file} does not exist"
            elif name is not None and name not in _defined(root / file):
                yield f"{where(match.start())}: {file} defines no {name}"
        for match in NAME_REF.finditer(text):
            if any(s <= match.start() < e for s, e, _ in cited):
                continue
            name, glob = match.groups()
            scope, in_file = _names_in_scope(root, text, match.start(), cited, known)
            if glob and any(k.startswith(name) for k in scope):
                continue
            if name not in scope:
                yield f"{where(match.start())}: no test is named {name}{in_file}"
        for what, pattern in FORBIDDEN.items():
            for match in pattern.finditer(text):
                yield f"{where(match.start())}: cites {what} ({match.group(0)!r})"


def test_every_cited_test_exists_and_nothing_cites_what_a_cloner_cannot_read() -> None:
    known = _all_tests(REPO)
    files = list(_files(REPO))
    assert any(f.name == "Makefile" for f in files) and len(files) > 100
    broken = [b for f in files for b in broken_citations(f, REPO, known)]
    assert broken == [], "\n".join(broken)


def test_the_scan_catches_each_kind_of_broken_citation(tmp_path: Path) -> None:
    # The checker checked, on a tree of its own: one citation of each broken kind, two good ones.
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "test_real.py").write_text("def test_real() -> None:\n    pass\n")
    (tmp_path / "tests" / "test_other.py").write_text("def test_elsewhere() -> None:\n    pass\n")
    probe = tmp_path / "probe.py"
    probe.write_text(
        '"""Held by tests/test_real.py::test_real, and test_real."""\n'
        "# tests/nowhere/test_gone.py wrong folder\n"
        "# tests/test_real.py::test_never_written, and test_nor_this, but test_re*\n"
        "# (tests/test_real.py, test_real; tests/test_real.py, test_elsewhere)\n"
        "# as DESIGN.md says, see issue 17, from seed 003\n"
        "x = 'tests/not_prose.py'  # a string in code is not a citation\n"
    )
    found = list(broken_citations(probe, tmp_path, _all_tests(tmp_path)))
    assert found == [
        "probe.py:2: tests/nowhere/test_gone.py does not exist",
        "probe.py:3: tests/test_real.py defines no test_never_written",
        "probe.py:3: no test is named test_nor_this in tests/test_real.py",
        "probe.py:4: no test is named test_elsewhere in tests/test_real.py",
        "probe.py:5: cites the upper-case design file ('DESIGN.md')",
        "probe.py:5: cites a numbered issue ('issue 17')",
        "probe.py:5: cites a numbered seed file ('seed 003')",
    ]
