"""Where the Kubernetes driver finds its cluster: credentials, namespace, release
(settings read with cluster.environment.setting).
"""

from __future__ import annotations

import os
from typing import Any

from kubernetes import client, config

from mlbench_master.cluster.base import ClusterError
from mlbench_master.cluster.environment import setting

SERVICE_ACCOUNT_NAMESPACE = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"


def load_api_client() -> Any:
    """An ApiClient from the pod's service account, else from KUBECONFIG / ~/.kube/config."""
    configuration = client.Configuration()
    try:
        if os.environ.get("KUBERNETES_SERVICE_HOST"):
            config.load_incluster_config(client_configuration=configuration)
        else:
            config.load_kube_config(
                config_file=os.environ.get("KUBECONFIG") or None,
                client_configuration=configuration,
            )
    except (config.ConfigException, OSError) as error:
        raise ClusterError(
            f"no Kubernetes credentials ({error}): run the master in the cluster with the "
            "chart's service account, or point KUBECONFIG at a kubeconfig file"
        ) from error
    return client.ApiClient(configuration)


def kubeconfig_namespace() -> str | None:
    try:
        _, current = config.list_kube_config_contexts(os.environ.get("KUBECONFIG") or None)
        return (current or {}).get("context", {}).get("namespace") or None
    except Exception:  # no kubeconfig: not an error here, the caller says what is missing
        return None


def namespace_from_environment() -> str:
    """MLBENCH_K8S_NAMESPACE, else the service account's namespace, else the kubeconfig's."""
    namespace = setting("MLBENCH_K8S_NAMESPACE")
    if namespace is None and os.path.exists(SERVICE_ACCOUNT_NAMESPACE):
        with open(SERVICE_ACCOUNT_NAMESPACE, encoding="utf-8") as fh:
            namespace = fh.read().strip() or None
    namespace = namespace or kubeconfig_namespace()
    if namespace is None:
        raise ClusterError(
            "the Kubernetes namespace of mlbench is unknown: set MLBENCH_K8S_NAMESPACE"
        )
    return namespace


def release_from_environment() -> str:
    release = setting("MLBENCH_RELEASE_NAME")
    if release is None:
        raise ClusterError(
            "the helm release of mlbench is unknown: set MLBENCH_RELEASE_NAME to the "
            "name given to `helm install`"
        )
    return release
