"""A run's and a series' results in forms others can check: the statistics of a series
(statistics.py, read from stored runs by stored.py), MLPerf-format result logs written with
MLCommons' own logger (mllog.py) and the rulesets their checker runs (mlperf_rules/).
"""
