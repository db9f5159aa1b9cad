"""`mlbench cluster create|list|use|dashboard-url|delete|token` (`mlbench prices`:
price_lines.py).

Why here and not in the providers: every provider's create is followed by the same steps
(a kubeconfig of the cluster's own, the chart, the wait for the master, the prices), and
every one of them can be interrupted. This module keeps the record's state true at each
step (clusters/known_clusters.py), so that `create` run again resumes and `delete` removes what
exists; the providers only make and remove their resources (clusters/spec.py).
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from mlbench_worker.client.cli.formatting import table
from mlbench_worker.client.cli.master import EXIT_CLUSTER, EXIT_OK, EXIT_USAGE, CliError, Master
from mlbench_worker.client.clusters import install, known_clusters, kubeconfig, prices
from mlbench_worker.client.clusters.spec import PROVIDERS, ClusterError, ClusterSpec, Say


def provider_of(name: str) -> Any:
    """The provider object; its module (and its SDK) is imported only when named."""
    if name == "aws":
        from mlbench_worker.client.clusters.aws import Aws

        return Aws()
    if name == "gcloud":
        from mlbench_worker.client.clusters.gcloud import Gcloud

        return Gcloud()
    if name == "kind":
        from mlbench_worker.client.clusters.kind import Kind

        return Kind()
    raise CliError(f"unknown provider {name!r}: one of {', '.join(PROVIDERS)}", EXIT_USAGE)


def add_parser(sub: Any) -> None:
    cluster = sub.add_parser(
        "cluster", help="Kubernetes clusters on Google Cloud, AWS or kind, with mlbench on them"
    )
    verbs = cluster.add_subparsers(dest="verb", metavar="VERB")
    verbs.required = True
    create = verbs.add_parser(
        "create", help="create a cluster, install mlbench on it and price its machines"
    )
    create.add_argument("provider", choices=PROVIDERS)
    create.add_argument("name", help="1-40 lower-case letters, digits, hyphens (e.g. bench-1)")
    create.add_argument("--nodes", type=int, default=2, help="worker nodes (default 2)")
    create.add_argument("--machine-type", default="", help="e.g. e2-standard-4, m5.xlarge")
    create.add_argument("--gpus", type=int, default=0, help="GPUs per node (default 0)")
    create.add_argument("--gpu-type", default="", help="gcloud: e.g. nvidia-tesla-t4")
    create.add_argument("--zone", default="", help="gcloud: a zonal cluster's zone")
    create.add_argument("--region", default="", help="aws: the region; gcloud: a regional one")
    create.add_argument("--project", default="", help="gcloud: the project (default: yours)")
    create.add_argument("--disk-gb", type=int, default=0, help="boot disk per node, GB")
    create.add_argument("--spot", action="store_true", help="spot / Spot VM nodes")
    create.add_argument("--kubernetes-version", default="", help="default: the provider's")
    create.add_argument(
        "--registry", default="", help="where the images are (default: the chart's)"
    )
    create.add_argument("--tag", default="", help="the images' tag (default: the chart's)")
    create.add_argument(
        "--no-install", action="store_true", help="make the cluster only; no chart, no prices"
    )
    listed = verbs.add_parser("list", help="the clusters this client made (* the active one)")
    listed.add_argument("--json", action="store_true", help="print them as JSON")
    use = verbs.add_parser("use", help="make the other commands talk to this cluster's master")
    use.add_argument("name", nargs="?", help="omit with --none")
    use.add_argument("--none", action="store_true", help="back to MLBENCH_URL / the embedded one")
    url = verbs.add_parser("dashboard-url", help="the dashboard's address (the active cluster's)")
    url.add_argument("name", nargs="?")
    delete = verbs.add_parser("delete", help="remove everything `create` made, and say what")
    delete.add_argument("name")
    token = verbs.add_parser("token", help="a Kubernetes ExecCredential (the kubeconfig runs it)")
    token.add_argument("name")


def cmd_cluster(args: argparse.Namespace) -> int:
    try:
        return {"create": _create, "list": _list, "use": _use, "dashboard-url": _url,
                "delete": _delete, "token": _token}[args.verb](args)  # fmt: skip
    except ClusterError as exc:
        raise CliError(str(exc), EXIT_CLUSTER) from None


def _spec(args: argparse.Namespace) -> ClusterSpec:
    return ClusterSpec(
        provider=args.provider, name=args.name, nodes=args.nodes, machine_type=args.machine_type,
        gpus=args.gpus, gpu_type=args.gpu_type, region=args.region, zone=args.zone,
        project=args.project, disk_gb=args.disk_gb, spot=args.spot,
        kubernetes_version=args.kubernetes_version,
    )  # fmt: skip


def _existing(name: str) -> known_clusters.ClusterRecord | None:
    """This client's record of `name`, if it has one (a damaged one is an error)."""
    if not (known_clusters.clusters_dir() / name / "cluster.json").exists():
        return None
    return known_clusters.load(name)


