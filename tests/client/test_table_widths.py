"""Every table command fits the terminal: its default view is no wider than 120 columns (80
where the columns that matter fit), `--wide` shows every column, `--json` parses. Measured
on data of realistic widths, stored on a live master (pytest-django's live server on real
PostgreSQL): long run names, algorithms with options, other implementations, a failed run
with its reason, priced runs, a series over many seeds and worker counts, a run imported
from another installation (tests/board/stored.py), trusted keys, an algorithm study over
every network condition with algorithms of many options, scored."""

from __future__ import annotations

import contextlib
import io
import json

import pytest

from mlbench_master.accounts.users import issue_user_token
from mlbench_master.api.models import Run
from mlbench_master.cluster import node_kinds
from mlbench_worker.client.cli import main
from tests.api.test_study_scores import _ended
from tests.board.stored import prepared
from tests.results.conftest import Maker

pytestmark = pytest.mark.django_db(transaction=True)

LONG_NAMES = [
    "resnet20-cifar10 on 1 worker, the baseline of the network study (second try)",
    "resnet20-cifar10 on 2 workers, powersgd rank 4 over a 100 Mbit/s link",
    "resnet20-cifar10 on 4 workers with torch-ddp, gloo, after the driver update",
]


@pytest.fixture
def wide(live_server, settings, tmp_path, monkeypatch, redis_settings):
    """The master's runs, series, board and keys at realistic widths; `wide.cli(*argv)` runs
    `mlbench` (its exit code and what it printed), `wide.ids` names the runs."""
    stored = prepared(settings, tmp_path)
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("COLUMNS", raising=False)
    token = issue_user_token("root", create_user=True, superuser=True)
    from rest_framework.test import APIClient

    api = APIClient()
    api.credentials(HTTP_AUTHORIZATION=f"Token {token}")
    price = {"node_kind": "local", "price_per_hour": 2.0, "currency": "USD",
             "source": "our own list", "as_of": "2026-11-01"}  # fmt: skip
    assert api.post("/api/prices/", price, format="json").status_code == 201
    maker = Maker(api)
    cifar = {"task": "resnet20-cifar10", "dataset": "cifar10", "target": "standard"}
    ids = {}
    for name, workers, algorithm, options, implementation, reach in (
        (LONG_NAMES[0], 1, "allreduce", {}, "reference", 400.0),
        (LONG_NAMES[1], 2, "powersgd", {"rank": 4, "start_iter": 10}, "reference", 230.0),
        (LONG_NAMES[2], 4, "allreduce", {}, "torch-ddp", 140.0),
    ):
        run = maker.run(
            None, 1234, workers,
            [(reach / 2, 0.5, 1.0), (reach, 0.81, 2.0), (reach + 3000, 0.923, 3.0)],
            target_value=0.8, rate=61234.5, nodes=node_kinds.local_nodes(workers),
            seconds=reach + 3300, **cifar,
        )  # fmt: skip
        Run.objects.filter(pk=run.pk).update(
            name=name, algorithm=algorithm, algorithm_options=options,
            implementation=implementation, backend="gloo" if workers == 4 else "mpi",
        )  # fmt: skip
        ids[workers] = run.pk
    failed = maker.run(None, 7, 8, [(30.0, 0.2, 0.5)], state=Run.FAILED, summary=False, **cifar)
    Run.objects.filter(pk=failed.pk).update(
        name="eight workers on the shared cluster, killed by the node's OOM killer",
        reason="rank 5 exited with code 137 (killed: out of memory?): see `mlbench logs` for "
        "the last lines of every rank",
    )
    ids["failed"] = failed.pk
    ids["imported"] = stored.runs["imported"].pk
    series = maker.series(
        name="scaling study of powersgd on epsilon, five seeds", seeds=[1, 2, 3, 4, 5],
        worker_counts=[1, 2, 4, 8],
    )  # fmt: skip
    for seed in (1, 2, 3):
        for workers, reach in ((1, 1234.5), (2, 700.25), (4, 400.75), (8, 260.5)):
            maker.run(
                series, seed, workers, [(reach / 2, 0.5, 1.0), (reach + seed, 0.85, 2.0)],
                nodes=node_kinds.local_nodes(workers), rate=36000.0 * workers,
            )  # fmt: skip
    ids["series"] = series.pk
    study = api.post("/api/studies/", {
        "name": "compressors against the all-reduce on every link, the second attempt",
        "algorithms": ["allreduce", {"algorithm": "powersgd", "options": {"rank": 4}},
                       {"algorithm": "topk", "options": {"density": 0.05}}],
        "workloads": ["logreg-epsilon"], "seeds": [1],
    }, format="json")  # fmt: skip
    assert study.status_code == 201, study.content
    for n, cell in enumerate(study.json()["cells"]):  # every cell scored, one a miss
        for run in Run.objects.filter(series_id=cell["series"]):
            _ended(run, None if n == 1 else 5.0 + n, state=Run.FAILED if n == 1 else Run.FINISHED)
    ids["study"] = study.json()["id"]

    def cli(*argv: str, columns: int | None = None) -> tuple[int, str]:
        if columns is None:
            monkeypatch.delenv("COLUMNS", raising=False)
        else:
            monkeypatch.setenv("COLUMNS", str(columns))
        out, err = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = main(["--url", live_server.url, "--token", token, *argv])
        return code, out.getvalue() + err.getvalue()

    cli.ids = ids
    return cli


