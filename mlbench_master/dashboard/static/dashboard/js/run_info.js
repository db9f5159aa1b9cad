// What the run page lists under Configuration, in order, and how a value is shown.

import { el, when } from "./format.js";

export const CONFIG = [
  ["task", "Task"],
  ["algorithm", "Algorithm"],
  ["implementation", "Implementation"],
  ["lr_schedule", "Learning-rate schedule"],
  ["backend", "Backend"],
  ["num_workers", "Workers"],
  ["seed", "Seed"],
  ["num_cpus", "CPUs per worker"],
  ["max_bandwidth", "Bandwidth (Mbit/s)"],
  ["latency", "Network latency (ms)"],
  ["gpu_enabled", "GPUs"],
  ["target", "Target"],
  ["light_target", "Light target"],
  ["dataset", "Dataset requested"],
  ["time_budget", "Time budget asked for (s)"],
  ["effective_time_budget", "Time budget in effect (s)"],
  ["time_budget_source", "Time budget from"],
  ["max_epochs", "Max epochs"],
  ["time_limit", "Time limit (s)"],
  ["custom_image_name", "Custom image"],
  ["custom_image_command", "Custom command"],
  ["custom_backend", "Custom backend"],
  ["run_all_nodes", "Run on all nodes"],
  ["resumed_from", "Resumed from run"],
  ["series", "Series"],
  ["queue_position", "Place in the queue"],
  ["job_id", "Job"],
  ["exit_code", "Exit code"],
  ["created_at", "Created"],
  ["started_at", "Started"],
  ["finished_at", "Finished"],
];

export function show(value) {
  if (value === null || value === undefined || value === "") return "—";
  if (typeof value === "boolean") return value ? "yes" : "no";
  if (typeof value === "string" && /^\d{4}-\d\d-\d\dT/.test(value)) return when(value);
  if (typeof value === "object") return JSON.stringify(value);
  return String(value);
}

export function kv(dl, pairs) {
  dl.replaceChildren(...pairs.flatMap(([k, v]) => [el("dt", { text: k }), el("dd", {}, v instanceof Node ? v : show(v))]));
}

// The ONNX audit of the run's final model: the evaluator ran it on its own test inputs and
// compared it with the run's predictions of that step (docs/checking.rst, "The ONNX audit").
export function auditLine(a) {
  const status = a.status || "no model";
  if (status === "matches" || status === "mismatch") {
    const where = a.sample ? `a seeded sample of ${a.examples}` : `all ${a.examples}`;
    const rows = (a.first_rows || []).length ? ` (first rows ${a.first_rows.join(", ")})` : "";
    const verdict = status === "matches" ? "gives the submitted predictions" : "MISMATCH: predicts otherwise than submitted";
    // An evaluation in reduced precision (--amp, TF32) may rank near-ties otherwise.
    const precision = a.precision && a.precision !== "fp32" ? `; evaluated in ${a.precision}: ${a.ties || 0} near-ties allowed` : "";
    return `Model audit: the final model ${verdict} on ${where} test examples of step ${a.step}; ${a.differ} differ${rows}${precision}.`;
  }
  if (status === "pending") return "Model audit: pending (the evaluator is running the final model).";
  if (status === "no model") return "Model audit: no model (the run posted no ONNX model).";
  return `Model audit: ${status}${a.why ? `: ${a.why}` : ""}.`;
}
