"""Throughput in the unit of each run's task: a task-2 run (logistic regression on epsilon)
counts samples, not images, on its run page and in the compare table; a task-1a run still
counts images; a run of a task the catalogue does not know is read by what it reported.
And the New run form says what the open division's fields do on this cluster."""

import pytest

from tests.browser.conftest import assert_accessible, screenshot
from tests.browser.seed import make_run

pytestmark = pytest.mark.browser


def open_run(page, run) -> None:
    page.goto(f"/runs/{run.pk}/")
    page.wait_for_selector("body[data-loaded='1']")
    page.wait_for_function(
        "Number(document.querySelector('#chart-throughput')?.dataset.points) > 0"
    )


def throughput_chart(page) -> tuple[str, str]:
    """(title, the whole chart's text: title, legend, axes) of the throughput chart."""
    chart = page.locator("#chart-throughput")
    return chart.locator("figcaption").inner_text(), chart.inner_text()


def summary_row(page, label_start: str) -> tuple[str, str]:
    """(label, value) of the row of the Result list whose label starts with `label_start`."""
    summary = page.locator("#run-summary")
    labels = summary.locator("dt").all_inner_texts()
    values = summary.locator("dd").all_inner_texts()
    return next((k, v) for k, v in zip(labels, values, strict=True) if k.startswith(label_start))


def test_task_2_counts_samples_and_task_1a_images(page):
    logreg = make_run("epsilon, 2 workers", 2, task="logreg-epsilon")
    resnet = make_run("cifar10, 2 workers", 2)

    open_run(page, logreg)
    title, chart = throughput_chart(page)
    assert title == "Samples per second (all workers)"
    assert "samples/s" in chart and "image" not in chart.lower()
    assert summary_row(page, "Throughput") == ("Throughput (samples/s)", "1080")
    result = page.locator("#run-summary").inner_text()
    assert "samples/s" in result and "image" not in result.lower()
    assert "PyTorch Linear Logistic Regression" in page.locator("#run-config").inner_text()
    screenshot(page, "run-details-task-2")
    assert_accessible(page)

    open_run(page, resnet)
    title, chart = throughput_chart(page)
    assert title == "Images per second (all workers)" and "images/s" in chart
    assert "sample" not in chart.lower()
    assert summary_row(page, "Throughput") == ("Throughput (images/s)", "1080")


def test_run_of_an_unknown_task_is_read_by_what_it_reported(page):
    from mlbench_master.api.models import Run

    # A run made by another version of mlbench, of a task this catalogue does not have: it
    # posted images_per_sec, so it is shown in images/s.
    old = make_run("from an older master", 1, task="resnet18-cifar10")
    open_run(page, old)
    assert throughput_chart(page)[0] == "Images per second (all workers)"
    assert summary_row(page, "Throughput") == ("Throughput (images/s)", "600")
    # Without a summary, the series it has decides.
    Run.objects.filter(pk=old.pk).update(summary={})
    open_run(page, old)
    assert throughput_chart(page)[0] == "Images per second (all workers)"


def test_compare_gives_each_run_its_own_unit(page):
    one = make_run("epsilon, 1 worker", 1, task="logreg-epsilon", ago=7200)
    two = make_run("epsilon, 2 workers", 2, task="logreg-epsilon", ago=5400)
    image_one = make_run("cifar10, 1 worker", 1, ago=3600)
    image_two = make_run("cifar10, 2 workers", 2, ago=1800)
    page.goto(f"/compare/?runs={one.pk},{two.pk},{image_one.pk},{image_two.pk}")
    page.wait_for_selector("body[data-loaded='1']")
    page.wait_for_function("Number(document.querySelector('#chart-compare').dataset.points) > 0")

    def row(run):
        return page.locator(f"#compare-table tr[data-run-id='{run.pk}']")

    assert row(one).locator(".throughput").inner_text() == "600 samples/s"
    assert row(two).locator(".throughput").inner_text() == "1080 samples/s"
    assert row(image_two).locator(".throughput").inner_text() == "1080 images/s"
    # Each pair scales against its own 1-worker run, never across tasks.
    assert row(two).locator(".speedup").inner_text() == "1.80×"
    assert "against epsilon, 1 worker" in row(two).locator(".speedup").get_attribute("title")
    assert "against cifar10, 1 worker" in row(image_two).locator(".speedup").get_attribute("title")
    warning = page.locator("#compare-warning").inner_text()
    assert "different tasks (logreg-epsilon, resnet20-cifar10)" in warning
    assert "different data sets (cifar10, epsilon)" in warning
    header = page.locator("#compare-table thead").inner_text()
    assert "Throughput" in header and "Images" not in header


def test_compare_by_throughput_in_samples(page):
    # Neither reached its target: the speed-up is the ratio of samples per second.
    one = make_run("epsilon short, 1 worker", 1, task="logreg-epsilon", epochs=3, ago=3600)
    two = make_run("epsilon short, 2 workers", 2, task="logreg-epsilon", epochs=3, ago=1800)
    page.goto(f"/compare/?runs={one.pk},{two.pk}")
    page.wait_for_selector("body[data-loaded='1']")
    page.wait_for_function("Number(document.querySelector('#chart-compare').dataset.points) > 0")
    row = page.locator(f"#compare-table tr[data-run-id='{two.pk}']")
    assert row.locator(".ttt").inner_text() == "not reached"
    assert row.locator(".speedup").inner_text() == "1.80× (throughput)"
    assert row.locator(".throughput").inner_text() == "1080 samples/s"


