// Workers page: every worker with its state and live sparklines of CPU, memory and network.

import { api, every, rows } from "./api.js";
import { Sparkline } from "./charts.js";
import { MetricFeed, toRate } from "./feed.js";
import { bytes, el, num, rate } from "./format.js";

const WINDOW = 15 * 60; // seconds of history in each sparkline
const NAMES = ["cpu_cores", "memory_bytes", "net_rx_bytes", "net_tx_bytes"];
const body = document.querySelector("#workers-table tbody");
const status = document.getElementById("workers-status");
const workers = new Map(); // name -> {row, feed, sparks, values}

function last(series) {
  return series.v.length ? series.v[series.v.length - 1] : null;
}

function makeRow(pod) {
  const cell = (cls) => el("td", { class: cls });
  const link = el("a", { href: `/workers/${encodeURIComponent(pod.name)}/`, class: "worker-link", text: pod.name });
  const row = el("tr", { dataset: { worker: pod.name } });
  const cells = {
    name: el("td", {}, link),
    phase: cell("phase-cell"),
    where: cell("where"),
    cpu: cell("spark-cell"),
    mem: cell("spark-cell"),
    net: cell("spark-cell"),
  };
  Object.values(cells).forEach((c) => row.append(c));
  const spark = (c, labels) => {
    const holder = el("div", { class: "spark-box" });
    const value = el("span", { class: "spark-value" }, "—");
    c.append(holder, value);
    return { chart: new Sparkline(holder, { labels }), value };
  };
  const sparks = { cpu: spark(cells.cpu, ["cpu"]), mem: spark(cells.mem, ["memory"]), net: spark(cells.net, ["rx", "tx"]) };
  row.addEventListener("click", (e) => {
    if (e.target.closest("a")) return;
    window.location.href = link.href;
  });
  return {
    row,
    cells,
    sparks,
    feed: new MetricFeed(pod.name, { type: "pod", names: NAMES, summarize: 90, windowSec: WINDOW, maxPoints: 600 }),
  };
}

function showPod(w, pod) {
  w.cells.phase.replaceChildren(el("span", { class: `phase phase-${(pod.phase || "unknown").toLowerCase()}`, text: pod.phase || "Unknown" }));
  const where = [pod.node, pod.ip, ...slurmFields(pod.labels || {})].filter(Boolean).join(" · ");
  w.cells.where.textContent = where || "—";
}

// A Slurm node's own fields (its labels): Slurm's state, CPUs, memory, GPUs, its job.
function slurmFields(labels) {
  if (labels.cluster !== "slurm") return [];
  return [
    labels.slurm_state && `Slurm: ${labels.slurm_state}`,
    labels.cpus && `${labels.cpus} CPUs`,
    labels.memory_mb && `${labels.memory_mb} MB`,
    labels.gpus && labels.gpus !== "0" && `${labels.gpus} GPUs`,
    labels.job && `job ${labels.job}`,
    labels.slurm_reason && `(${labels.slurm_reason})`,
  ];
}

// What keeps the cluster driver from running workers (bad settings), as the master says.
async function showProblems() {
  const box = document.getElementById("cluster-problems");
  const health = await api("/api/health/?cluster=1");
  const problems = (health && health.cluster_problems) || [];
  document.getElementById("cluster-name").textContent = health.cluster || "cluster";
  box.querySelector("ul").replaceChildren(...problems.map((p) => el("li", { text: p })));
  box.hidden = problems.length === 0;
}

async function refreshMetrics(w) {
  const changed = await w.feed.refresh();
  if (!changed.size) return;
  const cpu = w.feed.get("cpu_cores");
  const mem = w.feed.get("memory_bytes");
  const rx = toRate(w.feed.get("net_rx_bytes"));
  const tx = toRate(w.feed.get("net_tx_bytes"));
  w.sparks.cpu.chart.setSeries([cpu]);
  w.sparks.cpu.value.textContent = num(last(cpu), 2);
  w.sparks.mem.chart.setSeries([mem]);
  w.sparks.mem.value.textContent = bytes(last(mem));
  w.sparks.net.chart.setSeries([rx, tx]);
  w.sparks.net.value.textContent = `↓ ${rate(last(rx))} ↑ ${rate(last(tx))}`;
}

async function refresh() {
  await showProblems().catch(() => {});
  const pods = rows(await api("/api/pods/"));
  const seen = new Set();
  for (const pod of pods) {
    seen.add(pod.name);
    let w = workers.get(pod.name);
    if (!w) {
      w = makeRow(pod);
      workers.set(pod.name, w);
      body.append(w.row);
    }
    showPod(w, pod);
  }
  for (const [name, w] of workers) {
    if (!seen.has(name)) {
      w.row.remove();
      workers.delete(name);
    }
  }
  status.textContent = pods.length
    ? `${pods.length} worker${pods.length === 1 ? "" : "s"}.`
    : "No workers are known yet. They appear here once the cluster reports them.";
  await Promise.all([...workers.values()].map(refreshMetrics));
  document.body.dataset.loaded = "1";
}

every(5000, refresh);
