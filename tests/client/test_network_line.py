"""`mlbench show`'s network line: what was asked, and whether (and how) it was applied."""

from mlbench_worker.client.cli.commands import network_line


def test_applied_limits_say_how_the_latency_was_made():
    run = {
        "max_bandwidth": 100,
        "latency": 20.0,
        "job_metadata": {
            "max_bandwidth": {"requested_mbit_s": 100, "applied": True},
            "latency": {"requested_ms": 20.0, "applied": True, "by": "userspace delay line"},
        },
    }
    assert network_line(run) == (
        "100 Mbit/s per worker, 20 ms each way; applied (latency by userspace delay line)"
    )


def test_the_launch_record_overrides_the_plan_and_says_why_not():
    why = "the master runs without root (CAP_NET_ADMIN and CAP_SYS_ADMIN)"
    run = {
        "max_bandwidth": 10,
        "latency": None,
        "manifest": {"network": {"max_bandwidth": {"requested_mbit_s": 10, "applied": True}}},
        "job_metadata": {"max_bandwidth": {"requested_mbit_s": 10, "applied": False, "why": why}},
    }
    assert network_line(run) == f"10 Mbit/s per worker; max_bandwidth not applied ({why})"
