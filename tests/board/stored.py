"""Stored results for the board tests (tests/board, tests/client, tests/browser): local
runs made as tests/results' Maker makes them (real and generated data, self-reported and evaluated, reaching the target or not) and one
run imported from another installation through a real bundle, whose key this installation
trusts (`trust_origin`; tests/board/test_trust_board.py leaves it unverified). No worker
runs."""

from __future__ import annotations

from dataclasses import dataclass, field

from rest_framework.test import APIClient

from mlbench_master.accounts.users import issue_user_token
from mlbench_master.api.models import Run
from mlbench_master.bundles import trust
from tests.bundles import data
from tests.results.conftest import Maker

TASK = "logreg-epsilon"


# (elapsed s, accuracy, epoch): the target (0.8) reached at the second evaluation's clock.
def evals(reach_at: float) -> list[tuple[float, float, float]]:
    return [(reach_at / 2, 0.5, 1.0), (reach_at, 0.85, 2.0), (reach_at + 10, 0.86, 3.0)]


NEVER = [(20.0, 0.4, 1.0), (40.0, 0.5, 2.0)]


@dataclass
class Stored:
    """The board's runs by role; `imported` is this master's copy of the origin's run."""

    runs: dict[str, Run] = field(default_factory=dict)
    origin_fingerprint: str = ""
    origin_key: str = ""
    origin_run: int = 0


def store(staff: APIClient, settings, tmp_path, trust_origin: bool = True) -> Stored:
    """Every role of the board, in one database: first the origin installation's run,
    exported and removed (as if on another master), then this installation's runs and the
    import of the origin's bundle; then, with `trust_origin`, the operator trusts the
    origin's key (else its run is an unverified origin's, ranked nowhere)."""
    out = Stored()
    maker = Maker(staff)
    settings.MLBENCH_HOME = tmp_path / "origin"
    far = maker.run(None, 5, 2, evals(30.0), task=TASK, dataset="epsilon")
    bundle = data.export(staff, f"/api/runs/{far.pk}/bundle/")
    origin = staff.get("/api/installation/").json()
    out.origin_fingerprint, out.origin_key = origin["fingerprint"], origin["public_key"]
    out.origin_run = far.pk
    Run.objects.filter(pk=far.pk).delete()
    settings.MLBENCH_HOME = tmp_path / "here"
    out.runs["two"] = maker.run(None, 1, 2, evals(40.0), task=TASK, dataset="epsilon")
    out.runs["one"] = maker.run(None, 2, 1, evals(60.0), task=TASK, dataset="epsilon")
    out.runs["missed"] = maker.run(None, 3, 4, NEVER, task=TASK, dataset="epsilon")
    out.runs["synthetic"] = maker.run(None, 4, 2, evals(10.0), task=TASK, dataset="synthetic")
    out.runs["graded"] = maker.run(
        None, 6, 2, evals(50.0), task=TASK, dataset="epsilon", graded=[0.5, 0.85, 0.86]
    )
    Run.objects.filter(pk=out.runs["one"].pk).update(backend="gloo", max_bandwidth=100)
    answer = data.post_bundle(staff, bundle)
    assert answer.status_code == 201, answer.content
    out.runs["imported"] = Run.objects.get(origin__origin_run=far.pk)
    if trust_origin:
        trust.add(out.origin_key, "the board tests' origin", None)
    return out


def prepared(settings, tmp_path, trust_origin: bool = True) -> Stored:
    """`store` with a staff token of its own, MLBENCH_HOME under `tmp_path`, reads private."""
    settings.MLBENCH_CLUSTER = "local"
    settings.MLBENCH_PUBLIC_READ = False
    for name in ("origin", "here"):
        (tmp_path / name).mkdir(exist_ok=True)
    staff = APIClient()
    token = issue_user_token("root", create_user=True, superuser=True)
    staff.credentials(HTTP_AUTHORIZATION=f"Token {token}")
    return store(staff, settings, tmp_path, trust_origin)
