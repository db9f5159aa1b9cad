"""An outside algorithm on the dashboard (issue 44): a staff user's New run form has a file
input that uploads the algorithm before the run names it by its hash; the run page shows
its name, options and short hash, with the file's full hash linking to its source; a user
who is not staff has no such input."""

import pytest

from tests.api.test_outside_algorithm import SHA, SOURCE
from tests.browser.seed import make_run
from tests.browser.test_runs import open_form

pytestmark = pytest.mark.browser


def test_staff_start_a_run_of_their_own_file_and_its_page_names_it(page, dashboard_user):
    from mlbench_master.api.models import Run

    dashboard_user.is_staff = True
    dashboard_user.save()
    open_form(page)
    page.get_by_text("Official image and open division").click()
    page.locator("#f-algorithm-file").set_input_files(
        {"name": "halfavg.py", "mimeType": "text/x-python", "buffer": SOURCE}
    )
    page.get_by_label("Run name").fill("my own algorithm")
    page.get_by_role("button", name="Start run").click()
    page.get_by_role("link", name="my own algorithm").first.wait_for()
    run = Run.objects.get(name="my own algorithm")
    assert (run.algorithm, run.algorithm_source) == ("halfavg", SHA)
    assert run.algorithm_options == {"weight": 0.5, "mode": "sum"}

    page.goto(f"/runs/{run.pk}/")
    page.wait_for_selector("body[data-loaded='1']")
    config = page.locator("#run-config").inner_text()
    assert f"Algorithm\nhalfavg (mode sum, weight 0.5) [uploaded {SHA[:12]}]" in config
    link = page.locator("#algorithm-source")
    assert link.inner_text() == SHA and link.get_attribute("href") == f"/api/algorithms/{SHA}/"


def test_a_user_who_is_not_staff_has_no_file_input(page):
    open_form(page)
    assert page.locator("#f-algorithm-file").count() == 0


def test_compare_and_board_name_the_uploaded_file_and_what_a_rank_sent(page):
    """The compare page and the board name an uploaded algorithm with its short hash, and
    show the trainer's bytes per step and to the target (the run page's rows too)."""
    from mlbench_master.api.models import Run

    ours = make_run("allreduce", 2, ago=7200)
    theirs = make_run("halfavg", 2, ago=3600, algorithm="halfavg", algorithm_source=SHA,
                      algorithm_options={"weight": 0.5, "mode": "sum"})  # fmt: skip
    for run, per_step, total in ((ours, 1_100_000.0, 35_200_000.0), (theirs, 16_000.0, None)):
        Run.objects.filter(pk=run.pk).update(
            summary={
                **run.summary,
                "comm_bytes_per_step": per_step,
                "compression_ratio": None,
                "comm_bytes_to_target": total,
            }  # fmt: skip
        )

    page.goto(f"/compare/?runs={ours.pk},{theirs.pk}")
    page.wait_for_selector("body[data-loaded='1']")
    row = page.locator(f"#compare-table tr[data-run-id='{theirs.pk}']")
    row.wait_for()
    assert f"halfavg (mode sum, weight 0.5) [uploaded {SHA[:12]}]" in row.inner_text()
    assert row.locator(".sent").inner_text() == "16.0 kB a step; target not reached"
    mine = page.locator(f"#compare-table tr[data-run-id='{ours.pk}'] .sent")
    assert mine.inner_text() == "1.1 MB a step; 35.2 MB to the target"

    page.goto(f"/runs/{ours.pk}/")
    page.wait_for_selector("body[data-loaded='1']")
    summary = page.locator("#run-summary").inner_text()
    assert "Sent (a rank)\n1.1 MB a step; 35.2 MB to the target" in summary

    page.goto("/board/resnet20-cifar10/")
    page.wait_for_function("Number(document.body.dataset.loaded || 0) >= 1")
    cell = page.locator("#board td.algorithm", has_text=f"[uploaded {SHA[:12]}]")
    assert cell.locator(".sent").inner_text() == "sent 16.0 kB/step"
    assert page.locator("#board td.algorithm .sent", has_text="35.2 MB to target").count() == 1
