"""What the master, the client and the ranks all read: plain data and rules, no torch, no Django.

The task, algorithm and implementation catalogues (catalogue.py, algorithm_catalogue.py,
implementation_catalogue.py), the record a run publishes (result.py), where local state
lives (home.py), a free port (localhost.py), the charts of results (plots.py), the official
data files' checksums (data_files.py) and the evaluator with its predictions format
(evaluation/). The master imports nothing else of mlbench_worker (tests/test_worker_rooms.py),
so a rule that both sides apply is written here once.
"""
