"""What of an MCP server's installation its sandbox is shown (routines/mcpinstall.py), on
real files: a venv (pipx), an npm prefix, a bin/ prefix (nvm), and what is refused."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from routines.mcpinstall import InstallProblem, resolve_install
from worker.mcptools import IMAGE_CAP, RESULT_CAP, render_result
from worker.providers.base import Image


def _script(path: Path, shebang: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"#!{shebang}\n")
    path.chmod(0o755)
    return path


def test_a_pipx_venv_is_bound_whole_and_the_link_on_path_followed(tmp_path: Path) -> None:
    home = tmp_path / "home"
    venv = home / ".local/share/pipx/venvs/mcp-server-time"
    (venv / "pyvenv.cfg").parent.mkdir(parents=True)
    (venv / "pyvenv.cfg").write_text("home = /usr/bin\n")
    real = _script(venv / "bin/mcp-server-time", f"{venv}/bin/python")
    os.symlink("/usr/bin/python3", venv / "bin/python")
    bindir = home / ".local/bin"
    bindir.mkdir(parents=True)
    os.symlink(real, bindir / "mcp-server-time")
    got = resolve_install(
        ["mcp-server-time", "--local-timezone", "~/x"], home=str(home), path_env=str(bindir)
    )
    assert got.argv == (str(real), "--local-timezone", f"{home}/x")
    assert got.binds == (str(venv),)  # not ~/.local/bin, not the rest of ~/.local


def test_an_npm_prefix_binds_its_node_modules_and_an_nvm_node(tmp_path: Path) -> None:
    home = tmp_path / "home"
    node = _script(home / ".nvm/versions/node/v20/bin/node", "/bin/false")
    (home / ".nvm/versions/node/v20/lib").mkdir()
    pkg = home / "mcp/node_modules/@modelcontextprotocol/server-filesystem/dist/index.js"
    _script(pkg, "/usr/bin/env node")
    link = home / "mcp/node_modules/.bin/mcp-server-filesystem"
    link.parent.mkdir(parents=True)
    os.symlink(pkg, link)
    got = resolve_install([str(link)], home=str(home), path_env=f"{node.parent}:/usr/bin")
    assert got.argv == (str(pkg),)
    assert got.binds == (str(home / "mcp/node_modules"), str(home / ".nvm/versions/node/v20"))


def test_a_system_program_needs_no_bind(tmp_path: Path) -> None:
    got = resolve_install(["true"], home=str(tmp_path), path_env="/usr/bin:/bin")
    assert got.binds == () and got.argv[0].startswith(("/usr/", "/bin/"))


def test_a_program_not_on_path_is_a_problem(tmp_path: Path) -> None:
    with pytest.raises(InstallProblem, match="'mcp-server-nope' was not found on PATH"):
        resolve_install(["mcp-server-nope"], home=str(tmp_path), path_env="/usr/bin")


def test_an_install_that_is_a_broad_folder_or_on_the_never_list_is_refused(
    tmp_path: Path,
) -> None:
    home = tmp_path / "home"
    _script(home / ".local/bin/loose-server", "/bin/sh")
    (home / ".local/lib").mkdir(parents=True)
    with pytest.raises(InstallProblem, match="too broad"):
        resolve_install(["loose-server"], home=str(home), path_env=str(home / ".local/bin"))
    hidden = _script(home / ".ssh/tools/server", "/bin/sh")
    with pytest.raises(InstallProblem, match="never-list"):
        resolve_install(
            [str(hidden)], home=str(home), path_env="/usr/bin", never=(str(home / ".ssh"),)
        )


class _Block:
    def __init__(self, **kw: object) -> None:
        self.__dict__.update(kw)


def test_results_are_text_capped_and_other_content_described() -> None:
    image = _Block(type="image", data="A" * 4000, mime_type="image/png")
    bmp = _Block(type="image", data="B" * 40, mime_type="image/bmp")
    got = render_result([_Block(type="text", text="hello"), image, bmp], None, False)
    assert got.text == "hello" and not got.truncated
    # A PNG is kept for the routes that take images, and described for the others.
    assert got.images == (Image("image/png", "A" * 4000),)
    assert got.described == (
        "image (image/png, about 3,000 bytes), attached where the model takes images",
    )
    assert got.omitted == ("image (image/bmp, about 30 bytes)",)
    # Past IMAGE_CAP of base64 in one result, the rest is only described.
    half = _Block(type="image", data="C" * (IMAGE_CAP // 2 + 1), mime_type="image/jpeg")
    two = render_result([half, half], None, False)
    assert len(two.images) == 1 and len(two.omitted) == 1
    big = render_result([_Block(type="text", text="é" * RESULT_CAP)], None, True)
    assert big.truncated and len(big.text.encode()) <= RESULT_CAP and big.is_error
    structured = render_result([], {"n": 1}, False)
    assert structured.text == '{"n": 1}'