def _create(args: argparse.Namespace) -> int:
    from mlbench_worker.client.clusters.spec import check_name

    check_name(args.name)
    record = _existing(args.name)
    if record is not None:
        _check_resumable(record, args.provider)
    provider = provider_of(args.provider)
    say = Say()
    if record is None:
        spec = provider.complete(_spec(args))  # checked before anything is made
        record = known_clusters.new(spec)
        record.registry, record.tag = args.registry, args.tag
        known_clusters.save(record)
    else:
        say(f"resuming the create of {args.name} ({record.state}) with the options it began with")
    try:
        _build(record, provider, say, args.no_install)
    except KeyboardInterrupt:
        print(_leftovers(record, "interrupted"), file=sys.stderr)
        return 130
    except Exception as exc:  # whatever stopped it, the record says what exists
        record.state, record.error = known_clusters.FAILED, str(exc)
        known_clusters.save(record)
        raise ClusterError(f"{exc}\n{_leftovers(record, 'stopped')}") from None
    return EXIT_OK


def _check_resumable(record: known_clusters.ClusterRecord, provider: str) -> None:
    name = record.name
    if record.state == known_clusters.READY:
        raise ClusterError(
            f"this client already has a cluster named {name!r} ({record.spec.provider}, ready)",
            f"choose another name, or `mlbench cluster delete {name}` first",
        )
    if record.state == known_clusters.DELETING:
        raise ClusterError(
            f"cluster {name!r} is being deleted (a delete did not finish)",
            f"finish it with `mlbench cluster delete {name}`, then create it again",
        )
    if record.spec.provider != provider:
        raise ClusterError(
            f"cluster {name!r} is a {record.spec.provider} cluster whose create did not end",
            f"resume it with `mlbench cluster create {record.spec.provider} {name}` or "
            f"remove it with `mlbench cluster delete {name}`",
        )


def _build(record: known_clusters.ClusterRecord, provider: Any, say: Say, no_install: bool) -> None:
    spec = record.spec
    if record.state in (known_clusters.CREATING, known_clusters.FAILED) or not (
        record.kubeconfig.exists()
    ):
        record.state, record.error = known_clusters.CREATING, ""
        known_clusters.save(record)
        access = provider.create(spec, record.ledger(), say)
        for resource in record.resources:  # the project a provider chose (gcloud's default)
            spec.project = spec.project or str(resource.detail.get("project", ""))
        kubeconfig.write(record.kubeconfig, spec.name, record.context, access)
        say(f"cluster ready; its kubeconfig: {record.kubeconfig} (context {record.context})")
    # From here the chart may be (partly) in: a delete releases its namespace first.
    record.state = known_clusters.INSTALLING
    known_clusters.save(record)
    if no_install:
        print(f"made {spec.name} without mlbench: KUBECONFIG={record.kubeconfig} kubectl get nodes")
        return
    values = install.values_for(spec, registry=record.registry, tag=record.tag)
    install.install(record, values, say, install.chart_path())
    install.wait_for_master(record, say)
    known_clusters.save(record)  # its address and sign-in, before anything else can fail
    priced = prices.for_cluster(spec)
    if priced.lines:
        from mlbench_worker.client.cli.price_lines import set_price

        master = Master(record.url, record.token)
        record.prices = [set_price(master, line) for line in priced.lines]
    record.state = known_clusters.READY
    known_clusters.save(record)
    if known_clusters.active_name() is None:
        known_clusters.use(spec.name)
    _ready(record, priced.note)


def _ready(record: known_clusters.ClusterRecord, price_note: str) -> None:
    active = known_clusters.active_name() == record.name
    print(f"\nmlbench is running on {record.spec.provider} cluster {record.name}.")
    print(f"  dashboard:  {record.url}")
    print(f"  sign in:    admin / {record.password}")
    print(f"  API token:  {record.token}  (the CLI uses it while this cluster is active)")
    print(f"  kubectl:    export KUBECONFIG={record.kubeconfig}")
    print(f"  prices:     {price_note}")
    print(
        "  active:     yes: `mlbench run`, `mlbench runs`, ... talk to it"
        if active
        else f"  active:     no: `mlbench cluster use {record.name}` to talk to it"
    )
    print(f"  remove it:  mlbench cluster delete {record.name}  (it costs money while it exists)")


def _leftovers(record: known_clusters.ClusterRecord, how: str) -> str:
    made = ", ".join(str(r) for r in record.resources) or "nothing yet"
    return (
        f"the create of {record.name} {how}; what exists of it: {made}. Run "
        f"`mlbench cluster create {record.spec.provider} {record.name}` to resume, or "
        f"`mlbench cluster delete {record.name}` to remove it"
    )


