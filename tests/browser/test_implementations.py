"""The framework dimension on the dashboard: the New run form's implementation select (the
task's implementations, one the workers cannot run disabled with its install hint, the
algorithm and backend choices bounded by the chosen one), the run page and the runs list
saying the implementation with its framework, and the compare page's column with speed-ups
across implementations only when asked for, labelled as such."""

import pytest

from tests.browser.seed import make_run
from tests.browser.test_compare import cells, show
from tests.browser.test_runs import open_form

pytestmark = pytest.mark.browser


def test_the_form_offers_the_tasks_implementations_and_starts_a_torch_ddp_run(page, monkeypatch):
    from mlbench_master.api.models import Run
    from mlbench_master.cluster.local import LocalCluster

    # Workers whose Python has torch but no TensorFlow (the live server asks in this process).
    monkeypatch.setattr(LocalCluster, "has_module", lambda self, module: module != "tensorflow")
    open_form(page)
    select = page.get_by_label("Implementation", exact=True)
    option = lambda name: select.locator(f"option[value='{name}']")  # noqa: E731
    assert select.input_value() == "reference"
    assert option("torch-ddp").inner_text().startswith("PyTorch DistributedDataParallel")
    assert option("tensorflow").is_disabled()
    assert "pip install 'mlbench[tensorflow]'" in option("tensorflow").inner_text()

    # Task 2 is trained by the reference loop, Spark and Flink; ResNet-20 again offers DDP.
    task = page.get_by_label("Benchmark task")
    task.select_option("logreg-epsilon")
    assert option("torch-ddp").is_disabled() and select.input_value() == "reference"
    assert not option("spark").is_disabled()
    algorithm = page.get_by_label("Algorithm", exact=True)
    # MLlib's L-BFGS is Spark's own: offered with spark only, which runs no PowerSGD.
    assert algorithm.locator("option[value='lbfgs']").is_disabled()
    select.select_option("spark")
    assert not algorithm.locator("option[value='lbfgs']").is_disabled()
    assert algorithm.locator("option[value='powersgd']").is_disabled()
    assert page.get_by_label("Communication backend").is_disabled()
    # Flink runs the reference's SGD only: no L-BFGS, no PowerSGD, its own exchange.
    assert option("flink").inner_text().startswith("Apache Flink")
    select.select_option("flink")
    assert algorithm.locator("option[value='lbfgs']").is_disabled()
    assert algorithm.locator("option[value='powersgd']").is_disabled()
    assert not algorithm.locator("option[value='allreduce']").is_disabled()
    assert page.get_by_label("Communication backend").is_disabled()
    select.select_option("reference")
    task.select_option("resnet20-cifar10")
    assert not option("torch-ddp").is_disabled()

    # DDP runs the all-reduce on gloo or nccl: the other choices cannot be picked.
    select.select_option("torch-ddp")
    assert algorithm.locator("option[value='powersgd']").is_disabled()
    backend = page.get_by_label("Communication backend")
    assert backend.input_value() == "gloo"
    assert backend.locator("option[value='mpi']").is_disabled()
    page.get_by_label("Run name").fill("ddp from the form")
    page.get_by_role("button", name="Start run").click()
    page.get_by_role("link", name="ddp from the form").first.wait_for()
    run = Run.objects.get(name="ddp from the form")
    assert (run.implementation, run.backend, run.algorithm) == ("torch-ddp", "gloo", "allreduce")
    row = page.locator(f"#runs-table tr[data-run-id='{run.pk}'] .implementation")
    row.wait_for()
    assert row.inner_text().startswith("torch-ddp (PyTorch")

    # Back to the reference loop: every algorithm and backend again, the default backend.
    open_form(page)
    select.select_option("torch-ddp")
    select.select_option("reference")
    assert backend.input_value() == "mpi" and not algorithm.locator("option").nth(1).is_disabled()

    page.goto(f"/runs/{run.pk}/")
    page.wait_for_selector("body[data-loaded='1']")
    config = page.locator("#run-config").inner_text()
    assert "Implementation\ntorch-ddp (PyTorch" in config


