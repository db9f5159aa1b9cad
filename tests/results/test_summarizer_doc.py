"""docs/checking.rst's block that scores a series of a task MLPerf's summarizer does not
know (task 2 here) runs as written on an unzipped series and prints our olympic mean in
minutes (issue 50: the page's only snippet scored task 1b alone)."""

from __future__ import annotations

import io
import re
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from mlbench_master.results import mllog
from mlbench_master.results.statistics import for_series

DOC = Path(__file__).resolve().parents[2] / "docs" / "checking.rst"


def _block() -> tuple[str, str]:
    """The folder the doc's `python - FOLDER <<'EOF'` names, and the script it feeds."""
    text = DOC.read_text()
    found = re.search(r"\n    python - (\S+) <<'EOF'\n(.*?)\n    EOF\n", text, re.S)
    assert found, "docs/checking.rst lost its scoring block"
    return found.group(1), "\n".join(line[4:] for line in found.group(2).splitlines())


def test_the_docs_scoring_block_prints_our_olympic_mean(maker, tmp_path):
    folder, script = _block()
    series = maker.series(seeds=[1, 2, 3], worker_counts=[2])
    for seed, end in ((1, 20.0), (2, 26.0), (3, 23.0)):
        maker.run(series, seed, 2, [(10.0, 0.5, 1), (end, 0.85, 2)])
    with zipfile.ZipFile(io.BytesIO(mllog.series_zip(series))) as archive:
        archive.extractall(tmp_path)
    assert (tmp_path / folder).is_dir(), sorted(p.name for p in tmp_path.rglob("*"))
    done = subprocess.run(
        [sys.executable, "-", folder], input=script, capture_output=True, text=True,
        cwd=tmp_path, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    ours = for_series(series)["groups"][0]["time_to_target"]["olympic_mean"]
    minutes = float(done.stdout.split()[-2])
    assert minutes == pytest.approx(ours / 60)
