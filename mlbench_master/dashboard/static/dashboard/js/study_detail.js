// An algorithm study: per condition the times to target (algorithms by workloads, "∞" for a
// miss, with bytes and epochs to target, the held-out variants and the score), each
// condition's performance profile, the score per condition and overall with the held-out
// gate, every cell's series and runs, and cancelling it. Every number is the API's
// (GET /api/studies/<id>/: `cells` with their medians, `score`); this page formats them
// and computes none. It follows the study while runs are pending and stops after.

import { api, every } from "./api.js";
import { LineChart } from "./charts.js";
import { bytesText, el, num, stateBadge, when } from "./format.js";

const root = document.getElementById("study-detail");
const studyId = root.dataset.studyId;
const statusLine = document.getElementById("study-status");
const INF = "∞";
const LIVE = new Set(["queued", "running"]);
const charts = new Map(); // condition -> its profile chart

const seconds = (v) => `${num(v)} s`;
const timeText = (v) => (v === null || v === undefined ? INF : seconds(v));
const key = (...parts) => parts.join("\u0000");

// The API's lists as look-ups: base cells by (algorithm, workload, condition), held-out
// cells by (algorithm, workload), ratios by cell, the gate by (algorithm, workload).
function index(study) {
  const base = new Map();
  const held = new Map();
  for (const c of study.cells) {
    if (c.variant) held.set(key(c.algorithm, c.workload), c);
    else base.set(key(c.algorithm, c.workload, c.condition), c);
  }
  const score = study.score;
  const ratios = new Map((score?.ratios || []).map((r) => [key(r.algorithm, r.workload, r.condition), r]));
  const gate = new Map((score?.held_out_passed || []).map((p) => [key(p.algorithm, p.workload), p.passed]));
  return { base, held, ratios, gate, score };
}

function labels(study) {
  return study.algorithms.map((a) => a.label);
}

// A cell's series and runs as links; "reused" with the study that ran it.
function cellLinks(cell) {
  const runs = cell.runs.map((r, i) => [i ? ", " : "", el("a", { href: `/runs/${r.id}/`, text: String(r.id), title: `run ${r.id}, seed ${r.seed}: ${r.status}${r.why ? ` (${r.why})` : ""}` })]);
  const out = [el("div", { class: "links" }, el("a", { href: `/series/${cell.series}/`, text: `series ${cell.series}` }), runs.length ? "; runs " : "", ...runs.flat())];
  if (cell.reused) {
    out.push(
      el("div", { class: "reused" },
        el("span", { class: "badge reused-mark", text: "reused" }), " ",
        cell.reused_from ? el("a", { href: `/studies/${cell.reused_from}/`, text: `from study ${cell.reused_from}` }) : "from an earlier study"),
    );
  }
  return out;
}

// One cell's median time to target (or "∞"), its ratio to the best, what it took, its links.
function timeCell(cell, ratio, passed) {
  if (!cell) return el("td", { text: "—" });
  const lines = [];
  const m = cell.median;
  const data = { series: cell.series };
  if (!m) {
    const pending = cell.runs.filter((r) => r.status === "pending").length;
    data.time = "pending";
    lines.push(el("div", { class: "time pending", text: "pending" }));
    lines.push(el("div", { class: "hint", text: `${pending} of ${cell.runs.length} runs still to end or be graded` }));
  } else {
    const t = m.time_to_target;
    data.time = t === null ? "inf" : String(t);
    lines.push(el("div", { class: "time", text: timeText(t), title: t === null ? "a miss: the median of the seeds did not reach the target within the budget" : "median time to target over the seeds, from the evaluator's grades" }));
    const took = [`${m.reached}/${m.seeds} seeds reached`];
    if (m.bytes_to_target !== null) took.push(`${bytesText(m.bytes_to_target)} sent`);
    if (m.epochs_to_target !== null) took.push(`${num(m.epochs_to_target)} epochs`);
    lines.push(el("div", { class: "hint", text: took.join(", ") }));
  }
  if (ratio) {
    data.ratio = ratio.ratio === null ? "inf" : String(ratio.ratio);
    lines.push(el("div", { class: "ratio", text: `ratio ${ratio.ratio === null ? INF : num(ratio.ratio)}` }));
    if (passed === false && m && m.time_to_target !== null) lines.push(el("div", { class: "gated", text: "gated out: counts as ∞" }));
  }
  return el("td", { class: "time-cell", dataset: data }, ...lines, ...cellLinks(cell));
}

