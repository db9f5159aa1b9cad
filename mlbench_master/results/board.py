"""The results board: every result of a task, local and imported, in sections that are
ranked apart (docs/publishing.rst, "The results board").

Why sections: a ranking is only fair between results measured the same way. A section is
one task, one division (closed: the reference worker; open: the user's own command), one
measure (time to target, or accuracy after a time budget), one kind of data (real, or
generated/unrecorded: a synthetic result never sits in a real ranking), one grader (the
platform's evaluator, or the run's own word: never ranked beside each other) and one number
of test examples graded on (graded_on.py: a result on 2,000 examples never ranks beside one
on the whole set). Local and imported results whose origin this installation trusts share
sections and are ranked by the one rule in `rank`; results of an unverified origin are in
sections of their own and never ranked, and a disputed one is not ranked (standing.py).

An entry is one group of runs measured together: the runs of a series with one worker
count (its seeds), or one run outside any series (board_entry.py makes it). Its numbers are
the series statistics' (`statistics.summarize`, one group) and its cost theirs (cost.py
through the stored run), so the board shows what the series page and `mlbench report`
show, never its own sums; an imported run this master re-graded and agrees with is read on
this master's grades. Its `convergence` is its check against the reference series of its
task (convergence.py): a flag for a reader to weigh, not a reason to unrank, as MLPerf's
package checker lets a failed RCP check through for review (`--rcp_bypass`).

How a read stays fast at ten thousand runs: entries are kept in the database and made again
only where their runs changed (kept_entries.py); sections, filters and ranks are worked out
on their columns, and only the entries answered are read whole. A `Page` answers a slice
of the ranked entries (limit, offset), in the same sections.
"""

from __future__ import annotations

import json
import operator
import threading
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, fields
from typing import Any

from mlbench_master.bundles import signing, trust
from mlbench_master.results import board_entry, convergence, kept_entries
from mlbench_master.results.board_entry import Made, dumps
from mlbench_master.results.kept_entries import Entry
from mlbench_worker.shared import catalogue

DIVISIONS = ("closed", "open")
MEASURES = ("time_to_target", "accuracy_after_time")
DATA = ("real", "synthetic")
EVALUATIONS = ("evaluated", "self-reported")
ORIGINS = ("local", "imported")
TRUST = ("trusted", "unverified")  # a section's origins: trusted here (or local), or not
MEASUREMENT_TASKS = tuple(name for name, info in catalogue.TASKS.items() if info.measurement)
SCORE = board_entry.SCORE
LABELS = {
    "time_to_target": "time to target",
    "accuracy_after_time": "accuracy after time",
    "real": "real data",
    "synthetic": "synthetic (generated) data, or data not recorded",
    "evaluated": "evaluated by the platform",
    "self-reported": "self-reported, not evaluated",
}
# What a page's `values` lists: each filter's values among the entries matched.
VALUES = ("division", "measured", "data", "evaluation", "origin", "hardware", "workers",
          "algorithm", "implementation", "network", "backend", "seed")  # fmt: skip


@dataclass(frozen=True)
class Filters:
    """What a reader narrows the board to; None: any. Text dimensions match exactly,
    ignoring case; `origin` is local, imported, trusted, unverified, or an installation's
    fingerprint."""

    task: str | None = None
    division: str | None = None
    measured: str | None = None
    data: str | None = None
    evaluation: str | None = None
    origin: str | None = None
    hardware: str | None = None
    workers: int | None = None
    algorithm: str | None = None
    implementation: str | None = None
    network: str | None = None
    backend: str | None = None
    seed: int | None = None

    def applied(self) -> dict[str, Any]:
        return {
            f.name: getattr(self, f.name) for f in fields(self) if getattr(self, f.name) is not None
        }


@dataclass(frozen=True)
class Page:
    """A slice of the board: `limit` entries from place `offset` of the ranked whole."""

    limit: int
    offset: int = 0


class Shown:
    """An entry as this read sees it: its origin's trust now, why it is not ranked (''
    where it is) and its rank."""

    __slots__ = ("entry", "head", "rank", "section", "trust", "unranked")

    def __init__(self, entry: Entry, origin_trust: trust.Trust) -> None:
        made = entry.made
        self.entry, self.head, self.rank, self.trust = entry, made.head, None, origin_trust
        self.unranked = (
            made.unranked if origin_trust.trusted else board_entry.unranked_of(made, origin_trust)
        )
        self.section = (made.task, TRUST[0] if origin_trust.trusted else TRUST[1],
                        *_SECTION(made.head))  # fmt: skip


