"""The chart's values.schema.json, through Helm's own engine (what `helm install`,
`helm template` and `helm lint --strict` run): a key it does not know, at any level, and
a value of the wrong type are refused with the key's path; what it accepts podnet's own
config parser accepts; and the settings an operator needs render where they belong."""

from __future__ import annotations

import copy
import importlib.util
import re
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import helm_python
import pytest
import yaml

from podnet.core.config import parse_config
from podnet.core.errors import ConfigError
from podnet.hookspecs.policy import PoolPolicy

ROOT = Path(__file__).resolve().parent.parent
CHART = ROOT / "deploy" / "chart"


def _load(name: str) -> Any:
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, ROOT / "scripts" / f"{name}.py")
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]


render_deploy = _load("render_deploy")

#: the operator's own maps: any key goes (labels, annotations, selectors, resource names,
#: provider sections and the providers' names)
FREE_MAPS = {"nodeSelector", "podAnnotations", "podLabels", "labels", "annotations",
             "requests", "limits", "providers", "policies", "networks", "global"}
#: the monitoring block helper B's values.yaml ends with (issue 30's plan)
MONITORING = {"prometheusRule": {"enabled": False, "labels": {}},
              "dashboard": {"enabled": False, "labels": {"grafana_dashboard": "1"}}}


def refusal(values: dict[str, Any]) -> str:
    """The message `helm template` stops with; fails when it renders."""
    chart = helm_python.Chart.load(str(CHART))
    with pytest.raises(helm_python.HelmError) as caught:
        chart.render(values, name="podnet", namespace="kube-system", is_install=True)
    return str(caught.value)


def lint_errors(values: dict[str, Any]) -> list[str]:
    report = helm_python.lint(str(CHART), values, strict=True, kube_version="v1.30.0")
    return [m["error"] for m in report["messages"] if m["severity"] >= 2] + report["errors"]


def rendered(values: dict[str, Any] | None = None, *, name: str = "podnet",
             namespace: str = "kube-system") -> list[dict[str, Any]]:
    chart = helm_python.Chart.load(str(CHART))
    out = chart.render(values, name=name, namespace=namespace, is_install=True)
    return [d for path, text in out.items() if path.endswith(".yaml")
            for d in yaml.safe_load_all(text) if d]


def values_file(provider: str) -> dict[str, Any]:
    return dict(yaml.safe_load((CHART / f"values-{provider}.yaml").read_text()))


# --- the issue's three mistakes ---------------------------------------------------------

@pytest.mark.parametrize("values, says", [
    ({"controler": {"replicas": 3}}, "additional properties 'controler' not allowed"),
    ({"controller": {"replicas": "two"}}, "at '/controller/replicas': got string, want integer"),
    ({"config": {"workerz": 4}}, "at '/config': additional properties 'workerz' not allowed"),
], ids=["typo-controler", "replicas-two", "config-workerz"])
def test_the_issues_three_mistakes_are_refused_naming_the_key(values: dict[str, Any],
                                                              says: str) -> None:
    assert says in refusal(values)
    assert [e for e in lint_errors(values) if says in e], lint_errors(values)


def test_config_workerz_is_what_the_controller_would_crash_on() -> None:
    """The chart refuses it because podnet would: the ConfigMap is podnet's config."""
    with pytest.raises(ConfigError, match="workerz"):
        parse_config({"defaultProvider": "reference", "workerz": 4})


# --- every level, every type ------------------------------------------------------------

def _nodes(value: Any, path: tuple[str, ...] = ()) -> Iterator[tuple[tuple[str, ...], Any]]:
    yield path, value
    if isinstance(value, dict) and (not path or path[-1] not in FREE_MAPS):
        for key, item in value.items():
            yield from _nodes(item, (*path, key))


def _wrong_type(value: Any) -> Any:
    if isinstance(value, bool):
        return "yes"
    if isinstance(value, int | float):
        return "two"
    if isinstance(value, str):
        return ["a", "list"]
    if isinstance(value, list):
        return "not-a-list"
    return ["not", "a", "map"]


