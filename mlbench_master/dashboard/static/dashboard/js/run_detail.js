// Run details: state, live training charts (against time or epoch), the time split, logs,
// configuration and manifest, downloads, cancel, delete, and resume (a run that ended in a
// resumable state, with a checkpoint: a new run with the same settings continues from it).
// Which states those are, and which a run still changes in, are the master's run rules, read
// as data (GET /api/runs/defaults/: `run_states`, `training_only`). A run of a
// measurement task (the backend benchmark) gets its own view instead of the training
// charts: bus bandwidth against message size and the table of its cells (backend_benchmark.js).

import { api, every } from "./api.js";
import { CLOCK_INCRS, clockRange, fractionRange } from "./axes.js";
import { LineChart } from "./charts.js";
import { PROGRESS, elapsed, epochs, runClock } from "./clock.js";
import { costPairs } from "./cost.js";
import { showEvaluation } from "./evaluation.js";
import { MetricFeed } from "./feed.js";
import { M } from "./metric_points.js";
import { algorithmText, clock, datasetBadge, duration, el, implementationText, num, pct, sentText, stateBadge } from "./format.js";
import { LogFollower } from "./logs.js";
import { showOrigin } from "./origin.js";
import { CONFIG, kv } from "./run_info.js";
import { perSecond, taskInfo, throughputMetrics, throughputOf } from "./tasks.js";
import { OP_TITLES, chartOptions, sizeLabel, curves, fetchCells, isMeasurement, linkNotes, tableRows } from "./backend_benchmark.js";

const root = document.getElementById("run-detail");
const runId = root.dataset.runId;
// The master's run rules (GET /api/runs/defaults/), read once before the run is first shown:
// the page keeps no list of states or fields of its own.
let rules = null;
// A run not yet in a final state (queued or active) is still to change: the page keeps
// polling, and it can be cancelled.
const live = (state) => !rules.run_states.final.includes(state);
const SPLIT = [
  [M.time_data, "data"],
  [M.time_compute, "compute"],
  [M.time_comm, "communication"],
];
const CHARTS = [
  { id: "loss", title: "Training loss", series: [[M.train_loss, "train loss"], [M.val_loss, "validation loss"]], fmt: (v) => num(v) },
  { id: "accuracy", title: "Validation accuracy", series: [[M.evaluated_val_accuracy, "validation (evaluator)"], [M.val_accuracy, "validation (reported)"], [M.train_accuracy, "training"]], fmt: pct, range: fractionRange },
  { id: "lr", title: "Learning rate", series: [[M.learning_rate, "learning rate"]], fmt: (v) => num(v) },
];
// The throughput chart counts what the run's task counts (tasks.js): images for task 1a,
// samples for task 2. It is known once the run is: until then no chart is drawn.
function throughputChart({ metric, unit }) {
  return { id: "throughput", title: `${perSecond(unit)} (all workers)`, series: metric ? [[metric, unit]] : [], fmt: (v) => num(v) };
}
// A task whose goal is another metric than accuracy (task 3: validation perplexity, lower is
// better; task 4b: BLEU, 0..100, the evaluator's grade beside the run's own) gets its chart.
const PERPLEXITY_CHART = { id: "perplexity", title: "Validation perplexity (lower is better)", series: [[M.val_perplexity, "validation (reported)"]], fmt: (v) => num(v) };
const BLEU_CHART = { id: "bleu", title: "Validation BLEU (sacrebleu)", series: [[M.evaluated_val_bleu, "validation (evaluator)"], [M.val_bleu, "validation (reported)"]], fmt: (v) => num(v) };
function goalCharts(r) {
  const metrics = Object.values((r ? taskInfo(r) : null)?.goals || {}).map((g) => g.metric);
  return metrics.includes(M.val_bleu) ? [BLEU_CHART] : metrics.includes(M.val_perplexity) ? [PERPLEXITY_CHART] : [];
}
const NAMES = [...CHARTS.flatMap((c) => c.series.map((s) => s[0])), M.val_perplexity, M.val_bleu, M.evaluated_val_bleu, ...throughputMetrics(), ...SPLIT.map((s) => s[0]), ...PROGRESS, M.time_to_target];

