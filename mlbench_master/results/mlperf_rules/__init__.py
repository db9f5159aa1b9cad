"""Rulesets of our own for MLPerf's compliance checker (YAML in its format); where they
are, importable without Django, so a reader's shell can find them:
`python -c "from mlbench_master.results.mlperf_rules import OWN_RULES; print(OWN_RULES)"`."""

from pathlib import Path

RULES_DIR = Path(__file__).resolve().parent
OWN_RULES = RULES_DIR / "mlbench.yaml"  # every task that is no MLPerf benchmark
