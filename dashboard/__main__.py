import sys

from dashboard.server import main

sys.exit(main())
