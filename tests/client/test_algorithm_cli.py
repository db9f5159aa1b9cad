"""`mlbench run --algorithm NAME --algorithm-option KEY=VALUE` against a live master: the
run records what was asked, and a refusal is the master's, in its words, exit code 2."""

import pytest

from mlbench_worker.client.cli.master import EXIT_USAGE

pytestmark = pytest.mark.mpi


def _no_active_run(master):
    for run in master.get("/api/runs/").json():
        if run["state"] in ("INITIALIZED", "STARTED"):
            master.delete(f"/api/runs/{run['id']}/")


# Every option is stored (the recipe's defaults too) and shown.
POWERSGD = {"rank": 4, "min_compression_rate": 2.0, "warmup_steps": 0}
TEXT = "powersgd (min_compression_rate 2, rank 4, warmup_steps 0)"


def test_the_algorithm_and_its_options_reach_the_run(master):
    _no_active_run(master)
    done = master.cli(
        "run", "compressed", "--workers", "2", "--cpus", "1", "--algorithm", "powersgd",
        "--algorithm-option", "rank=4",
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    run_id = int(done.stdout.split()[1])
    try:
        run = master.run(run_id)
        assert (run["algorithm"], run["algorithm_options"]) == ("powersgd", POWERSGD)
        show = master.cli("show", str(run_id))
        assert TEXT in show.stdout
        listed = master.cli("runs", "--wide")  # the default view leaves the algorithm out
        assert TEXT in listed.stdout
    finally:
        master.delete(f"/api/runs/{run_id}/")


@pytest.mark.parametrize(
    "options, words",
    [
        (["--algorithm", "carrier-pigeon"], "'carrier-pigeon' is not known"),
        (["--algorithm", "powersgd", "--algorithm-option", "rank=0"], "rank must be at least 1"),
        (["--algorithm", "topk", "--algorithm-option", "density=2"], "density must be more than 0"),
        (["--algorithm", "localsgd", "--algorithm-option", "period=0"], "period must be at least 1"),
        (["--algorithm", "powersgd", "--algorithm-option", "rank"], "give KEY=VALUE"),
        (["--algorithm", "decentralized", "--algorithm-option", "topology=torus"],
         "topology torus needs a worker count"),
    ],
)  # fmt: skip
def test_a_refused_algorithm_is_a_usage_error_in_the_masters_words(master, options, words):
    _no_active_run(master)
    before = len(master.get("/api/runs/").json())
    done = master.cli("run", "refused", "--workers", "2", *options)
    assert done.returncode == EXIT_USAGE, done.stdout + done.stderr
    assert words in done.stderr
    assert len(master.get("/api/runs/").json()) == before


def test_the_client_sends_the_algorithm_and_its_options(master):
    from mlbench_worker.client.api import ApiClient

    _no_active_run(master)
    client = ApiClient(url=master.url, in_cluster=False, token=master.token)
    try:
        response = client.create_run(
            "via client", 2, num_cpus=1, algorithm="localsgd", algorithm_options={"period": 8}
        ).result()
        assert response.status_code == 201, response.text
        run = response.json()
        assert (run["algorithm"], run["algorithm_options"]) == ("localsgd", {"period": 8})
        served = client.run_defaults().result().json()
        assert served["algorithms"]["localsgd"]["options"][0]["default"] == 4
    finally:
        client.close()
        master.delete(f"/api/runs/{run['id']}/")