def test_compare_gives_cross_implementation_ratios_only_when_asked(page):
    one = make_run("reference, 1 worker", 1, ago=7200)
    two = make_run("reference, 2 workers", 2, ago=5400)
    # As the API stores them: DDP on gloo, the reference loop on its default, mpi.
    ddp = make_run("ddp, 2 workers", 2, implementation="torch-ddp", backend="gloo", ago=3600)
    show(page, one, two, ddp)
    row = page.locator(f"#compare-table tr[data-run-id='{ddp.pk}']")
    assert row.locator(".implementation").inner_text() == "torch-ddp (PyTorch 2.13.0)"
    assert cells(page, two)[0] == "1.80×"
    speedup, efficiency = cells(page, ddp)
    assert "no 1-worker run with the same backend/implementation" in speedup
    assert efficiency == "—"
    assert "Across implementations" in speedup  # how to ask for the ratio

    page.get_by_label("Across implementations").check()
    page.wait_for_function(
        "(id) => document.querySelector(`#compare-table tr[data-run-id='${id}'] .speedup.across`)",
        arg=ddp.pk,
    )
    assert cells(page, ddp)[0] == "1.80× vs reference (cross-implementation)"
    title = row.locator(".speedup").get_attribute("title")
    assert "a run of implementation reference on mpi" in title
    assert cells(page, two)[0] == "1.80×"  # within one implementation: unlabelled
    assert "across=1" in page.url  # a link to the page shows the same table


def test_the_gpu_box_decides_whether_nccl_can_be_picked(page, settings, monkeypatch):
    from mlbench_master.cluster.local import LocalCluster

    settings.MLBENCH_MAX_GPUS = 1
    monkeypatch.setattr(LocalCluster, "has_module", lambda self, module: True)
    open_form(page)
    backend = page.get_by_label("Communication backend")
    nccl = backend.locator("option[value='nccl']")
    gpus = page.get_by_label("Use GPUs")
    assert not gpus.is_checked() and nccl.is_disabled()  # the API refuses nccl without GPUs
    page.get_by_label("Implementation", exact=True).select_option("torch-ddp")
    assert backend.input_value() == "gloo"
    gpus.check()  # DDP on GPUs: nccl, as the API would give it
    assert not nccl.is_disabled() and backend.input_value() == "nccl"
    gpus.uncheck()
    assert nccl.is_disabled() and backend.input_value() == "gloo"
    # A backend picked by hand stays while it is allowed.
    gpus.check()
    backend.select_option("gloo")
    gpus.uncheck()
    gpus.check()
    assert backend.input_value() == "gloo"


def test_a_backend_the_form_chose_follows_the_gpu_box_and_measurements_keep_the_rule(
    page, settings, monkeypatch
):
    from mlbench_master.cluster.local import LocalCluster

    settings.MLBENCH_MAX_GPUS = 1
    monkeypatch.setattr(LocalCluster, "has_module", lambda self, module: True)
    open_form(page)
    backend = page.get_by_label("Communication backend")
    gpus = page.get_by_label("Use GPUs")
    select = page.get_by_label("Implementation", exact=True)
    backend.select_option("mpi")  # picked by hand for the reference loop ...
    select.select_option("torch-ddp")  # ... which DDP cannot use: the form picks gloo
    assert backend.input_value() == "gloo"
    gpus.check()  # the form's own choice follows the GPUs
    assert backend.input_value() == "nccl"
    # The backend benchmark measures every backend; nccl only with GPUs, as the API says.
    gpus.uncheck()
    page.get_by_label("Benchmark task").select_option("backend-benchmark")
    nccl = backend.locator("option[value='nccl']")
    assert nccl.is_disabled() and backend.input_value() == ""
    gpus.check()
    assert not nccl.is_disabled()
    backend.select_option("nccl")
    gpus.uncheck()
    assert nccl.is_disabled() and backend.input_value() == ""
