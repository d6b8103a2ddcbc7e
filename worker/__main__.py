"""`python -m worker`: one run. See worker.main."""

import sys

from worker.main import main

sys.exit(main())
