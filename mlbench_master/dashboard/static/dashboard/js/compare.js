// Compare: validation accuracy of several runs on one clock, and a table of time to target,
// accuracy after a chosen time, speed-up over a comparable 1-worker run and scaling efficiency.
// Runs of the backend benchmark (a measurement: no accuracy) get a card of their own:
// their bus bandwidth curves overlaid, labelled with each run's network settings.

import { api, rows } from "./api.js";
import { accuracyOverClock } from "./axes.js";
import { LineChart } from "./charts.js";
import { PROGRESS, elapsed, runClock } from "./clock.js";
import { MetricFeed } from "./feed.js";
import { M } from "./metric_points.js";
import { baselineFor, datasetOf, speedup } from "./comparable.js";
import { costCell } from "./cost.js";
import { algorithmText, datasetBadge, duration, el, implementationText, num, pct, sentText, stateBadge } from "./format.js";
import { taskInfo, throughputMetrics, throughputOf } from "./tasks.js";
import { OP_TITLES, chartOptions, sizeLabel, curves, fetchCells, isMeasurement, networkLabel, peak } from "./backend_benchmark.js";

const picker = document.getElementById("run-picker");
const afterInput = document.getElementById("after-time");
// Asked for: ratios against a 1-worker run of another implementation (comparable.js).
const acrossInput = document.getElementById("across-implementations");
const chartBox = document.getElementById("compare-chart");
const chartStatus = document.getElementById("compare-status");
const tbody = document.querySelector("#compare-table tbody");
const warningBox = document.getElementById("compare-warning");

let allRuns = [];
const feeds = new Map(); // run id -> MetricFeed (val_accuracy, throughput, time_to_target, progress)
let chart = null;
const commCells = new Map(); // run id -> cells of a backend benchmark run (backend_benchmark.js)
let commChart = null;
const opRadios = [...document.querySelectorAll('input[name="comm-op"]')];

function selectedIds() {
  return [...picker.querySelectorAll("input:checked")].map((i) => Number(i.value));
}

function fromUrl() {
  const q = new URLSearchParams(window.location.search).get("runs") || "";
  return new Set(q.split(",").filter(Boolean).map(Number));
}

// The page's address says what it shows (runs, and whether cross-implementation ratios
// were asked for), so a link to it shows the same table.
function toUrl(ids) {
  const url = new URL(window.location.href);
  if (ids.length) url.searchParams.set("runs", ids.join(","));
  else url.searchParams.delete("runs");
  if (acrossInput.checked) url.searchParams.set("across", "1");
  else url.searchParams.delete("across");
  window.history.replaceState(null, "", url);
}

// The speed-up cell: "1.80×", "1.80× (throughput)", or for a ratio against a run of another
// implementation "1.80× vs reference (cross-implementation)"; "—" with the reason otherwise
// (and, where only the implementation and the backend differ, how to ask for the
// cross-implementation ratio).
function speedupCell(sp, base) {
  if (sp.reason) {
    const hint = / the same (backend\/)?implementation$/.test(sp.reason) && !acrossInput.checked ? " (tick “Across implementations” for the cross-implementation ratio)" : "";
    return el("td", { class: "speedup none" }, "—", el("small", { class: "why", text: sp.reason + hint }));
  }
  const across = sp.across ? ` vs ${sp.across} (cross-implementation)` : "";
  const title = sp.how ? `from ${sp.how}, ${sp.against}${sp.across ? `, a run of implementation ${sp.across} on ${base?.backend || "its backend"}: the ratio measures the framework as well as the scaling` : ""}` : "";
  return el("td", { class: sp.across ? "speedup across" : "speedup", title }, `${sp.value.toFixed(2)}×${sp.how === "throughput" ? " (throughput)" : ""}${across}`);
}

// A metric against the run's benchmark clock (see clock.js).
function elapsedSeries(feed, run, name) {
  const s = feed.get(name);
  return { t: elapsed(s, runClock(feed, run)), v: s.v };
}

function sortedXY(series) {
  const pts = series.t.map((x, i) => [x, series.v[i]]).sort((a, b) => a[0] - b[0]);
  return { t: pts.map((p) => p[0]), v: pts.map((p) => p[1]) };
}

