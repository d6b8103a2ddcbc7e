import sys

from supervisor.cli.thinclient import main

sys.exit(main())
