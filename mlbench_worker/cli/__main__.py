"""`python -m mlbench_worker.cli`: the `mlbench` command without its console script."""

import sys

from mlbench_worker.cli import main

sys.exit(main())
