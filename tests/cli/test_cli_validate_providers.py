"""`vinos-routine validate` with providers from config.toml: a route on an undeclared provider,
an unpriced paid leg under a budget, and a bad [providers.NAME] table, through the CLI's entry
point (in-process, inprocess.py)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from routines.spec.paths import paths
from tests.cli.inprocess import run_in_process
from tests.helpers import AGENT, write

REPO = Path(__file__).resolve().parents[2]
CONFIG = """
[providers.lmstudio]
kind = "openai"
base_url = "http://127.0.0.1:1234/v1"
local = true

[providers.openrouter]
kind = "openai"
base_url = "https://openrouter.ai/api/v1"
key_file = "~/.vinos/secrets/openrouter-key"
"""


def validate(*args: str) -> subprocess.CompletedProcess[str]:
    # The CLI's entry point in this process (inprocess.py), as `python -m supervisor` runs it.
    return run_in_process(["validate", *args], env=os.environ.copy(), cwd=str(REPO))


def test_routes_are_checked_against_config(vinos_env: Path) -> None:
    p = paths()
    p.config_file.write_text(CONFIG)
    ok = write(
        p.routines_dir,
        "local-brief",
        AGENT.replace("[agent]\n", '[agent]\nroute = "lmstudio"\nmodel = "qwen"\n'),
    )
    typo = write(
        p.routines_dir,
        "typo",
        AGENT.replace("[agent]\n", '[agent]\nroute = "lmstduio"\nmodel = "qwen"\n'),
    )
    unpriced = write(
        p.routines_dir,
        "paid",
        AGENT.replace("[agent]\n", '[agent]\nroute = "openrouter"\nmodel = "openai/gpt-5"\n'),
    )
    done = validate(str(ok), str(typo), str(unpriced))
    assert done.returncode == 1
    lines = done.stdout.splitlines()
    assert f"{ok}: OK" in lines
    assert any(
        line.startswith(f"{typo}: [agent].route: expected one of")
        and '"lmstudio" | "openrouter"' in line
        and "(did you mean lmstudio?)" in line
        for line in lines
    ), lines
    assert any(
        line.startswith(
            f'{unpriced}: [agent].model: no price known for model "openai/gpt-5" '
            'on provider "openrouter"'
        )
        for line in lines
    ), lines


def test_a_bad_provider_table_fails_config_validation(vinos_env: Path) -> None:
    cfg = paths().config_file
    cfg.write_text(
        '[providers.lmstudio]\nkind = "openai"\nbase_url = "http://h/v1"\napi_key = "sk-x"\n'
    )
    done = validate(str(cfg))
    assert done.returncode == 1
    assert (
        "config.toml: [providers.lmstudio].api_key: a key never goes in config.toml" in done.stdout
    )
    assert "sk-x" not in done.stdout