def open_division(page):
    page.goto("/runs/")
    page.wait_for_selector("body[data-loaded='1']")
    page.get_by_role("button", name="New run").click()
    page.locator("#new-run-form details summary").click()


def test_form_says_what_the_open_division_does_on_the_local_cluster(page):
    open_division(page)
    image = page.get_by_label("Custom image")
    assert image.is_visible() and image.is_disabled()
    reason = page.locator("#h-custom_image_name")
    assert reason.is_visible()
    assert "Not available on this cluster (local)" in reason.inner_text()
    assert "no containers" in reason.inner_text()
    command = page.locator("#h-custom_image_command").inner_text()
    assert "on this machine" in command and "rank 0 only" in command
    assert "Run on all nodes" in command
    assert page.get_by_label("Custom command").is_enabled()
    assert "custom command" in page.locator("#new-run-form details summary").inner_text()
    page.get_by_label("Run on all nodes").scroll_into_view_if_needed()
    screenshot(page, "new-run-open-division", full_page=False)
    assert_accessible(page)


def test_form_says_what_the_open_division_does_on_kubernetes(page, settings):
    settings.MLBENCH_CLUSTER = "kubernetes"
    open_division(page)
    image = page.get_by_label("Custom image")
    assert image.is_enabled()
    help_text = page.locator("#h-custom_image_name").inner_text()
    assert "worker pods run this image" in help_text
    command = page.locator("#h-custom_image_command").inner_text()
    assert "in the worker pods" in command and "rank 0 only" in command
    assert "custom image and command" in page.locator("#new-run-form details summary").inner_text()


def test_form_offers_only_the_chosen_tasks_goals_and_data_sets(page):
    page.goto("/runs/")
    page.wait_for_selector("body[data-loaded='1']")
    page.get_by_role("button", name="New run").click()
    form = page.locator("#new-run-form")
    target, dataset = form.locator("select[name=target]"), form.locator("select[name=dataset]")
    page.locator("#new-run-form details").first.evaluate("d => d.open = true")
    target.select_option("paper")
    dataset.select_option("cifar10")
    form.locator("select[name=task]").select_option("logreg-epsilon")
    enabled = "s => [...s.options].filter(o => !o.disabled).map(o => o.value)"
    assert target.evaluate(enabled) == ["light", "standard"]
    assert sorted(dataset.evaluate(enabled)) == ["auto", "epsilon", "synthetic"]
    # what was chosen and is not offered any more falls back to the task's defaults
    assert (target.input_value(), dataset.input_value()) == ("standard", "auto")
    form.locator("select[name=task]").select_option("resnet20-cifar10")
    assert target.evaluate(enabled) == ["light", "standard", "paper"]
    assert sorted(dataset.evaluate(enabled)) == ["auto", "cifar10", "synthetic"]


def test_a_language_model_run_shows_its_perplexity(page):
    import datetime as dt

    from mlbench_master.api.models import Metric, Run

    run = make_run("gpt, 2 workers", 2, task="gpt-wikitext2", epochs=3)
    summary = {**run.summary, "final_val_perplexity": 210.5, "best_val_perplexity": 210.5}
    Run.objects.filter(pk=run.pk).update(summary=summary)
    for epoch, value in ((1, 900.0), (2, 400.0), (3, 210.5)):
        elapsed = 30.0 * epoch / 0.9
        Metric.objects.create(
            run=run, name="val_perplexity", value=value,
            date=run.started_at + dt.timedelta(seconds=elapsed),
            metadata={"epoch": epoch, "step": 100 * epoch, "elapsed": elapsed},
        )  # fmt: skip
    open_run(page, run)
    page.wait_for_function(
        "Number(document.querySelector('#chart-perplexity')?.dataset.points) > 0"
    )
    assert "Validation perplexity" in page.locator("#chart-perplexity figcaption").inner_text()
    assert summary_row(page, "Target") == ("Target perplexity (lower is better)", "250")
    assert summary_row(page, "Final validation perplexity")[1] == "211"  # 3 figures
    assert summary_row(page, "Throughput")[0] == "Throughput (tokens/s)"
    # The evaluator's grade of the final model (perplexity_audit.py), as the master stores it.
    from mlbench_master.grading import model_files

    folder = model_files.folder(run.pk)
    folder.mkdir(parents=True, exist_ok=True)
    model_files.write_audit(folder, {
        "status": "mismatch", "kind": "perplexity", "step": 300, "reported_perplexity": 210.5,
        "graded": {"perplexity": 260.25, "tokens": 4000, "loss": 5.56, "whole": True},
    })  # fmt: skip
    open_run(page, run)
    page.wait_for_function("!document.querySelector('#run-evaluation').hidden")
    said = page.locator("#run-evaluation").inner_text()
    assert "Self-reported curve" in said and "grades its final model" in said
    assert "MISMATCH: does not give the perplexity the run reported: the evaluator graded " in said
    assert "260.25 over 4000 tokens, the run reported 210.50 at step 300" in said
    # A task whose goal is accuracy has no perplexity chart.
    open_run(page, make_run("cifar10, 2 workers", 2))
    assert page.locator("#chart-perplexity").count() == 0
