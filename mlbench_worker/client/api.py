# Over 400 lines: the original client's methods with their documented signatures, one per endpoint.
"""`ApiClient`: the Python client of the master's REST API.

It keeps the original client's constructor arguments and methods, parameter for parameter,
so scripts written for it keep working; every method returns a `concurrent.futures.Future`
whose result is the `requests.Response`. Requests run on a thread pool: they wait on the
network, not on the CPU, so threads give the same non-blocking behaviour as processes
without pickling responses between processes.

Where the master is:
- `url=` (or MLBENCH_URL): used as given; this is how it is used outside a cluster and with
  the embedded master (`mlbench up` writes the URL to MLBENCH_HOME/url).
- inside a Kubernetes cluster (`in_cluster=True`, no url): the master pod is found by its
  labels and addressed by its IP.
- outside a cluster without url: the master service (by name or labels) is looked up and
  reached through its NodePort or load balancer.
The `kubernetes` package is imported only in the last two cases. This module never imports
torch or Django.
"""

from __future__ import annotations

import datetime as dt
import os
import uuid
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import requests

from mlbench_worker.client import discovery, studies_api
from mlbench_worker.client.algorithm_calls import AlgorithmCalls
from mlbench_worker.client.defaults import default_token, default_url  # noqa: F401 (exported)
from mlbench_worker.client.discovery import ApiError
from mlbench_worker.shared import catalogue

__all__ = ["ApiClient", "ApiError", "MLBENCH_IMAGES", "resolve_image"]

# Backends a run can use (the `backend` field; the master takes any case, e.g. "MPI").
MLBENCH_BACKENDS = ["mpi", "gloo", "nccl"]
# Reference tasks of the closed division (the catalogue): name -> (model, data set, GPU).
MLBENCH_TASKS = {
    name: (info.model, info.dataset, info.gpu_supported) for name, info in catalogue.TASKS.items()
}


def _image_table() -> dict[str, tuple[str, str, bool, bool]]:
    """The original client's table, same shape: {display name: (image, command, run_on_all,
    gpu)}, with its display names and ours for every task this platform runs. The image is
    the official name the master maps to the task; the command is what each rank runs."""
    table: dict[str, tuple[str, str, bool, bool]] = {}
    for info in catalogue.TASKS.values():
        image = f"{info.seed_images[0]}:latest" if info.seed_images else info.name
        table[info.title] = (
            image,
            f"python -m mlbench_worker {info.name}",
            True,
            info.gpu_supported,
        )
    for seed in catalogue.SEED_IMAGES:
        if seed.task:
            info = catalogue.TASKS[seed.task]
            command = f"python -m mlbench_worker {info.name}"
            table.setdefault(
                seed.title, (f"{seed.image}:latest", command, True, info.gpu_supported)
            )
    return table


MLBENCH_IMAGES = _image_table()
CUSTOM_IMAGE = catalogue.CUSTOM_IMAGE  # the open division: your command (and image on k8s)

DEFAULT_TIMEOUT = 30.0


def _normalize(url: str) -> str:
    url = url.strip()
    if "://" not in url:
        url = "http://" + url
    return url.rstrip("/")


def _iso(value: dt.datetime | str | None) -> str | None:
    if value is None:
        return None
    if isinstance(value, dt.datetime):
        if value.tzinfo is None:
            value = value.replace(tzinfo=dt.UTC)
        return value.isoformat()
    return str(value)


