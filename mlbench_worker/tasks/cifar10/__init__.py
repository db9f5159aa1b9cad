"""Task 1a's code: a ResNet on CIFAR-10, from the data set's arrays to a Trainer.

The pieces it puts together live where every image task can use them: the data set and its
batches in mlbench_worker/data/ (cifar10.py, synthetic.py, loader.py), the models in
mlbench_worker/models/, the training loop in training/trainer.py. setup.py is one run's set-up.

This top level imports no torch.
"""
