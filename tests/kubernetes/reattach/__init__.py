"""Re-attach on Kubernetes: mpirun runs detached in pod 0 and outlives the master.

The worker pods are the API emulator's; pod 0's commands (the launch's scripts of
detach.py) really run on this machine, in a directory that stands for the pods' "state"
emptyDir (tests/kubernetes/conftest.py): the stand-in for mpirun really is detached,
really writes its output and exit code to files there, and really outlives the channels
and the driver that started it. A master restart is a new driver given only the stored
launch record, as the job reads it back from the database; the old driver's Execution is
dropped.

The stand-in prints in steps, each released by a "gate" file the test creates, so what
was printed when is decided by the test and never by timing.

test_launch.py: launching, stopping, and the pieces (the probe's answer, the launch record);
test_master_restart.py: a master restarts (the driver alone, then through the run's job).
Fixtures in conftest.py, the stand-in and the readers in helpers.py.
"""
