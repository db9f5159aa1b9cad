// What the platform's evaluator said of a run (docs/checking.rst): its grades of the run's
// predictions and the ONNX audit of its final model, as the run page shows them.

import { duration, el, pct } from "./format.js";

// The ONNX audit of the run's final model: the evaluator ran it on its own test inputs and
// compared it with the run's predictions of that step (docs/checking.rst, "The ONNX audit").
export function auditLine(a) {
  const status = a.status || "no model";
  if ((status === "matches" || status === "mismatch") && a.kind === "perplexity") {
    // Task 3: the evaluator graded the final model's perplexity over the validation stream
    // itself (docs/checking.rst, "How the master grades it").
    const g = a.graded || {};
    const verdict = status === "matches" ? "gives the perplexity the run reported" : "MISMATCH: does not give the perplexity the run reported";
    return `Model audit: the final model ${verdict}: the evaluator graded ${Number(g.perplexity).toPrecision(5)} over ${g.tokens} tokens, the run reported ${Number(a.reported_perplexity).toPrecision(5)} at step ${a.step}.`;
  }
  if (status === "matches" || status === "mismatch") {
    const where = a.sample ? `a seeded sample of ${a.examples}` : `all ${a.examples}`;
    const rows = (a.first_rows || []).length ? ` (first rows ${a.first_rows.join(", ")})` : "";
    const verdict = status === "matches" ? "gives the submitted predictions" : "MISMATCH: predicts otherwise than submitted";
    // An evaluation in reduced precision (--amp, TF32) may rank near-ties otherwise.
    const precision = a.precision && a.precision !== "fp32" ? `; evaluated in ${a.precision}: ${a.ties || 0} near-ties allowed` : "";
    return `Model audit: the final model ${verdict} on ${where} test examples of step ${a.step}; ${a.differ} differ${rows}${precision}.`;
  }
  if (status === "pending") return "Model audit: pending (the evaluator is running the final model).";
  if (status === "no model") return "Model audit: no model (the run posted no ONNX model).";
  return `Model audit: ${status}${a.why ? `: ${a.why}` : ""}.`;
}

// Who graded the run: the platform's evaluator (its grades are the run's result; the
// summary above is what the run said of itself), or the run alone; a mismatch shows both.
export function showEvaluation(box, e) {
  const lines = [];
  // A translation run's grades are BLEU (0..100), the others' accuracies (0..1).
  const bleu = e.metric === "val_bleu";
  const show = bleu ? (v) => `BLEU ${Number(v).toFixed(2)}` : pct;
  const margin = bleu ? `${e.tolerance} BLEU` : `${(100 * e.tolerance).toFixed(1)} points`;
  if (e.status === "evaluated") {
    const reached = e.time_to_target !== null && e.time_to_target !== undefined ? `target reached at ${duration(e.time_to_target)}` : "target not reached";
    lines.push(`Graded by the platform's evaluator: ${e.grades} evaluation${e.grades === 1 ? "" : "s"}, last ${show(e.accuracy_after_time)}, ${reached}. The summary is the run's own report.`);
    if (e.signature) lines.push(`BLEU computed by the evaluator with sacrebleu, signature ${e.signature}.`);
  } else if (e.status) {
    const graded = e.audit && e.audit.kind === "perplexity";
    lines.push(graded
      ? "Self-reported curve: the run's perplexity at each evaluation is its own word; the evaluator grades its final model (below)."
      : "Self-reported, not evaluated: the run wrote no predictions, so its accuracy is its own word.");
  }
  for (const m of e.mismatches || []) lines.push(`Mismatch at step ${m.step}: the run reported ${show(m.reported)}, the evaluator graded ${show(m.graded)} (tolerance ${margin}).`);
  const audit = auditLine(e.audit || {});
  if (e.status === "evaluated" || (e.audit && e.audit.status !== "no model")) lines.push(audit);
  box.replaceChildren(...lines.flatMap((line, i) => (i ? [el("br"), line] : [line])));
  const lied = ["mismatch", "refused"].includes((e.audit || {}).status);
  box.classList.toggle("mismatch", Boolean((e.mismatches || []).length) || lied);
  box.hidden = !lines.length;
}
