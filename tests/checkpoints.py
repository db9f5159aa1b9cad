"""The identity of a task-1a checkpoint (2 workers, synthetic data), as the worker writes it:
the resume tests of the API, the CLI and the dashboard resume from it."""

IDENTITY = {
    "task": "resnet20-cifar10",
    "model": "resnet20",
    "num_workers": 2,
    "batch_size": 128,
    "seed": 42,
    "dataset": "synthetic",
}
