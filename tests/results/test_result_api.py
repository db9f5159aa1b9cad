"""The result endpoints: MLPerf logs and charts of runs and series, and their 404s."""

from __future__ import annotations

import io
import zipfile

import pytest
from PIL import Image

from mlbench_master.api.models import Run
from tests.client.test_plots import described

pytestmark = pytest.mark.django_db


@pytest.fixture
def series(maker):
    s = maker.series(seeds=[5, 6], worker_counts=[1, 2])
    for seed in (5, 6):
        maker.run(s, seed, 1, [(10.0, 0.5, 1), (20.0 + seed, 0.85, 2)])
        maker.run(s, seed, 2, [(6.0, 0.5, 1), (11.0 + seed, 0.82, 2)])
    return s


def test_run_mllog_is_a_text_attachment(api, series):
    run = series.runs.order_by("id").first()
    response = api.get(f"/api/runs/{run.pk}/mllog/")
    assert response.status_code == 200
    assert response["Content-Type"].startswith("text/plain")
    assert f'filename="run_{run.pk}_mllog.txt"' in response["Content-Disposition"]
    text = response.content.decode()
    assert text.splitlines()[0].startswith(":::MLLOG {")
    assert '"key": "run_stop"' in text
    assert api.get(f"/api/runs/{run.pk}/mllog").status_code == 200  # no slash: the same


def test_series_mllog_zip_has_one_result_file_per_seed_and_worker_count(api, series):
    response = api.get(f"/api/series/{series.pk}/mllog/")
    assert response.status_code == 200 and response["Content-Type"] == "application/zip"
    names = sorted(zipfile.ZipFile(io.BytesIO(response.content)).namelist())
    assert names == [
        "results/mlbench-1xcpu/logreg-epsilon/result_0.txt",
        "results/mlbench-1xcpu/logreg-epsilon/result_1.txt",
        "results/mlbench-2xcpu/logreg-epsilon/result_0.txt",
        "results/mlbench-2xcpu/logreg-epsilon/result_1.txt",
    ]


def test_charts_of_a_run_and_a_series(api, series):
    run = series.runs.order_by("id").first()
    png = api.get(f"/api/runs/{run.pk}/plots/accuracy.png")
    assert png.status_code == 200 and png["Content-Type"] == "image/png"
    assert Image.open(io.BytesIO(png.content)).format == "PNG"
    svg = api.get(f"/api/series/{series.pk}/plots/speedup.svg")
    assert svg.status_code == 200 and svg["Content-Type"] == "image/svg+xml"
    stats = api.get(f"/api/series/{series.pk}/").json()["statistics"]
    drawn = described(svg.content, "svg")
    assert drawn["lines"]["speedup"] == [
        [g["num_workers"], g["speedup"]["median"]] for g in stats["groups"]
    ]
    split = api.get(f"/api/series/{series.pk}/plots/time-split.png/")
    assert split.status_code == 200


@pytest.mark.parametrize(
    ("path", "message"),
    [
        ("/api/runs/999999/mllog/", "run 999999 does not exist"),
        ("/api/series/999999/mllog/", "series 999999 does not exist"),
        ("/api/series/999999/plots/accuracy.png", "series 999999 does not exist"),
        ("/api/runs/999999/plots/accuracy.png", "run 999999 does not exist"),
        (
            "/api/series/{s}/plots/pie.png",
            "chart 'pie' is not one of accuracy, speedup, time-split, cost",
        ),
        ("/api/series/{s}/plots/accuracy.jpg", "format 'jpg' is not one of png, svg"),
        ("/api/runs/{r}/plots/speedup.svg", "chart 'speedup' is not one of accuracy, time-split"),
    ],
)
def test_unknown_things_answer_404_naming_them(api, series, path, message):
    run = series.runs.order_by("id").first()
    response = api.get(path.format(s=series.pk, r=run.pk))
    assert response.status_code == 404
    assert response.json()["detail"] == message


def test_a_chart_the_data_cannot_give_answers_409(api, maker):
    s = maker.series(worker_counts=[2])
    maker.run(s, 1, 2, [(5.0, 0.9, 1)])
    response = api.get(f"/api/series/{s.pk}/plots/speedup.png")
    assert response.status_code == 409
    assert "no speed-up to draw" in response.json()["detail"]


def test_a_measurement_has_no_training_log(api):
    run = Run.objects.create(name="bb", task="backend-benchmark", state=Run.FINISHED)
    response = api.get(f"/api/runs/{run.pk}/mllog/")
    assert response.status_code == 404
    assert "measurement" in response.json()["detail"]


def test_reads_need_a_user_unless_public(client, series, settings):
    run = series.runs.order_by("id").first()
    assert client.get(f"/api/runs/{run.pk}/mllog/").status_code == 401  # no token
    settings.MLBENCH_PUBLIC_READ = True
    assert client.get(f"/api/runs/{run.pk}/plots/accuracy.svg").status_code == 200