// The numbers of one run, from its summary when the workers reported one, else from metrics.
// Throughput is in the unit of the run's task (tasks.js): images/s and samples/s never meet,
// because runs of different tasks are never compared (comparable.js).
// Where the platform's evaluator graded the run, its grades are the accuracy and the time to
// target (run.evaluation, stored.py); the run's own numbers are used only for a run that was
// not evaluated, and that run is labelled so in the table.
// A translation run's (task 4b) numbers are BLEU (0..100) where the others' are accuracies.
const goalOf = (run) => (run.evaluation?.metric === M.val_bleu ? M.val_bleu : M.val_accuracy);
const fmtOf = (run) => (goalOf(run) === M.val_bleu ? (v) => (v === null || v === undefined ? "—" : `${Number(v).toFixed(2)} BLEU`) : pct);
function measure(run) {
  const feed = feeds.get(run.id);
  const graded = run.evaluation?.status === "evaluated" ? run.evaluation : null;
  const goal = goalOf(run);
  const bestName = `best_${goal}`;
  const s = graded ? { ...(run.summary || {}), time_to_target: graded.time_to_target, [bestName]: undefined } : run.summary || {};
  const name = graded ? M[`evaluated_${goal}`] : goal;
  const acc = feed ? sortedXY(elapsedSeries(feed, run, name)) : { t: [], v: [] };
  const { metric, unit } = throughputOf(run, { has: (m) => Boolean(feed?.get(m).v.length) });
  const rates = feed && metric ? feed.get(metric).v.filter((v) => v !== null) : [];
  const ttm = feed && !graded ? feed.get(M.time_to_target).v : [];
  return {
    acc,
    ttt: s.time_to_target ?? (ttm.length ? ttm[ttm.length - 1] : null),
    best: s[bestName] ?? (acc.v.length ? Math.max(...acc.v) : null),
    throughput: (metric && s[metric]) ?? (rates.length ? rates.reduce((a, b) => a + b, 0) / rates.length : null),
    unit,
    length: acc.t.length ? acc.t[acc.t.length - 1] : (s.elapsed ?? null),
  };
}

// Who graded the run, under its name: a run graded only by itself says so, and
// a run whose own accuracy strays from the evaluator's grade shows both numbers.
function gradedMark(run) {
  const e = run.evaluation || {};
  if (e.status === "self-reported, not evaluated") return el("div", { class: "graded self", text: "self-reported, not evaluated" });
  const m = (e.mismatches || [])[0];
  const audit = (e.audit || {}).status;
  if (!m && ["mismatch", "refused"].includes(audit)) return el("div", { class: "graded mismatch", text: `model audit: ${audit}` });
  if (!m) return "";
  const fmt = fmtOf(run);
  return el("div", { class: "graded mismatch", text: `mismatch at step ${m.step}: reported ${fmt(m.reported)}, graded ${fmt(m.graded)}` });
}

function accuracyAfter(m, seconds) {
  let best = null;
  m.acc.t.forEach((t, i) => {
    if (t <= seconds && (best === null || m.acc.v[i] > best)) best = m.acc.v[i];
  });
  return best;
}

// Set-up differences worth a warning above the table: the picked runs used different data
// sets (a synthetic result is no CIFAR-10 result) or ran different tasks.
function mixedWarning(runs) {
  const distinct = (of) => [...new Set(runs.map(of))].sort();
  const sets = distinct((r) => datasetOf(r) ?? "not reported yet");
  const tasks = distinct((r) => r.task || "—");
  const parts = [];
  if (sets.length > 1) parts.push(`different data sets (${sets.join(", ")})`);
  if (tasks.length > 1) parts.push(`different tasks (${tasks.join(", ")})`);
  if (!parts.length) return "";
  const real = distinct((r) => (datasetOf(r) === "synthetic" ? taskInfo(r)?.dataset : null)).filter(Boolean);
  const synthetic = sets.includes("synthetic") ? ` A synthetic run measures generated data: its accuracy says nothing about ${real.length ? real.join(" or ") : "the task's real data set"}.` : "";
  return `These runs use ${parts.join(" and ")}: their accuracies and times are not comparable.${synthetic} Speed-up is only given against a 1-worker run of the same set-up.`;
}

