"""Task 1a's code: a ResNet on CIFAR-10, from the data set's arrays to a Trainer.

Here: the CIFAR-10 reader (reader.py), its generated stand-in (synthetic.py), the choice
between them (data.py), the tasks (task.py) and one run's set-up (setup.py). What it shares:
the batches (mlbench_worker/data/loader.py), the models (mlbench_worker/models/) and the
training loop (mlbench_worker/training/trainer.py).

This top level imports no torch.
"""
