"""mlbench worker: the code that runs benchmarks, the client that asks for them, and what both
share with the master, one room each:

- shared/: plain data and rules the master, the client and the ranks read (catalogues, the
  result record, MLBENCH_HOME); the only part the master imports;
- client/: ApiClient and the `mlbench` command (`from mlbench_worker.api import ApiClient`
  keeps the original client's import path);
- training/: one rank of a run (`python -m mlbench_worker <task> [options]`);
- algorithms/: how ranks combine their work (every gradient exchange);
- tasks/: one folder per family of tasks; data/ and models/: what two families share;
- implementations/: other frameworks' trainers of the same tasks;
- backend_benchmark/: the measurement task.

Importing this package, shared/ or client/ never imports torch.
"""

__version__ = "0.2.0.dev0"
