"""`python -m worker`: one run. See worker.main (`leave`: no interpreter teardown)."""

from worker.main import leave, main

leave(main())
