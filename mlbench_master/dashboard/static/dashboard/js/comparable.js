// Which runs may be compared with which: the one place where the dashboard decides that.
//
// Why: a speed-up (and the scaling efficiency derived from it) only means something when
// the runs differ in the number of workers and nothing else. A run on generated
// ("synthetic") data against a CIFAR-10 run, or a ResNet-32 run against a ResNet-20 run,
// gives a ratio that measures the data or the model, not scaling; mlbench never lets a
// synthetic result pass for a CIFAR-10 result. The same rule is in mlbench_worker/cli/report.py
// (`setup_differences`) for `mlbench report`; tests/rules/comparison_cases.json holds both to it.

// The data set a run actually used: what its workers reported, else what was requested;
// null while that is still unknown ("auto" requested, nothing reported yet).
export function datasetOf(run) {
  const used = run.dataset_used || run.summary?.dataset || run.dataset || "";
  return used && used !== "auto" ? used : null;
}

// What must be equal for two runs to be compared, and how each is read from a run.
const SETUP = [
  ["dataset", datasetOf],
  ["task", (r) => r.task || r.summary?.task || null],
  ["target", (r) => r.target || r.summary?.target || null],
  ["backend", (r) => r.backend || r.summary?.backend || null],
  ["CPUs per worker", (r) => (r.num_cpus === undefined || r.num_cpus === null ? null : Number(r.num_cpus))],
  ["device", (r) => (r.gpu_enabled ? "gpu" : "cpu")],
  ["command", (r) => (r.custom_image_command || "").trim()],
];

// The names of the set-up fields in which `a` and `b` differ ([] means comparable). An
// unknown data set differs from everything, even from another unknown one.
export function setupDifferences(a, b) {
  return SETUP.filter(([name, of]) => {
    const x = of(a);
    const y = of(b);
    return x !== y || (name === "dataset" && x === null);
  }).map(([name]) => name);
}
