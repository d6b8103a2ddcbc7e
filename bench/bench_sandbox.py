"""Per-call cost of the sandbox: `run_shell("true")` (bwrap, seccomp, limits, capped reads)
against a bare `bash -c true` started the same way, medians in the same run.

Target: under 15 ms added per call. With `network = true` the call also starts the holder
namespace, its forwarder and the egress proxy: that cost is reported separately, as the network-on
median minus the network-off one (target: under 60 ms).
"""

from __future__ import annotations

import dataclasses
import os
import subprocess
import tempfile
from pathlib import Path

from bench.common import Row, median_seconds

TARGET_ADDED_MS = 15.0
TARGET_NETWORK_MS = 60.0


def run(quick: bool) -> list[Row]:
    import sandbox

    refusal = sandbox.refuse_if_root()
    if refusal is not None:
        raise RuntimeError(refusal)
    check = sandbox.probe()
    if not check.ok:
        raise RuntimeError(f"cannot sandbox here: {check.reason} (fix: {check.fix})")
    repeat = 20 if quick else 200
    with tempfile.TemporaryDirectory(prefix="vinos-bench-") as tmp:
        from routines.never import never_paths

        home = Path(tmp) / "home"
        workspace = home / ".vinos/routines/workspace/bench"
        scratch = home / ".vinos/routines/scratch/bench/run"
        for d in (workspace, scratch, home / ".config/gh", home / "notes"):
            d.mkdir(parents=True)
        real = os.path.realpath(home)
        # What a starter declares: two home paths, the never-list, workspace and scratch.
        policy = sandbox.routine_policy(
            home=home,
            workspace=workspace,
            scratch_dir=scratch,
            network=False,
            declared=("~/.config/gh", "~/notes"),
            never=never_paths(real, real + "/.vinos"),
        )
        networked = dataclasses.replace(policy, network=True)

        def sandboxed() -> None:
            r = sandbox.run_shell("true", policy, timeout_sec=30)
            if r.exit_code != 0:
                raise RuntimeError(f"sandboxed true failed: {r.error or r.stderr}")

        def with_network() -> None:
            r = sandbox.run_shell("true", networked, timeout_sec=30)
            if r.exit_code != 0:
                raise RuntimeError(f"sandboxed true with network failed: {r.error or r.stderr}")

        def bare() -> None:
            subprocess.run(
                ["bash", "-c", "true"],
                stdin=subprocess.DEVNULL,
                capture_output=True,
                check=True,
                env={"PATH": os.environ.get("PATH", "/usr/bin:/bin")},
            )

        sandboxed()  # warm up: the probe and the seccomp compile happen once per process
        bare()
        # Interleaved halves, so drift on a shared machine hits both alike.
        half = repeat // 2
        s1, b1 = median_seconds(sandboxed, half), median_seconds(bare, half)
        b2, s2 = median_seconds(bare, half), median_seconds(sandboxed, half)
        with_network()
        n1, o1 = median_seconds(with_network, half), median_seconds(sandboxed, half)
        o2, n2 = median_seconds(sandboxed, half), median_seconds(with_network, half)
    net_ms = (n1 + n2) / 2 * 1000
    off_ms = (o1 + o2) / 2 * 1000
    net_added = net_ms - off_ms
    box_ms = (s1 + s2) / 2 * 1000
    bare_ms = (b1 + b2) / 2 * 1000
    added = box_ms - bare_ms
    return [
        Row(
            name=f"sandboxed `true` per call (median of {repeat})",
            value=box_ms,
            unit="ms",
            baseline=f"bash -c true: {bare_ms:.2f} ms",
            ratio=box_ms / bare_ms if bare_ms else None,
            target=f"< {TARGET_ADDED_MS:g} ms added",
            met=added < TARGET_ADDED_MS,
        ),
        Row(
            name="added by the sandbox per call",
            value=added,
            unit="ms",
            baseline=f"bash -c true: {bare_ms:.2f} ms",
            target=f"< {TARGET_ADDED_MS:g} ms",
            met=added < TARGET_ADDED_MS,
        ),
        Row(
            name="added by network = true per call (holder netns + egress proxy)",
            value=net_added,
            unit="ms",
            baseline=f"network off: {off_ms:.2f} ms",
            target=f"< {TARGET_NETWORK_MS:g} ms",
            met=net_added < TARGET_NETWORK_MS,
        ),
    ]