def commands(ids: dict) -> dict[str, list[str]]:
    """Every command that prints a table, on the data above."""
    return {
        "runs": ["runs"],
        "show": ["show", str(ids[2])],
        "show imported": ["show", str(ids["imported"])],
        "report": ["report", str(ids[1]), str(ids[2]), str(ids[4]), str(ids["imported"])],
        "report --series": ["report", "--series", str(ids["series"])],
        "series": ["series"],
        "series ID": ["series", str(ids["series"])],
        "board": ["board"],
        "trust list": ["trust", "list"],
        "study list": ["study", "list"],
        "study show": ["study", "show", str(ids["study"])],
    }


# Every column of each command, as --wide shows them (the throughput column of `report` is
# THROUGHPUT: the runs listed count images and samples).
WIDE_HEADERS = {
    "runs": ["ID", "NAME", "STATE", "WORKERS", "TASK", "ALGORITHM", "IMPLEMENTATION", "DATASET",
             "TARGET", "SEED", "CREATED", "TIME", "REASON"],
    "report": ["ID", "NAME", "STATE", "WORKERS", "ALGORITHM", "IMPLEMENTATION", "DATASET",
               "TARGET", "TIME TO TARGET", "ACC AFTER TIME", "THROUGHPUT", "SPEED-UP", "COMM",
               "SENT/STEP", "SENT TO TARGET", "COST TO TARGET / RUN"],
    "report --series": ["WORKERS", "REACHED", "TIME TO TARGET median (mean ± sd, cv)",
                        "OLYMPIC", "MIN–MAX", "ACC AFTER TIME", "SAMPLES/S", "COMM", "SPEED-UP",
                        "EFFICIENCY", "COST TO TARGET median", "PRICE INDEX", "VALID"],
    "series": ["ID", "NAME", "STATE", "SEEDS", "WORKERS", "RUNS", "CREATED"],
    "series ID": ["RUN", "SEED", "WORKERS", "STATE", "REASON", "OLYMPIC", "MIN–MAX"],
    "board": ["RANK", "SCORE", "WORKERS", "SEEDS", "HARDWARE", "ALGORITHM", "IMPLEMENTATION",
              "NETWORK", "BACKEND", "RUNS", "COST", "ORIGIN", "GRADED ON", "NOT RANKED"],
    "trust list": ["FINGERPRINT", "NAME", "RUNS", "ADDED BY", "ADDED", "PUBLIC KEY"],
    "study list": ["ID", "NAME", "STATE", "ALGORITHMS", "WORKLOADS", "CONDITIONS", "SEEDS",
                   "RUNS", "CREATED"],
    "study show": ["SERIES", "WORKLOAD", "CONDITION", "ALGORITHM", "TIME TO TARGET", "RATIO",
                   "BYTES TO TARGET", "EPOCHS", "REACHED", "REUSED", "BUDGET",
                   "RUNS (SEED: TIME)", "UNLIMITED", "100MBIT-20MS", "OVERALL"],
}  # fmt: skip


