"""The Helm chart in deploy/chart/, rendered by Helm's own engine: every manifest of every
provider's values validates against Kubernetes' schemas at the oldest version the chart
claims and at the newest kubernetes-validate knows, the pod specs are a network add-on's,
and deploy/'s plain manifests are the chart's defaults."""

from __future__ import annotations

import importlib.util
import json
import re
import sys
from pathlib import Path
from typing import Any

import helm_python
import kubernetes_validate
import pytest
import yaml

from podnet.core.config import parse_config

ROOT = Path(__file__).resolve().parent.parent
CHART = ROOT / "deploy" / "chart"

def oldest_claimed() -> str:
    """The Kubernetes version Chart.yaml's kubeVersion starts at (">=1.30.0-0": 1.30)."""
    claim = yaml.safe_load((CHART / "Chart.yaml").read_text())["kubeVersion"]
    match = re.fullmatch(r">=\s*v?(\d+)\.(\d+)(\.\d+)?(-0)?", claim)
    assert match, f"Chart.yaml's kubeVersion {claim!r}: say the oldest version with >="
    return f"{match[1]}.{match[2]}"


#: the oldest the chart claims and the newest kubernetes-validate has schemas of
K8S_VERSIONS = (oldest_claimed(), kubernetes_validate.latest_version())
#: kinds of CRDs the cluster may not have (prometheus-operator's): no schema to validate
#: them against here, their own tests check them
OPTIONAL_KINDS = {"ServiceMonitor", "PrometheusRule"}

_spec = importlib.util.spec_from_file_location("render_deploy", ROOT / "scripts" /
                                               "render_deploy.py")
assert _spec is not None and _spec.loader is not None
render_deploy = importlib.util.module_from_spec(_spec)
sys.modules["render_deploy"] = render_deploy
_spec.loader.exec_module(render_deploy)

PROVIDER_VALUES = {"reference": None, **{
    p: CHART / f"values-{p}.yaml" for p in ("ecs", "bbc", "ovn")}}


def values_of(provider: str) -> dict[str, Any] | None:
    path = PROVIDER_VALUES[provider]
    return None if path is None else yaml.safe_load(path.read_text())


def docs(values: dict[str, Any] | None = None, namespace: str = "kube-system"
         ) -> list[dict[str, Any]]:
    out = []
    for text in render_deploy.render(values, namespace=namespace).values():
        out.extend(d for d in yaml.safe_load_all(text) if d)
    return out


def one(rendered: list[dict[str, Any]], kind: str, name: str | None = None) -> dict[str, Any]:
    (doc,) = [d for d in rendered if d["kind"] == kind
              and (name is None or d["metadata"]["name"] == name)]
    return doc


def test_the_versions_checked_are_two() -> None:
    oldest, newest = K8S_VERSIONS
    assert tuple(map(int, oldest.split("."))) < tuple(map(int, newest.split(".")))


def with_everything_on(values: dict[str, Any] | None) -> dict[str, Any]:
    """A provider's values with every optional object and setting of the chart on."""
    return {**(values or {}),
            "imagePullSecrets": [{"name": "regcred"}],
            "metrics": {"serviceMonitor": {"enabled": True}},
            "monitoring": {"prometheusRule": {"enabled": True, "labels": {}},
                           "dashboard": {"enabled": True,
                                         "labels": {"grafana_dashboard": "1"}}},
            "cni": {"uninstall": True},
            "controller": {"extraArgs": ["-v"], "podAnnotations": {"a": "b"},
                           "extraEnv": [{"name": "OTEL_SERVICE_NAME", "value": "podnet"}],
                           "serviceAccount": {"annotations": {"a": "b"}}},
            "node": {**(values or {}).get("node", {}), "extraArgs": ["-v"],
                     "podLabels": {"a": "b"}}}


