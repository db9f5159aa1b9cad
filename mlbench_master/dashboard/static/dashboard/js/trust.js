// The keys whose imported results rank here: listed for every reader (GET /api/trust/, this
// installation's own first), trusted and removed by staff through the API (POST /api/trust/,
// DELETE /api/trust/<fingerprint>/), whose 400s name each field that is wrong. The page
// checks nothing itself: the master computes every fingerprint.

import { api } from "./api.js";
import { el } from "./format.js";

// "1 imported run", "2 imported runs", with the verb that agrees.
const importedRuns = (n, one, many) =>
  Number(n) === 1 ? `1 imported run ${one}` : `${n} imported runs ${many}`;

const root = document.getElementById("trust-page");
const staff = root.dataset.staff === "1";
const statusLine = document.getElementById("trust-status");
const form = document.getElementById("trust-form");

async function remove(k) {
  if (!window.confirm(`Stop trusting ${k.name} (${k.fingerprint})? Its ${importedRuns(k.runs, "will rank nowhere", "will rank nowhere")}.`)) return;
  const gone = await api(`/api/trust/${k.fingerprint}/`, { method: "DELETE" });
  statusLine.textContent = `No longer trusted: ${gone.name} (${gone.fingerprint}); its ${importedRuns(gone.runs, "is unverified again", "are unverified again")}.`;
  await refresh();
}

function row(k) {
  const added = k.own ? "always" : `${(k.added_at || "").slice(0, 10)} by ${k.added_by || "?"}`;
  const cells = [
    el("th", { scope: "row" }, el("span", { class: "fingerprint", text: k.fingerprint })),
    el("td", { class: "name", text: k.own ? `${k.name} (own key)` : k.name }),
    el("td", { class: "runs", text: String(k.runs) }),
    el("td", { text: added }),
    el("td", {}, el("code", { text: k.public_key })),
  ];
  if (staff) {
    if (k.own) cells.push(el("td", { class: "hint", text: "cannot be removed" }));
    else {
      const drop = el("button", { type: "button", class: "link remove", text: "Remove" });
      drop.addEventListener("click", () => remove(k).catch((err) => (statusLine.textContent = `Could not remove: ${err.message}`)));
      cells.push(el("td", {}, drop));
    }
  }
  return el("tr", { dataset: { fingerprint: k.fingerprint, own: k.own ? "1" : "" } }, ...cells);
}

async function refresh() {
  const keys = await api("/api/trust/");
  document.querySelector("#trust-table tbody").replaceChildren(...keys.map(row));
  document.body.dataset.loaded = "1";
}

form?.addEventListener("submit", async (event) => {
  event.preventDefault();
  const body = { key: form.elements.key.value, name: form.elements.name.value };
  const errors = document.getElementById("trust-errors");
  errors.replaceChildren();
  try {
    const added = await api("/api/trust/", { method: "POST", body });
    statusLine.textContent = `Trusted ${added.name} (${added.fingerprint}): its ${importedRuns(added.runs, "ranks from now on", "rank from now on")}.`;
    form.reset();
    await refresh();
  } catch (err) {
    const fields = err.data?.errors || {};
    const said = Object.entries(fields).map(([f, msgs]) => el("li", { text: `${f}: ${msgs.join(" ")}` }));
    errors.replaceChildren(...(said.length ? said : [el("li", { text: err.message })]));
    statusLine.textContent = `Not trusted: ${err.message}`;
  }
});

refresh().catch((err) => {
  statusLine.textContent = `Could not read the trusted keys: ${err.message}`;
  document.body.dataset.loaded = "1";
});
