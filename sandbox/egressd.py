"""Starts the egress proxy process: `python -I -S egressd.py CHANNEL_FD POLICY...`.

Run as a script, never imported. It loads this package's stdlib-only proxy modules
(egressserver, egress, tlshello) without running the package's __init__, which would import
the runner, seccomp and the read tool the proxy has no use for: a stand-in package object
whose path is this directory. -I -S: no PYTHON* variables, no user site, no script directory
on sys.path, no site-packages.
"""

import os
import sys
import types

if __name__ == "__main__":
    package = types.ModuleType("sandbox")
    package.__path__ = [os.path.dirname(os.path.realpath(__file__))]
    sys.modules["sandbox"] = package
    from sandbox.egressserver import main

    main(sys.argv[1:])