def _with(values: dict[str, Any], path: tuple[str, ...], new: Any) -> dict[str, Any]:
    out = copy.deepcopy(values)
    where = out
    for key in path[:-1]:
        where = where[key]
    where[path[-1]] = new
    return out


def _every_value() -> dict[str, Any]:
    """The defaults with every provider's values and every optional setting filled in,
    so that each key of the chart is there to be got wrong."""
    chart = helm_python.Chart.load(str(CHART))
    values = chart.merge_values({
        "imagePullSecrets": [{"name": "regcred"}],
        "monitoring": MONITORING,
        "controller": {"extraArgs": ["-v"], "extraEnv": [{"name": "A", "value": "b"}],
                       "podAnnotations": {"a": "b"}},
        "node": {"extraHostPaths": [{"name": "ovs", "path": "/var/run/openvswitch"}]},
        "config": {**values_file("ecs")["config"],
                   "nodeProviders": [{"provider": "ecs", "nodeSelector": "a=b"}],
                   "networks": {"overlay": {"provider": "ovn"}},
                   "workerStallSeconds": 60,
                   "policies": {"ecs": {"minIdle": 1, "cloudRate": {"rate": 5, "burst": 2},
                                        "cloudRates": {"X": {"rate": 1, "burst": 1}},
                                        "growBackoff": {"base": 1}}}},
    })
    values.pop("global", None)  # Helm's own, for a parent chart's globals
    return values


EVERY = _every_value()
LEVELS = [path for path, value in _nodes(EVERY) if path]
OBJECTS = [path for path, value in _nodes(EVERY)
           if isinstance(value, dict) and (not path or path[-1] not in FREE_MAPS)]


def test_the_filled_in_values_render() -> None:
    assert rendered(EVERY)


def _pointer(path: tuple[str, ...]) -> str:
    return "/" + "/".join(path)


@pytest.mark.parametrize("path", LEVELS, ids=[".".join(p) for p in LEVELS])
def test_a_value_of_the_wrong_type_is_refused_naming_it(path: tuple[str, ...]) -> None:
    value = EVERY
    for key in path:
        value = value[key]
    says = refusal(_with(EVERY, path, _wrong_type(value)))
    assert f"at '{_pointer(path)}'" in says, says


@pytest.mark.parametrize("path", OBJECTS, ids=[".".join(p) or "(top)" for p in OBJECTS])
def test_an_unknown_key_is_refused_at_every_level(path: tuple[str, ...]) -> None:
    where = EVERY
    for key in path:
        where = where[key]
    values = (_with(EVERY, path, {**where, "tpyo": 1}) if path else {**EVERY, "tpyo": 1})
    says = refusal(values)
    assert re.search(rf"at '{re.escape(_pointer(path) if path else '')}'?: additional "
                     r"properties 'tpyo' not allowed", says), says


@pytest.mark.parametrize("values, where", [
    ({"controller": {"dnsPolicy": "ClusterFirst"}}, "/controller/dnsPolicy"),
    ({"controller": {"port": 70000}}, "/controller/port"),
    ({"controller": {"resources": {"requests": {"cpu": "lots"}}}},
     "/controller/resources/requests/cpu"),
    ({"controller": {"resources": {"request": {"cpu": "1"}}}}, "/controller/resources"),
    ({"controller": {"tolerations": [{"operator": "Maybe"}]}},
     "/controller/tolerations/0/operator"),
    ({"controller": {"extraEnv": [{"value": "no name"}]}}, "/controller/extraEnv/0"),
    ({"controller": {"extraArgs": ["--workers", 8]}}, "/controller/extraArgs/1"),
    ({"imagePullSecrets": ["regcred"]}, "/imagePullSecrets/0"),
    ({"image": {"tag": 0.8}}, "/image/tag"),
    ({"node": {"podLabels": {"tier": 1}}}, "/node/podLabels/tier"),
    ({"node": {"socketDir": "run/podnet"}}, "/node/socketDir"),
    ({"networkPolicy": {"enforce": "calico"}}, "/networkPolicy/enforce"),
    ({"fullnameOverride": "Not_A_Name"}, "/fullnameOverride"),
    ({"credentials": {"secretName": "Podnet Credentials"}}, "/credentials/secretName"),
    ({"metrics": {"serviceMonitor": {"interval": "30"}}}, "/metrics/serviceMonitor/interval"),
    ({"monitoring": {"dashboard": {"enabeld": True}}}, "/monitoring/dashboard"),
    ({"monitoring": {"prometheusRule": {"labels": {"release": None, "x": 1}}}},
     "/monitoring/prometheusRule/labels/x"),
], ids=lambda v: v if isinstance(v, str) else None)
def test_a_value_kubernetes_or_podnet_would_refuse_is_refused_here(values: dict[str, Any],
                                                                   where: str) -> None:
    assert f"at '{where}'" in refusal(values)


