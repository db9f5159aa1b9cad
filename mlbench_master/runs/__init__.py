"""Every write a run's life makes, one module a concern: a reader finds every change to a
row here (tests/test_write_owners.py holds the master to it).

- ``lifecycle.py``: the ONLY place that changes ``Run.state`` (create, start, finish,
  fail, cancel, delete), worker tokens, summaries, imported runs;
- ``jobs.py``: the RQ job that runs one run through its driver; ``jobqueue.py``: the
  ``runs`` queue on Redis; ``run_queue.py``: which runs wait, in order;
- ``logwriter.py`` (output lines into rows) and ``logs.py`` (the one writer of
  ``LogChunk`` and ``Run.log_bytes``);
- ``metrics_store.py``: the one writer of metric points;
- ``series.py``: a series planned, queued and cancelled; ``manifest.py``: what a run
  records of its set-up;
- ``reconcile.py``, ``stopping.py``, ``unsettled.py``: recovery after a master restart or
  a stop; ``watching.py``: one job watches a run at a time (the run's watch lock);
- ``pods.py`` and ``collector.py``: the worker slots as pods, and their usage points;
- ``frozen.py``: what a run may still write once it has ended.
"""
