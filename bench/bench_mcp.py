"""The first MCP call of a run, to its result: mcp-server-time started in the routine's
sandbox (bwrap, seccomp, limits, its venv bound read-only) and spoken to through the SDK's
ClientSession over our pipes (worker/mcpclient.py), against the same call from a bare SDK
client (`stdio_client`, no sandbox), medians in the same run. Both include starting the
server, initialize and one tools/call of get_current_time.

Target: <= 1.5x the bare client, plus the sandbox's own cost (a sandboxed `true` minus a
bare `bash -c true`, measured here too).
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench.common import Row, median_seconds

TARGET_RATIO = 1.5


def run(quick: bool) -> list[Row]:
    import anyio
    from mcp.client.session import ClientSession
    from mcp.client.stdio import StdioServerParameters, stdio_client

    import sandbox
    from routines.mcpinstall import resolve_install
    from routines.spec.never import never_paths
    from sandbox.stdio import start_stdio
    from worker.mcpclient import Portal, Session

    refusal = sandbox.refuse_if_root()
    if refusal is not None:
        raise RuntimeError(refusal)
    server = str(Path(sys.executable).parent / "mcp-server-time")
    if not os.access(server, os.X_OK):
        raise RuntimeError(f"{server} is missing: pip install -e '.[test]'")
    repeat = 3 if quick else 10
    argv = [server, "--local-timezone", "UTC"]
    with tempfile.TemporaryDirectory(prefix="vinos-bench-") as tmp:
        home = Path(tmp) / "home"
        workspace = home / ".vinos/routines/workspace/bench"
        scratch = home / ".vinos/routines/scratch/bench/run"
        for d in (workspace, scratch):
            d.mkdir(parents=True)
        real = os.path.realpath(home)
        policy = sandbox.routine_policy(
            home=home,
            workspace=workspace,
            scratch_dir=scratch,
            network=False,
            never=never_paths(real, real + "/.vinos"),
        )
        install = resolve_install(argv, home=real, path_env=dict(policy.env)["PATH"])
        import dataclasses

        policy = dataclasses.replace(policy, ro_binds=install.binds)
        portal = Portal()

        def sandboxed() -> float:
            t0 = time.perf_counter()
            session = Session(portal, start_stdio(list(install.argv), policy), 30.0)
            try:
                result = session.call_tool("get_current_time", {"timezone": "UTC"}, 30.0)
                took = time.perf_counter() - t0  # to the result; the shutdown is not counted
                if result.is_error:
                    raise RuntimeError(f"sandboxed call failed: {result.content}")
            finally:
                session.close()
            return took

        async def bare_call() -> float:
            t0 = time.perf_counter()
            params = StdioServerParameters(command=argv[0], args=argv[1:])
            async with stdio_client(params) as (read, write), ClientSession(read, write) as s:
                await s.initialize()
                result = await s.call_tool("get_current_time", {"timezone": "UTC"})
                took = time.perf_counter() - t0
                if result.is_error:
                    raise RuntimeError(f"bare call failed: {result.content}")
            return took

        def bare() -> float:
            return anyio.run(bare_call)

        def box_true() -> None:
            sandbox.run_shell("true", policy, timeout_sec=30)

        def bash_true() -> None:
            subprocess.run(["bash", "-c", "true"], check=True, capture_output=True)

        try:
            sandboxed()  # warm up: the probe, the seccomp compile, the page cache
            bare()
            boxed, bared = [], []
            for _ in range(repeat):  # interleaved, so drift on a shared machine hits both
                boxed.append(sandboxed())
                bared.append(bare())
            cost = median_seconds(box_true, 10) - median_seconds(bash_true, 10)
        finally:
            portal.close()
    box_ms, bare_ms = statistics.median(boxed) * 1000, statistics.median(bared) * 1000
    cost_ms = cost * 1000
    allowed = TARGET_RATIO * bare_ms + cost_ms
    return [
        Row(
            name=f"first MCP call to result, sandboxed mcp-server-time (median of {repeat})",
            value=box_ms,
            unit="ms",
            baseline=f"bare SDK client: {bare_ms:.0f} ms",
            ratio=box_ms / bare_ms if bare_ms else None,
            target=f"<= {TARGET_RATIO}x + sandbox cost ({cost_ms:.1f} ms) = {allowed:.0f} ms",
            met=box_ms <= allowed,
        )
    ]