let run = null;
let throughput = null; // {metric, unit} of this run's task, once the run is known
let finalFetch = false;
const feed = new MetricFeed(runId, { type: "run", names: NAMES, summarize: 500, maxPoints: 5000 });
const chartsBox = document.getElementById("run-charts");
const xRadios = [...document.querySelectorAll('input[name="xaxis"]')];
const logs = new LogFollower(runId, document.getElementById("run-logs"), {
  rank: document.getElementById("log-rank"),
  stream: document.getElementById("log-stream"),
  follow: document.getElementById("log-follow"),
});

function xMode() {
  return xRadios.find((r) => r.checked).value;
}

// x of each point: seconds on the benchmark clock, or epochs completed (see clock.js).
function project(name, label, mode, clk) {
  const s = feed.get(name);
  const xs = mode === "epoch" ? epochs(s, clk) : elapsed(s, clk);
  const pts = xs.map((x, i) => [x, s.v[i]]).filter((p) => p[0] !== null && p[0] !== undefined);
  pts.sort((a, b) => a[0] - b[0]);
  return { label, t: pts.map((p) => p[0]), v: pts.map((p) => p[1]) };
}

let charts = [];
function buildCharts() {
  charts.forEach((c) => c.chart.destroy());
  const mode = xMode();
  charts = [...CHARTS, ...goalCharts(run), throughputChart(throughput)].map((c) => ({
    spec: c,
    chart: new LineChart(chartsBox, {
      id: `chart-${c.id}`,
      title: c.title,
      xLabel: mode === "epoch" ? "epoch" : "benchmark clock (min:s)",
      xFmt: mode === "epoch" ? (v) => num(v, 3) : duration,
      xTickFmt: mode === "epoch" ? (v) => num(v, 3) : clock,
      ...(mode === "epoch" ? {} : { xRange: clockRange, xIncrs: CLOCK_INCRS }),
      yFmt: c.fmt,
      yRange: c.range,
    }),
  }));
}

function drawCharts() {
  const mode = xMode();
  const clk = runClock(feed, run);
  for (const { spec, chart } of charts) chart.setSeries(spec.series.map(([n, label]) => project(n, label, mode, clk)));
  splitChart.setSeries(SPLIT.map(([n, label]) => project(n, label, "time", clk)));
  drawSplitTable();
}

const splitChart = new LineChart(document.getElementById("split-chart"), {
  id: "chart-split",
  title: "Seconds per step over time",
  xLabel: "benchmark clock (min:s)",
  xFmt: duration,
  xTickFmt: clock,
  xRange: clockRange,
  xIncrs: CLOCK_INCRS,
  yFmt: (v) => num(v),
  height: 180,
});

function drawSplitTable() {
  const means = SPLIT.map(([n, label]) => {
    const v = feed.get(n).v.filter((x) => x !== null);
    return { label, mean: v.length ? v.reduce((a, b) => a + b, 0) / v.length : null };
  });
  const total = means.reduce((a, m) => a + (m.mean || 0), 0);
  document.querySelector("#time-split tbody").replaceChildren(
    ...means.map((m) =>
      el(
        "tr",
        {},
        el("th", { scope: "row", text: m.label }),
        el("td", { text: m.mean === null ? "—" : num(m.mean, 3) }),
        el("td", {}, m.mean === null || !total ? "—" : el("meter", { min: 0, max: 1, value: m.mean / total, "aria-label": `${m.label} share` }), m.mean === null || !total ? "" : ` ${pct(m.mean / total)}`),
      ),
    ),
  );
}