# The head fields of an entry's section after its task and trust (`Shown.section`).
_SECTION = operator.itemgetter("division", "measured", "data", "evaluation", "test_examples",
                               "whole_test_set", "graded_on")  # fmt: skip


def _shown(entries: list[Entry], names: dict[str, str]) -> list[Shown]:
    """`entries` with their origins' trust (one Trust a key)."""
    trusts: dict[str, trust.Trust] = {"": board_entry.LOCAL}
    out = []
    for entry in entries:
        key = entry.made.origin_key
        if key not in trusts:
            trusts[key] = trust.of_key(key, names)
        out.append(Shown(entry, trusts[key]))
    return out


def board(filters: Filters, page: Page | None = None, fresh: bool = False) -> dict[str, Any]:
    """The board as GET /api/results/ answers it (`answer`), read as data."""
    return json.loads(answer(filters, page, fresh))


def answer(filters: Filters, page: Page | None = None, fresh: bool = False) -> str:
    """The JSON text of GET /api/results/: the sections, each ranked; with `page`, the
    entries of that slice in their sections, where the next slice starts and each filter's
    values among the entries matched. Put together from the kept entries' text; `fresh`:
    every entry made now and nothing kept (what a database without kept results reads)."""
    names, me = trust.known(), signing.this_installation()
    ranked = _ranked(filters, names, me.fingerprint, fresh)
    chosen = ranked.sections if page is None else _slice(ranked.sections, page)
    answered = kept_entries.with_bodies([s.entry for _, entries in chosen for s in entries])
    made = [m.conv for m in answered.values()]
    refs = convergence.references({convergence.Key(*m["key"]) for m in made if "key" in m})
    top = dumps({
        "installation": {"public_key": me.public_key, "fingerprint": me.fingerprint},
        "filters": filters.applied(),
        "count": len(ranked.shown),
    })  # fmt: skip
    body = ",".join(
        _section(key, [_answer(answered[s.entry.made.id], s, names, me.fingerprint, refs)
                       for s in entries if s.entry.made.id in answered])
        for key, entries in chosen
    )  # fmt: skip
    more = ""
    if page is not None:
        after = page.offset + sum(len(entries) for _, entries in chosen)
        if ranked.values is None:
            ranked.values = _values(ranked.shown, me.fingerprint)
        more = "," + dumps({"offset": page.offset, "limit": page.limit,
                            "next_offset": after if after < len(ranked.shown) else None,
                            "values": ranked.values})[1:-1]  # fmt: skip
    return f'{top[:-1]},"sections":[{body}]{more}}}'


@dataclass
class Ranked:
    """A board read: its entries matched (`shown`), in their sections ranked, and each
    filter's values among them (made when a page first asks)."""

    digest: str | None
    shown: list[Shown]
    sections: list[tuple[tuple, list[Shown]]]
    values: dict[str, list] | None = None


# The ranked boards of the latest reads, by what they were ranked from: the filters, the
# trusted keys, this installation, and the board's digest (its entries' ids and signatures:
# kept_entries.read), so a read of an unchanged board ranks nothing again. Exact: any change
# to an entry's runs changes its signature, and so the digest.
_RANKED: dict[tuple, Ranked] = {}
RANKED_KEPT = 32
_RANKED_LOCK = threading.Lock()


def _ranked(filters: Filters, names: dict[str, str], me: str, fresh: bool) -> Ranked:
    """The board's entries matched by `filters`, in their sections, ranked."""
    # A measurement (the backend benchmark) has no target and no accuracy: nothing to rank.
    key = (filters, tuple(sorted(names.items())), me)
    known = None if fresh else _RANKED.get(key)
    digest, entries = kept_entries.read(
        filters.task, MEASUREMENT_TASKS, fresh, known.digest if known else None
    )
    if entries is None and known is not None:
        return known
    shown = _shown(entries or [], names)
    if {k for k in filters.applied() if k != "task"}:
        matches = _matcher(filters, me)
        shown = [s for s in shown if matches(s)]
    sections: dict[tuple, list[Shown]] = defaultdict(list)
    for found in shown:
        sections[found.section].append(found)
    made = Ranked(digest, shown, [(k, rank(sections[k])) for k in sorted(sections, key=_order)])
    if digest is not None:
        with _RANKED_LOCK:
            while len(_RANKED) >= RANKED_KEPT:
                _RANKED.pop(next(iter(_RANKED)))
            _RANKED[key] = made
    return made


def _answer(made: Made, found: Shown, names: dict[str, str], me: str, refs: dict) -> str:
    """The entry's text (`made`: with its body), with its rank and its convergence check
    against the references now."""
    check = convergence.finish(made.conv, refs)
    return board_entry.finish(made, names, me, found.rank, check)


