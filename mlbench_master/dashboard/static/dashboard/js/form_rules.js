// What the "New run" form offers, read from the master's run rules as data: the answer of
// GET /api/runs/defaults/ (`served`, embedded in the Runs page as "run-defaults").
//
// Why a module of its own: the master holds every list these choices come from (which
// backends each implementation runs on with and without GPUs, the fields a measurement
// refuses, each task's data sets and algorithms: mlbench_master/run_rules/ and the
// catalogues), and the API refuses what they do not allow. The browser keeps no list of its
// own: it applies what is served, so the form never offers a combination the API refuses
// and follows the master when a rule changes. Pure functions of the served answer, so
// tests/rules/run_js.mjs runs them on the cases (tests/rules/form_cases.json) that
// tests/rules/test_form_rules.py runs against the API's own rules.

// How the served lists are keyed by device.
export function device(gpu) {
  return gpu ? "gpu" : "cpu";
}

// Whether `task` is a measurement (the backend benchmark): it trains nothing.
export function isMeasurementTask(served, task) {
  return served.tasks[task]?.measurement === true;
}

// The fields the form disables (so does not send) for a run of `task`.
export function refusedFields(served, task) {
  return isMeasurementTask(served, task) ? served.training_only : [];
}

// The backend options the form enables: for a measurement "" (every backend, sent as
// nothing: the master then measures every backend of the device) and the device's backends;
// for a training run the chosen implementation's; [] when it takes none (the field is then
// disabled and nothing is sent).
export function backendChoices(served, { task, implementation, gpu }) {
  if (isMeasurementTask(served, task)) return ["", ...served.backends[device(gpu)]];
  return served.implementations[implementation]?.backend_choices[device(gpu)] ?? [];
}

// The backend the form selects while the user has picked none (what the master would give a
// run that leaves it out); null when none is sent.
export function defaultBackend(served, { task, implementation, gpu }) {
  if (isMeasurementTask(served, task)) return "";
  if (!backendChoices(served, { task, implementation, gpu }).length) return null;
  return served.implementations[implementation].default_backend[device(gpu)];
}

// The algorithms the form enables: the task's, of those the implementation runs (its list
// empty: every one), without those tied to other implementations (an engine's own
// optimiser: lbfgs runs on spark only).
export function algorithmChoices(served, { task, implementation }) {
  const own = served.tasks[task]?.algorithms ?? [];
  const runs = served.implementations[implementation]?.algorithms ?? [];
  const tiedTo = (name) => served.algorithms?.[name]?.implementations ?? [];
  return own.filter(
    (name) => (!runs.length || runs.includes(name)) && (!tiedTo(name).length || tiedTo(name).includes(implementation)),
  );
}

// The data sets the form enables for `task` (none for a measurement, which reads no data).
export function datasetChoices(served, task) {
  return served.tasks[task]?.datasets ?? [];
}
