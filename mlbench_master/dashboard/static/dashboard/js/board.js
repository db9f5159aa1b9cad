// Results board of one task: the sections GET /api/results/ answers, drawn as they come.
// The API ranks, separates and filters; the filters here only choose its query, so the page
// and every API client see the same board. It is read a page of entries at a time (limit,
// offset: a task may hold thousands), in the whole board's order and ranks; "Show more"
// reads the next page, and the filters offer the values the API lists for the task.

import { api } from "./api.js";
import { bytesText, el, num, pct } from "./format.js";

// "1 run", "2 runs": a count the reader reads as words.
const runsText = (n) => `${n} run${Number(n) === 1 ? "" : "s"}`;

const root = document.getElementById("board");
const task = root.dataset.task;
const form = document.getElementById("board-filters");
const status = document.getElementById("board-status");
const FILTERS = [
  ["division", "Division"], ["measured", "Measured"], ["data", "Data"],
  ["evaluation", "Graded"], ["origin", "Origin"], ["hardware", "Hardware"],
  ["workers", "Workers"], ["algorithm", "Algorithm"], ["implementation", "Implementation"],
  ["network", "Network"], ["backend", "Backend"], ["seed", "Seed"],
];

const PAGE = 100; // entries a read asks for
const more = document.getElementById("board-more");

// A filter's choices: the values the API lists among the task's entries (a page's `values`).
function valuesOf(values, name) {
  return (values[name] || []).filter((v) => v !== null).map(String);
}

function drawFilters(values) {
  form.replaceChildren(
    ...FILTERS.map(([name, label]) =>
      el(
        "label",
        { class: "field" },
        label,
        el(
          "select",
          { name, "data-filter": name },
          el("option", { value: "", text: "any" }),
          ...valuesOf(values, name).map((v) => el("option", { value: v, text: v })),
        ),
      ),
    ),
  );
}

function score(entry) {
  if (entry.score === null) return "—";
  if (entry.measured === "time_to_target") return `${num(entry.score)} s`;
  if (entry.goal && entry.goal.metric === "val_bleu") return `${num(entry.score)} BLEU`; // task 4b
  return entry.lower_is_better ? num(entry.score) : pct(entry.score); // task 3: a perplexity
}

function costText(entry) {
  const c = entry.cost;
  const median = c.cost_to_target && c.cost_to_target.median;
  if (median !== null && median !== undefined && c.currency) return `${num(median)} ${c.currency} to target`;
  return "not priced";
}

// How far this installation trusts where an entry comes from: "local", "trusted (NAME)" or
// "unverified origin" (ranked nowhere).
function trustText(entry) {
  const t = entry.origin.trust;
  return t ? t.label : entry.origin.kind === "local" ? "local" : "unverified origin";
}

// This master's re-grade of an imported entry: agrees, "disputed" with both numbers, or
// "not re-graded here" with why (the API's words).
function regradeText(entry) {
  const r = entry.regrade;
  if (!r || r.status === "local") return "";
  return r.label;
}

// The entry's check against the reference series' convergence (MLPerf's RCP rule): a flag
// when it converges in fewer epochs than the reference allows; the API's words otherwise.
function convergenceNode(entry) {
  const c = entry.convergence;
  if (!c || c.status === "not checked") return null;
  const text = c.flagged ? `; flagged: ${c.reason}` : `; convergence ${c.status}`;
  return el("span", { class: `convergence ${c.flagged ? "flagged" : ""}`, text, title: c.reason });
}

// What a rank sent (the median over the entry's runs, the trainer's count): per step and to
// the target, under the algorithm that decides it; nothing when no run said.
function sentNode(sent) {
  if (!sent || sent.bytes_per_step === null) return null;
  const toTarget = sent.bytes_to_target === null ? "" : `, ${bytesText(sent.bytes_to_target)} to target`;
  return el("span", { class: "sent", text: `sent ${bytesText(sent.bytes_per_step)}/step${toTarget}` });
}

