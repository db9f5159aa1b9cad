"""The entries of the results board, made from their runs (board.py says what an entry is;
kept_entries.py keeps them between reads).

An entry is made in two parts. What its runs alone decide (`Made`: its numbers, cost,
dimensions, links, re-grade and why it may not rank apart from trust, and what its
convergence check is made of) is made here and kept. What is read at each request is
added by `finish`: its origin's trust (the trusted keys as they are now: adding a key
ranks its runs at once), this installation's fingerprint, its rank in its section and its
convergence check against the reference series as they are now.
"""

from __future__ import annotations

import json
import statistics
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from mlbench_master.api.models import Run
from mlbench_master.bundles import origins, trust
from mlbench_master.results import convergence, graded_on, kept_runs, standing, stored
from mlbench_master.results.statistics import summarize
from mlbench_worker.shared import catalogue, result

# The measure's statistic an entry is ranked by, and whether lower is better.
SCORE = {"time_to_target": ("time_to_target", True), "accuracy_after_time": ("accuracy_after_time", False)}  # fmt: skip
# An entry's keys in the order GET /api/results/ has always written them.
ORDER = (
    "id", "task", "goal", "division", "measured", "data", "datasets", "evaluation", "hardware",
    "workers", "algorithm", "algorithm_source", "sent", "implementation", "network", "backend",
    "seeds", "series", "statistics", "cost", "origin", "regrade", "test_examples",
    "whole_test_set", "graded_on", "score", "lower_is_better", "rank", "unranked", "links",
    "runs", "convergence",
)  # fmt: skip
# The keys `finish` adds: an entry's body is kept as the JSON text of the keys between them
# (PARTS), so that an answer is put together from kept text, not decoded and encoded again.
ADDED = ("origin", "rank", "unranked", "convergence")
PARTS = (ORDER[0:20], ORDER[21:27], ORDER[29:31])
SEPARATOR = "\x01"  # never in JSON text: json.dumps writes a control character escaped
# The fields of an entry that sections, filters and the ranking read (StoredEntry columns).
HEAD = (
    "division", "measured", "data", "evaluation", "test_examples", "whole_test_set",
    "graded_on", "score", "lower_is_better", "workers", "hardware", "algorithm",
    "implementation", "network", "backend",
)  # fmt: skip
GroupKey = tuple[str, int, int]  # ("series", series id, workers) or ("run", run id, workers)


def groups_of(rows: Sequence[tuple[int, int | None, int, str]]) -> dict[GroupKey, list[int]]:
    """The entries' groups of runs (id, series, workers, state), in id order: the runs of a
    series with one worker count, or one run outside any series once it has ended."""
    groups: dict[GroupKey, list[int]] = defaultdict(list)
    for pk, series, workers, state in rows:
        if series is not None:
            groups[("series", series, workers)].append(pk)
        elif state in Run.FINAL_STATES:  # a lone run is a result once it has ended
            groups[("run", pk, workers)].append(pk)
    return dict(groups)


def entry_id(key: GroupKey) -> str:
    return f"series-{key[1]}-x{key[2]}" if key[0] == "series" else f"run-{key[1]}"


@dataclass
class Made:
    """An entry less what `finish` adds: `head` the fields sections, filters and ranking
    read, `body` the rest as JSON text (`encode`), `conv` its convergence inputs
    (convergence.inputs); `unranked` why it may not rank, trust aside; its origin's key
    ('' when local)."""

    id: str
    task: str
    head: dict[str, Any]
    seeds: str  # comma-separated, as kept (`seeds_of`)
    unranked: str
    origin_key: str
    origin_fingerprint: str
    body: str
    conv: dict[str, Any]


def seeds_of(made: Made) -> list[int]:
    return [int(s) for s in made.seeds.split(",") if s]


def dumps(value: Any) -> str:
    """JSON text as the API writes it (DRF's JSONRenderer: compact, UTF-8, no NaN, and
    U+2028 and U+2029 escaped for JavaScript)."""
    text = json.dumps(value, ensure_ascii=False, allow_nan=False, separators=(",", ":"))
    return text.replace("\u2028", "\\u2028").replace("\u2029", "\\u2029")


