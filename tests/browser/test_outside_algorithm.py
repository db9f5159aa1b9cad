"""An outside algorithm on the dashboard (issue 44): a staff user's New run form has a file
input that uploads the algorithm before the run names it by its hash; the run page shows
its name, options and short hash, with the file's full hash linking to its source; a user
who is not staff has no such input."""

import pytest

from tests.api.test_outside_algorithm import SHA, SOURCE
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
