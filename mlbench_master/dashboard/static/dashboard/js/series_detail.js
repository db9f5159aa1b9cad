// A series: its statistics per worker count, the accuracy curve of every run with each
// worker count's band, its runs with their places in the queue, and cancelling it.
// Every number shown is one the API computed (GET /api/series/<id>/, `statistics`): this
// page formats them and computes none.

import { api, every } from "./api.js";
import { accuracyOverClock } from "./axes.js";
import { LineChart } from "./charts.js";
import { money } from "./cost.js";
import { duration, el, num, pct, stateBadge } from "./format.js";
import { showOrigin } from "./origin.js";

const root = document.getElementById("series-detail");
const seriesId = root.dataset.seriesId;
const statusLine = document.getElementById("series-status");
const ENDED = new Set(["ended", "cancelled"]);
// How a statistic is shown: fractions as percentages, times as durations.
const FORMATS = { accuracy_after_time: pct, communication_share: pct, time_to_target: duration, efficiency: pct };
const TITLES = {
  time_to_target: "Time to target",
  accuracy_after_time: "Accuracy after time",
  images_per_second: "Throughput",
  communication_share: "Communication share",
  speedup: "Speed-up vs 1 worker",
  efficiency: "Efficiency",
  cost_to_target: "Cost to target",
  run_cost: "Cost of a run",
};
// Costs are in the series' currency (statistics.cost.currency; null: not priced).
const COSTS = new Set(["cost_to_target", "run_cost"]);

let series = null;
let chart = null;
let costChart = null;
let indexChart = null;
let costCurrency = null; // the series' currency, read by the cost chart's axis

// A STAT object ({n, median, mean, sd, cv, min, max, olympic_mean}) in one cell.
function statCell(stat, fmt) {
  if (!stat || stat.median === null || stat.median === undefined) return el("td", { text: "—" });
  const f = fmt || ((v) => num(v));
  const spread = stat.sd !== null && stat.sd !== undefined ? ` ± ${f(stat.sd)}` : "";
  const lines = [
    el("div", { class: "median", text: `median ${f(stat.median)}` }),
    el("div", { class: "hint", text: `mean ${f(stat.mean)}${spread}${stat.cv !== null && stat.cv !== undefined ? `, CV ${pct(stat.cv)}` : ""}` }),
    el("div", { class: "hint", text: `min ${f(stat.min)}, max ${f(stat.max)}, n ${stat.n}` }),
  ];
  if (stat.olympic_mean !== null && stat.olympic_mean !== undefined) lines.push(el("div", { class: "hint", text: `olympic mean ${f(stat.olympic_mean)}` }));
  return el("td", {}, ...lines);
}

function isStat(value) {
  return value === null || (typeof value === "object" && !Array.isArray(value) && "median" in value);
}

function drawStats(stats) {
  const groups = stats?.groups || [];
  const keys = [...new Set(groups.flatMap((g) => Object.keys(g).filter((k) => isStat(g[k]))))];
  const currency = stats?.cost?.currency;
  // A goal of another metric than accuracy (task 3's perplexity): shown as a number.
  const ownMetric = stats?.target?.metric && stats.target.metric !== "val_accuracy";
  const fmt = (k) => (COSTS.has(k) ? (v) => money(v, currency) : k === "accuracy_after_time" && ownMetric ? (v) => num(v) : FORMATS[k]);
  const head = document.querySelector("#series-stats thead");
  head.replaceChildren(
    el("tr", {}, ...["Workers", "Reached / runs", "Valid", ...keys.map((k) => TITLES[k] || k), "Price per hour", "Price index"].map((t) => el("th", { scope: "col", text: t }))),
  );
  document.querySelector("#series-stats tbody").replaceChildren(
    ...groups.map((g) =>
      el(
        "tr",
        { dataset: { workers: g.num_workers } },
        el("th", { scope: "row", text: String(g.num_workers) }),
        el("td", { class: "reached", text: `${g.reached} / ${g.runs}` }),
        el("td", { class: "valid", text: g.valid ? "yes" : `no: ${g.invalid_reason || ""}` }),
        ...keys.map((k) => statCell(g[k], fmt(k))),
        el("td", { class: "price-per-hour", text: g.price_per_hour === null || g.price_per_hour === undefined ? "—" : `${money(g.price_per_hour, currency)}/h` }),
        el("td", { class: "price-index", text: g.price_index === null || g.price_index === undefined ? "—" : num(g.price_index) }),
      ),
    ),
  );
  const t = stats?.target || {};
  document.getElementById("series-target").textContent = t.task ? `Target: ${t.task}, goal ${t.goal}${t.value !== null && t.value !== undefined ? ` (${t.metric} ${t.metric === "val_accuracy" ? pct(t.value) : `${num(t.value)}, lower is better`})` : ""}${t.synthetic ? "; on generated (synthetic) data" : ""}.` : "";
}

