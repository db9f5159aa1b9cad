"""GET /api/metrics/<id>/ for a run that does not exist is a 404 naming the id (issue 50),
with or without metric_type=run, as GET /api/runs/<id>/ is; an existing run or pod keeps
its answer."""

import pytest

from mlbench_master.api.models import Pod

pytestmark = pytest.mark.django_db


@pytest.mark.parametrize("query", ["", "?metric_type=run", "?metric_type=pod"])
def test_a_run_that_does_not_exist_is_named(api, query):
    response = api.get(f"/api/metrics/99/{query}")
    assert response.status_code == 404, response.json()
    assert response.json()["detail"] == "run 99 does not exist"


def test_an_existing_run_and_a_pod_still_answer(api, run):
    assert api.get(f"/api/metrics/{run.pk}/?metric_type=run").status_code == 200
    assert api.get(f"/api/metrics/{run.pk}/").status_code == 200
    assert api.get("/api/metrics/local-worker-0/").json() == {}
    Pod.objects.create(name="7")
    assert api.get("/api/metrics/7/").status_code == 200
