// Which runs may be compared with which: the one place where the dashboard decides that.
//
// Why: a speed-up (and the scaling efficiency derived from it) only means something when
// the runs differ in the number of workers and nothing else. A run on generated
// ("synthetic") data against a CIFAR-10 run, or a ResNet-32 run against a ResNet-20 run,
// gives a ratio that measures the data or the model, not scaling; mlbench never lets a
// synthetic result pass for a CIFAR-10 result. The same rule is in mlbench_worker/client/cli/comparison.py
// (`setup_differences`) for `mlbench report`; tests/rules/comparison_cases.json holds both to it.

// The data set a run actually used: what its workers reported, else what was requested;
// null while that is still unknown ("auto" requested, nothing reported yet).
export function datasetOf(run) {
  const used = run.dataset_used || run.summary?.dataset || run.dataset || "";
  return used && used !== "auto" ? used : null;
}

// A run's algorithm with its options in one canonical text (options in key order); null for
// a run from a master that did not record one.
export function algorithmOf(run) {
  if (!("algorithm" in run)) return null;
  const options = run.algorithm_options || {};
  const sorted = Object.fromEntries(Object.keys(options).sort().map((k) => [k, options[k]]));
  return `${run.algorithm || ""} ${JSON.stringify(sorted)}`;
}

// A run's implementation (reference, torch-ddp, tensorflow): "reference" for a run stored
// before there were implementations (no field; the migration gave those "reference" too),
// "" for one that has none (a measurement, a custom command).
export function implementationOf(run) {
  const name = run?.implementation;
  return name === undefined || name === null ? "reference" : name;
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
  ["algorithm", algorithmOf],
  ["implementation", implementationOf],
  ["learning-rate schedule", (r) => r.lr_schedule || ""],
  ["test set", (r) => r.test_examples || ""],
  ["training set", (r) => r.train_examples || ""],
  ["batch size", (r) => r.batch_size || ""],
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

// The 1-worker run to compare `run` with: itself when it has one worker, else the first
// picked 1-worker run with the same set-up (setupDifferences above). Only picked runs count,
// so the baseline is always a row of the table. Without one, {reason}.
//
// Runs of different implementations are not compared by default: a ratio between them
// measures the framework as well as the scaling. With `acrossImplementations` (asked for
// by the user), a run without a 1-worker run of its own implementation is compared with
// one that differs in the implementation and at most the backend (what an implementation
// brings: torch-ddp runs on gloo or nccl, tensorflow on its own collectives, while the
// reference loop defaults to mpi): the same backend first, then the reference loop's,
// then the first picked. The answer says so (`across`: that run's implementation) so the
// page labels the ratio as a cross-implementation one.
const ACROSS = new Set(["implementation", "backend"]);
export function baselineFor(run, picked, measured, { acrossImplementations = false } = {}) {
  if (run.num_workers === 1) return { run, m: measured.get(run.id) };
  const ones = picked.filter((r) => r.num_workers === 1);
  if (!ones.length) return { reason: "no 1-worker run picked" };
  const diffs = ones.map((r) => ({ r, d: setupDifferences(run, r) }));
  const same = diffs.find((x) => x.d.length === 0);
  if (same) return { run: same.r, m: measured.get(same.r.id) };
  if (acrossImplementations) {
    const rank = (x) => 2 * x.d.length + (implementationOf(x.r) === "reference" ? 0 : 1);
    const others = diffs.filter((x) => x.d.includes("implementation") && x.d.every((n) => ACROSS.has(n)));
    const other = others.reduce((a, b) => (rank(b) < rank(a) ? b : a), others[0]);
    if (other) return { run: other.r, m: measured.get(other.r.id), across: implementationOf(other.r) };
  }
  if (datasetOf(run) === null) return { reason: "data set not reported yet" };
  const nearest = diffs.reduce((a, b) => (b.d.length < a.d.length ? b : a));
  return { reason: `no 1-worker run with the same ${nearest.d.join("/")}` };
}

// The speed-up of `run` (measured `m`: {ttt, throughput, unit}) over its baseline: by time
// to target when both have one, else by throughput counted in the same unit (the same task
// counts the same thing per second); {reason} when neither can be had. `across` (the
// baseline's implementation) marks a cross-implementation ratio.
export function speedup(run, m, base) {
  if (!base.run) return { reason: base.reason };
  if (base.run.id === run.id) return { value: 1, how: "" };
  const against = `against ${base.run.name || "run " + base.run.id} (#${base.run.id})`;
  const across = base.across ? { across: base.across } : {};
  if (m.ttt && base.m.ttt) return { value: base.m.ttt / m.ttt, how: "time to target", against, ...across };
  if (m.throughput && base.m.throughput && m.unit === base.m.unit) {
    return { value: m.throughput / base.m.throughput, how: "throughput", against, ...across };
  }
  return { reason: "no time to target or throughput yet" };
}
