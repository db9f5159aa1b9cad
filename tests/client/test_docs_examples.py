"""The example outputs in docs/cli.rst and docs/quickstart.rst have the shape of what the
commands print today: a block marked ``.. output of: COMMAND`` in the docs is compared with
the output the `mlbench` code prints against the live master, for runs made here (a short
command under mpirun, then the metric points and summary a worker posts, posted with the
master's staff token).

What is compared is the shape, not the numbers: each table's column headers, and that its
rows line up under them as `formatting.table` lays them out; each other line's format
(numbers, durations, names and URLs replaced by placeholders). A documented line of a kind
the command did not print here fails the test too, so the examples cannot drift."""

from __future__ import annotations

import contextlib
import datetime as dt
import io
import re
import uuid
from pathlib import Path

import pytest

from mlbench_worker.client.cli.master import Master
from mlbench_worker.client.cli.waiting import Progress, latest_metrics, wait_for
from tests.e2e.live import script
from tests.summaries import summary_body

pytestmark = pytest.mark.mpi

DOCS = Path(__file__).resolve().parents[2] / "docs"
MARK = re.compile(r"^\.\. output of: (.+)$")
FINAL = ("FINISHED", "FAILED", "CANCELLED")


def documented(name: str) -> list[tuple[str, list[str]]]:
    """Each marked block of docs/NAME: (the command it shows, its lines unindented)."""
    lines = (DOCS / name).read_text().splitlines()
    blocks = []
    for i, line in enumerate(lines):
        mark = MARK.match(line.strip())
        if not mark:
            continue
        j = i + 1
        while not (lines[j].rstrip().endswith("::") or ".. code-block::" in lines[j]):
            j += 1
        j += 1
        while not lines[j].strip():
            j += 1
        indent = len(lines[j]) - len(lines[j].lstrip())
        body = []
        while j < len(lines) and (not lines[j].strip() or lines[j].startswith(" " * indent)):
            body.append(lines[j][indent:])
            j += 1
        while body and not body[-1].strip():
            body.pop()
        blocks.append((mark.group(1).strip(), body))
    return blocks


def shape(line: str) -> str:
    """A line's format: URLs, quoted names, the progress bar, durations and numbers become
    placeholders; runs of spaces one double space."""
    s = re.sub(r"https?://\S+", "URL", line)
    s = re.sub(r"'[^']*'", "'NAME'", s)
    s = re.sub(r"\[#*-*\]", "[BAR]", s)
    s = re.sub(r"\b(\d+h\d+m|\d+m\d+s|\d+s)\b", "D", s)
    s = re.sub(r"\d+(\.\d+)?", "9", s)
    return re.sub(r" {2,}", "  ", s).strip()


def tables(lines: list[str]) -> list[tuple[list[str], list[int], list[str]]]:
    """Each table in `lines`: (its column names, where each column starts, its rows)."""
    found = []
    for i in range(len(lines) - 1):
        rule = lines[i + 1]
        if not rule.strip() or set(rule.replace(" ", "")) != {"-"}:
            continue
        starts = [m.start() for m in re.finditer(r"-+", rule)]
        ends = [*starts[1:], None]
        names = [lines[i][a:b].strip() for a, b in zip(starts, ends, strict=True)]
        rows = []
        for row in lines[i + 2 :]:
            if not row.strip() or row[0] == " " or not row[0].isdigit():
                break
            rows.append(row)
        found.append((names, starts, rows))
    return found


def in_tables(lines: list[str]) -> set[int]:
    """Indexes of the lines that belong to a table (header, rule, rows)."""
    inside = set()
    for i in range(len(lines) - 1):
        if lines[i + 1].strip() and set(lines[i + 1].replace(" ", "")) == {"-"}:
            inside |= {i, i + 1}
            for k in range(i + 2, len(lines)):
                if not lines[k].strip() or lines[k][0] == " " or not lines[k][0].isdigit():
                    break
                inside.add(k)
    return inside


def assert_same_shape(command: str, doc: list[str], real: list[str]) -> None:
    """The documented block `doc` has the shape of the real output `real` of `command`."""
    doc_tables, real_tables = tables(doc), tables(real)
    assert len(doc_tables) <= len(real_tables), (command, doc, real)
    for (names, starts, rows), (real_names, _, _) in zip(doc_tables, real_tables, strict=False):
        assert names == real_names, f"{command}: the docs' columns {names} != {real_names}"
        for row in rows:  # laid out as formatting.table lays rows out
            for start in starts[1:]:
                if start < len(row):  # else an empty last cell, cut off as `table` cuts it
                    assert row[start - 2 : start] == "  " and row[start] != " ", (command, row)
    # Other lines: a wrapped line (continued with an indent) is one line, in the docs as in
    # the output (which wraps its prose to the terminal's width).
    formats = {shape(line) for line in unwrapped(real)}
    for line in unwrapped(doc):
        assert shape(line) in formats, f"{command}: {line!r} is not printed so; it prints:\n" + (
            "\n".join(sorted(formats))
        )


def unwrapped(lines: list[str]) -> list[str]:
    """The lines outside tables, each wrapped one (continued with an indent) joined."""
    joined: list[str] = []
    skip = in_tables(lines)
    for i, line in enumerate(lines):
        if i in skip or not line.strip() or line.startswith("$ "):
            continue
        if line.startswith(" ") and joined:
            joined[-1] += " " + line.strip()
        else:
            joined.append(line)
    return joined


