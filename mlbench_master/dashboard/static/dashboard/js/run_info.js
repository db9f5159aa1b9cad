// What the run page lists under Configuration, in order, and how a value is shown.

import { el, when } from "./format.js";

export const CONFIG = [
  ["task", "Task"],
  ["algorithm", "Algorithm"],
  ["algorithm_source", "Algorithm file (SHA-256)"],
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