function renderComm(runs) {
  const card = document.getElementById("comm-compare-card");
  card.hidden = !runs.length;
  if (!runs.length) return;
  if (!commChart) commChart = new LineChart(document.getElementById("comm-compare-chart"), chartOptions("chart-comm-compare", "Bus bandwidth against message size", 320));
  const op = opRadios.find((r) => r.checked)?.value;
  const label = (r) => `${r.name || "run " + r.id}${networkLabel(r) ? ` (${networkLabel(r)})` : ""}`;
  commChart.setSeries(runs.flatMap((r) => curves(commCells.get(r.id) || [], { prefix: `${label(r)} · `, ops: op ? [op] : null })));
  document.querySelector("#comm-compare-table tbody").replaceChildren(
    ...runs.map((r) => {
      const cells = commCells.get(r.id) || [];
      const top = peak(cells);
      const smallest = cells.filter((c) => c.latency !== undefined).sort((a, b) => a.size - b.size || a.latency - b.latency)[0];
      return el(
        "tr",
        { dataset: { runId: r.id } },
        el("th", { scope: "row" }, el("a", { href: `/runs/${r.id}/`, text: r.name || `run ${r.id}` }), " ", stateBadge(r.state)),
        el("td", { class: "network", text: networkLabel(r) || "—" }),
        el("td", { text: String(r.num_workers ?? "—") }),
        el("td", { text: r.backend || "—" }),
        el("td", { class: "peak", text: top ? `${num(top.busbw)} Mbit/s (${OP_TITLES[top.op] || top.op}, ${top.backend}, ${sizeLabel(top.size)})` : "—" }),
        el("td", { text: smallest ? `${num(smallest.latency)} µs (${OP_TITLES[smallest.op] || smallest.op}, ${smallest.backend}, ${sizeLabel(smallest.size)})` : "—" }),
      );
    }),
  );
}

function render() {
  const ids = selectedIds();
  const picked = ids.map((id) => allRuns.find((r) => r.id === id)).filter(Boolean);
  const runs = picked.filter((r) => !isMeasurement(r));
  const measuring = picked.filter(isMeasurement);
  renderComm(measuring);
  // Only backend benchmark runs picked: the training cards have nothing to show.
  for (const id of ["accuracy-card", "results-card"]) document.getElementById(id).hidden = !runs.length && measuring.length > 0;
  const measured = new Map(runs.map((r) => [r.id, measure(r)]));
  const lengths = [...measured.values()].map((m) => m.length).filter((x) => x);
  const after = Number(afterInput.value) || (lengths.length ? Math.min(...lengths) : 0);
  document.getElementById("after-label").textContent = after ? duration(after) : "…";

  // Accuracy is a fraction: its axis stays within 0 to 100 % (uPlot's own range put one
  // evaluation at 90 % on an axis to 180 %); the clock axis as on the run and series pages.
  if (!chart) {
    chart = new LineChart(chartBox, accuracyOverClock("chart-compare", 300));
  }
  chart.setSeries(runs.map((r) => ({ label: `${r.name || "run " + r.id} (${r.num_workers} w)`, ...measured.get(r.id).acc })));
  chartStatus.hidden = runs.length > 0;
  const warning = mixedWarning(runs);
  warningBox.textContent = warning;
  warningBox.hidden = !warning;

  tbody.replaceChildren(
    ...runs.map((r) => {
      const m = measured.get(r.id);
      const base = baselineFor(r, runs, measured, { acrossImplementations: acrossInput.checked });
      const sp = speedup(r, m, base);
      return el(
        "tr",
        { dataset: { runId: r.id } },
        el("th", { scope: "row" }, el("a", { href: `/runs/${r.id}/`, text: r.name || `run ${r.id}` }), " ", stateBadge(r.state), gradedMark(r)),
        el("td", { text: r.task || "—" }),
        el("td", { class: "algorithm", text: algorithmText(r) || "—" }),
        el("td", { class: "implementation", text: implementationText(r) || "—" }),
        el("td", { text: String(r.num_workers ?? "—") }),
        el("td", { class: "network", text: networkLabel(r) || "—" }),
        el("td", {}, datasetBadge(r)),
        el("td", { class: "ttt", text: m.ttt !== null ? duration(m.ttt) : "not reached" }),
        el("td", { class: "after", text: after ? fmtOf(r)(accuracyAfter(m, after)) : "—" }),
        el("td", { text: fmtOf(r)(m.best) }),
        el("td", { class: "throughput", text: m.throughput === null ? "—" : `${num(m.throughput)} ${m.unit}` }),
        el("td", { class: "comm", text: pct(r.summary?.comm_share ?? null) }),
        el("td", { class: "sent", text: sentText(r.summary) }),
        speedupCell(sp, base.run),
        el("td", { class: "efficiency", text: sp.reason ? "—" : pct(sp.value / (r.num_workers || 1)) }),
        el("td", { class: "cost" }, costCell(r.cost)),
      );
    }),
  );
  document.body.dataset.loaded = "1";
}

