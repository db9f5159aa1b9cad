"""Runs in .venv-seed: the original platform's own ApiClient (mlbench-core 3.0.0), each of its
ten methods against the master at argv[1] ("user:TOKEN@host:port"), as a script written for
it would call them. Prints one JSON object: method -> [status code, what a script reads].

argv[2] is the id of the suite's own run, which has ended and carries the metrics: the
original client can only send a custom command together with a custom image, which the
local cluster refuses, so the run it creates itself (with an official image) is deleted
at once. The suite has posted a `seed_pod_probe` point (0.5) for the first worker pod.
"""

import datetime as dt
import io
import json
import sys
import zipfile

from mlbench_core.api import ApiClient

url, run_id = sys.argv[1], int(sys.argv[2])
client = ApiClient(in_cluster=False, url=url)
out = {}


def record(name, response, read=None):
    out[name] = [response.status_code, read(response) if read else None]


record("get_runs", client.get_runs().result(), lambda r: [x["id"] for x in r.json()])
record("get_run", client.get_run(run_id).result(), lambda r: r.json()["state"])
pods = client.get_worker_pods().result()
record("get_worker_pods", pods, lambda r: [p["name"] for p in r.json()])
start = dt.datetime.utcnow()
record(
    "post_metric", client.post_metric(run_id, "original_loss", 0.25).result(), lambda r: r.json()
)
client.post_metric(run_id, "original_loss", 0.125, date=start + dt.timedelta(seconds=1)).result()
record(
    "get_run_metrics",
    client.get_run_metrics(
        run_id, since=start - dt.timedelta(seconds=5), metric_filter="original_loss", last_n=5
    ).result(),
    lambda r: [p["value"] for p in r.json()["original_loss"]],
)
record(
    "get_pod_metrics",
    client.get_pod_metrics(
        pods.json()[0]["name"], since=dt.datetime(2020, 1, 1), summarize=10
    ).result(),
    lambda r: [p["value"] for p in r.json()["seed_pod_probe"]],
)
record("get_all_metrics", client.get_all_metrics().result(), lambda r: sorted(r.json()))
record(
    "download_run_metrics",
    client.download_run_metrics(run_id).result(),
    lambda r: sorted(zipfile.ZipFile(io.BytesIO(r.content)).namelist()),
)
created = client.create_run(
    "original", 2, num_cpus=1, image="PyTorch Cifar-10 ResNet-20", backend="MPI", light_target=True
).result()
record(
    "create_run",
    created,
    lambda r: {k: r.json()[k] for k in ("id", "task", "backend", "target", "image")},
)
record("delete_run", client.delete_run(created.json()["id"]).result())
refused = client.create_run("x", 2, image="PyTorch Machine Translation GNMT").result()
record("create_run_unimplemented", refused, lambda r: r.json()["detail"])
print(json.dumps(out))