// ---- run info ----
// Fields shown in words rather than as stored (time_budget_source: where the time budget
// in effect comes from).
const BUDGET_SOURCES = { asked: "asked for", task: "the task's budget", time_limit: "what fits in the time limit (shorter than the task's budget)" };
const SHOWN = {
  task: () => taskLabel(),
  algorithm: (r) => algorithmText(r),
  algorithm_source: (r) => el("a", { href: `/api/algorithms/${r.algorithm_source}/`, id: "algorithm-source", text: r.algorithm_source }), // the uploaded file the ranks ran
  implementation: (r) => implementationText(r), // "torch-ddp (PyTorch 2.3.1)"; none stored: reference
  lr_schedule: (r) => r.lr_schedule || "the task's default", // task 1b: step
  time_budget_source: (r) => BUDGET_SOURCES[r.time_budget_source] ?? r.time_budget_source,
  series: (r) => (r.series ? el("a", { href: `/series/${r.series}/`, id: "series-link", text: `series ${r.series}` }) : null),
};

function taskLabel() {
  const info = taskInfo(run);
  return info ? `${run.task} (${info.title})` : run.task;
}

// What a measurement has no use for (`training_only`: accuracy goals, data, epochs,
// checkpoints, ...), as a run's fields are named: a run stores the resume_from it was created
// with as resumed_from.
function trainingOnly() {
  return new Set(rules.training_only.map((name) => (name === "resume_from" ? "resumed_from" : name)));
}

function showMeasurementSummary(s) {
  const top = s.peak;
  kv(document.getElementById("run-summary"), [
    ["Highest bus bandwidth (median)", s.busbw_mbps !== undefined && s.busbw_mbps !== null ? `${num(s.busbw_mbps)} Mbit/s${top ? ` (${OP_TITLES[top.op] || top.op}, ${top.backend}, ${sizeLabel(top.size)})` : ""}` : null],
    ["Backends", s.backend],
    ["Cells measured", s.measured],
    ["Cells not measured", Array.isArray(s.not_measured) ? s.not_measured.length : null],
    ["Stopped because", s.stop_reason],
    ["Elapsed", s.elapsed !== undefined ? duration(s.elapsed) : null],
    ["Device", s.device],
  ]);
}

// What the run's links were, in words (backend_benchmark.js: linkNotes); null when nothing says.
const LINK_NOTES = [
  ["max_bandwidth", "bandwidth", "requested_mbit_s", "Mbit/s"],
  ["latency", "latency", "requested_ms", "ms each way"],
];
function networkText(run) {
  const notes = linkNotes(run);
  const parts = [];
  for (const [key, label, asked, unit] of LINK_NOTES) {
    const note = notes[key];
    if (!note || typeof note !== "object" || note[asked] === null || note[asked] === undefined) continue;
    const how = note.applied ? `applied${note.by ? ` by ${note.by}` : ""}` : `not applied (${note.why || "no reason given"})`;
    parts.push(`${label} ${note[asked]} ${unit}: ${how}`);
  }
  const slots = notes.network?.slots;
  if (slots && typeof slots === "object") parts.push(`each worker a host of its own (${Object.values(slots).join(", ")})`);
  return parts.length ? parts.join("; ") : null;
}

