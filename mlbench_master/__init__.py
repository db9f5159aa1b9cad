"""mlbench master: REST API, dashboard, run orchestration and cluster drivers."""
