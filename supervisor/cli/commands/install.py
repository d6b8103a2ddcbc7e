"""`vinos-routine install SLUG|URL|PATH`: add a routine from the gallery, a URL or a file.

It is fetched (https only; 64 KB at most), validated, shown with everything it will be able
to do, and installed disabled into ~/.vinos/routines/NAME.toml; `--enable` turns it on.
A name that exists already is refused unless `--force`.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from supervisor.cli.argtypes import seconds
from supervisor.cli.commands.common import add_parser, die

if TYPE_CHECKING:
    from routines.spec import Routine
    from routines.spec.paths import Paths

__all__ = ["Source", "register", "resolve"]

DEFAULT_TIMEOUT = 20.0


def register(sub: Any) -> None:
    p = add_parser(
        sub,
        "install",
        "install a routine from the gallery, a URL or a file (disabled until you enable it)",
        "  vinos-routine install founder-morning          # from the gallery\n"
        "  vinos-routine install https://example.org/routines/standup.toml --enable\n"
        "  vinos-routine install ./standup.toml --force   # replace an installed one\n",
    )
    p.add_argument("source", metavar="SLUG|URL|PATH", help="gallery name, https URL or file")
    p.add_argument("--enable", action="store_true", help="turn it on once installed")
    p.add_argument("--force", action="store_true", help="replace a routine of the same name")
    p.add_argument(
        "--yes",
        "-y",
        action="store_true",
        help="install a routine that reads files and reaches the network without asking",
    )
    p.add_argument(
        "--timeout",
        type=seconds(0, 3600),
        default=DEFAULT_TIMEOUT,
        metavar="SEC",
        help=f"give up fetching after SEC seconds (default {DEFAULT_TIMEOUT:g})",
    )
    p.set_defaults(func=run)


@dataclass(frozen=True, slots=True)
class Source:
    url: str | None  # fetch this, or
    path: Path | None  # read this
    name: str  # the name the source suggests (the file's own [routine].name wins)

    @property
    def where(self) -> str:
        return self.url or str(self.path)


def resolve(source: str, gallery_url: str) -> Source:
    """What SOURCE means: a URL, a file, or a gallery slug (gallery_url + slug + ".toml")."""
    import urllib.parse

    from routines.spec import NAME_RE

    if "://" in source:
        last = urllib.parse.urlsplit(source).path.rstrip("/").rsplit("/", 1)[-1]
        return Source(source, None, last.removesuffix(".toml"))
    path = Path(source).expanduser()
    try:
        exists = path.exists()
    except OSError:  # a name too long for a file: no file, so no path either
        exists = False
    if exists or "/" in source or source.endswith(".toml"):
        return Source(None, path, path.name.removesuffix(".toml"))
    if NAME_RE.fullmatch(source):
        base = gallery_url if gallery_url.endswith("/") else gallery_url + "/"
        return Source(base + source + ".toml", None, source)
    from routines.safetext import shortened

    raise ValueError(
        f"{shortened(source)!r} is not a gallery name (lowercase letters, digits, '-'), an "
        "https:// URL or an existing file"
    )


def _read_file(path: Path) -> bytes:
    from supervisor.cli.commands.fetch import MAX_BYTES, FetchError

    try:
        with path.open("rb") as f:
            data = f.read(MAX_BYTES + 1)
    except OSError as exc:
        raise FetchError(f"cannot read {path}: {exc.strerror}") from None
    if len(data) > MAX_BYTES:
        raise FetchError(f"{path}: over the {MAX_BYTES // 1024} KB a routine file may have")
    return data


def _bundled_starter(slug: str) -> tuple[Source, bytes] | None:
    """The starter routine of that name shipped in routines/starters/, if there is one."""
    from importlib.resources import files

    entry = files("routines.starters").joinpath(f"{slug}.toml")
    if not entry.is_file():
        return None
    return Source(None, Path(str(entry)), slug), entry.read_bytes()


def _declared_name(text: str) -> str | None:
    import tomllib

    try:
        doc = tomllib.loads(text)
    except tomllib.TOMLDecodeError:
        return None
    table = doc.get("routine")
    name = table.get("name") if isinstance(table, dict) else None
    return name if isinstance(name, str) else None


def run(args: argparse.Namespace) -> int:
    from routines.spec import NAME_RE
    from routines.spec.checks import RoutineInvalid
    from routines.spec.config import ConfigInvalid, load_config
    from routines.spec.paths import paths
    from supervisor.cli.commands.fetch import FetchError, fetch

    p = paths()
    try:
        config = load_config(p.config_file)
    except ConfigInvalid as exc:
        return die(f"config.toml is invalid:\n{exc}")
    try:
        source = resolve(args.source, config.gallery_url)
    except ValueError as exc:
        return die(str(exc), 2)
    try:
        if source.url is not None:
            data = fetch(source.url, args.timeout)
        else:
            assert source.path is not None
            data = _read_file(source.path)
    except FetchError as exc:
        bundled = _bundled_starter(args.source) if source.url and "://" not in args.source else None
        if bundled is None:
            return die(str(exc))
        # Offline (or the gallery lacks it): the starter that ships with the program, said so.
        print(f"vinos-routine: {exc}; installing the bundled starter {args.source} instead",
              file=sys.stderr)  # fmt: skip
        source, data = bundled
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return die(f"{source.where}: not a routine file (not UTF-8 text)")
    name = _declared_name(text) or source.name
    if not NAME_RE.fullmatch(name):
        return die(
            f"{source.where}: cannot tell the routine's name ({name!r} is not one); "
            'the file should set [routine].name = "some-name"'
        )
    target = p.routines_dir / f"{name}.toml"
    from routines.spec.loader import load_text

    try:
        routine = load_text(text, target)
    except RoutineInvalid as exc:
        from supervisor.cli.present import visible

        print(f"vinos-routine: {visible(source.where)} is not a valid routine:", file=sys.stderr)
        for problem in exc.errors:
            print(f"  {visible(str(problem))}", file=sys.stderr)
        return 1
    _show(routine, source, data)
    refusal = _collision(p, name, target, args.force)
    if refusal:
        return die(refusal)
    if not args.yes and (code := _consent(routine)) is not None:
        return code
    return _install(p, routine, target, data, args.enable)


def _consent(routine: Routine) -> int | None:
    """None to go on; an exit code when a routine that reads and reaches the network was not
    agreed to (asked on a terminal; without one, --yes is the only way)."""
    from supervisor.cli.commands.capabilities import needs_consent, reach_text
    from supervisor.cli.present import ask_yes, interactive

    if not needs_consent(routine):
        return None
    # A credential is a read too (its file is bound into the sandbox), so the words name both.
    what = "reads your files or credentials" if routine.credentials else "reads your files"
    what = f"{what} and {reach_text(routine)}"  # a webhook output reaches the network too
    question = f"{routine.name} {what} (above). Install it?"
    if not interactive():
        return die(
            f"{routine.name} {what}: read what it may do "
            "(above), then install it from a terminal, or add --yes",
            2,
        )
    if ask_yes(question, default=False):
        return None
    print(f"{routine.name} was not installed")
    return 1


def _collision(p: Paths, name: str, target: Path, force: bool) -> str | None:
    from routines.spec.registry import scan

    if force:
        return None
    if target.exists():
        return f"{name} is installed already ({target}); to replace it: add --force"
    entry = scan(p).get(name)
    if entry is not None:
        return (
            f"a system routine named {name} exists ({entry.path}); installing would override "
            "it: add --force to do that"
        )
    return None


def _show(routine: Routine, source: Source, data: bytes) -> None:
    from supervisor.cli.commands.capabilities import capabilities, on_this_host
    from supervisor.cli.present import color, use_color, visible

    c = use_color()
    # Everything shown comes from a file someone else wrote: escape sequences in it must show,
    # not act (a cursor movement could hide a tool from the list being reviewed).
    title = routine.name + (f" — {visible(routine.description)}" if routine.description else "")
    print(color(title, "bold", c))
    import hashlib

    digest = hashlib.sha256(data).hexdigest()
    rows = [("from", visible(source.where)), ("sha256", digest)]
    for line in capabilities(routine, on_this_host(routine)):
        text = visible(line.text)
        rows.append((line.label, color(text, "yellow", c) if line.caution else text))
    width = max(len(label) for label, _ in rows)
    for label, text in rows:
        print(f"  {label:<{width}}  {text}")
    for warning in routine.warnings:
        print(color(f"  {visible(warning)}", "yellow", c))


def _install(p: Paths, routine: Routine, target: Path, data: bytes, enable: bool) -> int:
    from routines.store import write_atomic
    from supervisor.cli.commands.authoring import ensure_disabled, reload_daemon

    ensure_disabled(p, routine)
    try:
        # Never a signature carried over: not from the gallery (only the .toml is fetched),
        # nor one left beside a file this replaces. The person signs after reading.
        _drop_signature(target)
        write_atomic(target, data, mode=0o600)
    except OSError as exc:
        return die(f"cannot write {target}: {exc.strerror or exc}")
    print(f"installed {routine.name}: {target}")
    if enable:
        from supervisor.cli.commands import enable as enable_cmd

        # The card is on the screen already, just above.
        return enable_cmd.run(argparse.Namespace(name=routine.name, on=True, card=False))
    print(f"  it is off; try it: vinos-routine run {routine.name}")
    print(f"  turn it on:        vinos-routine enable {routine.name}")
    print(f"  {reload_daemon(p)}")
    return 0


def _drop_signature(target: Path) -> None:
    import contextlib

    from routines.signing import signature_path

    sig = signature_path(target)
    with contextlib.suppress(FileNotFoundError):
        sig.unlink()  # unlink removes a link itself, never what it points at
        print(f"removed the old signature {sig}: sign the new file after reading it")