async function load() {
  const ids = selectedIds();
  toUrl(ids);
  await Promise.all(
    ids.map(async (id) => {
      const run = allRuns.find((r) => r.id === id);
      if (run && isMeasurement(run)) {
        commCells.set(id, (await fetchCells(run)).cells);
        return;
      }
      if (!feeds.has(id)) feeds.set(id, new MetricFeed(id, { type: "run", names: [M.val_accuracy, M.evaluated_val_accuracy, M.val_bleu, M.evaluated_val_bleu, ...throughputMetrics(), M.time_to_target, ...PROGRESS], summarize: 500 }));
      await feeds.get(id).refresh();
    }),
  );
  render();
}

// The picker lists the newest runs a page at a time (GET /api/runs/?limit=&offset=), and
// the runs the address names are read by id (?id=), so a page load never asks for the
// whole list (tens of megabytes at a large installation).
const PICKER_PAGE = 50;
let pickerOffset = 0;
const known = (id) => allRuns.some((r) => r.id === id);
const newestFirst = (a, b) => (b.created_at || "").localeCompare(a.created_at || "") || b.id - a.id;

function pickLabel(r, checked) {
  return el(
    "label",
    { class: "pick" },
    el("input", { type: "checkbox", name: "run", value: r.id, checked }),
    ` ${r.name || "run " + r.id} `,
    el("small", { text: `#${r.id} · ${r.num_workers} worker${r.num_workers === 1 ? "" : "s"} · ${r.state.toLowerCase()}` }),
  );
}

// The runs the address names; one that no longer exists is left out (the others are still
// shown), as a list that skipped it would.
async function pickedRuns(ids) {
  if (!ids.length) return [];
  try {
    return rows(await api("/api/runs/", { params: { id: ids.join(",") } }));
  } catch (err) {
    if (err.status !== 400) throw err;
    const each = await Promise.all(ids.map((id) => api(`/api/runs/${id}/`).catch(() => null)));
    return each.filter(Boolean);
  }
}

// The next page of the picker, below what it shows (runs already listed are not repeated).
async function morePicks() {
  const page = await api("/api/runs/", { params: { limit: PICKER_PAGE, offset: pickerOffset } });
  const fresh = rows(page).filter((r) => !known(r.id));
  allRuns.push(...fresh);
  pickerOffset = page.next_offset ?? pickerOffset + rows(page).length;
  const button = document.getElementById("picker-more");
  button.before(...fresh.map((r) => pickLabel(r, false)));
  button.hidden = page.next_offset === null || page.next_offset === undefined;
}

async function init() {
  const wanted = fromUrl();
  const [page, picked] = await Promise.all([api("/api/runs/", { params: { limit: PICKER_PAGE } }), pickedRuns([...wanted])]);
  allRuns = [...picked.sort(newestFirst), ...rows(page).filter((r) => !picked.some((p) => p.id === r.id))];
  pickerOffset = page.next_offset ?? allRuns.length;
  const legend = picker.querySelector("legend");
  const more = el("button", { type: "button", id: "picker-more", class: "picker-more", text: "Older runs" });
  more.hidden = page.next_offset === null || page.next_offset === undefined;
  more.addEventListener("click", () => morePicks().catch((e) => console.warn(e.message)));
  picker.replaceChildren(legend, ...(allRuns.length ? [...allRuns.map((r) => pickLabel(r, wanted.has(r.id))), more] : [el("p", { class: "status", text: "No runs yet." })]));
  picker.addEventListener("change", () => load().catch((e) => console.warn(e.message)));
  afterInput.addEventListener("input", render);
  acrossInput.checked = new URLSearchParams(window.location.search).get("across") === "1";
  acrossInput.addEventListener("change", () => {
    toUrl(selectedIds());
    render();
  });
  opRadios.forEach((r) => r.addEventListener("change", render));
  await load();
}

init();
