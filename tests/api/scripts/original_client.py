"""Runs in .venv-seed: the original platform's own ApiClient (mlbench-core 3.0.0), each of its
ten methods against the master at argv[1] ("user:TOKEN@host:port"), as a script written for
it would call them. Prints one JSON object: method -> [status code, what a script reads].

The sleeper command is argv[2]: an open-division run that ends by itself; the original
client can only send a custom command together with a custom image, which the local
cluster refuses, so it creates its run with an official image and the suite's own run
(argv[3]) carries the metrics.
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
record("get_worker_pods", client.get_worker_pods().result(), lambda r: len(r.json()))
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
    client.get_pod_metrics("local-worker-0", since=start, summarize=10).result(),
    lambda r: type(r.json()).__name__,
)
record("get_all_metrics", client.get_all_metrics().result(), lambda r: type(r.json()).__name__)
record(
    "download_run_metrics",
    client.download_run_metrics(run_id).result(),
    lambda r: sorted(zipfile.ZipFile(io.BytesIO(r.content)).namelist())[:3],
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