def test_the_monitoring_block_is_accepted_as_the_plan_shapes_it() -> None:
    assert rendered({"monitoring": MONITORING})
    on = {"prometheusRule": {"enabled": True, "labels": {"release": "prom"}},
          "dashboard": {"enabled": True, "labels": {"grafana_dashboard": "1"}}}
    chart = helm_python.Chart.load(str(CHART))
    chart.validate_schema(chart.merge_values({"monitoring": on}))


def test_the_provider_values_files_pass_the_schema_as_they_are() -> None:
    for provider in ("ecs", "bbc", "ovn"):
        assert lint_errors(values_file(provider)) == [], provider


# --- the config block follows podnet's own parser --------------------------------------

def _schema() -> dict[str, Any]:
    import json

    schema: dict[str, Any] = json.loads((CHART / "values.schema.json").read_text())
    return schema


def test_the_config_keys_are_podnets_less_those_the_chart_sets() -> None:
    from podnet.core.config import _TOP_KEYS

    chart_sets = {"leaderElection", "networkPolicy", "listen"}
    assert set(_schema()["properties"]["config"]["properties"]) == _TOP_KEYS - chart_sets
    for key in sorted(chart_sets):
        assert f"at '/config': additional properties '{key}' not allowed" in refusal(
            {"config": {key: {}}}), key


def test_every_pool_policy_field_is_in_the_schema_by_both_its_names() -> None:
    import attrs

    keys = set(_schema()["definitions"]["poolPolicy"]["properties"])
    for field in attrs.fields(PoolPolicy):
        camel = re.sub(r"_(.)", lambda m: m.group(1).upper(), field.name)
        assert {field.name, camel} <= keys, field.name


def _config(config: dict[str, Any]) -> dict[str, Any]:
    return {"config": {"defaultProvider": "reference", **config}}


def _accepted_by_podnet(config: dict[str, Any]) -> bool:
    try:
        parse_config(_config(config)["config"])
    except ConfigError:
        return False
    return True


def _accepted_by_the_chart(config: dict[str, Any]) -> bool:
    chart = helm_python.Chart.load(str(CHART))
    try:
        chart.validate_schema(chart.merge_values(_config(config)))
    except helm_python.HelmValuesError:
        return False
    return True


