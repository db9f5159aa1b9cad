"""`mlbench cluster`: Kubernetes clusters on Google Cloud, AWS and kind, made, used and
removed by the client (spec.py holds the contract between the command and a provider)."""
