"""Cluster drivers: where a run's worker ranks come from (this machine or Kubernetes)."""
