// Axis ranges that make sense from a chart's first point. Left to itself uPlot scales a
// series with no spread (one point, or none yet) to a range of its own making: a fraction
// such as an accuracy with no point got 0 to 100 (shown as 0 to 10,000 %), and one point on
// the benchmark clock got ticks a tenth of a second apart, each labelled "0 s".

import { clock, duration, pct } from "./format.js";

// Seconds between ticks of a clock axis: whole seconds, then minutes and hours.
export const CLOCK_INCRS = [1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 14400, 28800, 86400];
const MIN_CLOCK_SPAN = 10; // seconds a clock axis shows while its data spans under 1 s

const finite = (v) => v !== null && v !== undefined && Number.isFinite(v);

// A fraction (accuracy, share): within [0, 1], padded to tenths, never less than 0.1 wide.
export function fractionRange(min, max) {
  if (!finite(min) || !finite(max)) return [0, 1];
  let lo = Math.max(0, Math.floor((Math.min(min, max) - 0.02) * 10) / 10);
  let hi = Math.min(1, Math.ceil((Math.max(min, max) + 0.02) * 10) / 10);
  if (hi - lo < 0.1) [lo, hi] = hi >= 1 ? [0.9, 1] : [lo, lo + 0.1];
  return [lo, hi];
}

// Seconds on the benchmark clock: from 0 (or the data's start) to its end in whole
// seconds; 10 s wide while the data spans under a second (one point, a run just started),
// but no wider once it spans more, so runs of a few seconds fill the chart.
export function clockRange(min, max) {
  if (!finite(min) || !finite(max)) return [0, MIN_CLOCK_SPAN];
  const lo = Math.max(0, Math.floor(Math.min(min, max)));
  const end = Math.ceil(Math.max(min, max));
  const span = Math.abs(max - min) < 1 ? MIN_CLOCK_SPAN : 1;
  return [lo, Math.max(end, lo + span)];
}

// The options of a chart of validation accuracy against the benchmark clock (the compare
// and series pages): accuracy within 0 to 100 %, the clock in minutes and seconds.
export function accuracyOverClock(id, height) {
  return {
    id,
    title: "Validation accuracy against the benchmark clock",
    xLabel: "benchmark clock (min:s)",
    xFmt: duration,
    xTickFmt: clock,
    xRange: clockRange,
    xIncrs: CLOCK_INCRS,
    yFmt: pct,
    yRange: fractionRange,
    height,
  };
}