// The held-out variants of one algorithm: each workload's variant time and the gate.
function heldOutCell(study, ix, algorithm) {
  if (!study.held_out) return el("td", { class: "held-out", text: "not drawn" });
  const items = study.workloads.map((w) => {
    const cell = ix.held.get(key(algorithm, w));
    if (!cell) return el("li", { text: `${w}: —` });
    const t = cell.median ? timeText(cell.median.time_to_target) : "pending";
    const passed = ix.gate.get(key(algorithm, w));
    const verdict = passed === undefined ? "" : passed ? "passed" : "failed";
    return el("li", { dataset: { workload: w, passed: verdict } },
      `${w}: ${t}`, verdict ? el("span", { class: `gate ${verdict}`, text: ` ${verdict}` }) : "", " (",
      el("a", { href: `/series/${cell.series}/`, text: `series ${cell.series}` }), ")");
  });
  return el("td", { class: "held-out" }, el("ul", { class: "plain" }, ...items));
}

function scoreCell(score, condition, algorithm) {
  const value = condition === null ? score?.overall?.[algorithm] : score?.by_condition?.[condition]?.[algorithm];
  if (value === undefined || value === null) return el("td", { class: "score", text: "pending" });
  return el("td", { class: "score", dataset: { score: String(value) }, text: num(value) });
}

// The gate in words for one algorithm: passed everywhere, or the workloads it is gated out of.
function gateText(study, ix, algorithm) {
  if (!study.held_out) return "no held-out draw: scored without the gate";
  if (!ix.score) return "pending";
  const failed = study.workloads.filter((w) => ix.gate.get(key(algorithm, w)) === false);
  return failed.length ? `gated out of ${failed.join(", ")}` : "passed on every workload";
}

function drawScore(study, ix) {
  const head = ["Algorithm", ...study.conditions.map((c) => `At ${c}`), "Overall", "Held-out gate"];
  document.querySelector("#score-table thead").replaceChildren(el("tr", {}, ...head.map((t) => el("th", { scope: "col", text: t }))));
  document.querySelector("#score-table tbody").replaceChildren(
    ...labels(study).map((a) =>
      el("tr", { dataset: { algorithm: a } },
        el("th", { scope: "row", text: a }),
        ...study.conditions.map((c) => scoreCell(ix.score, c, a)),
        scoreCell(ix.score, null, a),
        el("td", { class: "gate", text: gateText(study, ix, a) })),
    ),
  );
  const note = document.getElementById("score-note");
  if (!ix.score) note.textContent = `The score comes once every run has its outcome: ${study.pending_runs} of ${study.runs.total} runs pending.`;
  else note.textContent = `τ_max = ${num(ix.score.tau_max)}.${study.held_out ? ` Held-out variants drawn with seed ${study.held_out.seed}, run at ${study.held_out.condition}.` : " No held-out variants were drawn: the score is without the gate."}`;
}

function conditionCard(condition) {
  const id = `condition-${condition}`;
  const card = el("section", { class: "card condition", id, dataset: { condition }, "aria-labelledby": `${id}-title` },
    el("h2", { id: `${id}-title`, text: `At ${condition}` }),
    el("p", { class: "hint", text: "Median time to target over the seeds (∞: a miss), its ratio to the best algorithm on the workload after the held-out gate, the seeds that reached it with the bytes a rank sent and the epochs it took (medians), and the cell's series and runs." }),
    el("div", { class: "table-wrap", role: "region", tabindex: "0", "aria-label": `Times to target at ${condition}` },
      el("table", { class: "data times" }, el("thead"), el("tbody"))),
    el("div", { class: "charts profile" }));
  document.getElementById("study-conditions").append(card);
  return card;
}

function drawCondition(study, ix, condition) {
  const card = document.getElementById(`condition-${condition}`) || conditionCard(condition);
  const budget = (w) => study.cells.find((c) => !c.variant && c.workload === w)?.budget;
  const heads = ["Algorithm", ...study.workloads.map((w) => `${w} (budget ${seconds(budget(w))})`),
    study.held_out ? `Held-out (at ${study.held_out.condition})` : "Held-out", "Score"];
  card.querySelector("thead").replaceChildren(el("tr", {}, ...heads.map((t) => el("th", { scope: "col", text: t }))));
  card.querySelector("tbody").replaceChildren(
    ...labels(study).map((a) =>
      el("tr", { dataset: { algorithm: a } },
        el("th", { scope: "row", text: a }),
        ...study.workloads.map((w) => timeCell(ix.base.get(key(a, w, condition)), ix.ratios.get(key(a, w, condition)), ix.gate.get(key(a, w)))),
        heldOutCell(study, ix, a),
        scoreCell(ix.score, condition, a)),
    ),
  );
  drawProfile(card, study, ix, condition);
}

