"""A stand-in run for tests/supervisor/test_forkserver.py: builds one call's overlays over a
folder of its own, as a run's first shell call or command does, writes a file through them,
and prints, as one JSON object, which maker built them and what landed."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile

from sandbox import overlay


def main() -> None:
    folder = tempfile.mkdtemp(prefix="vinos-overlayworker-")
    fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    built = overlay.Overlays([(folder, fd)], 1)
    try:
        built.build()
        # The maker's Popen: this process's own, or the copy a fork has of its forkserver's
        # (SO_PEERCRED on a socketpair names the process that made the pair, not the maker).
        maker = overlay._maker.proc
        assert maker is not None
        inner = f"echo written > {built.shown()[folder]}/f"
        wrote = subprocess.run(built.argv(["/bin/sh", "-c", inner]), check=False, env={})
        state = {
            "maker": maker.pid,
            "own_maker": overlay._maker.pid == os.getpid(),
            "wrote": wrote.returncode,
            "landed": os.path.exists(os.path.join(folder, "f")),  # not before the copy back
        }
    finally:
        built.close()
        os.close(fd)
        os.rmdir(folder)
    print(json.dumps(state))
    sys.stdout.flush()


main()