def width(text: str) -> int:
    return max((len(line) for line in text.splitlines()), default=0)


def headers(text: str) -> list[list[str]]:
    """The column names of each table in `text` (the line above each rule of dashes)."""
    lines = text.splitlines()
    found = []
    for above, rule in zip(lines, lines[1:], strict=False):
        if rule and set(rule.replace(" ", "")) == {"-"}:
            starts = [i for i, c in enumerate(rule) if c == "-" and (i == 0 or rule[i - 1] == " ")]
            ends = [*starts[1:], None]
            found.append([above[a:b].strip() for a, b in zip(starts, ends, strict=True)])
    return found


def table_lines(text: str) -> list[str]:
    """The lines of the tables in `text`: headers, rules and rows."""
    lines = text.splitlines()
    inside = []
    for i, line in enumerate(lines[1:], 1):
        if line and set(line.replace(" ", "")) == {"-"}:
            inside += [lines[i - 1], line]
            for row in lines[i + 1 :]:
                if not row or not (row[0].isdigit() or row[:2] == "- "):
                    break
                inside.append(row)
    return inside


@pytest.mark.parametrize("columns", [120, 100, 80])
def test_every_table_fits_the_terminal(wide, columns):
    """A terminal of COLUMNS: every line of every command fits, the long names shortened
    with an ellipsis, the prose wrapped; the columns that matter stay."""
    for name, argv in commands(wide.ids).items():
        code, out = wide(*argv, columns=columns)
        assert code == 0, out
        too_long = [line for line in out.splitlines() if len(line) > columns]
        assert not too_long, f"{name} at {columns} columns:\n" + "\n".join(too_long)
        for names in headers(out):
            assert names[0] in ("ID", "RUN", "WORKERS", "RANK", "FINGERPRINT", "SERIES",
                                "ALGORITHM"), (name, names)  # fmt: skip
    code, out = wide("report", str(wide.ids[1]), str(wide.ids[2]), str(wide.ids[4]), columns=120)
    first = headers(out)[0]
    assert first == ["ID", "NAME", "STATE", "WORKERS", "TARGET", "TIME TO TARGET",
                     "ACC AFTER TIME", "IMAGES/S", "SPEED-UP", "COST TO TARGET"]  # fmt: skip
    assert "…" in out and "left out" not in out  # names shortened; at 120 nothing is left out


def test_no_terminal_is_120_columns_for_tables_and_one_line_a_note(wide):
    """Into a pipe or a file (no COLUMNS): the tables fit 120 columns; a note stays one
    line, for grep."""
    for name, argv in commands(wide.ids).items():
        code, out = wide(*argv)
        assert code == 0, out
        if name.startswith("show"):  # lines of NAME and value, no table: one line each
            line = next(x for x in out.splitlines() if x.startswith(("cost ", "origin ")))
            assert line.rstrip().endswith(("USD/h", "origin)")), line
            continue
        assert table_lines(out) and max(len(line) for line in table_lines(out)) <= 120, name
    code, out = wide("report", str(wide.ids[1]), str(wide.ids[2]), str(wide.ids["imported"]))
    warning = out.splitlines()[0]
    assert warning.startswith("warning: ") and warning.endswith("of the same set-up.")
    assert len(warning) > 120


def test_a_narrow_terminal_leaves_out_the_least_important_columns_and_says_so(wide):
    code, out = wide("report", str(wide.ids[1]), str(wide.ids[2]), columns=80)
    assert code == 0
    kept = headers(out)[0]
    assert kept[:2] == ["ID", "NAME"] and "TIME TO TARGET" in kept and "ACC AFTER TIME" in kept
    assert "TARGET" not in kept  # the first to go
    assert "(to fit 80 columns, left out: TARGET, " in out and "; --wide shows all)" in out
    assert width(out) <= 80


