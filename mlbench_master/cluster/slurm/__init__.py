"""The Slurm cluster driver (MLBENCH_CLUSTER=slurm): a run is one Slurm job.

- config.py: the MLBENCH_SLURM_* settings and SLURM_CONF
- commands.py: the one place that runs sbatch, squeue, sinfo and scancel and reads them
- batch.py: a run's sbatch options and batch script
- states.py: Slurm's job states and pending reasons in words a person can act on
- execution.py: a job as the run job sees it (output by offset, exit code, Slurm's verdict)
- nodes.py: the nodes as pods, and their readings as pod metrics
- driver.py: SlurmCluster itself
"""

from mlbench_master.cluster.slurm.driver import SlurmCluster
from mlbench_master.cluster.slurm.execution import SlurmExecution

__all__ = ["SlurmCluster", "SlurmExecution"]