// rho(tau) per algorithm as the API's steps [[tau, rho], ...], held to tau_max: drawn as
// steps (horizontal, then vertical), every other one dashed so equal curves both show.
function drawProfile(card, study, ix, condition) {
  let chart = charts.get(condition);
  const tauMax = ix.score ? ix.score.tau_max : 4;
  if (!chart) {
    chart = new LineChart(card.querySelector(".profile"), {
      id: `profile-${condition}`,
      title: `Performance profile at ${condition}: the share of workloads ρ each algorithm reaches within τ times the best`,
      xLabel: "τ (time over the best)",
      xFmt: (v) => `τ ${num(v)}`,
      xTickFmt: (v) => num(v),
      xRange: () => [1, tauMax],
      yLabel: "ρ (share of workloads)",
      yFmt: (v) => num(v),
      yRange: () => [0, 1],
      height: 240,
    });
    charts.set(condition, chart);
  }
  const profiles = ix.score?.profiles?.[condition] || {};
  chart.setSeries(
    labels(study).filter((a) => profiles[a]).map((a, i) => {
      const steps = profiles[a];
      const t = steps.map((s) => s[0]);
      const v = steps.map((s) => s[1]);
      if (t[t.length - 1] < tauMax) {
        t.push(tauMax);
        v.push(v[v.length - 1]);
      }
      return { label: a, t, v, step: true, ...(i % 2 ? { dash: [8, 4] } : {}) };
    }),
  );
  if (!ix.score) chart.empty.textContent = "The profile is drawn once every run has its outcome.";
}

function runText(r) {
  if (r.status === "reached") return `reached in ${seconds(r.time_to_target)}`;
  return r.why ? `${r.status}: ${r.why}` : r.status;
}

function drawCells(study) {
  document.querySelector("#study-cells tbody").replaceChildren(
    ...study.cells.map((c) =>
      el("tr", { dataset: { series: c.series } },
        el("td", { text: c.algorithm }),
        el("td", { text: c.workload }),
        el("td", { text: c.variant ? `held-out variant, at ${c.condition}` : c.condition }),
        el("td", {}, el("a", { href: `/series/${c.series}/`, text: `series ${c.series}` }),
          c.reused ? el("span", { class: "hint", text: ` (reused${c.reused_from ? ` from study ${c.reused_from}` : ""})` }) : ""),
        el("td", {}, el("ul", { class: "plain" }, ...c.runs.map((r) =>
          el("li", {}, el("a", { href: `/runs/${r.id}/`, text: `run ${r.id}` }), ` (seed ${r.seed}): ${runText(r)}`))))),
    ),
  );
}

function drawHead(study) {
  document.getElementById("study-name").textContent = study.name || `Study ${study.id}`;
  document.title = `${study.name || `Study ${study.id}`} · mlbench`;
  document.getElementById("study-state").replaceChildren(stateBadge(study.state));
  const seeds = study.seeds.join(", ");
  document.getElementById("study-what").textContent =
    `${study.algorithms.length} algorithms × ${study.workloads.length} workloads × ${study.conditions.length} conditions, seeds ${seeds}, ` +
    `${study.num_workers} workers (${num(study.num_cpus)} CPU${Number(study.num_cpus) === 1 ? "" : "s"} each, ${study.cluster}), suite ${study.suite_version}: ` +
    `${study.runs.ended} of ${study.runs.total} runs ended; created ${when(study.created_at)}${study.created_by ? ` by ${study.created_by}` : ""}.`;
  const origin = document.getElementById("study-origin");
  origin.hidden = !study.origin;
  if (study.origin) {
    const there = study.origin.study ?? study.origin.origin_study ?? "?";
    origin.textContent = `Imported, read-only: study ${there} of installation ${study.origin.fingerprint || study.origin.origin_fingerprint || "unknown"}.`;
  }
  const cancel = document.getElementById("cancel-study");
  if (cancel) cancel.hidden = !LIVE.has(study.state);
}

let stopPolling = () => {};

async function refresh() {
  let study;
  try {
    study = await api(`/api/studies/${studyId}/`);
  } catch (err) {
    if (err.status !== 404) throw err;
    stopPolling();
    statusLine.textContent = `There is no study ${studyId}.`;
    document.body.dataset.loaded = "1";
    return;
  }
  const ix = index(study);
  drawHead(study);
  drawScore(study, ix);
  for (const c of study.conditions) drawCondition(study, ix, c);
  drawCells(study);
  if (study.pending_runs) statusLine.textContent = `${study.pending_runs} runs pending: this page follows them.`;
  else if (statusLine.dataset.said !== "cancel") statusLine.textContent = "";
  document.body.dataset.loaded = "1";
  document.body.dataset.pending = String(study.pending_runs);
  if (!study.pending_runs) stopPolling();
}

document.getElementById("cancel-study")?.addEventListener("click", async (event) => {
  event.target.disabled = true;
  try {
    await api(`/api/studies/${studyId}/cancel/`, { method: "POST" });
    statusLine.dataset.said = "cancel";
    statusLine.textContent = "The study was cancelled: its queued runs were dropped and its active run stopped; ended runs keep their grades, and a cancelled run counts as a miss.";
    await refresh();
  } catch (err) {
    statusLine.textContent = `Could not cancel: ${err.message}`;
  } finally {
    event.target.disabled = false;
  }
});

stopPolling = every(5000, refresh);
