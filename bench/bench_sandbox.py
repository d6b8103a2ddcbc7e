"""Per-call cost of the sandbox: `run_shell("true")` (bwrap, seccomp, limits, capped reads)
against a bare `bash -c true` started the same way, medians in the same run.

Target: under 15 ms added per call. With `network = true` the call also starts the holder
namespace and the egress proxy's process: that cost is reported separately, as the network-on
median minus the network-off one (target: under 60 ms). The proxy's process starts only once
the sandbox's first connection is pending, so `true` starts none; what a first request waits
for it (start to its first answer) is its own row.

The workspace quota kept by the kernel (sandbox/overlay.py: an overlay holder, a tmpfs, the
copy back) is measured against the plain bind mount with the poll, in the same run, for `true`
and for a call writing 1 MB (target: under 25 ms added).
"""

from __future__ import annotations

import dataclasses
import os
import socket
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

from bench.common import Row, median_seconds

if TYPE_CHECKING:
    from sandbox import ShellPolicy

TARGET_ADDED_MS = 15.0
TARGET_NETWORK_MS = 60.0
TARGET_OVERLAY_MS = 25.0


def run(quick: bool) -> list[Row]:
    import sandbox
    from sandbox.egress import EgressPolicy
    from sandbox.netns import ProxyProcess

    refusal = sandbox.refuse_if_root()
    if refusal is not None:
        raise RuntimeError(refusal)
    check = sandbox.probe()
    if not check.ok:
        raise RuntimeError(f"cannot sandbox here: {check.reason} (fix: {check.fix})")
    repeat = 20 if quick else 200
    with tempfile.TemporaryDirectory(prefix="vinos-bench-") as tmp:
        from routines.spec.never import never_paths

        home = Path(tmp) / "home"
        workspace = home / ".vinos/routines/workspace/bench"
        scratch = home / ".vinos/routines/scratch/bench/run"
        for d in (workspace, scratch, home / ".config/gh", home / "notes"):
            d.mkdir(parents=True)
        real = os.path.realpath(home)
        # What a starter declares: a home path and a credential, the never-list, workspace
        # and scratch.
        policy = sandbox.routine_policy(
            home=home,
            workspace=workspace,
            scratch_dir=scratch,
            network=False,
            declared=("~/notes",),
            never=never_paths(real, real + "/.vinos"),
            credentials=("~/.config/gh",),
            never_names=("credentials*", "*token*", "*.pem"),
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

        def proxy_alone() -> None:
            proxy = ProxyProcess(EgressPolicy(None))
            proxy.start()
            proxy.close()

        def proxy_first_answer() -> None:
            # As the holder does: hand the proxy a listener, then ask it for a loopback
            # address, which it refuses (403) without connecting anywhere.
            proxy = ProxyProcess(EgressPolicy(None))
            channel = socket.socket(fileno=os.dup(proxy.start()))
            with socket.create_server(("127.0.0.1", 0)) as listener, channel:
                socket.send_fds(channel, [b"L"], [listener.fileno()])
                proxy.handed_over()
                with socket.create_connection(listener.getsockname(), timeout=30) as c:
                    c.sendall(b"CONNECT 127.0.0.1:443 HTTP/1.1\r\n\r\n")
                    if not c.recv(100).startswith(b"HTTP/1.1 403"):
                        raise RuntimeError("the egress proxy did not refuse loopback")
            proxy.close()

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
        p1 = median_seconds(proxy_alone, half)
        p2 = median_seconds(proxy_first_answer, half)
        overlay = _overlay_rows(policy, workspace, half)
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
        Row(
            name="egress proxy of a call that opens no connection (no process started)",
            value=p1 * 1000,
            unit="ms",
            baseline=f"network on: {net_ms:.2f} ms per call",
        ),
        Row(
            name="egress proxy process: start to its first answer (a first request waits)",
            value=p2 * 1000,
            unit="ms",
            baseline=f"network on: {net_ms:.2f} ms per call",
        ),
        *overlay,
    ]


def _overlay_rows(policy: ShellPolicy, workspace: Path, half: int) -> list[Row]:
    """The workspace quota kept by the kernel (overlays on a tmpfs, copied back) against the
    plain bind mount kept by the poll, in the same run: `true`, and a call writing 1 MB."""
    import sandbox
    from sandbox import overlay

    reason = overlay.overlay_unavailable()
    if reason is not None:
        return []  # the kernel cannot: every call is the plain bind, nothing to compare

    def call(command: str) -> None:
        r = sandbox.run_shell(command, policy, timeout_sec=30)
        if r.exit_code != 0 or r.error is not None:
            raise RuntimeError(f"sandboxed {command!r} failed: {r.error or r.stderr}")

    def plain(command: str) -> float:
        # The probe's cached answer, as on a kernel without user xattrs on tmpfs: the runner
        # binds the dirs and polls. Set only here, for the measurement, then given back.
        overlay._available[sys.executable] = "bench: the plain bind mount"
        try:
            return median_seconds(lambda: call(command), half)
        finally:
            overlay._available[sys.executable] = None

    def overlaid(command: str) -> float:
        return median_seconds(lambda: call(command), half)

    write = f"head -c 1M /dev/zero > {workspace}/f"
    rows = []
    for what, command in (("`true`", "true"), ("writing 1 MB", write)):
        o1, p1 = overlaid(command), plain(command)
        p2, o2 = plain(command), overlaid(command)
        over_ms, plain_ms = (o1 + o2) / 2 * 1000, (p1 + p2) / 2 * 1000
        rows.append(
            Row(
                name=f"added by the quota overlay per call, {what} (tmpfs + copy back)",
                value=over_ms - plain_ms,
                unit="ms",
                baseline=f"plain bind: {plain_ms:.2f} ms",
                ratio=over_ms / plain_ms if plain_ms else None,
                target=f"< {TARGET_OVERLAY_MS:g} ms",
                met=over_ms - plain_ms < TARGET_OVERLAY_MS,
            )
        )
    return rows
