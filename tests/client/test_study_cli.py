"""`mlbench study ...` and ApiClient's study calls against a live master (pytest-django's
live server on PostgreSQL, the session's Redis; no RQ worker, so the runs stay queued until
a test ends them in the database as tests/api/test_study_scores.py does): create stores the
algorithms and options asked for, show prints the numbers the API answers, a refusal names
its field with exit code 2, plot writes a PNG and an SVG of the API's profiles, export
writes the study's bundle."""

from __future__ import annotations

import argparse
import json
import xml.etree.ElementTree as ET
import zipfile

import pytest

from mlbench_master.accounts.users import issue_user_token
from mlbench_master.api.models import Run, Study
from mlbench_worker.client.api import ApiClient
from mlbench_worker.client.cli import study as study_cli
from mlbench_worker.client.cli.master import EXIT_CONFLICT, EXIT_NOT_FOUND, EXIT_USAGE, Master
from tests.api.test_study_scores import _ended
from tests.outside_randk import randk_source

pytestmark = pytest.mark.django_db(transaction=True)

SMALL = ["--workloads", "logreg-epsilon", "--conditions", "unlimited,10mbit"]


@pytest.fixture
def cli(stored_cli, redis_settings):
    return stored_cli


def _created(out: str) -> int:
    line = next(x for x in out.splitlines() if x.startswith("study "))
    return int(line.split()[1])


def _scored(cli) -> dict:
    """A study of allreduce and topk on task 2 at two conditions over seeds 1 and 2 whose
    runs all ended with graded points (test_study_scores.py's first study): a miss in one
    cell, every score and the held-out gate defined."""
    body = {"name": "graded", "algorithms": ["allreduce", {"algorithm": "topk",
            "options": {"density": 0.1}}], "workloads": ["logreg-epsilon"],
            "conditions": ["unlimited", "10mbit"], "seeds": [1, 2]}  # fmt: skip
    created = cli.api.post("/api/studies/", body, format="json")
    assert created.status_code == 201, created.content
    reach = {("allreduce", "unlimited", 1): 10.0, ("allreduce", "unlimited", 2): 12.0,
             ("topk", "unlimited", 1): 20.0, ("topk", "unlimited", 2): None,
             ("allreduce", "10mbit", 1): 30.0, ("allreduce", "10mbit", 2): 30.0,
             ("topk", "10mbit", 1): 15.0, ("topk", "10mbit", 2): 15.0}  # fmt: skip
    for cell in created.json()["cells"]:
        name = cell["algorithm"].split(" ")[0]
        for run in Run.objects.filter(series_id=cell["series"]):
            if cell["variant"]:
                _ended(run, 10.0 if name == "allreduce" else 30.0)
            elif reach[(name, cell["condition"], run.seed)] is None:
                _ended(run, None, state=Run.CANCELLED)
            else:
                _ended(run, reach[(name, cell["condition"], run.seed)])
    scored = cli.api.get(f"/api/studies/{created.json()['id']}/").json()
    assert scored["pending_runs"] == 0 and scored["score"] is not None
    return scored


def test_create_stores_the_algorithms_and_options_asked_for(cli, capsys, tmp_path):
    path = tmp_path / "randk.py"
    source, sha256 = randk_source("studyrandk")
    path.write_bytes(source)
    code = cli("study", "create", "compressors", "--algorithms",
               "allreduce,powersgd:rank=2,warmup_steps=0,topk:density=0.1", *SMALL,
               "--seeds", "1,2", "--workers", "2", "--no-reuse", "--algorithm-file", str(path),
               "--algorithm-option", "density=0.5")  # fmt: skip
    out = capsys.readouterr().out
    assert code == 0, out
    body = cli.api.get(f"/api/studies/{_created(out)}/").json()
    specs = [(a["algorithm"], a["options"], a["source"]) for a in body["algorithms"]]
    assert specs == [  # as asked, typed and completed by the master
        ("allreduce", {"precision": "fp32"}, ""),
        ("powersgd", {"rank": 2, "warmup_steps": 0, "min_compression_rate": 2.0}, ""),
        ("topk", {"density": 0.1}, ""),
        ("studyrandk", {"density": 0.5}, sha256),
    ]
    assert (body["workloads"], body["conditions"]) == (["logreg-epsilon"], ["unlimited", "10mbit"])
    assert (body["seeds"], body["num_workers"]) == ([1, 2], 2)
    assert body["held_out"] is not None and body["runs"]["total"] == 4 * (2 * 2 + 1)
    for label in (a["label"] for a in body["algorithms"]):
        assert label in out  # the labels, options completed, as the master names them
    # --no-held-out: no variant drawn; list shows both, newest first.
    code = cli("study", "create", "plain", "--algorithms", "allreduce,signsgd", *SMALL,
               "--no-held-out")  # fmt: skip
    plain = _created(capsys.readouterr().out)
    assert code == 0 and cli.api.get(f"/api/studies/{plain}/").json()["held_out"] is None
    assert cli("study", "list") == 0
    rows = [r for r in capsys.readouterr().out.splitlines() if r[:1].isdigit()]
    assert [int(r.split()[0]) for r in rows] == [plain, body["id"]]
    assert "compressors" in rows[1] and "5/20" not in rows[1] and "0/20" in rows[1]
    assert cli("study", "list", "--json") == 0
    assert [s["id"] for s in json.loads(capsys.readouterr().out)] == [plain, body["id"]]


