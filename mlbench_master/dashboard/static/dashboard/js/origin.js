// Where an imported run or series comes from (docs/publishing.rst): the installation that
// ran it (its key's fingerprint), whether this installation trusts that key ("trusted
// (NAME)", or "unverified origin": never ranked), its id there, who imported it and when,
// and, for a run, what this master's evaluator said of its predictions beside the origin's
// grades ("disputed" with both numbers). Nothing for this installation's own: `origin` is
// null in the API then.

import { el, pct } from "./format.js";

function regradeText(r) {
  if (!r || !r.status) return "";
  if (r.status === "re-graded") {
    if (!r.disagreements) return ` This master graded its ${r.steps.length} predictions file(s) again: the grades agree.`;
    const off = r.steps.filter((s) => s.agrees === false).map((s) => {
      const here = Object.values(s.here || {})[0];
      const there = Object.values(s.origin || {})[0];
      return s.refused ? `step ${s.step}: refused here (${s.refused})` : `step ${s.step}: origin ${pct(there)}, here ${pct(here)}`;
    });
    return ` Disputed: this master's evaluator DISAGREES with the origin's grades (${off.join("; ")}); not ranked.`;
  }
  return ` Not graded again here: ${r.why}.`;
}

// Fill `box` (hidden when the run is this installation's) and say whether it was imported.
export function showOrigin(box, origin, what) {
  if (!origin) {
    box.hidden = true;
    return false;
  }
  const id = what === "series" ? origin.origin_series : origin.origin_run;
  const imported = origin.imported_at ? ` on ${origin.imported_at.slice(0, 10)}` : "";
  const by = origin.imported_by ? ` by ${origin.imported_by}` : "";
  const trust = origin.trust || { trusted: false, label: "unverified origin" };
  const trustNote = trust.trusted
    ? ""
    : " Its key is not one this installation trusts: it ranks nowhere until staff trust it (";
  box.replaceChildren(
    `Imported${imported}${by}, read-only: ${what} ${id ?? "?"} of installation `,
    el("span", { class: "fingerprint", text: origin.fingerprint, title: `Ed25519 public key ${origin.public_key}` }),
    ", ",
    el("strong", { class: `trust ${trust.trusted ? "trusted" : "unverified"}`, text: trust.label }),
    `, verified against its signature (bundle ${String(origin.bundle).slice(0, 12)}…).`,
    trustNote,
    trust.trusted ? null : el("a", { href: "/trust/", text: "Trusted keys" }),
    trust.trusted ? null : ").",
    regradeText(origin.regrade),
  );
  box.classList.toggle("disagrees", Boolean(origin.regrade && origin.regrade.disagreements));
  box.classList.toggle("unverified", !trust.trusted);
  box.hidden = false;
  return true;
}
