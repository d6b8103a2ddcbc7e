"""`python -m supervisor.cli`: the full command line, in-process (no thin client)."""

import sys

from supervisor.cli.main import main

sys.exit(main())