@pytest.mark.parametrize(
    ("algorithms", "words"),
    [("allreduce,sgd-with-magic", "sgd-with-magic"), ("topk:density=7", "density")],
)
def test_a_refused_algorithm_is_exit_code_2_naming_algorithms(cli, capsys, algorithms, words):
    code = cli("study", "create", "refused", "--algorithms", algorithms, *SMALL)
    err = capsys.readouterr().err
    assert code == EXIT_USAGE, err
    assert err.startswith("mlbench: error: the master refused the request (HTTP 400): ")
    assert "algorithms: " in err and words in err
    assert not Study.objects.exists() and not Run.objects.exists()


def test_usage_errors_before_anything_is_sent(cli, capsys):
    with pytest.raises(SystemExit) as stopped:
        cli("study", "create", "x", "--algorithms", "rank=2")
    assert stopped.value.code == EXIT_USAGE
    assert "an option needs its algorithm first" in capsys.readouterr().err
    assert cli("study", "create", "x", *SMALL) == EXIT_USAGE
    assert "--algorithms allreduce,powersgd" in capsys.readouterr().err
    assert cli("study", "create", "x", "--algorithms", "allreduce", "--algorithm-option",
               "rank=2") == EXIT_USAGE  # fmt: skip
    assert "--algorithm-file's options" in capsys.readouterr().err
    assert not Study.objects.exists()


def _row(out: str, series: int) -> list[str]:
    """The cells of the cell table's row of `series`, cut where the rule under the headers
    puts the columns."""
    lines = out.splitlines()
    at = next(i for i, x in enumerate(lines) if x.split(" ", 1)[0] == str(series))
    rule = next(x for x in reversed(lines[:at]) if x and set(x) == {"-", " "})
    starts = [i for i, c in enumerate(rule) if c == "-" and (i == 0 or rule[i - 1] == " ")]
    return [lines[at][a:b].strip() for a, b in zip(starts, [*starts[1:], None], strict=True)]


def test_show_prints_the_numbers_the_api_answers(cli, capsys):
    body = _scored(cli)
    assert cli("study", "show", str(body["id"]), "--wide") == 0
    out = capsys.readouterr().out
    ratios = {(r["algorithm"], r["workload"], r["condition"]): r["ratio"]
              for r in body["score"]["ratios"]}  # fmt: skip
    for cell in body["cells"]:
        row = _row(out, cell["series"])
        median = cell["median"]
        seconds = median["time_to_target"]
        assert row[1:4] == [cell["workload"],
                            cell["condition"] + (" (held-out)" if cell["variant"] else ""),
                            cell["algorithm"]]  # fmt: skip
        assert row[4] == ("∞" if seconds is None else f"{seconds:.1f} s")
        ratio = ratios.get((cell["algorithm"], cell["workload"], cell["condition"]))
        assert row[5] == ("-" if cell["variant"] else "∞" if ratio is None else f"{ratio:.2f}")
        assert row[8] == f"{median['reached']}/{median['seeds']}"
        assert row[10] == f"{cell['budget']:g} s"
    fast = next(c for c in body["cells"] if c["median"]["time_to_target"] == 11.0)
    assert _row(out, fast["series"])[4:8] == ["11.0 s", "1.00", "11.0 kB", "2"]
    missed = next(c for c in body["cells"] if c["median"]["reached"] == 1)
    assert _row(out, missed["series"])[4:8] == ["∞", "∞", "∞", "∞"]
    assert "1: 20.0 s, 2: ∞" in out  # each run's outcome, with --wide
    score = body["score"]
    for algorithm in body["algorithms"]:
        label = algorithm["label"]
        line = next(x for x in out.splitlines() if x.startswith(label + "  "))
        expected = [f"{score['by_condition'][c][label]:.4f}" for c in ("unlimited", "10mbit")]
        assert line.split()[-3:] == [*expected, f"{score['overall'][label]:.4f}"]
    assert score["overall"][body["algorithms"][0]["label"]] == pytest.approx(5 / 6)
    assert "0.8333" in out and "0.5000" in out and "UNLIMITED  10MBIT  OVERALL" in out
    assert "held-out gate: every algorithm passed on every workload" in out
    assert cli("study", "show", str(body["id"]), "--json") == 0
    assert json.loads(capsys.readouterr().out) == cli.api.get(f"/api/studies/{body['id']}/").json()


