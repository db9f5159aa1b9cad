// Series page: every series (GET /api/series/), newest first, each linking to its own page.
// The list is the API's: the state is the one the master gives each series.

import { api, every, rows } from "./api.js";
import { el, stateBadge, when } from "./format.js";

const body = document.querySelector("#series-table tbody");
const status = document.getElementById("series-list-status");
const ENDED = new Set(["FINISHED", "FAILED", "CANCELLED"]);

function seriesRow(s) {
  const ended = s.runs.filter((r) => ENDED.has(r.state)).length;
  return el(
    "tr",
    { dataset: { seriesId: s.id } },
    el("td", {}, el("a", { href: `/series/${s.id}/`, class: "series-link", text: s.name || `series ${s.id}` })),
    el("td", { text: s.settings?.task || "—" }),
    el("td", {}, stateBadge(s.state)),
    el("td", { class: "seeds", text: s.seeds.join(", ") }),
    el("td", { class: "workers", text: s.worker_counts.join(", ") }),
    el("td", { class: "runs", text: `${ended} / ${s.runs.length}` }),
    el("td", {}, el("time", { datetime: s.created_at, text: when(s.created_at) })),
  );
}

async function refresh() {
  const listed = rows(await api("/api/series/"));
  body.replaceChildren(...listed.map(seriesRow));
  status.textContent = listed.length
    ? `${listed.length} series.`
    : "No series yet. Start one with “New run” on the Runs page: several seeds or worker counts make a series.";
  document.body.dataset.loaded = "1";
}

every(5000, refresh);
