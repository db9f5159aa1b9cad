// Runs the shared rule cases (comparison_cases.json, clock_cases.json, throughput_cases.json,
// implementation_cases.json, axes_cases.json, form_cases.json) through the dashboard's own
// JavaScript and prints what it answers, as JSON, for tests/rules/ (the `js` fixture of
// conftest.py).
//
//   MLBENCH_TASK_CATALOGUE='{...}' MLBENCH_RUN_DEFAULTS='{...}' node tests/rules/run_js.mjs
//     ->  {"dataset_of": {name: value}, "setup_differences": {...}, "baseline": {...},
//          "clock": {...}, "throughput": {...}, "implementation_text": {...}, "axes": {...},
//          "form": {"backends": {...}, "algorithms": {...}, "datasets": {...},
//                   "refused_fields": {...}}}
//
// The modules are imported as the browser imports them, unchanged:
// - comparable.js and clock.js are pure;
// - the clock reads a run's series from a MetricFeed, so the cases' API points go through
//   feed.js's own `absorb` (sorting, dropped dates, null values) exactly as on the pages;
//   feed.js imports api.js, which listens for a sign-out on `document` when loaded, so a
//   stand-in `document` is given;
// - tasks.js reads the task catalogue from the page (`json_script` with id
//   "task-catalogue"); the stand-in `document` serves the JSON the pages embed
//   (mlbench_master/dashboard/tasks.py), which test_rules.py passes in
//   MLBENCH_TASK_CATALOGUE;
// - form_rules.js reads the master's run rules as GET /api/runs/defaults/ serves them, which
//   conftest.py passes in MLBENCH_RUN_DEFAULTS;
// The dashboard's files are ES modules in a folder without a package.json "type": a load
// hook says so, so node treats them as the browser does on any node version.

import { readFileSync } from "node:fs";
import * as nodeModule from "node:module";

const here = new URL("./", import.meta.url);
const js = new URL("../../mlbench_master/dashboard/static/dashboard/js/", here);

const hooks = `
export async function load(url, context, next) {
  if (url.startsWith(${JSON.stringify(js.href)})) {
    return { ...(await next(url, { ...context, format: "module" })), format: "module" };
  }
  return next(url, context);
}`;
// (Before node 20.6 there are no load hooks; newer nodes also detect module syntax alone.)
nodeModule.register?.(`data:text/javascript,${encodeURIComponent(hooks)}`);

const catalogueJson = process.env.MLBENCH_TASK_CATALOGUE;
if (!catalogueJson) throw new Error("MLBENCH_TASK_CATALOGUE is not set: run through tests/rules/ (pytest)");
const servedJson = process.env.MLBENCH_RUN_DEFAULTS;
if (!servedJson) throw new Error("MLBENCH_RUN_DEFAULTS is not set: run through tests/rules/ (pytest)");
const served = JSON.parse(servedJson);
globalThis.document ??= {
  addEventListener() {},
  querySelector: () => null,
  getElementById: (id) => (id === "task-catalogue" ? { textContent: catalogueJson } : null),
};

const { baselineFor, datasetOf, setupDifferences, speedup } = await import(
  new URL("comparable.js", js).href
);
const { elapsed, runClock } = await import(new URL("clock.js", js).href);
const { MetricFeed } = await import(new URL("feed.js", js).href);
const { throughputOf } = await import(new URL("tasks.js", js).href);
const { clockRange, fractionRange } = await import(new URL("axes.js", js).href);
const { implementationText } = await import(new URL("format.js", js).href);
const { algorithmChoices, backendChoices, datasetChoices, defaultBackend, refusedFields } = await import(
  new URL("form_rules.js", js).href
);

const load = (name) => JSON.parse(readFileSync(new URL(name, here), "utf8"));
const comparison = load("comparison_cases.json");
const clock = load("clock_cases.json");
const throughput = load("throughput_cases.json");
const axes = load("axes_cases.json");
const implementation = load("implementation_cases.json");
const form = load("form_cases.json");

// The reason compare.js gives, in the cases' words (see comparison_cases.json).
function why(reason) {
  if (reason === undefined) return null;
  const same = "no 1-worker run with the same ";
  if (reason.startsWith(same)) return reason.slice(same.length).split("/");
  if (reason === "no 1-worker run picked") return "no 1-worker run";
  return reason;
}

// What compare.js measures for a run that has a summary and no fetched series.
function measured(run) {
  const s = run.summary || {};
  const { metric, unit } = throughputOf(run);
  return { ttt: s.time_to_target ?? null, throughput: metric ? (s[metric] ?? null) : null, unit };
}

const out = { dataset_of: {}, setup_differences: {}, baseline: {}, clock: {}, throughput: {}, implementation_text: {}, axes: {} };

for (const c of comparison.dataset_of) out.dataset_of[c.name] = datasetOf(c.run);
for (const c of comparison.setup_differences) {
  out.setup_differences[c.name] = setupDifferences(c.a, c.b);
}
for (const c of comparison.baseline) {
  const measures = new Map(c.runs.map((r) => [r.id, measured(r)]));
  const run = c.runs.find((r) => r.id === c.run);
  const base = baselineFor(run, c.runs, measures, { acrossImplementations: Boolean(c.across_implementations) });
  const sp = speedup(run, measures.get(run.id), base);
  out.baseline[c.name] = {
    baseline: base.run ? base.run.id : null,
    why: why(base.reason),
    speedup: sp.reason ? null : { value: sp.value, by: sp.how || "itself", ...(sp.across ? { across: sp.across } : {}) },
  };
}

for (const c of clock.cases) {
  const feed = new MetricFeed(c.run?.id ?? 1, { names: null });
  feed.absorb({ ...(c.other_series || {}), elapsed: c.elapsed });
  // A since= refresh serves the points of the newest date again (the page's next poll).
  if (c.served_again) feed.absorb({ elapsed: c.served_again });
  const at = Date.parse(c.at) / 1000;
  const clk = runClock(feed, c.run ?? null);
  const [x] = elapsed({ t: [at], v: [null], meta: [{}] }, clk);
  out.clock[c.name] = Number.isFinite(x) ? x : null;
}

for (const c of throughput.cases) {
  const series = new Set(c.series || []);
  out.throughput[c.name] = throughputOf(c.run, { has: (m) => series.has(m) });
}

for (const [kind, range] of [["clock", clockRange], ["fraction", fractionRange]]) {
  for (const c of axes[kind]) out.axes[`${kind}: ${c.name}`] = range(c.min, c.max);
}

for (const c of implementation.cases) out.implementation_text[c.name] = implementationText(c.run);

// What the New run form offers, from the served rules (the page's choices, see runs.js).
out.form = { backends: {}, algorithms: {}, datasets: {}, refused_fields: {} };
for (const c of form.backends) {
  out.form.backends[c.name] = { offered: backendChoices(served, c), chosen: defaultBackend(served, c) };
}
for (const c of form.algorithms) out.form.algorithms[c.name] = algorithmChoices(served, c);
for (const c of form.datasets) out.form.datasets[c.name] = datasetChoices(served, c.task);
for (const c of form.refused_fields) out.form.refused_fields[c.name] = refusedFields(served, c.task);

process.stdout.write(JSON.stringify(out));
