// Placing a run's metric points on the benchmark clock (seconds since training started) and
// on the epoch axis. Points carry metadata {elapsed, epoch} when the API serves it; otherwise
// both are derived from dates: the clock's origin from the `time_to_target` point (posted at
// `origin + value`) or the run's start, epochs by interpolating the `epoch` series.

export function origin(feed, run) {
  const ttt = feed.get("time_to_target");
  if (ttt.t.length && ttt.v[0] !== null) return ttt.t[0] - ttt.v[0];
  if (run && run.started_at) return Date.parse(run.started_at) / 1000;
  for (const s of feed.series.values()) if (s.t.length) return s.t[0];
  return 0;
}

export function elapsed(series, t0) {
  return series.t.map((t, i) => series.meta[i]?.elapsed ?? t - t0);
}

function interpolator(epochs, t0) {
  const xs = [t0, ...epochs.t];
  const ys = [0, ...epochs.v];
  return (t) => {
    if (xs.length < 2 || t <= xs[0]) return t <= xs[0] ? 0 : null;
    let i = 1;
    while (i < xs.length && xs[i] < t) i += 1;
    if (i < xs.length) {
      const f = (t - xs[i - 1]) / (xs[i] - xs[i - 1] || 1);
      return ys[i - 1] + f * (ys[i] - ys[i - 1]);
    }
    // After the last completed epoch: continue at the last epoch's pace, within one epoch.
    const n = xs.length - 1;
    const pace = (ys[n] - ys[n - 1]) / (xs[n] - xs[n - 1] || 1);
    return Math.min(ys[n] + 1, ys[n] + pace * (t - xs[n]));
  };
}

export function epochs(series, feed, t0) {
  const at = interpolator(feed.get("epoch"), t0);
  return series.t.map((t, i) => series.meta[i]?.epoch ?? at(t));
}