@pytest.mark.parametrize("version", K8S_VERSIONS)
def test_helm_lints_the_chart_clean(version: str) -> None:
    for provider in PROVIDER_VALUES:
        for values in (values_of(provider), with_everything_on(values_of(provider))):
            report = helm_python.lint(str(CHART), values, strict=True,
                                      kube_version=f"v{version}.0")
            problems = [m for m in report["messages"] if m["severity"] >= 2]
            assert report["errors"] == [] and problems == [], (provider, problems)


@pytest.mark.parametrize("version", K8S_VERSIONS)
@pytest.mark.parametrize("provider", sorted(PROVIDER_VALUES))
def test_every_rendered_manifest_validates_strictly(provider: str, version: str) -> None:
    for values in (values_of(provider), with_everything_on(values_of(provider))):
        rendered = docs(values, namespace="podnet-system")
        for doc in rendered:
            if doc["kind"] not in OPTIONAL_KINDS:
                kubernetes_validate.validate(doc, version, strict=True)
            if doc["kind"] not in ("ClusterRole", "ClusterRoleBinding"):
                assert doc["metadata"]["namespace"] == "podnet-system", doc["metadata"]


@pytest.mark.parametrize("version", K8S_VERSIONS)
def test_the_crds_validate_at_every_version_the_chart_claims(version: str) -> None:
    """The chart's crds/ (Helm installs them before the templates): a field newer than
    Chart.yaml's kubeVersion (PodNetwork's selectableFields is 1.30's) fails here."""
    for crd in sorted((CHART / "crds").glob("*.yaml")):
        kubernetes_validate.validate(yaml.safe_load(crd.read_text()), version, strict=True)


@pytest.mark.parametrize("provider", sorted(PROVIDER_VALUES))
def test_each_providers_config_parses_and_holds_no_credentials(provider: str) -> None:
    rendered = docs(values_of(provider))
    text = one(rendered, "ConfigMap")["data"]["config.yaml"]
    config = parse_config(yaml.safe_load(text))
    assert config.default_provider == provider
    assert config.leader_election.enabled and config.leader_election.namespace == "kube-system"
    for word in ("access_key", "accesskey", "secretaccesskey", "password", "token"):
        assert word not in text.lower(), word
    assert not [d for d in rendered if d["kind"] == "Secret"], "the chart makes no Secret"
    (controller,) = one(rendered, "Deployment")["spec"]["template"]["spec"]["containers"]
    (source,) = controller["envFrom"]
    # a cloud provider waits for its keys; the reference and OVN need none
    assert source == {"secretRef": {"name": "podnet-credentials",
                                    "optional": provider not in ("ecs", "bbc")}}
    ds = one(rendered, "DaemonSet")["spec"]["template"]["spec"]
    assert "envFrom" not in ds["initContainers"][0]
    # the ECS agent asks the cloud for ENIs' MACs; no other agent gets the keys
    (agent,) = ds["containers"]
    assert ("envFrom" in agent) == (provider == "ecs")
    if provider == "ecs":
        assert agent["envFrom"] == controller["envFrom"]


