// Studies page: every algorithm study (GET /api/studies/), newest first, each linking to its
// own page. The state and the run counts are the API's.

import { api, every } from "./api.js";
import { el, stateBadge, when } from "./format.js";

const body = document.querySelector("#studies-table tbody");
const status = document.getElementById("studies-status");

function list(items) {
  return el("ul", { class: "plain" }, ...items.map((text) => el("li", { text })));
}

function studyRow(s) {
  return el(
    "tr",
    { dataset: { studyId: s.id } },
    el("td", {}, el("a", { href: `/studies/${s.id}/`, class: "study-link", text: s.name || `study ${s.id}` })),
    el("td", { class: "state-cell" }, stateBadge(s.state)),
    el("td", { class: "algorithms" }, list(s.algorithms.map((a) => a.label))),
    el("td", { class: "workloads" }, list(s.workloads)),
    el("td", { class: "conditions", text: s.conditions.join(", ") }),
    el("td", { class: "runs", text: `${s.runs.ended} / ${s.runs.total}` }),
    el("td", {}, el("time", { datetime: s.created_at, text: when(s.created_at) })),
  );
}

async function refresh() {
  const listed = await api("/api/studies/");
  body.replaceChildren(...listed.map(studyRow));
  status.textContent = listed.length
    ? `${listed.length} ${listed.length === 1 ? "study" : "studies"}.`
    : "No study yet. Start one with POST /api/studies/ (algorithms, workloads, conditions, seeds).";
  document.body.dataset.loaded = "1";
}

every(5000, refresh);
