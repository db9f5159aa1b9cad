"""GET /api/runs/<id>/logs/ and the log store behind it (append-only, bounded, by offset)."""

import pytest

from mlbench_master.api.models import LogChunk, Run
from mlbench_master.runs.logs import append_logs

pytestmark = pytest.mark.django_db


def test_read_by_offset_rank_and_stream(api, run):
    append_logs(run, [(0, "stdout", "a\n"), (1, "stdout", "b\n"), (0, "stderr", "c\n")])
    r = api.get(f"/api/runs/{run.pk}/logs/")
    page = r.json()
    assert r.status_code == 200
    assert [c["text"] for c in page["chunks"]] == ["a\n", "b\n", "c\n"]
    assert page["next_offset"] == 3 and page["truncated"] is False
    assert set(page["chunks"][0]) == {"seq", "rank", "stream", "text", "created_at"}
    # only what is new after an offset
    append_logs(run, [(1, "stdout", "d\n")])
    page = api.get(f"/api/runs/{run.pk}/logs/?offset=3").json()
    assert [c["text"] for c in page["chunks"]] == ["d\n"] and page["next_offset"] == 4
    page = api.get(f"/api/runs/{run.pk}/logs/?offset=4").json()
    assert page["chunks"] == [] and page["next_offset"] == 4
    page = api.get(f"/api/runs/{run.pk}/logs/?rank=0&stream=stderr").json()
    assert [c["text"] for c in page["chunks"]] == ["c\n"]
    page = api.get(f"/api/runs/{run.pk}/logs/?limit=2").json()
    assert len(page["chunks"]) == 2 and page["next_offset"] == 2


@pytest.mark.parametrize(
    "query, field",
    [("offset=-1", "offset"), ("offset=x", "offset"), ("rank=x", "rank"),
     ("stream=stdin", "stream"), ("limit=0", "limit")],
)  # fmt: skip
def test_bad_parameters(api, run, query, field):
    r = api.get(f"/api/runs/{run.pk}/logs/?{query}")
    assert r.status_code == 400 and field in r.json()["errors"]


def test_unknown_run(api):
    assert api.get("/api/runs/424242/logs/").status_code == 404


def test_bounded_per_run_keeps_the_end(api, run, settings):
    settings.MLBENCH_LOG_MAX_BYTES = 100
    for i in range(30):
        append_logs(run, [(0, "stdout", f"line {i:02d}\n")])  # 8 characters each
    total = sum(len(t) for t in LogChunk.objects.filter(run=run).values_list("text", flat=True))
    assert total <= 100
    page = api.get(f"/api/runs/{run.pk}/logs/").json()
    assert page["truncated"] is True
    assert page["chunks"][-1]["text"] == "line 29\n"
    assert Run.objects.get(pk=run.pk).log_bytes == total


def test_logs_go_with_the_run(api, make_run):
    run = make_run()
    append_logs(run.pk, [(None, "stdout", "mpirun says hi\n")])
    api.delete(f"/api/runs/{run.pk}/")
    assert LogChunk.objects.count() == 0


@pytest.mark.django_db(transaction=True)
def test_deleting_a_run_while_its_job_appends_output_never_breaks():
    """The run job keeps appending a cancelled run's last output while DELETE removes it
    (seen under load: the rows it added between the cascade's reads and the row's delete
    made the delete a 409). Each delete succeeds; the appender then finds no run."""
    import threading

    from django.db import connection

    from mlbench_master.runs import lifecycle
    from mlbench_master.runs.logs import append_logs

    for attempt in range(5):
        run = Run.objects.create(name=f"deleted {attempt}", state=Run.CANCELLED)
        stop = threading.Event()

        def append(run_id: int = run.pk, stop: threading.Event = stop) -> None:
            try:
                while not stop.is_set():
                    try:
                        append_logs(run_id, [(0, "stdout", "line\n")] * 20)
                    except Run.DoesNotExist:
                        return
            finally:
                connection.close()

        writer = threading.Thread(target=append)
        writer.start()
        try:
            lifecycle.delete_run(run, by="test", staff=True)
        finally:
            stop.set()
            writer.join(timeout=30)
        assert not Run.objects.filter(pk=run.pk).exists()
