"""A count of runs reads as words: "1 run", "2 runs", never "run(s)" (issue 50), in the
409 of a full queue and in a series' statistics that are not valid yet."""

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from mlbench_master.results.statistics import _validity
from mlbench_master.runs.lifecycle import RunConflict


@pytest.mark.parametrize(
    ("queued", "said"), [(1, "1 run waits in the queue"), (2, "2 runs wait in the queue")]
)
def test_the_queue_conflict_counts_runs(queued, said):
    message = str(RunConflict(None, queued))
    assert message.startswith(said + ";") and "(s)" not in message


@pytest.mark.parametrize(
    ("pending", "said"), [(1, "1 run not finished yet"), (3, "3 runs not finished yet")]
)
def test_statistics_pending_runs_are_counted(pending, said):
    assert _validity(4, pending, 0) == (False, said)


JS = Path(__file__).resolve().parents[2] / "mlbench_master" / "dashboard" / "static" / "dashboard"


@pytest.mark.parametrize("script", ["bundles.js", "trust.js", "board.js"])
def test_the_pages_count_runs_in_words_too(script):
    """The browser tests see "2 runs stored" on the bundles page (tests/browser/test_bundles.py);
    the trust and board pages say their counts the same way."""
    text = (JS / "js" / script).read_text()
    assert "run(s)" not in text
    assert "runsText(" in text or "importedRuns(" in text


def _node(definition: str, expression: str) -> str:
    """`expression` evaluated by node after a helper's definition, as the page runs it."""
    node = shutil.which("node")
    if node is None:
        pytest.skip("node is not installed")
    done = subprocess.run(
        [node, "-e", f"{definition}\nconsole.log({expression});"],
        capture_output=True, text=True, timeout=30,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def _helper(script: str, name: str) -> str:
    text = (JS / "js" / script).read_text()
    found = re.search(rf"^const {name} = .*?;$", text, re.M | re.S)
    assert found, f"{script} lost {name}"
    return found.group(0)


@pytest.mark.parametrize("script", ["bundles.js", "board.js"])
def test_the_pages_helper_says_1_run_and_2_runs(script):
    helper = _helper(script, "runsText")
    assert (
        _node(helper, "[runsText(1), runsText(2), runsText(0)].join('|')") == "1 run|2 runs|0 runs"
    )


def test_the_trust_page_agrees_its_verb_with_the_count():
    helper = _helper("trust.js", "importedRuns")
    said = _node(helper, "[importedRuns(1, 'is', 'are'), importedRuns(3, 'is', 'are')].join('|')")
    assert said == "1 imported run is|3 imported runs are"
