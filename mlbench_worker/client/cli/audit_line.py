"""One line saying the ONNX audit of a run's final model (docs/checking.rst, "The ONNX audit"),
as the master shows it in the run's `evaluation.audit`: for `mlbench show` and the notes of
`mlbench show` and `mlbench report` (comparison.evaluation_notes). The run page says the
same in run_info.js."""

from __future__ import annotations


def audit_line(run: dict) -> str:
    """The ONNX audit of the run's final model, for `mlbench show` and the report's notes."""
    audit = (run.get("evaluation") or {}).get("audit") or {}
    status = audit.get("status") or "no model"
    if status in ("matches", "mismatch") and audit.get("kind") == "perplexity":  # task 3
        graded = audit.get("graded") or {}
        return (
            f"{status}: the final model's perplexity {graded.get('perplexity', 0):.4g} over "
            f"{graded.get('tokens')} tokens, graded by the evaluator; the run reported "
            f"{audit.get('reported_perplexity', 0):.4g} at step {audit.get('step')}"
        )
    if status in ("matches", "mismatch"):
        where = "a seeded sample of " if audit.get("sample") else "all "
        found = f"{where}{audit.get('examples')} test examples, {audit.get('differ')} differ"
        rows = audit.get("first_rows") or []
        first = f" (first rows {', '.join(map(str, rows))})" if rows else ""
        precision = audit.get("precision") or "fp32"
        if precision != "fp32":  # the evaluation's own arithmetic: near-ties are not lies
            first += f"; evaluated in {precision}: {audit.get('ties', 0)} near-ties allowed"
        return f"{status}: the final model against step {audit.get('step')}'s predictions on {found}{first}"
    return f"{status}: {audit['why']}" if audit.get("why") else status
