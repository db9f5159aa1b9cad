"""From the ranks mpirun started to a TensorFlow cluster: TF_CONFIG, devices, threads.

mpirun starts the ranks, as for every implementation; MultiWorkerMirroredStrategy needs
to be told who they are. mpi4py (coordination only: nothing of training goes through it)
gathers every rank's address and a free port, and rank r becomes worker r of the cluster
spec in TF_CONFIG. Addresses follow the reference's rendezvous rule (training/comm.py): loopback
when every rank runs on one host, else the address this host's name resolves to (a pod's
IP on Kubernetes, a slot's on the local driver). The workers talk gRPC to each other
directly, never through a proxy the environment may name for downloads (the local
driver's slots have one): their addresses go into no_grpc_proxy.

All of it must happen before TensorFlow starts its runtime (the first op, or the
strategy): which GPU a rank sees, how many threads it runs, and TF_CONFIG.
"""

from __future__ import annotations

import json
import os
import socket
from typing import Any

from mlbench_worker.implementations.engine_ranks import Control
from mlbench_worker.shared.localhost import free_port
from mlbench_worker.training.errors import WorkerError


def local_rank(control: Control) -> int:
    """This rank's index among the ranks on its machine (it picks the GPU)."""
    env = os.environ.get("OMPI_COMM_WORLD_LOCAL_RANK") or os.environ.get("MPI_LOCALRANKID")
    if env is not None:
        return int(env)
    from mpi4py import MPI

    node = control.world.Split_type(MPI.COMM_TYPE_SHARED)
    try:
        return node.Get_rank()
    finally:
        node.Free()


def cluster_config(control: Control, hostnames: list[str]) -> dict | None:
    """This rank's TF_CONFIG (None for a single rank: the strategy then runs alone), from
    every rank's host name (`hostnames`, by rank)."""
    if control.size == 1:
        return None
    local = all(h == hostnames[0] for h in hostnames)
    host = "127.0.0.1" if local else socket.gethostbyname(socket.gethostname())
    address = f"{host}:{free_port(host if local else '')}"
    workers = control.allgather_object(address)
    return {"cluster": {"worker": workers}, "task": {"type": "worker", "index": control.rank}}


def export_cluster(config: dict | None) -> None:
    """Put `config` where the strategy reads it, and keep its gRPC off any proxy."""
    os.environ.pop("TF_CONFIG", None)
    if config is None:
        return
    os.environ["TF_CONFIG"] = json.dumps(config)
    hosts = sorted({w.rsplit(":", 1)[0] for w in config["cluster"]["worker"]})
    os.environ["no_grpc_proxy"] = ",".join(hosts)


def set_threads(threads: int) -> None:
    """`threads` for each operation (intra-op, like torch.set_num_threads) and as many
    operations at a time (inter-op): a ResNet step is a chain of operations, so more than
    `threads` concurrent ones would only oversubscribe the rank's cores."""
    import tensorflow as tf

    tf.config.threading.set_intra_op_parallelism_threads(threads)
    tf.config.threading.set_inter_op_parallelism_threads(threads)


def pick_device(requested: str, control: Control) -> str:
    """ "cpu", or "cuda:N": this rank's GPU (ranks on one machine take them round-robin).
    The others are hidden from TensorFlow, which would otherwise claim all of them."""
    import tensorflow as tf

    gpus = tf.config.list_physical_devices("GPU")
    if requested == "cpu" or (requested == "auto" and not gpus):
        if gpus:
            tf.config.set_visible_devices([], "GPU")
        return "cpu"
    if not gpus:
        raise WorkerError(
            "--device cuda: TensorFlow sees no GPU (tf.config.list_physical_devices('GPU') "
            "is empty; the tensorflow-cpu build has none): use --device cpu, or install "
            "TensorFlow's CUDA build in the workers"
        )
    index = local_rank(control) % len(gpus)
    tf.config.set_visible_devices(gpus[index], "GPU")
    tf.config.experimental.set_memory_growth(gpus[index], True)
    return f"cuda:{index}"


def make_strategy(device: str) -> Any:
    """MultiWorkerMirroredStrategy over TF_CONFIG's workers, its all-reduce RING on CPU
    (gRPC) and NCCL on GPU."""
    import tensorflow as tf

    impl = tf.distribute.experimental.CommunicationImplementation
    options = tf.distribute.experimental.CommunicationOptions(
        implementation=impl.NCCL if device.startswith("cuda") else impl.RING
    )
    return tf.distribute.MultiWorkerMirroredStrategy(communication_options=options)


def collective_name(device: str) -> str:
    """The strategy's all-reduce, in words (the summary's backend)."""
    return "nccl" if device.startswith("cuda") else "ring"


def gpu_info(device: str) -> dict:
    """The GPU a rank trained on, for the summary's hardware."""
    if not device.startswith("cuda"):
        return {}
    import tensorflow as tf

    gpus = tf.config.get_visible_devices("GPU")
    details = tf.config.experimental.get_device_details(gpus[0]) if gpus else {}
    physical = tf.config.list_physical_devices("GPU")
    return {"gpu": details.get("device_name", "GPU"), "gpu_count": len(physical)}