#: (config, accepted): each judged the same way by podnet's parser and by the schema
CONFIGS = [
    ({"workers": 1}, True), ({"workers": 256}, True), ({"workers": 0}, False),
    ({"workers": 257}, False), ({"workers": "4"}, False), ({"workers": True}, False),
    ({"workerStallSeconds": 0.5}, True), ({"workerStallSeconds": 0}, False),
    ({"workerStallSeconds": "2m"}, False),
    ({"defaultProvider": 3}, False),
    ({"nodeProviders": [{"provider": "bbc", "nodeSelector": "a in (b)"}]}, True),
    ({"nodeProviders": [{"provider": "bbc"}]}, False),
    ({"nodeProviders": [{"provider": "bbc", "nodeSelector": "  "}]}, False),
    ({"nodeProviders": [{"provider": "bbc", "nodeSelector": "a=b", "weight": 1}]}, False),
    ({"nodeProviders": {"provider": "bbc"}}, False),
    ({"networks": {"overlay": {"provider": "ovn"}}}, True),
    ({"networks": {"default": {"provider": "ovn"}}}, False),
    ({"networks": {"Overlay": {"provider": "ovn"}}}, False),
    ({"networks": {"overlay": {"provider": "ovn", "mtu": 1400}}}, False),
    ({"networks": {"overlay": "ovn"}}, False),
    ({"providers": {"ecs": {"region": "cn-hangzhou"}}}, True),
    ({"providers": {"ecs": None}}, True),
    ({"providers": {"ecs": ["region"]}}, False),
    ({"providers": ["ecs"]}, False),
    ({"policies": {"ecs": {"minIdle": 2, "max_idle": 8}}}, True),
    ({"policies": {"ecs": {"minIdel": 2}}}, False),
    ({"policies": {"ecs": {"minIdle": -1}}}, False),
    ({"policies": {"ecs": {"batchSize": 0}}}, False),
    ({"policies": {"ecs": {"reuseCooldown": 0}}}, True),
    ({"policies": {"ecs": {"refillPeriod": 0}}}, False),
    ({"policies": {"ecs": {"halveBatchOnQuota": 1}}}, False),
    ({"policies": {"ecs": {"minIdle": True}}}, False),
    ({"policies": {"ecs": {"gcPeriod": "1m"}}}, False),
    ({"policies": {"ecs": {"cloudRate": {"rate": 5, "burst": 2}}}}, True),
    ({"policies": {"ecs": {"cloudRate": {"rate": 0}}}}, False),
    ({"policies": {"ecs": {"cloudRate": {"rate": 5, "bust": 2}}}}, False),
    ({"policies": {"ecs": {"cloudRates": {"DescribeNetworkInterfaces": {"burst": 2}}}}},
     True),
    ({"policies": {"ecs": {"cloudRates": {"X": 5}}}}, False),
    ({"policies": {"ecs": {"growBackoff": {"base": 1, "cap": 30}}}}, True),
    ({"policies": {"ecs": {"growBackoff": {"cap": -1}}}}, False),
    ({"policies": {"ecs": "fast"}}, False),
]


@pytest.mark.parametrize("config, accepted", CONFIGS, ids=[str(c) for c, _ in CONFIGS])
def test_the_schema_judges_the_config_as_podnet_does(config: dict[str, Any],
                                                      accepted: bool) -> None:
    assert _accepted_by_podnet(config) is accepted, "podnet's parser"
    assert _accepted_by_the_chart(config) is accepted, "the chart's schema"


def test_the_schema_is_what_its_builder_makes() -> None:
    assert (CHART / "values.schema.json").read_text() == render_deploy.values_schema_text(), (
        "run: .venv/bin/python scripts/render_deploy.py")


# --- what an operator sets renders where it belongs ------------------------------------

def _one(docs: list[dict[str, Any]], kind: str, name: str | None = None) -> dict[str, Any]:
    (doc,) = [d for d in docs if d["kind"] == kind
              and (name is None or d["metadata"]["name"] == name)]
    return doc


