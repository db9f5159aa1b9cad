"""The kubeconfig of a cluster this client made: one file of its own, one context.

Why a file of its own (MLBENCH_HOME/clusters/NAME/kubeconfig) and not a context merged
into ~/.kube/config: the issue's rule is never to change the user's current context
silently, and a file of our own cannot. `mlbench cluster create` prints how to use it
(`export KUBECONFIG=...` or `kubectl --kubeconfig ...`). It is written as JSON, which
every kubeconfig reader accepts (YAML is a superset), so the client needs no YAML library.

EKS and GKE hand out tokens that expire, so their user runs `mlbench cluster token NAME`
(the client.authentication.k8s.io/v1 exec protocol, as aws-cli's and gcloud's plugins do);
kind gives a client certificate, written inline.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from mlbench_worker.client.clusters.spec import KubeAccess


def token_command(name: str) -> list[str]:
    """The command a kubeconfig runs for a token: this Python's `mlbench cluster token`,
    so it works whether or not `mlbench` is on the PATH of whoever reads the file."""
    return [sys.executable, "-m", "mlbench_worker.client.cli", "cluster", "token", name]


def document(name: str, context: str, access: KubeAccess) -> dict:
    """The kubeconfig as a dict: one cluster, one user, one context named `context`."""
    if access.client_cert_data:
        user = {
            "client-certificate-data": access.client_cert_data,
            "client-key-data": access.client_key_data,
        }
    else:
        command = token_command(name)
        user = {
            "exec": {
                "apiVersion": "client.authentication.k8s.io/v1",
                "command": command[0],
                "args": command[1:],
                "interactiveMode": "Never",
                "provideClusterInfo": False,
            }
        }
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {
                "name": context,
                "cluster": {"server": access.server, "certificate-authority-data": access.ca_data},
            }
        ],
        "users": [{"name": context, "user": user}],
        "contexts": [{"name": context, "context": {"cluster": context, "user": context}}],
        "current-context": context,
        "preferences": {},
    }


def write(path: Path, name: str, context: str, access: KubeAccess) -> Path:
    """Write the kubeconfig to `path`, readable by its owner only (it may hold a key)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(path.name + ".partial")
    partial.write_text(json.dumps(document(name, context, access), indent=2) + "\n")
    os.chmod(partial, 0o600)
    partial.replace(path)
    return path
