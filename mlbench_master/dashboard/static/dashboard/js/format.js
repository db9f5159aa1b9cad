// Number, size, date and state formatting shared by the pages.

import { implementationOf } from "./comparable.js";

export function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (v === undefined || v === null || v === false) continue;
    if (k === "class") node.className = v;
    else if (k === "text") node.textContent = v;
    else if (k === "dataset") Object.assign(node.dataset, v);
    else node.setAttribute(k, v === true ? "" : v);
  }
  for (const c of children.flat()) {
    if (c === undefined || c === null || c === false) continue;
    node.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return node;
}

export function num(v, digits = 3) {
  if (v === null || v === undefined || v === "" || Number.isNaN(Number(v))) return "—";
  const n = Number(v);
  if (Number.isInteger(n) && Math.abs(n) < 1e6) return String(n);
  return Number(n.toPrecision(digits)).toLocaleString("en");
}

export function pct(v) {
  if (v === null || v === undefined || Number.isNaN(Number(v))) return "—";
  return `${(100 * Number(v)).toFixed(1)} %`;
}

export function bytes(v) {
  if (v === null || v === undefined || Number.isNaN(Number(v))) return "—";
  let n = Number(v);
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let i = 0;
  while (Math.abs(n) >= 1024 && i < units.length - 1) {
    n /= 1024;
    i += 1;
  }
  return `${n.toFixed(n >= 100 || i === 0 ? 0 : 1)} ${units[i]}`;
}

export function rate(v) {
  return v === null || v === undefined ? "—" : `${bytes(v)}/s`;
}

export function duration(seconds) {
  if (seconds === null || seconds === undefined || Number.isNaN(Number(seconds))) return "—";
  let s = Math.round(Number(seconds));
  const h = Math.floor(s / 3600);
  s -= h * 3600;
  const m = Math.floor(s / 60);
  s -= m * 60;
  if (h) return `${h} h ${m} min`;
  if (m) return `${m} min ${s} s`;
  return `${Number(seconds).toFixed(Number(seconds) < 10 ? 1 : 0)} s`;
}

// Elapsed seconds as a compact clock for axis ticks: 45 s, 2:30, 1:02:30.
export function clock(seconds) {
  const s = Math.round(Number(seconds));
  if (Math.abs(s) < 60) return `${s} s`;
  const h = Math.floor(s / 3600);
  const m = Math.floor((s % 3600) / 60);
  const ss = String(s % 60).padStart(2, "0");
  return h ? `${h}:${String(m).padStart(2, "0")}:${ss}` : `${m}:${ss}`;
}

export function when(iso) {
  if (!iso) return "—";
  const d = new Date(iso);
  return d.toLocaleString("en-GB", { dateStyle: "medium", timeStyle: "short" });
}

export function stateBadge(state) {
  const s = (state || "UNKNOWN").toUpperCase();
  return el("span", { class: `state state-${s.toLowerCase()}`, text: s.toLowerCase() });
}

// The data a run used, as its workers reported it; "synthetic" gets a badge that cannot be
// missed, so no result on generated data passes for a CIFAR-10 result.
export function datasetBadge(run) {
  const used = run.dataset_used || "";
  if (used === "synthetic") {
    return el(
      "span",
      { class: "dataset" },
      el("span", { class: "badge synthetic", title: "Generated data, not CIFAR-10: not comparable with real results", text: "synthetic" }),
    );
  }
  if (used) return el("span", { class: "dataset", text: used });
  return el("span", { class: "dataset pending", title: "requested; the workers have not reported what they used yet" }, `${run.dataset || "auto"} (requested)`);
}

export function timeToTarget(run) {
  const s = run.summary || {};
  if (s.time_to_target !== undefined && s.time_to_target !== null) return duration(s.time_to_target);
  if (s.reached === false) return "not reached";
  return "—";
}

// A run's algorithm with all its options, e.g. "powersgd (rank 2)"; "" when it has none (a
// measurement, a custom command); an uploaded one's with its file's short hash, "halfavg
// (weight 0.5) [uploaded 1a2b3c4d5e6f]". mlbench_worker/client/cli/formatting.py says it the same way.
export function algorithmText(run) {
  const name = run?.algorithm || "";
  const options = run?.algorithm_options || {};
  const keys = Object.keys(options).sort();
  const text = name && keys.length ? `${name} (${keys.map((k) => `${k} ${options[k]}`).join(", ")})` : name;
  return text && run?.algorithm_source ? `${text} [uploaded ${run.algorithm_source.slice(0, 12)}]` : text;
}

// The framework an implementation runs on, as the run recorded it: {name, version}, the
// version the workers reported (summary.versions) before the master's (manifest.framework);
// a run from before manifests named it is read from its versions alone. null: no framework
// (a measurement, a custom command) or nothing says which.
const FRAMEWORK_TITLES = { pytorch: "PyTorch", tensorflow: "TensorFlow", spark: "Spark" };
const VERSION_KEYS = { pytorch: "torch", tensorflow: "tensorflow", spark: "pyspark" };
export function frameworkOf(run) {
  if (!implementationOf(run)) return null;
  const versions = run?.summary?.versions || {};
  const recorded = run?.manifest?.framework || {};
  const name = recorded.name || (versions.tensorflow ? "tensorflow" : versions.torch ? "pytorch" : null);
  if (!name) return null;
  const version = versions[VERSION_KEYS[name] || name] || recorded.version || null;
  return { name, title: FRAMEWORK_TITLES[name] || name, version };
}

// "PyTorch 2.3.1" (or "PyTorch, version not reported yet"); "" without a framework.
export function frameworkText(run) {
  const fw = frameworkOf(run);
  if (!fw) return "";
  return fw.version ? `${fw.title} ${fw.version}` : `${fw.title}, version not reported yet`;
}

// "torch-ddp (PyTorch 2.3.1)": the implementation and its framework with version; "" for a
// run that has none. mlbench_worker/client/cli/formatting.py (`implementation_text`) says the same.
export function implementationText(run) {
  const name = implementationOf(run);
  if (!name) return "";
  const fw = frameworkText(run);
  return fw ? `${name} (${fw})` : name;
}

// A count of bytes in decimal units, as `mlbench report` writes it: "1.1 MB".
export function bytesText(bytes) {
  const units = [["GB", 1e9], ["MB", 1e6], ["kB", 1e3]];
  const [unit, scale] = units.find(([, s]) => Number(bytes) >= s) || ["B", 1];
  return `${(Number(bytes) / scale).toFixed(scale === 1 ? 0 : 1)} ${unit}`;
}

// What a rank sent, as the trainer counted it whichever algorithm ran: a step's bytes (in
// brackets, how many times less than a full fp32 all-reduce), then to the evaluation that
// reached the target: "16.0 kB a step (4.0×); 2.6 MB to the target", "; target not
// reached"; nothing about the target from a worker that did not count it; "—" before the
// worker says.
export function sentText(summary) {
  const sent = summary?.comm_bytes_per_step;
  if (sent === null || sent === undefined) return "—";
  const ratio = summary.compression_ratio;
  const step = `${bytesText(sent)} a step${ratio ? ` (${Number(ratio).toFixed(1)}×)` : ""}`;
  const total = summary.comm_bytes_to_target;
  if (total === undefined) return step;
  return `${step}; ${total === null ? "target not reached" : `${bytesText(total)} to the target`}`;
}