// The curves and bands as the API gives them: [[seconds, accuracy], ...] per run and
// [[seconds, low, median, high], ...] per worker count.
function drawCurves(stats) {
  if (!chart) {
    chart = new LineChart(document.getElementById("series-charts"), accuracyOverClock("chart-series", 280));
  }
  const list = [];
  for (const c of stats?.curves || []) {
    const pts = c.points || [];
    list.push({ label: `run ${c.run}: seed ${c.seed}, ${c.num_workers} w`, t: pts.map((p) => p[0]), v: pts.map((p) => p[1]) });
  }
  for (const b of stats?.bands || []) {
    const pts = b.points || [];
    // The band is shaded between its high and low lines; the median is dashed.
    const label = (name) => `${b.num_workers} w ${name}`;
    [["low", 1, [2, 4]], ["median", 2, [8, 4]], ["high", 3, [2, 4]]].forEach(([name, i, dash]) =>
      list.push({ label: label(name), t: pts.map((p) => p[0]), v: pts.map((p) => p[i]), dash,
                  ...(name === "high" ? { fillTo: label("low") } : {}) }),
    );
  }
  chart.setSeries(list);
}

// Cost to target against workers (median with the cheapest and dearest run) and the price
// index against workers, as the statistics give them; the reason when nothing is priced.
function drawCost(stats) {
  const box = document.getElementById("series-cost-charts");
  const block = stats?.cost || {};
  const currency = block.currency;
  costCurrency = currency;
  if (!costChart) {
    const opts = (id, title, yLabel, yFmt) => ({ id, title, xLabel: "workers", xFmt: (v) => `${v} w`, xTickFmt: (v) => (Number.isInteger(v) ? String(v) : ""), yLabel, yFmt, height: 240 });
    costChart = new LineChart(box, opts("chart-cost", "Cost to target against workers", "cost to target", (v) => money(v, costCurrency)));
    indexChart = new LineChart(box, opts("chart-price-index", "Price index against workers (1: as dear as one worker)", "price index", (v) => num(v)));
  }
  const groups = (stats?.groups || []).filter((g) => g.cost_to_target && g.cost_to_target.n);
  const counts = groups.map((g) => g.num_workers);
  const line = (label, key, dash) => ({ label, t: counts, v: groups.map((g) => g.cost_to_target[key]), ...(dash ? { dash } : {}) });
  costChart.setSeries(groups.length ? [line("median", "median"), line("cheapest run", "min", [2, 4]), line("dearest run", "max", [2, 4])] : []);
  const indexed = (stats?.groups || []).filter((g) => g.price_index !== null && g.price_index !== undefined);
  indexChart.setSeries(indexed.length ? [{ label: "price index", t: indexed.map((g) => g.num_workers), v: indexed.map((g) => g.price_index) }] : []);
  const notes = [];
  if (block.reason) notes.push(block.reason);
  else for (const m of block.not_priced || []) notes.push(`run ${m.run}: ${m.reason}`);
  document.getElementById("series-cost-note").textContent = notes.length ? `${notes.join("; ")}.` : `In ${currency}, at the prices each run copied from the price table when it was created.`;
}

// A run's costs from the statistics' curves (the master's numbers), "not priced" otherwise.
function runCost(id) {
  const stats = series.statistics || {};
  const c = (stats.curves || []).find((x) => x.run === id);
  if (!c || c.price_per_hour === null || c.price_per_hour === undefined) return "not priced";
  const cur = stats.cost?.currency;
  return `${money(c.cost_to_target, null)} / ${money(c.run_cost, cur)}`;
}

function drawRuns() {
  document.querySelector("#series-runs tbody").replaceChildren(
    ...series.runs.map((r) =>
      el(
        "tr",
        { dataset: { runId: r.id } },
        el("td", {}, el("a", { href: `/runs/${r.id}/`, text: r.name || `run ${r.id}` })),
        el("td", { text: String(r.seed) }),
        el("td", { text: String(r.num_workers) }),
        el("td", {}, stateBadge(r.state), r.reason ? el("div", { class: "reason", text: r.reason }) : ""),
        el("td", { class: "queue-position", text: r.queue_position ? `#${r.queue_position}` : "—" }),
        el("td", { class: "cost", text: runCost(r.id) }),
      ),
    ),
  );
}

let stopPolling = () => {};

async function refresh() {
  try {
    series = await api(`/api/series/${seriesId}/`);
  } catch (err) {
    if (err.status !== 404) throw err;
    stopPolling();
    statusLine.textContent = `There is no series ${seriesId}: it may have been deleted.`;
    document.body.dataset.loaded = "1";
    return;
  }
  document.getElementById("series-name").textContent = series.name || `Series ${series.id}`;
  document.title = `${series.name || "Series " + series.id} · mlbench`;
  document.getElementById("series-state").replaceChildren(stateBadge(series.state));
  showOrigin(document.getElementById("series-origin"), series.origin, "series");
  document.getElementById("series-what").textContent = `seeds ${series.seeds.join(", ")} × workers ${series.worker_counts.join(", ")}: ${series.runs.length} runs, one after another`;
  const cancel = document.getElementById("cancel-series");
  if (cancel) cancel.hidden = ENDED.has(series.state);
  drawRuns();
  drawStats(series.statistics);
  drawCurves(series.statistics);
  drawCost(series.statistics);
  document.body.dataset.loaded = "1";
  if (ENDED.has(series.state)) stopPolling();
}

document.getElementById("cancel-series")?.addEventListener("click", async () => {
  try {
    await api(`/api/series/${seriesId}/cancel/`, { method: "POST" });
    statusLine.textContent = "The series was cancelled: its queued runs were dropped and its active run stopped.";
    await refresh();
  } catch (err) {
    statusLine.textContent = `Could not cancel: ${err.message}`;
  }
});

stopPolling = every(5000, refresh);