def test_the_controller_is_two_replicas_a_pdb_and_a_scrapable_metrics_service() -> None:
    rendered = docs()
    dep = one(rendered, "Deployment")
    pod = dep["spec"]["template"]
    spec = pod["spec"]
    assert dep["spec"]["replicas"] == 2
    # it must run where the network is not there yet: every taint tolerated
    assert spec["tolerations"] == [{"operator": "Exists"}]
    assert spec["priorityClassName"] == "system-cluster-critical"
    assert spec["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    assert spec["securityContext"]["runAsNonRoot"] is True
    pdb = one(rendered, "PodDisruptionBudget")
    assert pdb["spec"]["maxUnavailable"] == 1
    assert pdb["spec"]["selector"]["matchLabels"].items() <= pod["metadata"]["labels"].items()
    (container,) = spec["containers"]
    (port,) = container["ports"]
    listen = container["args"][container["args"].index("--listen") + 1]
    host, _, listen_port = listen.rpartition(":")
    # the Service reaches the pod IP, where it listens (not loopback)
    assert host == "$(POD_IP)" and int(listen_port) == port["containerPort"]
    service = one(rendered, "Service")
    assert service["spec"]["selector"].items() <= pod["metadata"]["labels"].items()
    (service_port,) = service["spec"]["ports"]
    assert service_port["targetPort"] == port["name"] == "metrics"
    assert container["livenessProbe"]["httpGet"]["port"] == "metrics"
    assert "host" not in container["readinessProbe"]["httpGet"]
    assert not [d for d in rendered if d["kind"] == "ServiceMonitor"], "optional, off"


def test_loopback_only_moves_the_probes_there_and_the_service_can_go() -> None:
    rendered = docs({"controller": {"listenHost": "127.0.0.1"},
                     "metrics": {"service": {"enabled": False}}})
    (container,) = one(rendered, "Deployment")["spec"]["template"]["spec"]["containers"]
    assert container["livenessProbe"]["httpGet"]["host"] == "127.0.0.1"
    assert "127.0.0.1:9808" in container["args"]
    assert not [d for d in rendered if d["kind"] == "Service"]


def test_the_service_monitor_scrapes_the_metrics_port() -> None:
    rendered = docs({"metrics": {"serviceMonitor": {"enabled": True,
                                                    "labels": {"release": "prom"}}}})
    monitor = one(rendered, "ServiceMonitor")
    service = one(rendered, "Service")
    assert monitor["apiVersion"] == "monitoring.coreos.com/v1"
    assert monitor["metadata"]["labels"]["release"] == "prom"
    assert monitor["spec"]["selector"]["matchLabels"].items() <= (
        service["metadata"]["labels"].items())
    (endpoint,) = monitor["spec"]["endpoints"]
    assert endpoint["port"] == service["spec"]["ports"][0]["name"]
    assert endpoint["path"] == "/metrics"


def test_the_node_agent_runs_on_every_node_with_the_cni_install_step() -> None:
    rendered = docs(values_of("ovn"))
    spec = one(rendered, "DaemonSet")["spec"]["template"]["spec"]
    assert spec["tolerations"] == [{"operator": "Exists"}]
    assert spec["priorityClassName"] == "system-node-critical"
    assert spec["hostNetwork"] is True
    assert spec["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    (init,) = spec["initContainers"]
    assert init["args"][0] == "install-cni"
    assert init["securityContext"]["capabilities"] == {"drop": ["ALL"]}
    assert init["securityContext"]["allowPrivilegeEscalation"] is False
    (agent,) = spec["containers"]
    socket = agent["args"][agent["args"].index("--socket") + 1]
    assert socket == init["args"][init["args"].index("--socket") + 1] == (
        "/run/podnet/agent.sock")
    mounts = {m["mountPath"]: m["name"] for m in agent["volumeMounts"]}
    volumes = {v["name"]: v for v in spec["volumes"]}
    assert volumes[mounts["/run/podnet"]]["hostPath"]["path"] == "/run/podnet"
    # OVN's values add the local OVS database's socket directory
    assert volumes[mounts["/var/run/openvswitch"]]["hostPath"]["path"] == (
        "/var/run/openvswitch")
    # the Role the agent writes its report with, bound to its account
    report = one(rendered, "RoleBinding", "podnet-node-report")
    assert report["subjects"][0]["name"] == spec["serviceAccountName"] == "podnet-node"


def test_the_node_agent_is_probed_on_its_loopback_health_port() -> None:
    """The agent is on the host network: it listens on the node's loopback only, and the
    kubelet (on the host too) probes it there; the port is one value."""
    for values, port in ((None, 9254), ({"node": {"health": {"port": 9300}}}, 9300)):
        (agent,) = one(docs(values), "DaemonSet")["spec"]["template"]["spec"]["containers"]
        args = agent["args"]
        assert args[args.index("--health-listen") + 1] == f"127.0.0.1:{port}"
        assert float(args[args.index("--stuck-after") + 1]) == 300
        for probe, path in (("startupProbe", "/healthz"), ("livenessProbe", "/healthz"),
                            ("readinessProbe", "/readyz")):
            assert agent[probe]["httpGet"] == {"host": "127.0.0.1", "path": path,
                                               "port": port}, probe
        # liveness counts only once the start is over, after several failures in a row
        assert agent["startupProbe"]["failureThreshold"] * agent["startupProbe"][
            "periodSeconds"] >= 120
        assert agent["livenessProbe"]["failureThreshold"] >= 3
        assert "ports" not in agent, "nothing to reach from outside the node"


def test_the_agents_listener_opens_to_the_nodes_addresses_only_when_asked() -> None:
    """``node.health.host: 0.0.0.0`` lets a Prometheus scrape the agents; the probes still
    ask the loopback, where such a listener answers too; any other host is refused (the
    probes would miss it)."""
    values = {"node": {"health": {"host": "0.0.0.0"}}}
    (agent,) = one(docs(values), "DaemonSet")["spec"]["template"]["spec"]["containers"]
    args = agent["args"]
    assert args[args.index("--health-listen") + 1] == "0.0.0.0:9254"
    assert agent["livenessProbe"]["httpGet"]["host"] == "127.0.0.1"
    with pytest.raises(Exception, match="host"):
        docs({"node": {"health": {"host": "10.0.0.5"}}})


def test_deploy_holds_the_charts_defaults() -> None:
    stale = [str(path.relative_to(ROOT)) for path, text in
             render_deploy.expected_files().items()
             if not path.exists() or path.read_text() != text]
    assert stale == [], "run: .venv/bin/python scripts/render_deploy.py"
    made = {p.name for p in render_deploy.expected_files()}
    shipped = {p.name for p in (ROOT / "deploy").glob("*.yaml")}
    assert shipped <= made, "a file in deploy/ the chart does not make"
    # the CRD copies are the source's, no more (one removed from sim/crds/ goes from both)
    sources = {p.name for p in render_deploy.CRDS.glob("*.yaml")}
    for copies in (CHART / "crds", ROOT / "deploy" / "crds"):
        assert {p.name for p in copies.glob("*.yaml")} == sources, (
            f"{copies.relative_to(ROOT)} holds a CRD that sim/crds/ does not")


def test_the_image_recipe_matches_what_the_chart_runs() -> None:
    lines = [line.split(None, 1) for line in (ROOT / "Dockerfile").read_text().splitlines()
             if line and not line.startswith((" ", "#"))]
    stages = [rest for word, rest in lines if word == "FROM"]
    assert len(stages) >= 2, "multi-stage: the build's tools stay out of the image"
    (user,) = [rest for word, rest in lines if word == "USER"]
    uid, _, gid = user.strip().partition(":")
    rendered = docs()
    controller = one(rendered, "Deployment")["spec"]["template"]["spec"]
    assert (controller["securityContext"]["runAsUser"],
            controller["securityContext"]["runAsGroup"]) == (int(uid), int(gid))
    assert int(uid) != 0
    version = _version()
    (entrypoint,) = [rest for word, rest in lines if word == "ENTRYPOINT"]
    assert json.loads(entrypoint) == ["podnet"]
    # the chart's commands are podnet's subcommands, given as args to that entrypoint
    ds = one(rendered, "DaemonSet")["spec"]["template"]["spec"]
    for container in controller["containers"] + ds["containers"] + ds["initContainers"]:
        assert "command" not in container
        assert container["args"][0] in ("run", "node", "install-cni")
        assert container["image"] == f"podnet:{version}"


def _version() -> str:
    import tomllib

    version: str = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    # the chart follows the package: its appVersion is the image tag it runs
    assert chart["appVersion"] == chart["version"] == version
    return version