def encode(body: dict[str, Any]) -> str:
    """The kept text of an entry's `body`: each of PARTS as the members of a JSON object
    (without its braces), and its origin less its trust, joined by SEPARATOR."""
    parts = [dumps({k: body[k] for k in part})[1:-1] for part in PARTS]
    return SEPARATOR.join([*parts, dumps(body["origin"])])


def make(groups: dict[GroupKey, Sequence[Run]]) -> dict[GroupKey, Made]:
    """Each group's `Made`. `groups`' runs read with origins.with_origins (their origins and
    trust in the same query); their kept results, test-set counts and convergence inputs
    are read for all groups at once."""
    runs = [r for members in groups.values() for r in members]
    kept = kept_runs.of_runs(runs)
    standings = standing.of_runs(runs)
    results = {r.pk: kept[r.pk].on_board() if standings[r.pk].here_grades else kept[r.pk].result
               for r in runs}  # fmt: skip
    here = {pk: s.judgement.examples for pk, s in standings.items() if s.here_grades}
    sizes = graded_on.of_runs(runs, here)
    return {
        key: _made(key, list(members), [results[r.pk] for r in members],
                   standing.of_entry(members, standings), graded_on.of_entry(members, sizes),
                   convergence.inputs([convergence.member(r, kept[r.pk]) for r in members]))
        for key, members in groups.items()
    }  # fmt: skip


def _made(
    key: GroupKey, runs: list[Run], results: list, stand: dict, size: dict, conv: dict
) -> Made:
    first = runs[0]
    target = stored.target_for(
        first.task, first.target, [r.dataset_used for r in runs if r.dataset_used]
    )
    stats = summarize(results, target)
    group = stats["groups"][0]
    measured = "accuracy_after_time" if first.time_budget else "time_to_target"
    statistic, lower = SCORE[measured]
    if measured == "accuracy_after_time" and target["direction"] == catalogue.DOWN:
        lower = True  # a goal reached from above (task 3's perplexity after time)
    score = group[statistic]["median"]
    # Why not ranked, the first that holds, trust aside (`finish` puts an unverified
    # origin first): a disputed grade (standing.py), grades counting different test sets,
    # the group's validity, no score.
    unranked = stand["disputed"] or size["mixed"]
    if not unranked and not group["valid"]:
        unranked = group["invalid_reason"]
    elif not unranked and score is None:
        reaching = measured == "time_to_target"
        unranked = "no run reached the target" if reaching else "no finished run measured it"
    statuses = {r.evaluation for r in results if r.evaluation}
    origin = origins.of_run(first)
    body = {
        "id": entry_id(key),
        "task": first.task,
        "goal": target,
        "division": first.division,
        "measured": measured,
        "data": "synthetic" if target["synthetic"] or not target["datasets"] else "real",
        "datasets": target["datasets"],
        "evaluation": "evaluated" if statuses == {stored.EVALUATED} else "self-reported",
        "hardware": _hardware(first),
        "workers": first.num_workers,
        "algorithm": first.algorithm,
        "algorithm_source": first.algorithm_source,  # an uploaded algorithm's file, or ""
        "sent": _sent(runs),
        "implementation": first.implementation,
        "network": _network(first),
        "backend": first.backend,
        "seeds": sorted(r.seed for r in runs),
        "series": first.series_id,
        "statistics": group,
        "cost": {
            **stats["cost"],
            "cost_to_target": group["cost_to_target"],
            "run_cost": group["run_cost"],
            "price_per_hour": group["price_per_hour"],
            "price_index": group["price_index"],
        },  # fmt: skip
        "origin": _origin(origin),
        "regrade": stand["regrade"],
        "test_examples": size["test_examples"],
        "whole_test_set": size["whole_test_set"],
        "graded_on": size["graded_on"],
        "score": score,
        "lower_is_better": lower,
        "links": _links(first.series_id, runs),
        "runs": [
            {
                "id": r.pk,
                "seed": r.seed,
                "state": r.state,
                "evaluation": res.evaluation,
                "time_to_target": res.time_to_target,
                "accuracy_after_time": res.accuracy_after_time,
            }
            for r, res in zip(runs, results, strict=True)
        ],  # fmt: skip
    }
    return Made(
        id=body["id"],
        task=first.task,
        head={name: body[name] for name in HEAD},
        seeds=",".join(map(str, body["seeds"])),
        unranked=unranked,
        origin_key=origin["public_key"] if origin else "",
        origin_fingerprint=origin["fingerprint"] if origin else "",
        body=encode(body),
        conv=conv,
    )