def rank(section: list[Shown]) -> list[Shown]:
    """The ONE ranking rule, for local and imported entries alike: valid entries with a
    score first, best score first (the shortest median time to target, or the highest
    median accuracy after time), ties by fewer workers; the rest after them, unranked
    (`rank` None), with why in `unranked`."""
    ranked = [e for e in section if e.unranked == ""]
    rest = [e for e in section if e.unranked != ""]
    ranked.sort(key=lambda e: (e.head["score"] if e.head["lower_is_better"] else -e.head["score"],
                               e.head["workers"], e.entry.made.id))  # fmt: skip
    for place, entry in enumerate(ranked, start=1):
        entry.rank = place
    rest.sort(key=lambda e: (e.head["workers"], e.entry.made.id))
    return ranked + rest


def _slice(ordered: list[tuple[tuple, list[Shown]]], page: Page) -> list[tuple[tuple, list]]:
    """The sections holding the entries from `page.offset` to `page.offset + page.limit`
    of the whole in its order, each with only those entries."""
    out, place = [], 0
    for key, entries in ordered:
        start, end = max(page.offset - place, 0), page.offset + page.limit - place
        if start < len(entries) and end > 0:
            out.append((key, entries[start:end]))
        place += len(entries)
    return out


def _origin_words(found: Shown, me: str) -> tuple[str, str, str, str]:
    """The words an `origin` filter matches on the entry: its kind, fingerprint, trust
    status and section."""
    made = found.entry.made
    kind = "imported" if made.origin_key else "local"
    section = TRUST[0] if found.trust.trusted else TRUST[1]
    return kind, made.origin_fingerprint or me, found.trust.status, section


def _matcher(f: Filters, me: str) -> Callable[[Shown], bool]:
    """Whether an entry passes the filters `f` (text ignoring case, `origin` by its kind,
    fingerprint, trust status or section): the filters given are looked at, once each."""
    exact = [(k, v) for k, v in (("division", f.division), ("measured", f.measured),
             ("data", f.data), ("evaluation", f.evaluation), ("workers", f.workers))
             if v is not None]  # fmt: skip
    text = [(k, v.lower()) for k, v in (("hardware", f.hardware), ("algorithm", f.algorithm),
            ("implementation", f.implementation), ("network", f.network),
            ("backend", f.backend)) if v is not None]  # fmt: skip

    def matches(found: Shown) -> bool:
        head = found.head
        if any(head[k] != v for k, v in exact):
            return False
        if any(str(head[k]).lower() != v for k, v in text):
            return False
        if f.seed is not None and f.seed not in board_entry.seeds_of(found.entry.made):
            return False
        return f.origin is None or f.origin in _origin_words(found, me)

    return matches


def _values(shown: list[Shown], me: str) -> dict[str, list]:
    """Each filter's values among `shown`, as the board page offers them: origin as local or
    the fingerprint (and imported where any is), the others as their fields hold them."""
    heads = [s.head for s in shown]
    found: dict[str, set] = {
        name: set(map(operator.itemgetter(name), heads))
        for name in VALUES
        if name not in ("origin", "seed")
    }
    found["seed"] = {int(x) for s in {s.entry.made.seeds for s in shown} for x in s.split(",") if x}
    found["origin"] = {s.entry.made.origin_fingerprint or "local" for s in shown}
    if found["origin"] - {"local"}:
        found["origin"].add("imported")
    return {name: sorted(found[name], key=lambda v: (v is None, str(v))) for name in VALUES}


def _order(key: tuple) -> tuple:
    task, origins_, division, measured, data, evaluation, examples, _, _ = key
    return (
        task,
        TRUST.index(origins_),
        DIVISIONS.index(division),
        MEASURES.index(measured),
        DATA.index(data),
        EVALUATIONS.index(evaluation),
        examples is None,  # the whole test set first (the most examples), unknown last
        -(examples or 0),
    )


def _section(key: tuple, ranked: list[str]) -> str:
    task, origins_, division, measured, data, evaluation, examples, whole, said = key
    label = f"{task}: {division} division, {LABELS[measured]}, {LABELS[data]}, {LABELS[evaluation]}, {said}"  # fmt: skip
    if origins_ == TRUST[1]:
        label += ", unverified origins (not ranked until this installation trusts their keys)"
    section = {
        "task": task,
        "origins": origins_,
        "division": division,
        "measured": measured,
        "data": data,
        "evaluation": evaluation,
        "test_examples": examples,
        "whole_test_set": whole,
        "graded_on": said,
        "label": label,
    }
    return f'{dumps(section)[:-1]},"entries":[{",".join(ranked)}]}}'
