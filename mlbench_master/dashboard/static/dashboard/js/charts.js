// Thin wrappers around uPlot (loaded as the global `uPlot` from the npm package): a line chart
// that follows its container's width, and a sparkline. Data comes as {t, v} series that are
// aligned here with uPlot.join, so series sampled at different instants share one chart.

const PALETTE = ["#1d4ed8", "#b45309", "#047857", "#be123c", "#6d28d9", "#0e7490", "#4d7c0f"];

export function color(i) {
  return PALETTE[i % PALETTE.length];
}

function aligned(list) {
  const tables = list.map((s) => [s.t, s.v]);
  if (!tables.length) return [[]];
  if (tables.length === 1) return tables[0];
  return uPlot.join(tables);
}

// A line chart. opts: {title, id, xTime: bool, xLabel, xFmt (legend), xTickFmt (axis), yLabel,
// yFmt, height, xLog / yLog: the base of a logarithmic axis (e.g. 2 for message sizes),
// xRange / yRange: (dataMin, dataMax) => [min, max] and xIncrs: the tick steps (axes.js)}.
// A series may carry `dash` (uPlot's dash pattern) to set it apart from its neighbours, and
// `fillTo` (the label of another series): the area between the two is shaded, a band; and
// `step: true` to be drawn as a step function, each value held until the next point
// (horizontal, then vertical: a study's performance profile).
export class LineChart {
  constructor(container, opts) {
    this.opts = opts;
    this.box = document.createElement("figure");
    this.box.className = "chart";
    if (opts.id) this.box.id = opts.id;
    const cap = document.createElement("figcaption");
    cap.textContent = opts.title;
    this.box.append(cap);
    this.empty = document.createElement("p");
    this.empty.className = "empty";
    this.empty.textContent = "No data yet.";
    this.box.append(this.empty);
    container.append(this.box);
    this.box.lineChart = this; // lets tests (and the console) read the plotted data
    this.plot = null;
    this.points = 0;
    this.observer = new ResizeObserver(() => this.resize());
    this.observer.observe(this.box);
  }

  width() {
    return Math.max(200, Math.floor(this.box.clientWidth || 400));
  }

  build(labels, dashes = [], bands = [], steps = []) {
    const o = this.opts;
    const yFmt = o.yFmt || ((v) => v);
    const series = [{ label: o.xLabel || (o.xTime ? "time" : "x"), value: o.xFmt ? (u, v) => (v == null ? "—" : o.xFmt(v)) : undefined }];
    labels.forEach((label, i) => {
      series.push({
        label,
        stroke: color(i),
        width: 2,
        ...(dashes[i] ? { dash: dashes[i] } : {}),
        ...(steps[i] ? { paths: uPlot.paths.stepped({ align: 1 }) } : {}),
        spanGaps: true,
        points: { size: 5 }, // uPlot draws them only where points are sparse
        value: (u, v) => (v == null ? "—" : yFmt(v)),
      });
    });
    const axes = [
      {
        scale: "x",
        label: o.xLabel,
        stroke: "#334155",
        grid: { stroke: "#e2e8f0" },
        // A log axis leaves its minor ticks unlabelled (null).
        values: o.xTickFmt && !o.xTime ? (u, vals) => vals.map((v) => (v == null ? "" : o.xTickFmt(v))) : undefined,
        ...(o.xIncrs ? { incrs: o.xIncrs } : {}),
      },
      { label: o.yLabel, stroke: "#334155", grid: { stroke: "#e2e8f0" }, size: 84, values: (u, vals) => vals.map((v) => (v == null ? "" : yFmt(v))) },
    ];
    this.plot = new uPlot(
      {
        width: this.width(),
        height: o.height || 220,
        scales: {
          x: o.xLog ? { time: false, distr: 3, log: o.xLog } : { time: !!o.xTime, ...(o.xRange ? { range: (u, lo, hi) => o.xRange(lo, hi) } : {}) },
          ...(o.yLog ? { y: { distr: 3, log: o.yLog } } : o.yRange ? { y: { range: (u, lo, hi) => o.yRange(lo, hi) } } : {}),
        },
        series,
        axes,
        ...(bands.length ? { bands } : {}),
        legend: { show: true },
      },
      [[]],
      this.box,
    );
    this.labels = labels.join("|");
  }

  // series: [{label, t: [...], v: [...]}]
  setSeries(list) {
    const present = list.filter((s) => s.t.length);
    this.points = present.reduce((n, s) => n + s.t.length, 0);
    this.box.dataset.points = String(this.points);
    if (!present.length) {
      this.empty.hidden = false;
      return;
    }
    this.empty.hidden = true;
    const labels = present.map((s) => s.label);
    if (!this.plot || this.labels !== labels.join("|")) {
      if (this.plot) this.plot.destroy();
      // uPlot numbers the series from 1 (0 is x); a band goes from its upper series down.
      const bands = present
        .map((s, i) => [i + 1, labels.indexOf(s.fillTo) + 1])
        .filter(([, to]) => to > 0)
        .map(([from, to]) => ({ series: [from, to], fill: `${color(from - 1)}33` }));
      this.build(labels, present.map((s) => s.dash || null), bands, present.map((s) => Boolean(s.step)));
    }
    this.plot.setData(aligned(present));
  }

  resize() {
    if (this.plot) this.plot.setSize({ width: this.width(), height: this.opts.height || 220 });
  }

  destroy() {
    this.observer.disconnect();
    if (this.plot) this.plot.destroy();
    this.box.remove();
  }
}

// A small chart with no axes or legend, for tables of workers.
export class Sparkline {
  constructor(container, { width = 140, height = 34, labels = ["value"] } = {}) {
    this.size = { width, height };
    this.plot = new uPlot(
      {
        ...this.size,
        class: "spark",
        cursor: { show: false },
        legend: { show: false },
        scales: { x: { time: true }, y: { range: (u, min, max) => [Math.min(0, min), max > 0 ? max * 1.1 : 1] } },
        axes: [{ show: false }, { show: false }],
        series: [{}, ...labels.map((label, i) => ({ label, stroke: color(i), width: 1.5, spanGaps: true, points: { show: false } }))],
      },
      [[], ...labels.map(() => [])],
      container,
    );
    this.count = labels.length;
  }

  setSeries(list) {
    if (!list.some((s) => s.t.length)) return;
    const data = list.length === 1 ? [list[0].t, list[0].v] : uPlot.join(list.map((s) => [s.t, s.v]));
    this.plot.setData(data);
  }
}