def _list(args: argparse.Namespace) -> int:
    known = known_clusters.all_records()
    active = known_clusters.active_name()
    if args.json:
        print(json.dumps([_public(r, active) for r in known], indent=2))
        return EXIT_OK
    if not known:
        print("no clusters made by this client; make one with `mlbench cluster create`")
        return EXIT_OK
    rows = [
        [("* " if r.name == active else "  ") + r.name, r.spec.provider, r.spec.location or "-",
         r.spec.machine_type or "-", str(r.spec.nodes), r.state, r.created_at[:16], r.url or "-"]
        for r in known
    ]  # fmt: skip
    headers = ["NAME", "PROVIDER", "WHERE", "MACHINE", "NODES", "STATE", "CREATED", "DASHBOARD"]
    print(table(headers, rows))
    return EXIT_OK


def _public(record: known_clusters.ClusterRecord, active: str | None) -> dict[str, Any]:
    """A record as `list --json` prints it: no token, no password."""
    data = record.to_json()
    data.pop("token")
    data.pop("password")
    data["active"] = record.name == active
    return data


def _use(args: argparse.Namespace) -> int:
    if args.none or not args.name:
        if not args.none:
            raise CliError("name a cluster, or --none for MLBENCH_URL / the embedded master", 2)
        known_clusters.use(None)
        print("no cluster is active: the commands talk to MLBENCH_URL or the embedded master")
        return EXIT_OK
    record = known_clusters.load(args.name)
    if record.state != known_clusters.READY:
        raise ClusterError(
            f"cluster {args.name!r} is {record.state}: its master is not installed",
            f"finish it with `mlbench cluster create {record.spec.provider} {args.name}`",
        )
    known_clusters.use(args.name)
    print(f"active: {args.name}; the commands talk to {record.url} (MLBENCH_URL still wins)")
    return EXIT_OK


def _url(args: argparse.Namespace) -> int:
    name = args.name or known_clusters.active_name()
    if not name:
        raise ClusterError("no cluster is active", "name one, or `mlbench cluster use NAME`")
    record = known_clusters.load(name)
    if not record.url:
        raise ClusterError(
            f"cluster {name!r} has no dashboard yet ({record.state})",
            f"`mlbench cluster create {record.spec.provider} {name}` finishes it",
        )
    print(record.url)
    return EXIT_OK


def _delete(args: argparse.Namespace) -> int:
    record = known_clusters.load(args.name)
    provider = provider_of(record.spec.provider)
    say = Say()
    record.state = known_clusters.DELETING
    known_clusters.save(record)
    released = _release_cloud_resources(record, say)
    removal = provider.delete(record.spec, record.ledger(), say)
    for resource in removal.removed:
        print(f"removed {resource}")
    for resource, why in removal.failed:
        print(f"NOT removed {resource}: {why}", file=sys.stderr)
    if removal.failed:
        raise ClusterError(
            f"some of {args.name} is left (above); it is kept in the list",
            f"fix the cause and run `mlbench cluster delete {args.name}` again; everything "
            f"made carries the label/tag mlbench-cluster={args.name}",
        )
    known_clusters.forget(record)
    if not released:
        # The cluster is gone, so nothing can release them any more: say where to look.
        print(
            f"the cluster is gone, but its namespace could not be released first: look for "
            f"a load balancer and disks of Kubernetes cluster {args.name} at "
            f"{record.spec.provider} (tag kubernetes.io/cluster/{args.name} on AWS; "
            "'kubernetes.io/cluster-name' on Google Cloud)",
            file=sys.stderr,
        )
    print(f"deleted {args.name}: everything it recorded is removed")
    return EXIT_OK


def _release_cloud_resources(record: known_clusters.ClusterRecord, say: Say) -> bool:
    """Remove the chart's namespace first, so that Kubernetes deletes the cloud load
    balancer of the master's Service and the disks of its volume claims, which a cluster's
    delete would leave behind (and which keep an AWS VPC from being deleted). True when
    there is nothing to release (kind, no cluster recorded, the chart never started, the
    namespace already gone) or it is released."""
    clusters = [r for r in record.resources if r.kind in ("eks-cluster", "gke-cluster")]
    if record.spec.provider == "kind" or not clusters or not record.kubeconfig.exists():
        return True
    try:
        import time

        from kubernetes import client, config
        from kubernetes.client.rest import ApiException

        api = client.CoreV1Api(
            config.new_client_from_config(str(record.kubeconfig), context=record.context)
        )
        say(f"deleting namespace {install.NAMESPACE}: the load balancer and the disks with it")
        try:
            api.delete_namespace(install.NAMESPACE)
        except ApiException as exc:
            if exc.status == 404:
                return True
            raise
        deadline = time.monotonic() + 600
        while time.monotonic() < deadline:
            try:
                api.read_namespace(install.NAMESPACE)
            except ApiException as exc:
                if exc.status == 404:
                    return True
                raise
            time.sleep(5)
        print(f"namespace {install.NAMESPACE} still there after 10 minutes", file=sys.stderr)
        return False
    except Exception as exc:  # the cluster may be half-made or unreachable: say, go on
        print(f"could not release the namespace's load balancer and disks: {exc}", file=sys.stderr)
        return False


def _token(args: argparse.Namespace) -> int:
    record = known_clusters.load(args.name)
    print(json.dumps(provider_of(record.spec.provider).token(record.spec)))
    return EXIT_OK