def post(master, run_id: int, points: list[tuple[str, float, float]]) -> None:
    """Metric points as rank 0 posts them: (name, value, benchmark clock)."""
    begun = dt.datetime.now(dt.UTC) - dt.timedelta(seconds=max(t for _, _, t in points) + 5)
    body = [
        {"run_id": run_id, "name": name, "value": value, "uid": uuid.uuid4().hex,
         "date": (begun + dt.timedelta(seconds=at)).isoformat(),
         "metadata": {"elapsed": at, "epoch": at / 100, "step": int(at)}}
        for name, value, at in points
    ]  # fmt: skip
    response = master.post("/api/metrics/", body)
    assert response.status_code == 201, response.text


def summarize(master, run_id: int, workers: int, dataset: str, **changes) -> None:
    body = summary_body("resnet20-cifar10", dataset=dataset, num_workers=workers, **changes)
    response = master.post(f"/api/runs/{run_id}/summary/", body)
    assert response.status_code == 200, response.text


def ended(master, run_ids: list[int]) -> None:
    for run_id in run_ids:
        master.wait_state(run_id, FINAL, timeout=120)


@pytest.fixture(scope="module")
def printed(master) -> dict[str, list[str]]:
    """What the commands the docs show print, for runs made here."""
    listed = master.get("/api/runs/").json()
    for run in listed:
        if run["state"] in ("QUEUED", "INITIALIZED", "STARTED"):
            master.delete(f"/api/runs/{run['id']}/")
    # One command for all three, so only their data sets keep them from being compared.
    command = script("sleeper.py") + " 12"
    made = master.cli("run", "first-try", "--workers", "2", "--cpus", "1", "--command",
                      command, "--all-ranks")  # fmt: skip
    assert made.returncode == 0, made.stderr
    first = int(made.stdout.split()[1])
    short = {"custom_image_command": command, "run_all_nodes": True, "num_cpus": 1,
             "queue": True}  # fmt: skip
    one = master.create_run(name="c10-1w", num_workers=1, **short)["id"]
    two = master.create_run(name="c10-2w", num_workers=2, **short)["id"]
    client = Master(master.url, master.token)
    out: dict[str, list[str]] = {}
    no_columns = {k: v for k, v in master.env.items() if k != "COLUMNS"}  # 120 wide

    # The progress line while `first-try` trains: before its first evaluation, then after.
    # A command has no time budget of its own (the master refuses one): the run's record
    # gets the 60 s a reference run started with --time-budget 60 carries.
    master.wait_state(first, ("STARTED",), timeout=120)
    post(master, first, [("epoch", 0.37, 24.0), ("elapsed", 24.0, 24.0),
                         ("train_accuracy", 0.25, 24.0), ("images_per_sec", 612.0, 24.0)])  # fmt: skip
    budgeted = dict(master.run(first), effective_time_budget=60)
    lines = [Progress.render(budgeted, latest_metrics(client, first))]
    post(master, first, [("val_accuracy", 0.31, 30.0), ("epoch", 1.0, 30.0),
                         ("elapsed", 30.0, 30.0)])  # fmt: skip
    lines.append(Progress.render(budgeted, latest_metrics(client, first)))
    out["the progress line"] = lines
    summarize(master, first, 2, "synthetic", final_val_accuracy=0.52, time_to_target=None,
              reached=False, elapsed=75.0, stop_reason="time budget spent",
              dataset_note="CIFAR-10 could not be downloaded", config={"time_budget": 60})  # fmt: skip
    for run_id, workers, ttt in ((one, 1, 210.0), (two, 2, 117.0)):
        summarize(master, run_id, workers, "cifar10", time_to_target=ttt, elapsed=ttt + 90)
    ended(master, [one, two, first])

    # `mlbench run first-try --workers 2 --time-budget 60 --wait`, once the run ended:
    # the last progress line, the end, the results table, its notes, the dashboard.
    buffer = io.StringIO()
    with contextlib.redirect_stdout(buffer), pytest.MonkeyPatch.context() as patch:
        patch.delenv("COLUMNS", raising=False)  # no terminal: 120 columns, as documented
        wait_for(client, first)
    out["mlbench run --wait"] = [made.stdout.splitlines()[0], *lines,
                                 *buffer.getvalue().splitlines()]  # fmt: skip
    report = ["report", str(one), str(two), str(first)]
    for command, args in (("mlbench report", report), ("mlbench report --wide", [*report, "--wide"]),
                          ("mlbench runs", ["runs"]), ("mlbench runs --wide", ["runs", "--wide"])):  # fmt: skip
        done = master.cli(*args, env=no_columns)
        assert done.returncode == 0, done.stderr
        out[command] = done.stdout.splitlines()
    return out


@pytest.mark.parametrize("page", ["cli.rst", "quickstart.rst"])
def test_the_docs_examples_have_the_shape_of_the_real_output(printed, page):
    blocks = documented(page)
    assert blocks, f"docs/{page} marks no example output"
    for command, lines in blocks:
        assert command in printed, f"docs/{page}: no real output of {command!r} here"
        assert_same_shape(command, lines, printed[command])


def test_the_check_finds_a_changed_column_or_line(printed):
    """The comparison fails where an example drifts: a column renamed, a progress line
    with a part the command does not print."""
    for command in ("mlbench report", "mlbench report --wide"):
        real = printed[command]
        header = next(i for i, line in enumerate(real) if line.startswith("ID "))
        renamed = [
            *real[:header],
            real[header].replace("SPEED-UP", "SPEEDUP "),
            *real[header + 1 :],
        ]
        with pytest.raises(AssertionError, match="columns"):
            assert_same_shape(command, renamed, real)
        assert_same_shape(command, real, real)  # wrapped lines and all
    line = printed["the progress line"][0]
    with pytest.raises(AssertionError, match="is not printed so"):
        assert_same_shape("the progress line", [line.replace("train acc", "val acc")], [line])
