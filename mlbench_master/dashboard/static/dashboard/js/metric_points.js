// The metric points' names as the master declares them (mlbench_worker/shared/metric_points.py),
// so no page spells a metric's name that nobody posts.
//
// Why a module of its own: the declarations are the one list of what runs and workers record
// (name, unit, meaning, goal). The page templates embed them as JSON (`json_script` with id
// "metric-points", mlbench_master/dashboard/views.py); `M.<name>` answers the name when it is
// declared and throws when it is not, so a misspelled name fails as the page loads instead of
// leaving a chart empty. Without the embedded JSON (a page that does not carry it, the rule
// tests in node) the names are answered unchecked.

let embedded;

export function declarations() {
  if (embedded === undefined) {
    const node = globalThis.document?.getElementById?.("metric-points");
    embedded = node ? JSON.parse(node.textContent) : null;
  }
  return embedded;
}

// M.train_loss === "train_loss"; M.train_los throws.
export const M = new Proxy(
  {},
  {
    get(_, name) {
      if (typeof name !== "string") return undefined;
      const served = declarations();
      if (served && !Object.hasOwn(served.points, name)) throw new Error(`${name} is not a declared metric point`);
      return name;
    },
  },
);

// The names serving one goal of the declarations (e.g. "time split"), in their order.
export function ofGoal(goal, owner = "run") {
  const served = declarations();
  if (!served) return [];
  return Object.entries(served.points)
    .filter(([, p]) => p.goal === goal && p.owner === owner)
    .map(([name]) => name);
}
