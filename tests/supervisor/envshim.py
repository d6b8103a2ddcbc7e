"""A stand-in for `python -m worker` that records what the daemon handed it, then becomes the
real worker: `python envshim.py RECORD` appends {"env": ..., "fds": [...]} (one JSON line) to
RECORD and execs `python -P -m worker` with the same stdin, stdout and stderr."""

from __future__ import annotations

import json
import os
import sys

# Checked before anything here opens a file, so no descriptor of ours is counted.
fds = []
for fd in range(64):
    try:
        os.fstat(fd)
    except OSError:
        continue
    fds.append(fd)
with open(sys.argv[1], "a") as f:
    f.write(json.dumps({"env": dict(os.environ), "fds": fds}) + "\n")
os.execv(sys.executable, [sys.executable, "-P", "-m", "worker"])
