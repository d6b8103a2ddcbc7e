import sys

from supervisor.thinclient import main

sys.exit(main())
