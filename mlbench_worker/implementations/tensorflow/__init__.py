"""`--implementation tensorflow`: task 1a's ResNet in Keras under MultiWorkerMirroredStrategy.

The framework dimension asks what a framework costs, so everything but the framework is
the reference's: the same data (our CIFAR-10 reader or the same generated set), the same
shards in the same order per rank and epoch (data.py), the same architecture and
initialisation scheme (model.py), the same per-worker batch, rates, warm-up, decays,
momentum and weight decay (training/recipe.py's Schedule and scaled_rates), the same goal tracking,
metric names and reporter (train.py, training/metric_sink.py), the same rank body and
record (training/rank_body.py, training/run_record.py: `implementation` and TensorFlow's
version say which). What differs is said where it is decided
(model.py, data.py, steps.py) and in the summary's `implementation_note`.

A custom training loop (train.py) around tf.functions that call `strategy.run` (steps.py),
not `model.fit`: the benchmark's rules (clock, timed parts of a step, rate per step,
evaluation, stopping, metrics) are the reference loop's and must be written the same way;
`model.fit` would hide the step they time. cluster.py turns mpirun's ranks into the
strategy's workers; session.py supplies TensorFlow's parts of the rank body (set-up,
warm-up, what it measured, the final model's export).

This process never imports torch (tests/worker/test_tensorflow_run.py checks both ranks'
sys.modules at exit), and TensorFlow only once the options are checked, so a refused
option costs no TensorFlow start. It ends as every rank does (training/entry.py): errors a
user can fix printed once, by rank 0; anything unexpected aborts the MPI job.
"""

from __future__ import annotations

import os

from mlbench_worker.models import MODELS
from mlbench_worker.training.config import RunConfig
from mlbench_worker.training.entry import World, run_rank
from mlbench_worker.training.errors import WorkerError

INSTALL_HINT = (
    "tensorflow is not installed in this worker's Python: pip install 'mlbench[tensorflow]'"
)
# TensorFlow's C++ INFO and WARNING lines on every rank (CPU features, gRPC servers
# starting) are noise in a run's log; its errors still show.
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")


def run_main(config: RunConfig) -> int:
    """Entry point after option parsing (mlbench_worker/__main__.py); the exit code."""

    def body(world: World) -> int:
        refuse_unsupported(config)
        try:
            import tensorflow  # noqa: F401
        except ImportError:
            raise WorkerError(INSTALL_HINT) from None
        from mlbench_worker.implementations.engine_ranks import Control
        from mlbench_worker.implementations.tensorflow.session import run

        control = Control()
        world.known(control.rank, control.size, control.abort)
        return run(config, control)

    return run_rank(body)


def has_model(name: str) -> bool:
    """Whether model.py has a Keras twin of `name`: the original CIFAR ResNets."""
    return name in MODELS and MODELS[name][0] == "resnet"


def refuse_unsupported(config: RunConfig) -> None:
    """The options this implementation cannot honour, each named with why."""
    if not has_model(config.model):
        raise WorkerError(
            f"--model {config.model}: the tensorflow implementation has the original CIFAR "
            "ResNets only (resnet20, resnet32, resnet44, resnet56); pre-activation ones run "
            "on --implementation reference or torch-ddp"
        )
    if config.amp:
        raise WorkerError(
            "--amp: the tensorflow implementation trains in float32 only (Keras's mixed "
            "precision is not wired in); drop --amp, or use --implementation reference"
        )
    if config.channels_last:
        raise WorkerError(
            "--channels-last: Keras already lays images out channels-last (NHWC), the only "
            "layout it has on CPU; the option chooses torch's memory format: drop it"
        )
    if config.resume or config.resume_from:
        option = "--resume-from" if config.resume_from else "--resume"
        raise WorkerError(
            f"{option}: the tensorflow implementation writes no checkpoints, so it cannot "
            "continue a run; start a new one, or use --implementation reference"
        )
    if config.bucket_mb is not None:
        raise WorkerError(
            "--bucket-mb: the tensorflow implementation all-reduces its gradients with the "
            "strategy's collective, which packs them itself; drop --bucket-mb"
        )
    precision = (config.algorithm_options or {}).get("precision", "fp32")
    if precision != "fp32":
        raise WorkerError(
            f"--algorithm-option precision={precision}: the tensorflow implementation "
            "all-reduces float32 gradients only"
        )
