"""The backend benchmark task (`backend-benchmark`): collective latency and bandwidth.

It measures the platform rather than training on it: all-reduce and broadcast of messages
from 1 KiB to 64 MiB on every backend the ranks have (mpi through mpi4py and gloo on CPU,
nccl on GPUs), repeated, summarised (best, median) and posted as metric points, so runs on
different networks (e.g. links shaped to 100 and 1,000 Mbit/s) can be compared curve by
curve. Modules: `options` (the command line, torch-free), `sizes` (the message sizes),
`stats` (bandwidth formulas and summary statistics), `collectives` (one object per
backend), `sweep` (the timed loop), `records` (metric points, summary, table), `main`.
"""

TASK = "backend-benchmark"
