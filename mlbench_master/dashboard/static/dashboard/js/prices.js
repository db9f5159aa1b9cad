// The price table: listed for every reader; added to, changed and emptied by staff through
// the API (POST, PATCH, DELETE /api/prices/), whose 400s name each field that is wrong.

import { api } from "./api.js";
import { money } from "./cost.js";
import { el } from "./format.js";

const root = document.getElementById("prices");
const staff = root.dataset.staff === "1";
const statusLine = document.getElementById("prices-status");
const form = document.getElementById("price-form");
const FIELDS = ["node_kind", "pricing", "price_per_hour", "currency", "source", "as_of"];
let prices = [];

function edit(p) {
  form.elements.id.value = p.id;
  for (const f of FIELDS) form.elements[f].value = p[f];
  document.getElementById("price-form-title").textContent = `Change the price of ${p.node_kind} (${p.pricing})`;
  form.elements.node_kind.focus();
}

function clear() {
  form.reset();
  form.elements.id.value = "";
  document.getElementById("price-form-title").textContent = "Add a price";
  document.getElementById("price-errors").replaceChildren();
}

async function remove(p) {
  if (!window.confirm(`Remove the ${p.pricing} price of ${p.node_kind}? Runs made before keep the price they copied.`)) return;
  await api(`/api/prices/${p.id}/`, { method: "DELETE" });
  statusLine.textContent = `Removed the price of ${p.node_kind}.`;
  await refresh();
}

function row(p) {
  const cells = [
    el("th", { scope: "row", text: p.node_kind }),
    el("td", { text: p.pricing }),
    el("td", { class: "per-hour", text: `${money(p.price_per_hour, p.currency)}/h` }),
    el("td", { text: p.source }),
    el("td", { text: p.as_of }),
  ];
  if (staff) {
    const change = el("button", { type: "button", class: "link", text: "Change" });
    change.addEventListener("click", () => edit(p));
    const drop = el("button", { type: "button", class: "link remove", text: "Remove" });
    drop.addEventListener("click", () => remove(p).catch((err) => (statusLine.textContent = `Could not remove: ${err.message}`)));
    cells.push(el("td", {}, change, " ", drop));
  }
  return el("tr", { dataset: { kind: p.node_kind, pricing: p.pricing } }, ...cells);
}

async function refresh() {
  prices = await api("/api/prices/");
  document.querySelector("#prices-table tbody").replaceChildren(...prices.map(row));
  document.getElementById("prices-empty").hidden = prices.length > 0;
  document.body.dataset.loaded = "1";
}

form?.addEventListener("submit", async (event) => {
  event.preventDefault();
  const body = Object.fromEntries(FIELDS.map((f) => [f, form.elements[f].value]));
  const id = form.elements.id.value;
  const errors = document.getElementById("price-errors");
  try {
    await api(id ? `/api/prices/${id}/` : "/api/prices/", { method: id ? "PATCH" : "POST", body });
    statusLine.textContent = `Saved the price of ${body.node_kind}; runs created from now on copy it.`;
    clear();
    await refresh();
  } catch (err) {
    const fields = err.data?.errors || {};
    errors.replaceChildren(...Object.entries(fields).map(([f, msgs]) => el("li", { text: `${f || "price"}: ${msgs.join(" ")}` })));
    statusLine.textContent = `Not saved: ${err.message}`;
  }
});
document.getElementById("price-new")?.addEventListener("click", clear);

refresh().catch((err) => {
  statusLine.textContent = `Could not read the price table: ${err.message}`;
  document.body.dataset.loaded = "1";
});
