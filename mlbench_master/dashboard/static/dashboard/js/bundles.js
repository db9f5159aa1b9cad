// Result bundles: the upload of a bundle to POST /api/bundles/ (the master verifies it and
// stores its runs, or refuses it naming the member or the signature) and the list of the
// bundles imported (GET /api/bundles/). The page checks nothing itself.

import { api } from "./api.js";
import { el } from "./format.js";

// "1 run", "2 runs": a count the reader reads as words.
const runsText = (n) => `${n} run${Number(n) === 1 ? "" : "s"}`;

const statusLine = document.getElementById("import-status");

function runLinks(ids) {
  const out = [];
  for (const id of ids) out.push(out.length ? ", " : "", el("a", { href: `/runs/${id}/`, text: `run ${id}` }));
  return out.length ? out : ["—"];
}

async function showBundles() {
  const bundles = await api("/api/bundles/");
  const body = document.querySelector("#bundle-table tbody");
  body.replaceChildren(
    ...bundles.map((b) =>
      el(
        "tr",
        {},
        el("td", {}, el("span", { class: "fingerprint", text: b.origin.fingerprint, title: `Ed25519 public key ${b.origin.public_key}` })),
        el("td", { text: `${(b.exported_at || "").slice(0, 16).replace("T", " ")} by ${b.exported_by || "?"}` }),
        el("td", { text: `${b.imported_at.slice(0, 16).replace("T", " ")} by ${b.imported_by || "?"}` }),
        el("td", {}, ...runLinks(b.runs)),
        el("td", {}, el("code", { text: `${b.digest.slice(0, 16)}…`, title: b.digest })),
      ),
    ),
  );
  document.getElementById("bundle-empty").hidden = bundles.length > 0;
}

async function importBundle(event) {
  event.preventDefault();
  const file = document.getElementById("bundle-file").files[0];
  if (!file) return;
  const button = document.getElementById("import-button");
  const result = document.getElementById("import-result");
  button.disabled = true;
  result.replaceChildren();
  statusLine.textContent = `Verifying ${file.name}…`;
  try {
    const done = await api("/api/bundles/", { method: "POST", file });
    statusLine.textContent = `${file.name}: verified, signed by installation ${done.bundle.origin.fingerprint}; ${runsText(done.stored)} stored.`;
    result.replaceChildren(
      ...done.runs.map((r) => el("li", {}, el("a", { href: `/runs/${r.id}/`, text: `run ${r.id}` }), ` — run ${r.origin_run} of installation ${r.origin}, ${r.trust || "unverified origin"}${r.new ? "" : " (already here)"}`)),
      ...done.series.map((s) => el("li", {}, el("a", { href: `/series/${s}/`, text: `series ${s}` }))),
    );
    await showBundles();
  } catch (err) {
    statusLine.textContent = `Refused: ${err.message}`;
  } finally {
    button.disabled = false;
  }
}

document.getElementById("import-form")?.addEventListener("submit", importBundle);
showBundles().catch((err) => {
  if (statusLine) statusLine.textContent = `Could not list the bundles: ${err.message}`;
});