function showRun() {
  document.getElementById("run-name").textContent = run.name || `Run ${run.id}`;
  document.title = `${run.name || "Run " + run.id} · mlbench`;
  document.getElementById("run-state").replaceChildren(stateBadge(run.state));
  document.getElementById("run-reason").textContent = run.reason || "";
  const measuring = isMeasurement(run);
  const unused = measuring ? trainingOnly() : new Set();
  kv(document.getElementById("run-config"), [
    ...CONFIG.filter(([k]) => (k in run || k === "implementation") && !(!run[k] && (k.startsWith("custom") || k === "algorithm_source")) && !unused.has(k)).map(([k, label]) => [label, (SHOWN[k] || ((r) => r[k]))(run)]),
    ...(measuring ? [] : [["Dataset used", datasetBadge(run)]]),
    ...(networkText(run) ? [["Network", networkText(run)]] : []),
  ]);
  kv(document.getElementById("run-cost"), costPairs(run.cost));
  const s = run.summary || {};
  if (measuring && Object.keys(s).length) showMeasurementSummary(s);
  else if (Object.keys(s).length) {
    const { metric, unit } = throughputOf(run);
    kv(document.getElementById("run-summary"), [
      ["Reached target", s.reached],
      ...(s.final_val_perplexity !== undefined
        ? [["Target perplexity (lower is better)", s.target_accuracy !== undefined ? num(s.target_accuracy) : null]]
        : [["Target accuracy", s.target_accuracy !== undefined ? pct(s.target_accuracy) : null]]),
      ["Time to target", s.time_to_target !== undefined && s.time_to_target !== null ? duration(s.time_to_target) : null],
      ["Best validation accuracy", s.best_val_accuracy !== undefined ? pct(s.best_val_accuracy) : null],
      ["Final validation accuracy", s.final_val_accuracy !== undefined ? pct(s.final_val_accuracy) : null],
      ...(s.final_val_perplexity !== undefined
        ? [["Best validation perplexity", num(s.best_val_perplexity)], ["Final validation perplexity", num(s.final_val_perplexity)]]
        : []),
      ["Epochs", s.epochs],
      [`Throughput (${unit})`, metric && s[metric] !== undefined && s[metric] !== null ? num(s[metric]) : null],
      ["Communication share", s.comm_share !== undefined ? pct(s.comm_share) : null],
      ["Sent (a rank)", s.comm_bytes_per_step !== undefined ? sentText(s) : null],
      ["Elapsed", s.elapsed !== undefined ? duration(s.elapsed) : null],
      ["Dataset", datasetBadge(run)],
    ]);
  }
  document.getElementById("run-manifest").textContent = JSON.stringify(run.manifest || {}, null, 2);
  showResumed();
  showEvaluation(document.getElementById("run-evaluation"), run.evaluation || {});
  // An imported run: its origin shown; deleted by staff only (the API refuses others too).
  if (showOrigin(document.getElementById("run-origin"), run.origin, "run") && root.dataset.staff !== "1") document.getElementById("delete-run")?.setAttribute("hidden", "");
  const cancel = document.getElementById("cancel-run");
  if (cancel) cancel.hidden = !live(run.state); // a queued one leaves the queue
}

// A resumed run says so where its state is shown: its result continues another run's
// training (from that run's checkpoint), it was not trained from scratch.
function showResumed() {
  const box = document.getElementById("run-resumed");
  if (!run.resumed_from) {
    box.hidden = true;
    return;
  }
  const from = (run.manifest && run.manifest.resumed_from) || {};
  const where = from.epoch !== undefined ? ` at epoch ${from.epoch} (step ${from.step}, ${duration(from.elapsed || 0)} on the clock)` : "";
  box.replaceChildren(
    "Resumed from the checkpoint of ",
    el("a", { href: `/runs/${run.resumed_from}/`, text: `run ${run.resumed_from}` }),
    `${where}: this run continues that run's training; it did not start from scratch.`,
  );
  box.hidden = false;
}

// ---- resume ----
// The last checkpoint a resumable reference run reported (null: none), fetched once.
let checkpoint;

async function lastCheckpoint() {
  if (checkpoint === undefined) {
    const data = await api(`/api/metrics/${runId}/`, { params: { metric_type: "run", metric_filter: "checkpoint", last_n: 1 } });
    const points = (data && data.checkpoint) || [];
    checkpoint = points.length ? points[points.length - 1] : null;
  }
  return checkpoint;
}

async function showResume() {
  const button = document.getElementById("resume-run");
  if (!button) return;
  if (!rules.run_states.resumable.includes(run.state) || run.custom_image_command || isMeasurement(run) || run.origin) {
    button.hidden = true;
    return;
  }
  const point = await lastCheckpoint();
  button.hidden = !point;
  if (point) button.textContent = `Resume from epoch ${Math.round(point.value)}`;
}

// The new run: a name and resume_from. The master gives it every other setting of this run
// (run_rules: a resumed run inherits what its request leaves out), so nothing is lost here.
function resumeBody() {
  return { name: `${run.name} (resumed)`.slice(0, 200), resume_from: run.id };
}

