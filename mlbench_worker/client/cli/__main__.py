"""`python -m mlbench_worker.client.cli`: the `mlbench` command without its console script."""

import sys

from mlbench_worker.client.cli import main

sys.exit(main())
