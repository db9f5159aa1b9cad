"""Algorithm studies (issue 45, docs/studies.rst): algorithms compared over the declared
suite's workloads and network conditions, each cell a series of the study's seeds, scored
from the evaluator's grades as MLCommons AlgoPerf scores (results/study_score.py).

- `request`: a study request checked whole and turned into its cells' series requests;
- `store`: the one writer of studies and their cells (create with reuse of earlier cells,
  the held-out draw, cancel);
- `outcomes`: each run's outcome read from the grades, and the study's score and table.
"""
