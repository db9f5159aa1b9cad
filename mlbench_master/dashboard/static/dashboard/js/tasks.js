// What the pages know about each benchmark task: its title, its goals, and which metric
// carries its throughput with the unit to print (task 1a counts images per second, task 2
// samples per second).
//
// Why a module of its own: the task catalogue (mlbench_worker/shared/catalogue.py) is the only list
// of tasks, so no page may assume that every task counts images. The page templates embed
// the catalogue's entries as JSON (mlbench_master/dashboard/tasks.py, `json_script` with id
// "task-catalogue") and every page reads them through here. mlbench_worker/client/cli/comparison.py
// (`throughput_of`) applies the same rule for `mlbench report`; tests/rules/
// throughput_cases.json holds both to it.
//
// A run whose task the catalogue does not know (made by another version of mlbench) is read
// by what it reported: the first catalogue throughput metric in its summary, else one with
// points in its series, with the unit the catalogue pairs with that metric, so an old ResNet
// run still says images/s. A run that reported neither gets the neutral "samples/s" (every
// task counts samples of some kind; "images" would be wrong for most) and no metric.

export const NEUTRAL_UNIT = "samples/s";

let embedded;

// {task name: {kind, measurement, title, dataset, throughput_metric, throughput_unit, default_goal, goals}}.
export function catalogue() {
  if (embedded === undefined) {
    const node = globalThis.document?.getElementById?.("task-catalogue");
    embedded = node ? JSON.parse(node.textContent) : {};
  }
  return embedded;
}

export function taskName(run) {
  return run?.task || run?.summary?.task || null;
}

// The catalogue's entry for the run's task, or null when the catalogue does not know it.
export function taskInfo(run, tasks = catalogue()) {
  return Object.hasOwn(tasks, taskName(run) ?? "") ? tasks[taskName(run)] : null;
}

// Every metric some task posts its throughput as: what a page must fetch before it knows a
// run's task.
export function throughputMetrics(tasks = catalogue()) {
  return [...new Set(Object.values(tasks).map((t) => t.throughput_metric))];
}

// {metric, unit} of a run's throughput; `has(metric)` says whether the run's series of that
// metric has points (for runs of unknown tasks without a summary).
export function throughputOf(run, { has = () => false, tasks = catalogue() } = {}) {
  const info = taskInfo(run, tasks);
  if (info) return { metric: info.throughput_metric, unit: info.throughput_unit };
  const summary = run?.summary || {};
  const known = Object.values(tasks);
  const found =
    known.find((t) => summary[t.throughput_metric] !== undefined && summary[t.throughput_metric] !== null) ||
    known.find((t) => has(t.throughput_metric));
  return found ? { metric: found.throughput_metric, unit: found.throughput_unit } : { metric: null, unit: NEUTRAL_UNIT };
}

// "images/s" -> "Images per second", for chart titles and table labels.
export function perSecond(unit) {
  const what = unit.replace(/\/s$/, "");
  return `${what.charAt(0).toUpperCase()}${what.slice(1)} per second`;
}
