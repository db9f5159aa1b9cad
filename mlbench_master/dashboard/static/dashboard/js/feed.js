// A live metric series for one run or one worker, kept small for pages that stay open for days.
//
// The first request asks the API for a downsampled series (summarize=N); every later request
// asks only for points newer than the newest one already held (since=<date>). When the held
// series grows past maxPoints it is fetched downsampled again, so memory and drawing time stay
// bounded however long the page is open.

import { api } from "./api.js";

export class MetricFeed {
  constructor(target, { type = "run", names = null, summarize = 400, maxPoints = 4000, windowSec = 0 } = {}) {
    this.url = `/api/metrics/${encodeURIComponent(target)}/`;
    this.type = type;
    this.names = names;
    this.summarize = summarize;
    this.maxPoints = maxPoints;
    this.windowSec = windowSec;
    this.reset();
  }

  reset() {
    // name -> {t: [sec], v: [], clock: [benchmark-clock sec or null], meta: [], lastMs, atLast: values held at lastMs}
    this.series = new Map();
    this.since = null; // the newest date string the server gave us
    this.sinceMs = -Infinity;
    this.loaded = false;
  }

  get(name) {
    return this.series.get(name) || { t: [], v: [], clock: [], meta: [] };
  }

  // Fetch what is new; returns the names that changed.
  async refresh() {
    const params = { metric_type: this.type };
    if (this.names) params.metric_filter = this.names.join(",");
    if (!this.loaded) {
      params.summarize = this.summarize;
      if (this.windowSec) params.since = new Date(Date.now() - this.windowSec * 1000).toISOString();
    } else if (this.since) {
      params.since = this.since;
    }
    const data = await api(this.url, { params });
    const changed = this.absorb(data || {});
    // Until the first point arrives keep asking for a downsampled series: a run whose
    // workers post a backlog at once must not be fetched raw.
    this.loaded = this.since !== null;
    this.trim();
    let total = 0;
    for (const s of this.series.values()) total = Math.max(total, s.t.length);
    if (total > this.maxPoints) {
      // Re-fetch downsampled rather than hold an ever-growing series.
      this.reset();
      await this.refresh();
      return new Set(this.series.keys());
    }
    return changed;
  }

  absorb(data) {
    const changed = new Set();
    for (const [name, points] of Object.entries(data)) {
      if (!Array.isArray(points) || !points.length) continue;
      if (this.names && !this.names.includes(name)) continue;
      let s = this.series.get(name);
      if (!s) {
        s = { t: [], v: [], clock: [], meta: [], lastMs: -Infinity, atLast: new Set() };
        this.series.set(name, s);
      }
      const sorted = points
        .map((p) => ({ p, ms: Date.parse(p.date) }))
        .filter((x) => !Number.isNaN(x.ms))
        .sort((a, b) => a.ms - b.ms);
      for (const { p, ms } of sorted) {
        // A since= request serves the points at the newest date again: skip those held
        // already (the same value at that date), but keep another point of that date.
        const key = `${p.value}`;
        if (ms < s.lastMs || (ms === s.lastMs && s.atLast.has(key))) continue;
        s.t.push(ms / 1000);
        s.v.push(p.value === null ? null : Number(p.value));
        // The point's benchmark time as the API stores and serves it (a bucket's: its last
        // point's); null for a point posted without one (clock.js places those).
        s.clock.push(Number.isFinite(p.elapsed) ? p.elapsed : null);
        s.meta.push(p.metadata || {});
        if (ms > s.lastMs) s.atLast = new Set();
        s.atLast.add(key);
        s.lastMs = ms;
        changed.add(name);
        if (ms > this.sinceMs) {
          this.sinceMs = ms;
          this.since = p.date;
        }
      }
    }
    return changed;
  }

  trim() {
    if (!this.windowSec) return;
    const cut = Date.now() / 1000 - this.windowSec;
    for (const s of this.series.values()) {
      let i = 0;
      while (i < s.t.length && s.t[i] < cut) i += 1;
      if (i) {
        s.t.splice(0, i);
        s.v.splice(0, i);
        s.clock.splice(0, i);
        s.meta.splice(0, i);
      }
    }
  }
}

// Per-second rate of a cumulative counter (network bytes); counter resets are skipped.
export function toRate(series) {
  const t = [];
  const v = [];
  for (let i = 1; i < series.t.length; i += 1) {
    const dt = series.t[i] - series.t[i - 1];
    const dv = series.v[i] - series.v[i - 1];
    if (dt > 0 && dv >= 0) {
      t.push(series.t[i]);
      v.push(dv / dt);
    }
  }
  return { t, v, meta: [] };
}
