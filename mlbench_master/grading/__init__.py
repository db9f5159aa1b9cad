"""The evaluator's side of the master: a run's results are graded here, never by the run.

- ``scoring.py``: a posted predictions file graded on the run's test set and stored with its
  grade (the evaluator of each test set built once, kept in a small LRU);
- ``audits.py``: the one interface every model audit implements (check, intake), and which
  audit a task's model gets;
- ``model_auditing.py``: the ONNX audit of a classifier or task 2's model against the run's
  predictions; ``perplexity_audit.py``: task 3's grade of its final model;
- ``prediction_files.py``, ``model_files.py``: where a run's files and audit records live;
- ``receive.py``: every upload (predictions, models, bundles) read bounded into a file.
"""