def finish(
    made: Made, names: dict[str, str], me: str, rank: int | None, check: dict[str, Any]
) -> str:
    """The entry's JSON text as GET /api/results/ answers it, its keys in ORDER: `made`
    with its origin's trust (`names`: trust.known()), this installation's fingerprint `me`
    on a local entry, its `rank` and its convergence `check`."""
    first, middle, last, kept_origin = made.body.split(SEPARATOR)
    origin_trust = trust_of(made, names)
    origin = json.loads(kept_origin)
    if origin["kind"] == "local":
        origin["fingerprint"] = me
    origin["trust"] = origin_trust.as_dict()
    unranked = dumps(unranked_of(made, origin_trust))
    return (
        f'{{{first},"origin":{dumps(origin)},{middle},"rank":{dumps(rank)},'
        f'"unranked":{unranked},{last},"convergence":{dumps(check)}}}'
    )


LOCAL = trust.Trust(trust.LOCAL)


def trust_of(made: Made, names: dict[str, str]) -> trust.Trust:
    """How far this installation trusts the entry's origin (its first run's), now."""
    return trust.of_key(made.origin_key, names) if made.origin_key else LOCAL


def unranked_of(made: Made, origin_trust: trust.Trust) -> str:
    """Why the entry is not ranked ('' where it is): an unverified origin first."""
    if not origin_trust.trusted:
        return standing.unverified(made.origin_fingerprint)
    return made.unranked


def _sent(runs: list[Run]) -> dict[str, float | None]:
    """What a rank sent, the median over the entry's runs as their workers counted it (the
    trainer's count, whichever algorithm ran): per step, and to the target over the runs
    that reached it. The bytes are the algorithm's doing, not the grade's: read from the
    summaries, as the run page shows them. None: no run said."""

    def median(key: str) -> float | None:
        found = [v for r in runs if (v := result.read(r.summary or {}, key)) is not None]
        return statistics.median(found) if found else None

    return {"bytes_per_step": median("comm_bytes_per_step"),
            "bytes_to_target": median("comm_bytes_to_target")}  # fmt: skip


def _origin(origin: dict[str, Any] | None) -> dict[str, Any]:
    """The entry's origin less its trust and, for a local entry, the fingerprint (`finish`)."""
    if origin is None:
        return {"kind": "local", "fingerprint": None, "public_key": None, "imported_at": None}
    keep = ("fingerprint", "public_key", "imported_at", "origin_run", "origin_series")
    return {"kind": "imported", **{k: origin[k] for k in keep}}


def _hardware(run: Run) -> str:
    """What each worker ran on, in the words the workers reported (their summary)."""
    found = result.read(run.summary or {}, "hardware") or {}
    if run.gpu_enabled:
        device = f"GPU {found.get('gpu') or '(model not recorded)'}"
    else:
        device = f"CPU {found.get('cpu_model') or '(model not recorded)'}"
    cores = "core" if run.num_cpus == 1 else "cores"
    return f"{device}, {run.num_cpus:g} {cores} per worker"


def _network(run: Run) -> str:
    text = f"{run.max_bandwidth} Mbit/s"
    return text + (f", {run.latency:g} ms latency" if run.latency else "")


def _links(series_id: int | None, runs: list[Run]) -> dict[str, Any]:
    """Paths on this master (the static board makes them absolute with the master's URL)."""
    out: dict[str, Any] = {
        "runs": [
            {
                "id": r.pk,
                "page": f"/runs/{r.pk}/",
                "api": f"/api/runs/{r.pk}/",
                "bundle": f"/api/runs/{r.pk}/bundle/",
                "mllog": f"/api/runs/{r.pk}/mllog/",
            }
            for r in runs
        ]  # fmt: skip
    }
    if series_id is not None:
        out["series"] = {
            "page": f"/series/{series_id}/",
            "api": f"/api/series/{series_id}/",
            "bundle": f"/api/series/{series_id}/bundle/",
        }
    return out
