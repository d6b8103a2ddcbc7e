"""Claude Code's CLI as a benchmark's peer: `claude -p --bare`, installed with npm into a temp
prefix once per bench run (never by `make test`), at the version pinned here, so a figure
always names the CLI it was measured against.

The package's postinstall puts a native binary (a single-file executable, no Node.js process
of its own) in place of `bin/claude.exe`; its `engines` field asks for Node 22, which npm only
warns about, since the binary does not run under Node. `claude --version` must then print the
pinned version, or the CLI counts as not installed.

Aimed at a fake Anthropic server with ANTHROPIC_BASE_URL and a dummy ANTHROPIC_API_KEY,
`claude -p --bare "hi"` makes exactly one request there (POST /v1/messages, streamed). Without
`ENV` below it also preconnects with HEAD /api/hello and resolves api.anthropic.com for its
telemetry (seen with `strace -f -e trace=connect,sendmmsg` on 2.1.332); with `ENV` its only
connection is to the base URL. Its HOME is a temp dir, so the user's ~/.claude is never read
or written.
"""

from __future__ import annotations

import atexit
import functools
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

__all__ = ["ENV", "VERSION", "install"]

VERSION = "2.1.332"
PACKAGE = f"@anthropic-ai/claude-code@{VERSION}"
# Claude Code's documented switches for an offline run: no telemetry, error reports, update
# checks or other nonessential traffic (the preconnect included).
ENV = {
    "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
    "DISABLE_TELEMETRY": "1",
    "DISABLE_ERROR_REPORTING": "1",
    "DISABLE_AUTOUPDATER": "1",
}


def _last_line(text: str) -> str:
    lines = [line for line in text.strip().splitlines() if line.strip()]
    return lines[-1].strip() if lines else "no output"


@functools.cache
def install() -> Path | str:
    """The installed `claude` binary, or why there is none (for a "not measured" row)."""
    npm = shutil.which("npm")
    if npm is None:
        return "npm is not on PATH"
    prefix = Path(tempfile.mkdtemp(prefix="vinos-bench-claude-"))
    atexit.register(shutil.rmtree, prefix, True)
    cmd = [npm, "install", "--prefix", str(prefix), "--no-audit", "--no-fund", PACKAGE]
    # Node trusts the system's CA store too (--use-openssl-ca): under `make bench`'s bare
    # environment, behind a TLS-inspecting proxy whose CA only the system store holds, npm's
    # install otherwise retried each package on SELF_SIGNED_CERT_IN_CHAIN for minutes.
    node_options = f"{os.environ.get('NODE_OPTIONS', '')} --use-openssl-ca".strip()
    env = {**os.environ, "NODE_OPTIONS": node_options}
    try:
        subprocess.run(cmd, capture_output=True, text=True, timeout=300, check=True, env=env)
        claude = prefix / "node_modules" / ".bin" / "claude"
        got = subprocess.run(
            [str(claude), "--version"], capture_output=True, text=True, timeout=60, check=True
        )
    except subprocess.CalledProcessError as e:
        return f"`{' '.join(e.cmd[:2])}` exited {e.returncode}: {_last_line(e.stderr)}"
    except (OSError, subprocess.TimeoutExpired) as e:
        return f"{PACKAGE}: {type(e).__name__}: {e}"
    if not got.stdout.startswith(VERSION):
        return f"`claude --version` says {_last_line(got.stdout)!r}, not {VERSION}"
    return claude