function row(entry) {
  const stats = entry.statistics;
  const links = entry.links.runs.map((r) =>
    el("span", { class: "run-links" },
      el("a", { href: r.page, text: `run ${r.id}` }), " (",
      el("a", { href: r.bundle, text: "bundle" }), ", ",
      el("a", { href: r.mllog, text: "MLPerf log" }), ") "),
  );
  if (entry.links.series) links.unshift(el("a", { href: entry.links.series.page, text: `series ${entry.series}` }), " ");
  const trust = entry.origin.trust ? entry.origin.trust.status : "local";
  const regrade = entry.regrade ? entry.regrade.status : "local";
  return el(
    "tr",
    { dataset: { entry: entry.id, data: entry.data, evaluation: entry.evaluation, origin: entry.origin.kind, trust, regrade } },
    el("td", { class: "rank", text: entry.rank === null ? `unranked: ${entry.unranked}` : String(entry.rank) }),
    el("td", { class: "score", text: score(entry) }),
    el("td", { class: "workers", text: String(entry.workers) }),
    el("td", { text: entry.hardware }),
    el("td", { class: "algorithm" },
      entry.algorithm ? entry.algorithm + (entry.algorithm_source ? ` [uploaded ${entry.algorithm_source.slice(0, 12)}]` : "") : "—",
      sentNode(entry.sent)),
    el("td", { text: entry.implementation || "—" }),
    el("td", { text: entry.network }),
    el("td", { text: entry.backend }),
    el("td", { class: "seeds", text: entry.seeds.join(", ") }),
    el("td", { class: "statistics" },
      `${runsText(stats.runs)}, ${stats.reached} reached; ${stats.valid ? "valid" : `not valid: ${stats.invalid_reason}`}`,
      convergenceNode(entry)),
    el("td", { class: "cost", text: costText(entry), title: entry.cost.reason || null }),
    el("td", { class: "origin", text: entry.origin.kind === "local" ? `local (${entry.origin.fingerprint})` : `imported from ${entry.origin.fingerprint}` }),
    el("td", { class: "trust", text: trustText(entry) }),
    el("td", { class: "evaluation" },
      entry.evaluation === "evaluated" ? "evaluated" : "self-reported, not evaluated",
      regradeText(entry) ? el("span", { class: `regrade ${regrade === "disputed" ? "disputed" : ""}`, text: `; ${regradeText(entry)}` }) : null),
    el("td", { class: "graded-on", text: entry.graded_on || "—" }),
    el("td", {}, ...links),
  );
}

const HEAD = ["Rank", "Score", "Workers", "Hardware", "Algorithm", "Implementation", "Network",
  "Backend", "Seeds", "Statistics", "Cost", "Origin", "Trust", "Graded", "Test set", "Links"];

function sectionNode(section) {
  return el(
    "div",
    { class: "board-section", dataset: { data: section.data, evaluation: section.evaluation, origins: section.origins || "trusted" } },
    el("h3", { text: section.label }),
    el("div", { class: "table-wrap" },
      el("table", { class: "data" },
        el("thead", {}, el("tr", {}, ...HEAD.map((h) => el("th", { scope: "col", text: h })))),
        el("tbody", {}, ...section.entries.map(row)))),
  );
}

// The sections read so far: a page continues the one before it, so a section cut by a page
// goes on in the next (the same label), and is drawn as one.
let shown = { sections: [], count: 0, next: null, params: {} };

function merge(sections, page) {
  const out = sections.map((s) => ({ ...s, entries: [...s.entries] }));
  for (const section of page.sections) {
    const last = out[out.length - 1];
    if (last && last.label === section.label) last.entries.push(...section.entries);
    else out.push({ ...section, entries: [...section.entries] });
  }
  return out;
}

function draw() {
  for (const kind of ["real", "synthetic"]) {
    const box = document.getElementById(`board-${kind}`);
    const chosen = shown.sections.filter((s) => s.data === kind);
    box.querySelector(".sections").replaceChildren(...chosen.map(sectionNode));
    box.hidden = chosen.length === 0;
  }
  const drawn = shown.sections.reduce((n, s) => n + s.entries.length, 0);
  status.textContent = !shown.count
    ? "No results match."
    : drawn < shown.count
      ? `${shown.count} entries; the first ${drawn} shown.`
      : `${shown.count} entries.`;
  more.hidden = shown.next === null;
}

// Answers may come back out of order when filters change quickly: only the answer to the
// latest choice is drawn. `loaded` counts every answer, drawn or not, for the tests.
let latest = 0;

function settled() {
  document.body.dataset.loaded = String(Number(document.body.dataset.loaded || 0) + 1);
}

function read(params, offset) {
  return api("/api/results/", { params: { task, ...params, limit: PAGE, offset } });
}

async function load(params, first = false) {
  const mine = ++latest;
  try {
    const page = await read(params, 0);
    if (first) drawFilters(page.values);
    if (mine === latest) {
      shown = { sections: page.sections, count: page.count, next: page.next_offset, params };
      draw();
    }
  } catch (err) {
    if (mine === latest) status.textContent = `The board could not be read: ${err.message}`;
  }
  settled();
}

form.addEventListener("change", () => {
  const params = {};
  for (const box of form.querySelectorAll("select")) if (box.value) params[box.name] = box.value;
  load(params);
});

more.addEventListener("click", async () => {
  const mine = latest;
  more.disabled = true;
  try {
    const page = await read(shown.params, shown.next);
    if (mine === latest) {
      shown = { ...shown, sections: merge(shown.sections, page), count: page.count, next: page.next_offset };
      draw();
    }
  } catch (err) {
    status.textContent = `The board could not be read: ${err.message}`;
  }
  more.disabled = false;
  settled();
});

load({}, true);
