// The backend benchmark's view (task kind "measurement", mlbench_worker/backend_benchmark/):
// bus bandwidth against message size, one line per backend and collective, and the table of
// every (collective, backend, size) cell, for the run page and the compare page.
//
// Why a module of its own: a measurement run has no clock, epochs or accuracy. Its worker
// posts three points per cell (latency_us, busbw_mbps, algbw_mbps), each valued by the
// median repeat with the cell in its metadata (op, backend, size, repeats, capped, best).
// A run that has posted its summary is drawn from the summary's results table (the same
// cells, the run's final word, no extra request); until then the curves are read from the
// stored points, so they grow while the run measures, and a run that died before its summary
// still shows what it measured. Points are fetched whole (a sweep is a few hundred points)
// and with their metadata (`details=1`): a downsampled series, or one without metadata,
// could not be placed.

import { api } from "./api.js";
import { bytes, el, num } from "./format.js";
import { taskInfo } from "./tasks.js";

// 1024 -> "1 KiB", 3000 -> "3000 B": sizes as the worker's table names them (sizes.py).
export function sizeLabel(size) {
  for (const [unit, scale] of [["GiB", 2 ** 30], ["MiB", 2 ** 20], ["KiB", 2 ** 10]]) {
    if (size >= scale && size % scale === 0) return `${size / scale} ${unit}`;
  }
  return size >= 1024 ? bytes(size) : `${size} B`;
}

export const COMM_METRICS = ["busbw_mbps", "latency_us", "algbw_mbps"];
export const OP_TITLES = { allreduce: "all-reduce", broadcast: "broadcast" };

export function isMeasurement(run) {
  return taskInfo(run)?.measurement === true;
}

// {key: cell} with cell = {op, backend, size, repeats, capped, busbw, busbwBest, latency,
// latencyBest, algbw, algbwBest}, from the API's {name: [points]} answer.
export function cellsFrom(data) {
  const cells = new Map();
  const fields = { busbw_mbps: "busbw", latency_us: "latency", algbw_mbps: "algbw" };
  for (const [name, field] of Object.entries(fields)) {
    for (const p of (data && data[name]) || []) {
      const m = p.metadata || {};
      if (!m.op || !m.backend || !m.size) continue;
      const key = `${m.op}|${m.backend}|${m.size}`;
      const cell = cells.get(key) || { op: m.op, backend: m.backend, size: Number(m.size), repeats: m.repeats, capped: Boolean(m.capped) };
      cell[field] = Number(p.value);
      cell[`${field}Best`] = m.best === undefined ? null : Number(m.best);
      cells.set(key, cell);
    }
  }
  return [...cells.values()].sort((a, b) => a.op.localeCompare(b.op) || a.backend.localeCompare(b.backend) || a.size - b.size);
}

// The same cells from the summary's `results` rows (mlbench_worker/backend_benchmark/stats.py).
export function cellsFromRows(rows) {
  return rows.map((r) => ({
    op: r.op, backend: r.backend, size: Number(r.size), repeats: r.repeats, capped: Boolean(r.capped),
    busbw: r.busbw_median_mbps, busbwBest: r.busbw_best_mbps,
    latency: r.latency_median_us, latencyBest: r.latency_best_us,
    algbw: r.algbw_median_mbps, algbwBest: r.algbw_best_mbps,
  }));
}

// {cells, source}: from the run's summary once it has one ("summary"), else from its points
// ("points"; "" while there are none yet).
export async function fetchCells(run) {
  const rows = run.summary?.results;
  if (Array.isArray(rows) && rows.length) return { cells: cellsFromRows(rows), source: "summary" };
  const params = { metric_type: "run", metric_filter: COMM_METRICS.join(","), details: 1 };
  const cells = cellsFrom(await api(`/api/metrics/${encodeURIComponent(run.id)}/`, { params }));
  return { cells, source: cells.length ? "points" : "" };
}

// One series per (backend, collective) of bus bandwidth against size; `prefix` names the run
// on the compare page. Broadcast lines are dashed so the two collectives part at a glance.
export function curves(cells, { prefix = "", ops = null } = {}) {
  const lines = new Map();
  for (const c of cells) {
    if (c.busbw === undefined || (ops && !ops.includes(c.op))) continue;
    const label = `${prefix}${c.backend} ${OP_TITLES[c.op] || c.op}`;
    if (!lines.has(label)) lines.set(label, { label, t: [], v: [], dash: c.op === "broadcast" ? [6, 4] : null });
    const line = lines.get(label);
    line.t.push(c.size);
    line.v.push(c.busbw);
  }
  return [...lines.values()];
}

// The chart options both pages use: size on a log2 axis, bandwidth on a log10 axis.
export function chartOptions(id, title, height = 260) {
  return { id, title, xLabel: "message size", xLog: 2, yLog: 10, xFmt: sizeLabel, xTickFmt: sizeLabel, yLabel: "bus bandwidth (Mbit/s)", yFmt: (v) => `${num(v)} Mbit/s`, height };
}

export function tableRows(cells) {
  return cells.map((c) =>
    el(
      "tr",
      { dataset: { op: c.op, backend: c.backend, size: c.size } },
      el("td", { text: OP_TITLES[c.op] || c.op }),
      el("td", { text: c.backend }),
      el("td", { text: sizeLabel(c.size) }),
      el("td", { text: `${c.repeats ?? "—"}${c.capped ? " *" : ""}`, title: c.capped ? "fewer repeats than asked: the size's time cap or the time budget was reached" : null }),
      el("td", { text: num(c.latencyBest) }),
      el("td", { text: num(c.latency) }),
      el("td", { text: num(c.busbwBest) }),
      el("td", { text: num(c.busbw) }),
      el("td", { text: num(c.algbw) }),
    ),
  );
}

// "1000 Mbit/s, 5 ms": the network a run measured, as its settings say; a bandwidth the
// cluster did not apply (the manifest says so) is marked, so no curve passes for a shaped one.
// What a run's links were, per limit: the launch record's notes (what was applied, and how)
// over the master's plan at creation (manifest.network).
export function linkNotes(run) {
  return { ...(run.manifest?.network || {}), ...(run.job_metadata || {}) };
}

export function networkLabel(run) {
  const notes = linkNotes(run);
  const notApplied = (key) => {
    const note = notes[key];
    if (note && typeof note === "object" && "applied" in note) return !note.applied;
    return Boolean(run.manifest?.not_applied?.[key]);  // a run created before manifest.network
  };
  const parts = [];
  if (run.max_bandwidth !== undefined && run.max_bandwidth !== null) {
    parts.push(`${run.max_bandwidth} Mbit/s${notApplied("max_bandwidth") ? " (not applied)" : ""}`);
  }
  if (run.latency !== undefined && run.latency !== null) parts.push(`${num(run.latency)} ms${notApplied("latency") ? " (not applied)" : ""}`);
  return parts.join(", ");
}

// The highest median bus bandwidth and the cell it came from.
export function peak(cells) {
  return cells.reduce((best, c) => (c.busbw !== undefined && (!best || c.busbw > best.busbw) ? c : best), null);
}
