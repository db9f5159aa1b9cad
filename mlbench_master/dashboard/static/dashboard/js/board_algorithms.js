// The board's "Algorithms" part: algorithms ranked by their studies' scores per suite
// version and network condition, drawn from GET /api/results/algorithms/. The API chooses
// which study's score counts (the latest) and ranks; this page only shows it, each row with
// the study its number comes from.

import { api } from "./api.js";
import { el, num, when } from "./format.js";

const box = document.querySelector("#board-algorithms .sections");
const status = document.getElementById("algorithms-status");

const HEAD = ["Rank", "Algorithm", "Score", "Per workload: time, ratio", "Held-out gate", "From study", "Compared with", "Origin"];

function workloadsNode(entry) {
  return el("ul", { class: "plain" }, ...Object.entries(entry.workloads).map(([w, r]) =>
    el("li", { text: `${w}: ${r.time === null ? "∞" : `${num(r.time)} s`}, ratio ${r.ratio === null ? "∞" : num(r.ratio)}` })));
}

function gateText(entry) {
  const gate = entry.held_out;
  if (!gate.applied) return "no held-out draw";
  const failed = Object.entries(gate.passed).filter(([, ok]) => !ok).map(([w]) => w);
  return failed.length ? `gated out of ${failed.join(", ")}` : "passed";
}

function studyNode(entry) {
  const s = entry.study;
  const earlier = entry.earlier_studies.map((e, i) => [i ? ", " : "", el("a", { href: e.page, text: `study ${e.id}` })]).flat();
  return el("div", {},
    el("a", { href: s.page, class: "study-link", text: `study ${s.id}: ${s.name}` }),
    el("div", { class: "hint", text: `${when(s.created_at)}; ${s.workloads.join(", ")}; seeds ${s.seeds.join(", ")}, ${s.num_workers} workers` }),
    earlier.length ? el("div", { class: "hint" }, "supersedes ", ...earlier) : "");
}

function row(entry) {
  const trust = entry.origin.trust;
  return el("tr", { dataset: { algorithm: entry.algorithm, study: entry.study.id } },
    el("td", { class: "rank", text: entry.rank === null ? `unranked: ${entry.unranked}` : String(entry.rank) }),
    el("th", { scope: "row", class: "algorithm", text: entry.algorithm }),
    el("td", { class: "score", dataset: { score: String(entry.score) }, text: num(entry.score) }),
    el("td", { class: "workloads" }, workloadsNode(entry)),
    el("td", { class: "gate", text: gateText(entry) }),
    el("td", { class: "study" }, studyNode(entry)),
    el("td", { class: "compared", text: entry.study.compared_with.join(", ") || "nothing (alone)" }),
    el("td", { class: `origin trust ${trust.trusted ? "trusted" : "unverified"}`, text: entry.origin.kind === "local" ? "local" : `${trust.label} (${entry.origin.fingerprint})` }));
}

function sectionNode(section) {
  const joined = section.studies.length > 1
    ? `Ranked from ${section.studies.length} studies (each row links its own): scores from different studies were computed against different algorithms.`
    : "";
  return el("div", { class: "board-section", dataset: { suiteVersion: section.suite_version, condition: section.condition } },
    el("h3", { text: `Suite ${section.suite_version}, at ${section.condition}` }),
    joined ? el("p", { class: "hint", text: joined }) : "",
    el("div", { class: "table-wrap" },
      el("table", { class: "data algorithms" },
        el("thead", {}, el("tr", {}, ...HEAD.map((h) => el("th", { scope: "col", text: h })))),
        el("tbody", {}, ...section.entries.map(row)))));
}

(async () => {
  try {
    const ranked = await api("/api/results/algorithms/");
    box.replaceChildren(...ranked.sections.map(sectionNode));
    status.textContent = ranked.count
      ? `${ranked.count} scores from ended studies. Rule: ${ranked.rule}`
      : "No ended study with a score yet.";
  } catch (err) {
    status.textContent = `The algorithms could not be read: ${err.message}`;
  }
  document.body.dataset.loaded = "1";
})();
