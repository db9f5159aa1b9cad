// What a run or a series cost, as the master computed it (a run's `cost`, a series'
// `statistics`: mlbench_master/results/cost.py and statistics.py). The pages word these
// numbers and compute none; a run the master could not price says "not priced" with its
// reason, never 0.

import { duration, el } from "./format.js";

export const NOT_PRICED = "not priced";

// 0.00383 USD, 12.50 USD: cents where there are any, three figures below one unit (a short
// run costs fractions of a cent); "—" when there is no amount. The CLI words it alike.
export function money(value, currency) {
  if (value === null || value === undefined || Number.isNaN(Number(value))) return "—";
  const n = Number(value);
  const amount = Math.abs(n) >= 1 ? n.toFixed(2) : String(Number(n.toPrecision(3)));
  return currency ? `${amount} ${currency}` : amount;
}

// One cell: "cost to target / whole run", or the reason it has none.
export function costCell(cost) {
  if (!cost || !cost.priced) {
    const why = (cost?.reason || "").replace(/^not priced: /, "");
    return el("span", { class: "not-priced", title: cost?.reason || NOT_PRICED }, NOT_PRICED, why ? el("small", { class: "why", text: why }) : "");
  }
  const part = (p) => money(p?.cost, null);
  return el("span", { class: "cost-value", text: `${part(cost.to_target)} / ${money(cost.whole_run?.cost, cost.currency)}` });
}

// The run page's Cost card: [label, value] pairs for run_info.kv.
export function costPairs(cost) {
  if (!cost || !cost.priced) return [["Cost", el("span", { class: "not-priced", text: cost?.reason || NOT_PRICED })]];
  const c = cost.currency;
  const part = (p, key) => (p ? `${money(p.cost, c)} (${duration(p.seconds)})` : `— (${cost.notes?.[key] || "no time"})`);
  const nodes = (cost.nodes || []).map((n) =>
    el("li", { text: `${n.name || "a node"} (${n.workers} worker${n.workers === 1 ? "" : "s"}): ${n.node_kind}, ${n.pricing}, ${money(n.price_per_hour, n.currency)}/h, from ${n.source} as of ${n.as_of}` }),
  );
  return [
    ["Cost to target", part(cost.to_target, "to_target")],
    ["Cost of the whole run", part(cost.whole_run, "whole_run")],
    ["Price per hour", `${money(cost.per_hour, c)}/h`],
    ["Nodes priced", el("ul", { class: "plain" }, ...nodes)],
    ["Prices as of", cost.prices_taken_at ? new Date(cost.prices_taken_at).toLocaleString("en-GB", { dateStyle: "medium", timeStyle: "short" }) : "—"],
  ];
}