def test_a_running_study_says_what_is_pending_and_cancel_ends_it(cli, capsys):
    assert cli("study", "create", "to cancel", "--algorithms", "allreduce,topk", *SMALL) == 0
    study_id = _created(capsys.readouterr().out)
    assert cli("study", "show", str(study_id)) == 0
    out = capsys.readouterr().out
    assert "pending 6 runs: the score comes once every run has its outcome" in out
    assert "pending" in _row(out, Run.objects.order_by("id").first().series_id)[4]
    assert cli("study", "plot", str(study_id), "-o", "x.png") == EXIT_CONFLICT
    assert "has no score yet: 6 runs pending" in capsys.readouterr().err
    assert cli("study", "export", str(study_id), "-o", "early.zip") == EXIT_CONFLICT
    err = capsys.readouterr().err  # the master's words: wait, or cancel the study
    assert "still pending" in err and err.count(f"mlbench study cancel {study_id}") == 1
    assert "export it again" in err and "delete RUN" not in err and "series" not in err
    assert cli("study", "cancel", str(study_id)) == 0
    assert f"study {study_id} cancelled" in capsys.readouterr().out
    assert not Run.objects.filter(state__in=[Run.QUEUED, *Run.ACTIVE_STATES]).exists()
    assert cli("study", "cancel", str(study_id)) == EXIT_CONFLICT
    assert "no queued or active run left to cancel" in capsys.readouterr().err
    for verb in ("show", "cancel", "plot", "export"):
        extra = ["-o", "x.svg"] if verb == "plot" else []
        assert cli("study", verb, "999999", *extra) == EXIT_NOT_FOUND
        err = capsys.readouterr().err
        assert "study 999999 does not exist (`mlbench study list` lists them)" in err


def test_wait_follows_the_study_until_every_run_has_its_outcome(cli, capsys, live_server):
    body = _scored(cli)
    token = issue_user_token("root", create_user=True, superuser=True)
    args = argparse.Namespace(json=False, wide=False)
    assert study_cli._wait(args, Master(live_server.url, token), body["id"]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"study {body['id']}: 10 of 10 runs ended, 0 queued, 0 pending\n")
    assert "OVERALL" in out


def _described(svg: bytes) -> dict:
    """The chart's drawn points, stored in the SVG's Dublin Core description."""
    root = ET.fromstring(svg)
    assert root.tag == "{http://www.w3.org/2000/svg}svg"
    text = next(e.text for e in root.iter() if e.tag.endswith("}description"))
    return json.loads(text)


def test_plot_writes_the_profiles_as_png_and_svg(cli, capsys, tmp_path):
    body = _scored(cli)
    png, svg = tmp_path / "profiles.png", tmp_path / "profiles.svg"
    assert cli("study", "plot", str(body["id"]), "--output", str(png)) == 0
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert cli("study", "plot", str(body["id"]), "-o", str(svg)) == 0
    assert "wrote " in capsys.readouterr().out
    drawn = _described(svg.read_bytes())
    tau_max = body["score"]["tau_max"]
    assert drawn["tau_max"] == tau_max
    for condition, curves in body["score"]["profiles"].items():
        for label, steps in curves.items():  # the API's steps, held to tau_max
            assert drawn["profiles"][condition][label] == [*steps, [tau_max, steps[-1][1]]]
    assert cli("study", "plot", str(body["id"]), "-o", str(tmp_path / "x.pdf")) == EXIT_USAGE
    assert "must end in .png or .svg" in capsys.readouterr().err


def test_export_writes_the_studys_bundle(cli, capsys, tmp_path):
    body = _scored(cli)
    target = tmp_path / "study.zip"
    code = cli("study", "export", str(body["id"]), "-o", str(target))
    captured = capsys.readouterr()
    assert code == 0, captured.err
    assert captured.out.startswith(f"wrote {target} (")
    with zipfile.ZipFile(target) as zf:
        assert "mlbench-bundle.json" in zf.namelist()
    assert not list(tmp_path.glob(".*.part"))


def test_the_client_creates_lists_gets_and_cancels_a_study(cli, live_server):
    token = issue_user_token("root", create_user=True, superuser=True)
    with ApiClient(url=live_server.url, token=token, in_cluster=False) as client:
        created = client.create_study(
            "client", ["allreduce", {"algorithm": "topk", "options": {"density": 0.2}}],
            workloads=["logreg-epsilon"], conditions=["unlimited"], seeds=[1, 2],
            num_workers=2, held_out=False, reuse=False,
        ).result()  # fmt: skip
        assert created.status_code == 201, created.text
        body = created.json()
        assert body["held_out"] is None and body["runs"]["total"] == 4
        assert body["algorithms"][1]["options"] == {"density": 0.2}
        assert [s["id"] for s in client.list_studies().result().json()] == [body["id"]]
        detail = client.get_study(body["id"]).result().json()
        assert detail["pending_runs"] == 4 and detail["score"] is None
        assert client.cancel_study(body["id"]).result().status_code == 200
        assert client.cancel_study(body["id"]).result().status_code == 409
        refused = client.create_study("bad", ["allreduce"], conditions=["pigeon"]).result()
        assert refused.status_code == 400 and "conditions" in refused.json()["errors"]
        assert client.get_study(999999).result().status_code == 404
