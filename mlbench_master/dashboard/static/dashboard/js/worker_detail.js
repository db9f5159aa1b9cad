// Worker details: resource charts over a chosen time range, for the metrics picked.

import { api, every, rows } from "./api.js";
import { LineChart } from "./charts.js";
import { MetricFeed, toRate } from "./feed.js";
import { bytes, el, num, rate, when } from "./format.js";

const root = document.getElementById("worker-detail");
const podName = root.dataset.pod;
const picker = document.getElementById("metric-picker");
const range = document.getElementById("time-range");
const chartsBox = document.getElementById("worker-charts");
const info = document.getElementById("worker-info");

// How each known metric is shown; other names the worker reports are plotted as they are.
const KNOWN = {
  cpu_cores: { title: "CPU (cores in use)", fmt: (v) => num(v, 2) },
  memory_bytes: { title: "Memory", fmt: bytes },
  net_rx_bytes: { title: "Network received", fmt: rate, cumulative: true },
  net_tx_bytes: { title: "Network sent", fmt: rate, cumulative: true },
};
const DEFAULT = Object.keys(KNOWN);

let feed = null;
let charts = new Map();

function selected() {
  return [...picker.selectedOptions].map((o) => o.value);
}

function addOption(name) {
  if ([...picker.options].some((o) => o.value === name)) return;
  const known = KNOWN[name];
  picker.append(el("option", { value: name, selected: DEFAULT.includes(name) }, known ? known.title : name));
}

function rebuild() {
  for (const c of charts.values()) c.destroy();
  charts = new Map();
  for (const name of selected()) {
    const k = KNOWN[name] || { title: name, fmt: (v) => num(v) };
    charts.set(name, new LineChart(chartsBox, { title: k.title, xTime: true, yFmt: k.fmt, height: 200, id: `chart-${name}` }));
  }
  feed = new MetricFeed(podName, { type: "pod", summarize: 600, windowSec: Number(range.value), maxPoints: 5000 });
  refresh().catch((err) => console.warn("refresh failed:", err.message));
}

function draw(changed) {
  for (const [name, chart] of charts) {
    if (!changed.has(name)) continue;
    const s = feed.get(name);
    chart.setSeries([{ label: KNOWN[name] ? KNOWN[name].title : name, ...(KNOWN[name]?.cumulative ? toRate(s) : s) }]);
  }
}

async function refreshInfo() {
  const pod = rows(await api("/api/pods/")).find((p) => p.name === podName);
  info.textContent = pod
    ? `${pod.phase || "Unknown"} · node ${pod.node || "—"} · ${pod.ip || "no IP"} · last seen ${when(pod.last_seen)}`
    : "This worker is not in the cluster any more; its recorded metrics are shown.";
}

async function refresh() {
  const current = feed;
  const changed = await current.refresh();
  if (current !== feed) return; // the picker or range changed meanwhile
  for (const name of feed.series.keys()) addOption(name);
  draw(changed);
  document.body.dataset.loaded = "1";
}

DEFAULT.forEach(addOption);
picker.addEventListener("change", rebuild);
range.addEventListener("change", rebuild);
rebuild();
setTimeout(() => every(5000, refresh), 5000);
every(15000, refreshInfo);