async function resumeRun() {
  const point = await lastCheckpoint();
  const epoch = point ? ` (epoch ${Math.round(point.value)})` : "";
  if (!(await confirmAction("Resume this run?", `A new run with the same settings continues from this run's last checkpoint${epoch}. This run stays as it is.`))) return;
  try {
    const created = await api("/api/runs/", { method: "POST", body: resumeBody() });
    window.location.href = `/runs/${created.id}/`;
  } catch (err) {
    // A setting of this run the master no longer allows can be changed where the new run is
    // described: the New run form, with this run in "Resume from run".
    const change = err.status === 400 ? ` To change a setting, use New run on the Runs page with “Resume from run” ${run.id}.` : "";
    statusLine.textContent = `Could not resume: ${err.message}${change}`;
  }
}

let stopPolling = () => {};

async function refresh() {
  if (run && !live(run.state) && finalFetch) return;
  rules ??= await api("/api/runs/defaults/");
  try {
    run = await api(`/api/runs/${runId}/`);
  } catch (err) {
    if (err.status !== 404) throw err;
    stopPolling();
    statusLine.textContent = `There is no run ${runId}: it may have been deleted.`;
    document.body.dataset.loaded = "1";
    return;
  }
  showRun();
  await showResume();
  if (!live(run.state)) finalFetch = true; // one last fetch of metrics and logs, then stop
  if (isMeasurement(run)) {
    await Promise.all([drawMeasurement(), logs.refresh()]);
    document.body.dataset.loaded = "1";
    return;
  }
  const [changed] = await Promise.all([feed.refresh(), logs.refresh()]);
  const known = throughputOf(run, { has: (m) => feed.get(m).v.length > 0 });
  if (!throughput || known.metric !== throughput.metric || known.unit !== throughput.unit) {
    throughput = known;
    buildCharts();
    drawCharts();
  } else if (changed.size) drawCharts();
  document.body.dataset.loaded = "1";
}

// ---- a measurement run (the backend benchmark) ----
let commChart = null;

async function drawMeasurement() {
  if (!commChart) {
    for (const id of ["training-card", "split-card"]) document.getElementById(id).hidden = true;
    document.getElementById("comm-card").hidden = false;
    commChart = new LineChart(document.getElementById("comm-chart"), chartOptions("chart-busbw", "Bus bandwidth against message size"));
  }
  const { cells, source } = await fetchCells(run);
  commChart.setSeries(curves(cells));
  document.querySelector("#comm-table tbody").replaceChildren(...tableRows(cells));
  document.getElementById("comm-card").dataset.source = source;
}

// ---- actions ----
const statusLine = document.getElementById("run-status");
const dialog = document.getElementById("confirm-dialog");

function confirmAction(title, text) {
  return new Promise((resolve) => {
    document.getElementById("confirm-title").textContent = title;
    document.getElementById("confirm-text").textContent = text;
    dialog.returnValue = "";
    dialog.addEventListener("close", () => resolve(dialog.returnValue === "ok"), { once: true });
    dialog.showModal();
  });
}

async function cancelRun() {
  if (!(await confirmAction("Cancel this run?", "Every worker process of the run is stopped. The metrics and output recorded so far are kept."))) return;
  try {
    run = await api(`/runs/${runId}/cancel/`, { method: "POST" });
    statusLine.textContent = "The run was cancelled.";
    finalFetch = false;
    await refresh();
  } catch (err) {
    statusLine.textContent = `Could not cancel: ${err.message}`;
  }
}

async function deleteRun() {
  if (!(await confirmAction("Delete this run?", "The run, its metrics and its output are deleted for good. An active run is cancelled first."))) return;
  try {
    await api(`/api/runs/${runId}/`, { method: "DELETE" });
    window.location.href = "/runs/";
  } catch (err) {
    statusLine.textContent = `Could not delete: ${err.message}`;
  }
}

document.getElementById("cancel-run")?.addEventListener("click", cancelRun);
document.getElementById("delete-run")?.addEventListener("click", deleteRun);
document.getElementById("resume-run")?.addEventListener("click", resumeRun);
xRadios.forEach((r) =>
  r.addEventListener("change", () => {
    if (!throughput) return; // the charts are built once the run is known
    buildCharts();
    drawCharts();
  }),
);
stopPolling = every(3000, refresh);
