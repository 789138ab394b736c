"""The manifests in deploy/ validate against Kubernetes' schemas (at the oldest version the
chart claims and the newest kubernetes-validate knows) and keep least privilege."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml
from test_chart import K8S_VERSIONS

from podnet.core.config import load_config, parse_config
from podnet.core.networks.migrate import MARKER
from podnet.core.plugin import BUILTIN_PLUGINS

DEPLOY = Path(__file__).resolve().parent.parent / "deploy"


def documents() -> list[tuple[str, dict[str, Any]]]:
    """Every manifest; deploy/config/ holds podnet config files, not manifests, and
    deploy/chart/ the chart they are rendered from (tests/test_chart.py)."""
    out = []
    for path in sorted(DEPLOY.rglob("*.yaml")):
        if path.relative_to(DEPLOY).parts[0] in ("config", "chart"):
            continue
        for doc in yaml.safe_load_all(path.read_text()):
            if doc:
                out.append((f"{path.relative_to(DEPLOY)}:{doc['kind']}/{doc['metadata']['name']}",
                            doc))
    return out


DOCS = documents()


@pytest.mark.parametrize("version", K8S_VERSIONS)
@pytest.mark.parametrize("name, doc", DOCS, ids=[n for n, _ in DOCS])
def test_manifest_validates_strictly(name: str, doc: dict[str, Any], version: str) -> None:
    kubernetes_validate.validate(doc, version, strict=True)


def test_every_kind_we_ship_is_there() -> None:
    kinds = sorted({doc["kind"] for _, doc in DOCS})
    assert kinds == ["ClusterRole", "ClusterRoleBinding", "ConfigMap",
                     "CustomResourceDefinition", "DaemonSet", "Deployment",
                     "PodDisruptionBudget", "Role", "RoleBinding", "Service", "ServiceAccount"]


def test_rbac_has_no_wildcards_and_no_secrets() -> None:
    for _, doc in DOCS:
        for rule in doc.get("rules", ()):
            for field in ("apiGroups", "resources", "verbs", "resourceNames"):
                assert "*" not in rule.get(field, []), (doc["metadata"]["name"], rule)
            assert "secrets" not in rule.get("resources", [])


def test_rbac_covers_what_the_engine_does() -> None:
    rules = [r for _, d in DOCS if d["kind"] == "ClusterRole"
             and d["metadata"]["name"] == "podnet" for r in d["rules"]]

    def allowed(group: str, resource: str, verb: str) -> bool:
        return any(group in r["apiGroups"] and resource in r["resources"] and verb in r["verbs"]
                   for r in rules)

    for resource in ("pods", "nodes"):
        for verb in ("get", "list", "watch"):
            assert allowed("", resource, verb)
        assert not allowed("", resource, "update"), "podnet never writes pods or nodes"
    for resource in ("podnetworks", "nodenetworks"):
        for verb in ("get", "list", "watch", "create", "update", "delete"):
            assert allowed("podnet.io", resource, verb)
        assert allowed("podnet.io", f"{resource}/status", "update")
    assert allowed("", "events", "create")
    for resource in ("subnets", "ippools", "securitygroups"):
        for verb in ("get", "list", "watch", "create", "update", "patch"):
            assert allowed("podnet.io", resource, verb), (resource, verb)
        assert not allowed("podnet.io", resource, "delete"), "the networks are the operator's"
        for verb in ("update", "patch"):
            assert allowed("podnet.io", f"{resource}/status", verb)
    for verb in ("get", "list", "watch"):
        assert allowed("k8s.cni.cncf.io", "network-attachment-definitions", verb)
    for verb in ("create", "update", "patch", "delete"):
        assert not allowed("k8s.cni.cncf.io", "network-attachment-definitions", verb)
    # NetworkPolicies: read, and patched for the status annotation only
    for verb in ("get", "list", "watch", "patch"):
        assert allowed("networking.k8s.io", "networkpolicies", verb)
    for verb in ("create", "update", "delete"):
        assert not allowed("networking.k8s.io", "networkpolicies", verb)


def test_rbac_lets_the_engine_watch_every_kind_it_caches_and_write_none_it_only_reads(
) -> None:
    from podnet.core.engine import Engine, EngineOptions
    from podnet.plugins.reference.provider import ReferenceCloud, ReferenceProvider
    from podnet.sim.memory import InMemoryCluster
    from podnet.testing.harness import build_plugin_manager

    rules = [r for _, d in DOCS if d["kind"] == "ClusterRole"
             and d["metadata"]["name"] == "podnet" for r in d["rules"]]
    bound = {d["roleRef"]["name"] for _, d in DOCS if d["kind"] == "RoleBinding"
             and {"kind": "ServiceAccount", "name": "podnet", "namespace": "kube-system"}
             in d["subjects"]}
    #: namespace -> the rules of the Roles the controller is bound to there
    roles: dict[str, list[dict[str, Any]]] = {}
    for _, d in DOCS:
        if d["kind"] == "Role" and d["metadata"]["name"] in bound:
            roles.setdefault(d["metadata"]["namespace"], []).extend(d["rules"])

    def verbs(group: str, resource: str, namespace: str | None = None) -> set[str]:
        where = rules + (roles.get(namespace, []) if namespace else [])
        return {v for r in where if group in r["apiGroups"] and resource in r["resources"]
                and "resourceNames" not in r for v in r["verbs"]}

    engine = Engine(InMemoryCluster(),
                    build_plugin_manager(ReferenceProvider(cloud=ReferenceCloud())),
                    options=EngineOptions(default_provider="reference"))
    cached = {(i.kind.group, i.kind.plural, i.namespace) for i in engine.informers}
    assert {("", "namespaces", None), ("apps", "statefulsets", None),
            ("coordination.k8s.io", "leases", "kube-system")} <= cached
    for group, resource, namespace in cached:
        assert {"get", "list", "watch"} <= verbs(group, resource, namespace), (group, resource)
    for group, resource in (("", "namespaces"), ("apps", "statefulsets")):
        assert verbs(group, resource) == {"get", "list", "watch"}, "read only"


def test_deployment_probes_and_resources() -> None:
    (dep,) = [d for _, d in DOCS if d["kind"] == "Deployment"]
    container = dep["spec"]["template"]["spec"]["containers"][0]
    assert container["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert container["readinessProbe"]["httpGet"]["path"] == "/readyz"
    # probed where it listens: its pod IP (no host: the kubelet's default), by port name
    assert "host" not in container["livenessProbe"]["httpGet"]
    assert container["livenessProbe"]["httpGet"]["port"] == "metrics"
    assert container["resources"]["requests"]["cpu"]
    assert container["resources"]["requests"]["memory"]
    assert container["securityContext"]["allowPrivilegeEscalation"] is False


def test_configmap_holds_a_valid_config_consistent_with_the_deployment() -> None:
    (cm,) = [d for _, d in DOCS if d["kind"] == "ConfigMap"]
    config = parse_config(yaml.safe_load(cm["data"]["config.yaml"]))
    assert config.default_provider in BUILTIN_PLUGINS
    (dep,) = [d for _, d in DOCS if d["kind"] == "Deployment"]
    (container,) = dep["spec"]["template"]["spec"]["containers"]
    (port,) = [p["containerPort"] for p in container["ports"] if p["name"] == "metrics"]
    # the listen address is the flag's (the file cannot name the pod's IP)
    args = container["args"]
    assert args[args.index("--listen") + 1] == f"$(POD_IP):{port}"
    assert {"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}} in (
        container["env"])
    (role,) = [d for _, d in DOCS if d["kind"] == "Role"
               and d["metadata"]["name"] == "podnet-leader-election"]
    assert role["metadata"]["namespace"] == config.leader_election.namespace
    leases = {n for r in role["rules"] if r["resources"] == ["leases"]
              for n in r.get("resourceNames", [])}
    assert leases == {config.leader_election.name}
    # the migration's marker, by name: podnet reads and writes no other ConfigMap
    marker = [r for r in role["rules"] if r["resources"] == ["configmaps"]]
    assert {v for r in marker for v in r["verbs"]} == {"create", "get", "update"}
    assert all(r.get("resourceNames") == [MARKER] for r in marker if r["verbs"] != ["create"])


def test_crds_have_status_printer_columns_and_short_names() -> None:
    crds = {d["spec"]["names"]["plural"]: d for _, d in DOCS
            if d["kind"] == "CustomResourceDefinition"}
    assert crds["podnetworks"]["spec"]["names"]["shortNames"] == ["pn"]
    assert crds["nodenetworks"]["spec"]["names"]["shortNames"] == ["nn"]
    for crd in crds.values():
        (version,) = crd["spec"]["versions"]
        assert version["subresources"] == {"status": {}}
        assert version["schema"]["openAPIV3Schema"]["type"] == "object"
    columns = [c["name"] for c in crds["podnetworks"]["spec"]["versions"][0][
        "additionalPrinterColumns"]]
    assert columns[:4] == ["Ready", "Phase", "IP", "Node"]


def test_the_chart_ships_the_network_crds_and_not_multus_one() -> None:
    crds = {d["spec"]["names"]["plural"]: d for _, d in DOCS
            if d["kind"] == "CustomResourceDefinition"}
    assert set(crds) == {"podnetworks", "nodenetworks", "subnets", "ippools", "securitygroups"}
    for plural, short in (("subnets", "pnsubnet"), ("ippools", "pnippool"),
                          ("securitygroups", "pnsg")):
        spec = crds[plural]["spec"]
        assert spec["scope"] == "Cluster" and spec["group"] == "podnet.io"
        assert spec["names"]["shortNames"] == [short]
        assert spec["names"]["categories"] == ["podnet"]
    columns = [c["name"] for c in crds["subnets"]["spec"]["versions"][0][
        "additionalPrinterColumns"] if not c.get("priority")]
    assert columns == ["Provider", "CIDR", "Available", "InUse", "Phase", "Age"]


def test_the_sample_configs_parse_and_name_only_built_in_providers() -> None:
    for path in sorted((DEPLOY / "config").glob("*.yaml")):
        config = load_config(path)
        named = {config.default_provider, *config.providers, *config.networks.values(),
                 *(rule.provider for rule in config.node_providers)}
        assert named <= set(BUILTIN_PLUGINS), path.name


def test_the_node_agent_reads_pods_patches_podnetworks_and_writes_only_its_report() -> None:
    (role,) = [d for _, d in DOCS if d["kind"] == "ClusterRole"
               and d["metadata"]["name"] == "podnet-node"]
    granted = {(g, r, v) for rule in role["rules"] for g in rule["apiGroups"]
               for r in rule["resources"] for v in rule["verbs"]}
    # patch: the agent writes its host onto a record before it plugs it (the release
    # handshake's durable half); no create, update, delete, and no status. NetworkPolicy:
    # it resolves policies as the controller does, reading policies, pods and namespaces
    # cluster-wide, read only
    read = ("get", "list", "watch")
    assert granted == {("podnet.io", "podnetworks", "patch"),
                       *(("podnet.io", "podnetworks", v) for v in read),
                       *(("", "pods", v) for v in read),
                       *(("", "namespaces", v) for v in read),
                       *(("networking.k8s.io", "networkpolicies", v) for v in read)}
    (binding,) = [d for _, d in DOCS if d["kind"] == "ClusterRoleBinding"
                  and d["roleRef"]["name"] == "podnet-node"]
    # its one write: its node's Lease, in podnet's namespace alone
    (report,) = [d for _, d in DOCS if d["kind"] == "Role"
                 and d["metadata"]["name"] == "podnet-node-report"]
    assert report["metadata"]["namespace"] == "kube-system"
    assert {(g, r, v) for rule in report["rules"] for g in rule["apiGroups"]
            for r in rule["resources"] for v in rule["verbs"]} == {
        ("coordination.k8s.io", "leases", v) for v in ("get", "create", "update")}
    (report_binding,) = [d for _, d in DOCS if d["kind"] == "RoleBinding"
                         and d["roleRef"]["name"] == "podnet-node-report"]
    assert report_binding["subjects"][0]["name"] == "podnet-node"
    (ds,) = [d for _, d in DOCS if d["kind"] == "DaemonSet"]
    spec = ds["spec"]["template"]["spec"]
    assert binding["subjects"][0]["name"] == spec["serviceAccountName"] == "podnet-node"
    assert spec["hostNetwork"] is True
    (init,) = spec["initContainers"]
    assert init["args"][0] == "install-cni"
    (agent,) = spec["containers"]
    assert agent["args"][0] == "node"
    socket = agent["args"][agent["args"].index("--socket") + 1]
    assert socket == init["args"][init["args"].index("--socket") + 1]
    assert socket.startswith("/run/podnet/")
    # the agent reads the controller's config (its providers' sections) from the ConfigMap
    config = agent["args"][agent["args"].index("--config") + 1]
    (mount,) = [m for m in agent["volumeMounts"] if config.startswith(m["mountPath"] + "/")]
    (volume,) = [v for v in spec["volumes"] if v["name"] == mount["name"]]
    assert volume["configMap"]["name"] == "podnet-config" and mount["readOnly"] is True