def test_wide_shows_every_column_whole(wide):
    wanted = {**commands(wide.ids)}
    for name, expected in WIDE_HEADERS.items():
        code, out = wide(*wanted[name], "--wide")
        assert code == 0, out
        shown = [h for names in headers(out) for h in names]
        assert set(expected) <= set(shown), (name, set(expected) - set(shown))
        assert "left out" not in out and "…" not in out
    code, out = wide("runs", "--wide")
    for long in LONG_NAMES:
        assert long in out
    assert "powersgd (rank 4, start_iter 10)" in out and "torch-ddp (PyTorch" in out
    assert "see `mlbench logs` for the last lines of every rank" in out  # the whole reason
    code, out = wide("report", str(wide.ids[1]), str(wide.ids[2]), "--wide")
    row = next(line for line in out.splitlines() if line.startswith(f"{wide.ids[2]} "))
    assert LONG_NAMES[1] in row and "standard (80.0%)" in row and row.endswith(" USD")
    code, out = wide("show", str(wide.ids[2]), "--wide")
    assert '"train_samples": 4000}' in out  # the summary's dicts whole


@pytest.mark.parametrize(
    "name", ["runs", "show", "report", "report --series", "series", "series ID", "board",
             "trust list", "study list", "study show"],
)  # fmt: skip
def test_json_parses(wide, name):
    code, out = wide(*commands(wide.ids)[name], "--json")
    assert code == 0, out
    json.loads(out)


def test_report_json_has_the_numbers(wide):
    one, two, four = wide.ids[1], wide.ids[2], wide.ids[4]
    code, out = wide("report", str(one), str(four), "--json", "--across-implementations")
    assert code == 0, out
    body = json.loads(out)
    runs = {r["id"]: r for r in body["runs"]}
    assert runs[one]["time_to_target"] == 400.0 and runs[one]["speedup"] == 1.0
    assert runs[four]["speedup"] == pytest.approx(400.0 / 140.0)
    assert runs[four]["speedup_from"] == "time_to_target" and runs[four]["speedup_against"] == one
    assert runs[four]["cross_implementation"] is True
    assert runs[four]["throughput_unit"] == "images/s"
    assert runs[four]["accuracy_after_time"] == pytest.approx(0.923)
    assert runs[four]["cost"]["currency"] == "USD"
    assert body["warning"] is None
    assert any("cross-implementation ratio" in note for note in body["notes"])
    assert two not in runs


MISSING = 999999


@pytest.mark.parametrize(
    ("argv", "kind"),
    [
        (["show", "{m}"], "run"),
        (["report", "{r}", "{m}"], "run"),
        (["logs", "{m}"], "run"),
        (["download", "{m}"], "run"),
        (["download", "{m}", "--mllog"], "run"),
        (["delete", "{m}"], "run"),
        (["export", "{m}"], "run"),
        (["export", "{r}", "{m}"], "run"),
        (["report", "{m}", "--plot", "x.png"], "run"),
        (["series", "{m}"], "series"),
        (["series", "{m}", "--cancel"], "series"),
        (["report", "--series", "{m}"], "series"),
        (["delete", "--series", "{m}"], "series"),
        (["export", "--series", "{m}"], "series"),
        (["download", "--series", "{m}", "--mllog"], "series"),
    ],
)
def test_an_unknown_id_is_named_with_the_command_that_lists_them(wide, argv, kind):
    argv = [a.format(m=MISSING, r=wide.ids[1]) for a in argv]
    code, out = wide(*argv)
    listing = "mlbench runs" if kind == "run" else "mlbench series"
    assert code == 5, out
    assert f"mlbench: error: {kind} {MISSING} does not exist (`{listing}` lists them)" in out
    assert "matches the given query" not in out


def test_evaluate_names_a_data_dir_that_is_not_there(wide, tmp_path):
    missing = tmp_path / "nonexistent"
    code, out = wide("evaluate", str(wide.ids[1]), "--data-dir", str(missing))
    assert code == 2 and f"--data-dir {missing}: does not exist" in out
    (tmp_path / "a-file").write_text("x")
    code, out = wide("evaluate", str(wide.ids[1]), "--data-dir", str(tmp_path / "a-file"))
    assert code == 2 and "is not a folder" in out


def test_one_is_singular(wide):
    code, out = wide("board", "--wide")
    assert code == 0 and " 1 runs" not in out and "1 run, 1 reached" in out
    code, out = wide("series", str(wide.ids["series"]))
    assert "12 of 12 runs started" in out
