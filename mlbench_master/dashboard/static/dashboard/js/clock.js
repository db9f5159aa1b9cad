// Placing a run's metric points on the benchmark clock and on the epoch axis: the one place
// where the dashboard decides what "elapsed" and "epoch" mean for a point.
//
// The benchmark time of a point is one fact, stored with it: the API serves each point's
// `elapsed` (its metadata's, a summarized bucket's being its last point's; docs/api.rst), and
// a point's x on the clock is that value, never rebuilt from dates. (Rebuilding it from the
// `elapsed` series interpolated at a point's date put late-dated points, such as the
// evaluator's grades, and bucket averages at the wrong time.) `mlbench report` and the
// master's results read the same value.
//
// Only a point served without one (posted without metadata: a custom command, a run stored
// by an old worker) is placed by its date, on the clock the run's own `elapsed` series keeps
// (linear between its points, at wall speed before and after them). Without any `elapsed`
// point the clock's start is a served point's date minus its served time, else guessed: from
// the `time_to_target` point (posted at start + value), else run.started_at, else the first
// point of any metric.
//
// Epochs are interpolated between (clock start, 0) and the `epoch` points; after the last one
// they go on at the last pace, at most one epoch further (a run whose worker posts `epoch`
// only at epoch ends then still fills its epoch charts).

import { M } from "./metric_points.js";

export const PROGRESS = [M.elapsed, M.epoch];

// The index of the last entry of sorted `xs` that is <= t, or -1.
function floorIndex(xs, t) {
  let lo = 0;
  let hi = xs.length - 1;
  let found = -1;
  while (lo <= hi) {
    const mid = (lo + hi) >> 1;
    if (xs[mid] <= t) {
      found = mid;
      lo = mid + 1;
    } else hi = mid - 1;
  }
  return found;
}

// {t, v} of a series with null values dropped (dates are already ascending in a feed).
function usable(series) {
  const t = [];
  const v = [];
  series.t.forEach((x, i) => {
    if (series.v[i] !== null && Number.isFinite(series.v[i])) {
      t.push(x);
      v.push(series.v[i]);
    }
  });
  return { t, v };
}

function between(xs, ys, i, t) {
  const span = xs[i + 1] - xs[i];
  return span > 0 ? ys[i] + ((t - xs[i]) / span) * (ys[i + 1] - ys[i]) : ys[i + 1];
}

// Where the benchmark clock started (epoch seconds) when no `elapsed` point says so.
function guessedStart(feed, run) {
  for (const s of feed.series.values()) {
    const i = (s.clock || []).findIndex((c) => c !== null);
    if (i >= 0) return s.t[i] - s.clock[i];
  }
  const ttt = feed.get(M.time_to_target);
  if (ttt.t.length && ttt.v[0] !== null) return ttt.t[0] - ttt.v[0];
  if (run && run.started_at) return Date.parse(run.started_at) / 1000;
  for (const s of feed.series.values()) if (s.t.length) return s.t[0];
  return 0;
}

// The clock of one run, from its MetricFeed (which must fetch PROGRESS too) and run record.
// elapsedAt(t) and epochAt(t) take a date in epoch seconds; epochAt may answer null.
export function runClock(feed, run) {
  const el = usable(feed.get(M.elapsed));
  const ep = usable(feed.get(M.epoch));
  const fromSeries = el.t.length > 0;
  const start = fromSeries ? el.t[0] - el.v[0] : guessedStart(feed, run);

  function elapsedAt(t) {
    if (!fromSeries) return t - start;
    const i = floorIndex(el.t, t);
    if (i < 0) return el.v[0] - (el.t[0] - t);
    if (i === el.t.length - 1) return el.v[i] + (t - el.t[i]);
    return between(el.t, el.v, i, t);
  }

  const xs = [start, ...ep.t];
  const ys = [0, ...ep.v];
  function epochAt(t) {
    if (t <= xs[0]) return xs.length > 1 ? 0 : null;
    if (xs.length < 2) return null;
    const i = floorIndex(xs, t);
    if (i < xs.length - 1) return between(xs, ys, i, t);
    const n = xs.length - 1;
    const pace = (ys[n] - ys[n - 1]) / (xs[n] - xs[n - 1] || 1);
    return Math.min(ys[n] + 1, ys[n] + pace * (t - xs[n]));
  }

  return { start, fromSeries, elapsedAt, epochAt };
}

// The x of each point of `series` ({t, v, clock, meta}): seconds on the clock or epochs
// completed. The served benchmark time (`clock`, feed.js) is the point's; metadata, where a
// source serves it, is exact too; only a point with neither is placed by its date.
export function elapsed(series, clk) {
  return series.t.map((t, i) => series.clock?.[i] ?? series.meta?.[i]?.elapsed ?? clk.elapsedAt(t));
}

export function epochs(series, clk) {
  return series.t.map((t, i) => series.meta?.[i]?.epoch ?? clk.epochAt(t));
}