def test_per_component_settings_reach_their_pods() -> None:
    from podnet.app.cli import build_parser

    env = [{"name": "OTEL_EXPORTER_OTLP_ENDPOINT", "value": "http://10.96.0.20:4317"}]
    docs = rendered({
        "imagePullSecrets": [{"name": "regcred"}],
        "controller": {"extraArgs": ["-v"], "extraEnv": env,
                       "podAnnotations": {"example.com/team": "net"},
                       "podLabels": {"tier": "network", "app.kubernetes.io/name": "mine"},
                       "resources": {"requests": {"cpu": "1"}},
                       "serviceAccount": {"annotations": {
                           "pod-identity.alibabacloud.com/role-name": "podnet"}}},
        "node": {"extraArgs": ["-v", "--add-timeout", "20"], "extraEnv": env,
                 "podAnnotations": {"example.com/team": "node"}, "podLabels": {"t": "n"},
                 "resources": {"limits": {"memory": "1Gi"}}},
        "cni": {"resources": {"limits": {"memory": "200Mi"}}},
    })
    controller = _one(docs, "Deployment")["spec"]["template"]
    agent = _one(docs, "DaemonSet")["spec"]["template"]
    for pod in (controller, agent):
        assert pod["spec"]["imagePullSecrets"] == [{"name": "regcred"}]
        (container,) = pod["spec"]["containers"]
        assert env[0] in container["env"]
        # podnet's own flags, then the operator's, all podnet's parser takes
        args = build_parser().parse_args(container["args"])
        assert args.verbose + args.sub_verbose == 1  # how cli.main counts -v
        assert pod["metadata"]["annotations"]["podnet.io/config-sha256"]
    assert controller["metadata"]["annotations"]["example.com/team"] == "net"
    assert agent["metadata"]["annotations"]["example.com/team"] == "node"
    # an operator's label is added; the selector's own is kept
    assert controller["metadata"]["labels"]["tier"] == "network"
    assert controller["metadata"]["labels"]["app.kubernetes.io/name"] == "podnet"
    assert agent["metadata"]["labels"]["t"] == "n"
    assert build_parser().parse_args(agent["spec"]["containers"][0]["args"]).add_timeout == 20
    # each over the chart's defaults (Helm merges maps)
    assert controller["spec"]["containers"][0]["resources"]["requests"] == {
        "cpu": "1", "memory": "256Mi"}
    assert agent["spec"]["containers"][0]["resources"]["limits"] == {"memory": "1Gi"}
    assert agent["spec"]["initContainers"][0]["resources"]["limits"] == {"memory": "200Mi"}
    account = _one(docs, "ServiceAccount", "podnet")
    assert account["metadata"]["annotations"] == {
        "pod-identity.alibabacloud.com/role-name": "podnet"}
    assert "annotations" not in _one(docs, "ServiceAccount", "podnet-node")["metadata"]


def test_the_controller_and_the_agent_use_the_nodes_resolver() -> None:
    """Both ask the cloud's endpoints by host name; the cluster's DNS runs in pods that
    wait for podnet to give them an address: ClusterFirstWithHostNet would be a bootstrap
    loop on a fresh cluster."""
    docs = rendered()
    for kind in ("Deployment", "DaemonSet"):
        spec = _one(docs, kind)["spec"]["template"]["spec"]
        assert spec["hostNetwork"] is True
        assert spec["dnsPolicy"] == "Default", kind
    docs = rendered({"controller": {"dnsPolicy": "ClusterFirstWithHostNet"}})
    assert _one(docs, "Deployment")["spec"]["template"]["spec"]["dnsPolicy"] == (
        "ClusterFirstWithHostNet")


STANDARD = ("app.kubernetes.io/name", "app.kubernetes.io/instance",
            "app.kubernetes.io/version", "app.kubernetes.io/component",
            "app.kubernetes.io/part-of", "app.kubernetes.io/managed-by", "helm.sh/chart")


def _everything_on() -> dict[str, Any]:
    return {"metrics": {"serviceMonitor": {"enabled": True}},
            "monitoring": {"prometheusRule": {"enabled": True, "labels": {}},
                           "dashboard": {"enabled": True,
                                         "labels": {"grafana_dashboard": "1"}}}}


@pytest.mark.parametrize("provider", ["reference", "ecs", "bbc", "ovn"])
def test_every_object_has_the_standard_labels(provider: str) -> None:
    values = {} if provider == "reference" else values_file(provider)
    for doc in rendered({**values, **_everything_on()}, name="net"):
        labels = doc["metadata"].get("labels", {})
        missing = [k for k in STANDARD if k not in labels]
        assert missing == [], (doc["kind"], doc["metadata"]["name"], missing)
        assert labels["app.kubernetes.io/instance"] == "net"
        assert labels["app.kubernetes.io/managed-by"] == "Helm"


