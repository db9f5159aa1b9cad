"""The run page says in words what the run's links were: the launch record's notes (what was
applied, and how) or, before a launch, what the master planned."""

import pytest

from tests.browser.seed import make_run

pytestmark = pytest.mark.browser

SLOTS = {"mlb-abc123-0": "198.18.5.10", "mlb-abc123-1": "198.18.5.11"}


def network_row(page, run) -> str:
    page.goto(f"/runs/{run.pk}/")
    page.wait_for_selector("body[data-loaded='1']")
    label = page.locator("#run-config dt").get_by_text("Network", exact=True)
    return label.locator("xpath=following-sibling::dd[1]").inner_text()


def test_applied_limits_say_how_and_where(page):
    run = make_run("shaped", 2, max_bandwidth=100, latency=20.0)
    run.job_metadata = {
        "max_bandwidth": {"requested_mbit_s": 100, "applied": True},
        "latency": {"requested_ms": 20.0, "applied": True, "by": "userspace delay line"},
        "network": {"subnet": "198.18.5.0/24", "slots": SLOTS},
    }
    run.save()
    text = network_row(page, run)
    assert "bandwidth 100 Mbit/s: applied" in text
    assert "latency 20 ms each way: applied by userspace delay line" in text
    assert "198.18.5.10, 198.18.5.11" in text


def test_limits_not_applied_say_why(page):
    run = make_run("shared", 2, max_bandwidth=10)
    why = "MLBENCH_LOCAL_NETWORK=off: every rank uses this machine's own network"
    run.manifest = {
        "network": {"max_bandwidth": {"requested_mbit_s": 10, "applied": False, "why": why}}
    }
    run.save()
    assert network_row(page, run) == f"bandwidth 10 Mbit/s: not applied ({why})"
