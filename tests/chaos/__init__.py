"""The chaos series: many short runs queued on a real embedded master while a seeded
scheduler injects faults at random moments, then the platform's promises checked on what
happened (docs/chaos.rst).

- reasons.py: the one table of what a run's reason must say after each kind of fault
- workload.py: the runs queued; faults.py, victims.py: the faults and what they hit
- schedule.py: the seeded plan and the fault log; poller.py: the API asked throughout
- evidence.py, invariants.py: what is gathered afterwards and the checks on it
- summary.py: the numbers; series.py: one series end to end; __main__.py: `make chaos`
"""