def test_the_selectors_are_0_8_0s_so_an_upgrade_keeps_working() -> None:
    """A Deployment's and a DaemonSet's spec.selector cannot change: `helm upgrade` from
    0.8.0 fails if the chart's differ."""
    docs = rendered()
    assert _one(docs, "Deployment")["spec"]["selector"] == {
        "matchLabels": {"app.kubernetes.io/name": "podnet"}}
    assert _one(docs, "DaemonSet")["spec"]["selector"] == {
        "matchLabels": {"app.kubernetes.io/name": "podnet-node"}}


@pytest.mark.parametrize("release, values, base", [
    ("podnet", {}, "podnet"),
    ("net", {}, "net-podnet"),
    ("net", {"fullnameOverride": "cni"}, "cni"),
    ("net", {"nameOverride": "pn"}, "net-pn"),
    ("x" * 53, {}, None),
], ids=["podnet", "net", "fullnameOverride", "nameOverride", "longest-release"])
def test_names_follow_the_fullname_and_every_reference_follows_them(
        release: str, values: dict[str, Any], base: str | None) -> None:
    docs = rendered(values, name=release)
    names = {(d["kind"], d["metadata"]["name"]) for d in docs}
    if base is not None:
        assert {("Deployment", base), ("DaemonSet", f"{base}-node"),
                ("ConfigMap", f"{base}-config"), ("Service", f"{base}-metrics"),
                ("Role", f"{base}-leader-election"), ("Role", f"{base}-node-report")} <= names
    for kind, name in names:
        limit = 63 if kind == "Service" else 253
        assert len(name) <= limit and re.fullmatch(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?", name), (
            kind, name)
    # every name an object refers to is an object the chart makes
    for doc in docs:
        if doc["kind"] in ("RoleBinding", "ClusterRoleBinding"):
            role = doc["roleRef"]
            assert (role["kind"], role["name"]) in names
            for subject in doc["subjects"]:
                assert ("ServiceAccount", subject["name"]) in names
        if doc["kind"] in ("Deployment", "DaemonSet"):
            spec = doc["spec"]["template"]["spec"]
            assert ("ServiceAccount", spec["serviceAccountName"]) in names
            for volume in spec["volumes"]:
                if "configMap" in volume:
                    assert ("ConfigMap", volume["configMap"]["name"]) in names
            labels = doc["spec"]["template"]["metadata"]["labels"]
            assert doc["spec"]["selector"]["matchLabels"].items() <= labels.items()


def test_the_leader_elections_order_is_refused_at_install() -> None:
    says = refusal({"leaderElection": {"renewDeadlineSeconds": 20}})
    assert "leaderElection: leaseDurationSeconds (15) > renewDeadlineSeconds (20)" in says
    with pytest.raises(ConfigError, match="leaseDuration > renewDeadline"):
        parse_config({"leaderElection": {"leaseDurationSeconds": 15,
                                         "renewDeadlineSeconds": 20}})


def _notes(values: dict[str, Any] | None = None, namespace: str = "kube-system") -> str:
    chart = helm_python.Chart.load(str(CHART))
    out = chart.render(values, name="podnet", namespace=namespace, is_install=True)
    (notes,) = [text for path, text in out.items() if path.endswith("NOTES.txt")]
    return notes


def test_the_notes_say_what_runs_and_what_to_do_next() -> None:
    notes = _notes()
    assert "kubectl -n kube-system rollout status deploy/podnet ds/podnet-node" in notes
    assert "kubectl get subnets" in notes
    assert "podnet status" in notes and "--agent-namespace" not in notes
    assert "secret" not in notes.lower(), "the reference provider needs no Secret"
    ecs = _notes(values_file("ecs"), namespace="podnet-system")
    assert "kubectl -n podnet-system get secret podnet-credentials" in ecs
    assert "provider ecs" in ecs
    assert "podnet status --agent-namespace podnet-system" in ecs
