"""Implementations other than the reference loop of training/: each trains the same task with
another framework (tensorflow/), on the same data shards, schedule, goal, metric names and
reporter, so only the framework differs. Each is imported only by a run that asks for it;
torch-ddp is the reference loop with DDP's exchange (algorithms/ddp.py)."""