class ApiClient(AlgorithmCalls, studies_api.StudyCalls):
    """Client for the mlbench master's REST API; every call returns a Future of a Response.

    Args:
        max_workers: requests that may run at the same time.
        in_cluster: whether this runs inside the Kubernetes cluster of the master.
        label_selector: labels of the master pod (inside a cluster) or service.
        k8s_namespace: namespace mlbench runs in. None: inside a cluster this pod's own
            namespace; outside, the one master service found in any namespace.
        url: `host:port[/path]` or a full URL of the master; overrides discovery.
        load_config: load the Kubernetes configuration (in-cluster or kubeconfig) first.
        service_name: the master's service (outside a cluster, when no url is given).
        token: API token sent as `Authorization: Token ...` (default: MLBENCH_TOKEN or the
            embedded master's token file).
        timeout: seconds each request may take.
    """

    def __init__(
        self,
        max_workers: int = 5,
        in_cluster: bool = True,
        label_selector: str = "component=master,app=mlbench",
        k8s_namespace: str | None = None,
        url: str | None = None,
        load_config: bool = True,
        *,
        service_name: str | None = None,
        token: str | None = None,
        timeout: float = DEFAULT_TIMEOUT,
    ) -> None:
        self.in_cluster = in_cluster
        self.label_selector = label_selector
        self.k8s_namespace = k8s_namespace
        self.service_name = service_name
        self.timeout = timeout
        url = url or os.environ.get("MLBENCH_URL", "").strip() or None
        if url:
            self.endpoint = _normalize(url)
        elif in_cluster:
            self.endpoint = discovery.master_pod_url(k8s_namespace, label_selector, load_config)
        else:
            self.endpoint = discovery.master_service_url(
                k8s_namespace, service_name, label_selector, load_config
            )
        self.token = token if token is not None else default_token(self.endpoint)
        self.executor = ThreadPoolExecutor(max_workers=max_workers)
        self.session = requests.Session()
        self.session.headers["Accept"] = "application/json"
        if self.token:
            self.session.headers["Authorization"] = f"Token {self.token}"

    # ------------------------------------------------------------------ plumbing
    def url(self, path: str) -> str:
        return f"{self.endpoint}/api/{path.lstrip('/')}"

    def _submit(self, method: str, path: str, **kwargs: Any) -> Future:
        kwargs.setdefault("timeout", self.timeout)
        if "params" in kwargs:
            kwargs["params"] = {k: v for k, v in kwargs["params"].items() if v is not None}
        return self.executor.submit(self.session.request, method, self.url(path), **kwargs)

    def close(self) -> None:
        self.executor.shutdown(wait=True)
        self.session.close()

    def __enter__(self) -> ApiClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------------ runs
    def get_runs(
        self, limit: int | None = None, offset: int | None = None, ids: list[int] | None = None
    ) -> Future:
        """All runs (active, finished, failed, cancelled), newest first. With `limit` (and
        `offset`): one page, {count, offset, limit, next_offset, results}; with `ids`: only
        those runs. The whole list of a large master is tens of megabytes."""
        params = {"limit": limit, "offset": offset,
                  "id": ",".join(map(str, ids)) if ids else None}  # fmt: skip
        return self._submit("GET", "runs/", params=params)

    def get_run(self, run_id: int | str) -> Future:
        """One run by id."""
        return self._submit("GET", f"runs/{run_id}/")

    def create_run(
        self,
        name: str,
        num_workers: int,
        num_cpus: float | None = None,
        max_bandwidth: int = 1000,
        image: str | None = None,
        backend: str | None = None,
        custom_image_name: str | None = None,
        custom_image_command: str | None = None,
        custom_backend: str | None = None,
        run_all_nodes: bool = False,
        gpu_enabled: bool = False,
        light_target: bool = False,
        *,
        task: str | None = None,
        target: str | None = None,
        time_budget: float | None = None,
        max_epochs: int | None = None,
        dataset: str | None = None,
        time_limit: int | None = None,
        resume_from: int | None = None,
        latency: float | None = None,
        algorithm: str | None = None,
        algorithm_options: dict[str, Any] | None = None,
        algorithm_source: str | None = None,
        implementation: str | None = None,
        seed: int | None = None,
        queue: bool = False,
        lr_schedule: str | None = None,
        test_examples: int | None = None,
        train_examples: int | None = None,
        batch_size: int | None = None,
    ) -> Future:
        """Start a run. The keyword-only arguments are this version's additions.

        The positional signature is the original client's, with its documented default
        max_bandwidth 1000 Mbit/s, which is also the master's own default for a run that
        leaves it out (GET /api/runs/defaults/, `run_defaults`), unless its operator's
        limit is lower: then the master refuses it (400) and says its limit. num_cpus
        (the original's 2.0) is left to the master when None: 2.0, but on a local master
        never more than its workers' share of the machine's cores, so a run of 2 workers on
        2 cores gets 1 each. A run the master accepts with a caution (more threads than
        cores) says it in its `warnings`.
        Every other field left as None gets the master's default. A resumed run
        (`resume_from`) takes its parent's value for every field left as None or at the
        signature's default.

        `latency` (ms) is added each way on every worker's link, beside `max_bandwidth`.

        `algorithm` (see the algorithm catalogue / GET /api/runs/defaults/, `run_defaults`:
        its `algorithms` and each task's) and its `algorithm_options` (e.g. {"rank": 4};
        those left out keep their defaults): how the ranks combine their work; the master
        refuses (400) one the task does not admit.
        `algorithm_source`: an uploaded file's SHA-256 (`upload_algorithm`); its NAME is the
        algorithm.

        `implementation` (reference, torch-ddp, tensorflow, spark, flink): which code trains it; the
        original client's DDP and TensorFlow image names choose theirs by themselves.
        `seed` (default 42) is what every rank seeds from: the same seed gives the same
        curve. `queue`: while another run is active, wait in the master's queue (the run
        is QUEUED, with its `queue_position`) instead of the master's 409.

        `lr_schedule` (task 1b only: step, the default; cosine; poly, MLPerf's closed
        ResNet schedule, the one whose MLPerf log passes the closed rules) is the learning
        rate's schedule after the warm-up; the master refuses (400) it for other tasks.

        `test_examples`: grade the run on that many test examples (task 3: validation
        tokens), fixed now, instead of the task's whole test set; the master refuses (400)
        every file the run posts for another number. `train_examples` (task 3: tokens),
        `batch_size` (per worker): another training set size or batch than the task's.
        `resume_from` (a run id) continues that FAILED or CANCELLED run from its last
        checkpoint; the master refuses (400) a run it could not continue.

        `image` names the benchmark as the original client did: a display name (a key of
        MLBENCH_IMAGES, e.g. "PyTorch Cifar-10 ResNet-20", any case), an official image name
        or a task name; it is sent as `task`. Anything else raises ValueError listing the
        names. The official image it stands for is sent as `image_name`, so the run
        records it. With `custom_image_name` or `custom_image_command` (or image
        "custom_image") the run is the open division's and needs the command. `backend`
        is any case; `custom_backend` is for custom images only.
        """
        open_division = bool(custom_image_name or custom_image_command) or image == CUSTOM_IMAGE
        image_name = None
        if open_division:
            if image not in (None, CUSTOM_IMAGE):
                raise ValueError(
                    f"image {image!r} is an official benchmark; a custom command or image "
                    "runs instead of one: give one or the other"
                )
            if not custom_image_command:
                raise ValueError("a custom image needs custom_image_command: what each rank runs")
            image_name = CUSTOM_IMAGE
        elif image is not None:
            named = resolve_image(image)
            if task not in (None, named):
                raise ValueError(f"image {image!r} runs task {named}, not {task!r}")
            task, image_name = named, _official_image(image, named)
        if custom_backend is not None:
            if backend not in (None, "custom_backend"):
                raise ValueError("custom_backend and backend are mutually exclusive")
            backend = "custom_backend"
        elif backend is not None:
            backend = backend.strip().lower()
        body: dict[str, Any] = {
            "name": name,
            "num_workers": num_workers,
            "num_cpus": num_cpus,
            "max_bandwidth": max_bandwidth,
            "run_all_nodes": run_all_nodes,
            "gpu_enabled": gpu_enabled,
            "light_target": light_target,
        }
        if resume_from is not None:  # what was not changed is the parent's, not a default
            signature = {"num_cpus": None, "max_bandwidth": 1000, "run_all_nodes": False,
                         "gpu_enabled": False, "light_target": False}  # fmt: skip
            body = {k: v for k, v in body.items() if k not in signature or v != signature[k]}
        optional = {
            "image_name": image_name,
            "backend": backend,
            "custom_image_name": custom_image_name,
            "custom_image_command": custom_image_command,
            "custom_backend": custom_backend,
            "task": task,
            "target": target,
            "time_budget": time_budget,
            "max_epochs": max_epochs,
            "test_examples": test_examples,
            "train_examples": train_examples,
            "batch_size": batch_size,
            "dataset": dataset,
            "time_limit": time_limit,
            "resume_from": resume_from,
            "latency": latency,
            "algorithm": algorithm,
            "algorithm_options": algorithm_options,
            "algorithm_source": algorithm_source,
            "implementation": implementation,
            "seed": seed,
            "lr_schedule": lr_schedule,
            "queue": queue or None,
        }
        body.update({k: v for k, v in optional.items() if v is not None})
        return self._submit("POST", "runs/", json=body)

    # ------------------------------------------------------------------ series
    def create_series(
        self,
        name: str,
        *,
        seeds: list[int] | None = None,
        repeats: int | None = None,
        workers: list[int] | None = None,
        **fields: Any,
    ) -> Future:
        """Queue a series: the same run over `seeds` (or seeds 1..`repeats`) and each of
        the worker counts `workers`, run one after another. `fields` are the run fields
        of POST /api/runs/ (task, time_budget, dataset, ...; None: the master's default).
        The master refuses (400, naming the field, nothing stored) empty or repeated
        seeds, worker counts over its limit, or more runs than MLBENCH_SERIES_MAX_RUNS."""
        body = {"name": name, "seeds": seeds, "repeats": repeats, "workers": workers, **fields}
        return self._submit(
            "POST", "series/", json={k: v for k, v in body.items() if v is not None}
        )

    def list_series(self) -> Future:
        """Every series, newest first, with its runs' states."""
        return self._submit("GET", "series/")

    def get_series(self, series_id: int | str) -> Future:
        """A series with its runs and its statistics per worker count."""
        return self._submit("GET", f"series/{series_id}/")

    def cancel_series(self, series_id: int | str) -> Future:
        """Drop the series' queued runs and cancel its active one (its ended runs stay)."""
        return self._submit("POST", f"series/{series_id}/cancel/")

    def delete_series(self, series_id: int | str) -> Future:
        """Delete a series with its runs (an active one is cancelled first)."""
        return self._submit("DELETE", f"series/{series_id}/")

    def get_results(self, **filters: Any) -> Future:
        """The results board (`GET /api/results/`): sections ranked apart, narrowed by
        `filters` (task, division, measured, data, evaluation, origin, hardware, workers,
        algorithm, implementation, network, backend, seed)."""
        return self._submit("GET", "results/", params=filters)

    def run_defaults(self) -> Future:
        """What a run gets for each field it leaves out, and the master's limits."""
        return self._submit("GET", "runs/defaults/")

    def delete_run(self, run_id: int | str) -> Future:
        """Delete a run (an active run is cancelled first: its ranks are stopped)."""
        return self._submit("DELETE", f"runs/{run_id}/")

    def get_run_logs(self, run_id: int | str, offset: int = 0, limit: int | None = None) -> Future:
        """A run's log chunks after `offset` (an addition of this version)."""
        return self._submit(
            "GET", f"runs/{run_id}/logs/", params={"offset": offset, "limit": limit}
        )

    # ------------------------------------------------------------------ metrics
    def get_all_metrics(self) -> Future:
        """Every pod's resource metrics."""
        return self._submit("GET", "metrics/")

    def get_run_metrics(
        self,
        run_id: int | str,
        since: dt.datetime | None = None,
        summarize: int | None = None,
        metric_filter: str | None = None,
        last_n: int | None = None,
    ) -> Future:
        """A run's metrics, optionally newer than `since`, downsampled or only the last n."""
        params = {
            "metric_type": "run",
            "since": _iso(since),
            "summarize": summarize,
            "metric_filter": metric_filter,
            "last_n": last_n,
        }
        return self._submit("GET", f"metrics/{run_id}/", params=params)

    def get_pod_metrics(
        self, pod_id: str, since: dt.datetime | None = None, summarize: int | None = None
    ) -> Future:
        """A worker pod's resource metrics."""
        params = {"metric_type": "pod", "since": _iso(since), "summarize": summarize}
        return self._submit("GET", f"metrics/{pod_id}/", params=params)

    def download_run_metrics(
        self, run_id: int | str, since: dt.datetime | None = None, summarize: int | None = None
    ) -> Future:
        """A run's metrics as a zip archive (the response body is the archive)."""
        params = {
            "metric_type": "run",
            "since": _iso(since),
            "summarize": summarize,
            "format": "zip",
        }
        return self._submit("GET", f"metrics/{run_id}/", params=params, stream=True)

    def post_metric(
        self,
        run_id: int | str,
        name: str,
        value: float,
        cumulative: bool = False,
        metadata: dict | str = "",
        date: dt.datetime | None = None,
    ) -> Future:
        """Store one metric point of a run (sent as a one-point batch with a unique uid)."""
        if date is None:
            date = dt.datetime.now(dt.UTC)
        if not metadata:
            metadata = {}
        elif isinstance(metadata, str):
            metadata = {"note": metadata}
        point = {
            "run_id": int(run_id) if str(run_id).isdigit() else run_id,
            "name": name,
            "value": float(value),
            "cumulative": bool(cumulative),
            "metadata": metadata,
            "date": _iso(date),
            "uid": f"client-{uuid.uuid4().hex}",
        }
        return self._submit("POST", "metrics/", json=[point])

    # ------------------------------------------------------------------ pods
    def get_worker_pods(self) -> Future:
        """The worker pods (or local worker slots) and their phase."""
        return self._submit("GET", "pods/")


def resolve_image(image: str) -> str:
    """The task `image` names: a display name (any case), an official image or a task name.

    ValueError lists what is accepted, the way the original client refused unknown images.
    """
    info = catalogue.by_title(image) or catalogue.by_image(image) or catalogue.TASKS.get(image)
    if info is not None:
        return info.name
    known = catalogue.seed_image(image) or catalogue.seed_by_title(image)
    if known is not None:
        raise ValueError(
            f"{known.title} ({known.image}) is not implemented here yet; known benchmarks: "
            + ", ".join(MLBENCH_IMAGES)
        )
    raise ValueError(
        f"image {image!r} not found; known benchmarks: {', '.join(MLBENCH_IMAGES)} (or a task: "
        f"{', '.join(catalogue.TASKS)})"
    )


def _official_image(image: str, task: str) -> str | None:
    """The official image `image` stands for: itself (tag kept), its display name's, or the
    task's own; None for a task no official image runs."""
    if catalogue.seed_image(image) is not None:
        return image.strip()
    titled = catalogue.seed_by_title(image)
    if titled is not None:
        return f"{titled.image}:latest"
    own = catalogue.TASKS[task].seed_images
    return f"{own[0]}:latest" if own else None
