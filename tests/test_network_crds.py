"""The Subnet, IPPool and SecurityGroup CRDs (sim/crds/) served by the emulator: what
``kubectl explain`` and ``kubectl get`` show, and admission of good and bad objects
through the official client and kubectl (OpenAPI schema and CEL rules, 422 naming the
field and saying why)."""

from __future__ import annotations

import json
import shutil
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException

from podnet.sim.apiserver import ApiServer

GROUP, VERSION = "podnet.io", "v1alpha1"
KUBECTL = shutil.which("kubectl")
needs_kubectl = pytest.mark.skipif(KUBECTL is None, reason="kubectl is not on PATH")
PLURALS = {"Subnet": "subnets", "IPPool": "ippools", "SecurityGroup": "securitygroups"}
SUBNET = {"provider": "ovn", "cidrBlock": "10.20.0.0/16"}
POOL = {"subnet": "blue", "addresses": ["10.20.1.0/28"]}


@pytest.fixture(scope="module")
def server() -> Iterator[ApiServer]:
    with ApiServer() as srv:
        yield srv


@pytest.fixture(scope="module")
def objects(server: ApiServer) -> Iterator[client.CustomObjectsApi]:
    with client.ApiClient(client.Configuration(host=server.url)) as api_client:
        yield client.CustomObjectsApi(api_client)


@pytest.fixture(scope="module")
def kubectl(server: ApiServer, tmp_path_factory: pytest.TempPathFactory) -> Any:
    where = tmp_path_factory.mktemp("kubectl")
    kubeconfig = server.write_kubeconfig(where / "kubeconfig")

    def run(*args: str, stdin: str | None = None, check: bool = True
            ) -> subprocess.CompletedProcess[str]:
        cmd = [str(KUBECTL), "--kubeconfig", str(kubeconfig), "--cache-dir",
               str(where / "cache"), "--request-timeout=10s", *args]
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=60, input=stdin)
        if check and done.returncode != 0:
            raise AssertionError(f"{' '.join(args)} failed: {done.stderr}")
        return done

    return run


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def body(kind: str, spec: Any, name: str | None = None) -> dict[str, Any]:
    return {"apiVersion": f"{GROUP}/{VERSION}", "kind": kind,
            "metadata": {"name": name or unique(kind.lower())}, "spec": spec}


def create(objects: client.CustomObjectsApi, obj: dict[str, Any]) -> Any:
    return objects.create_cluster_custom_object(GROUP, VERSION, PLURALS[obj["kind"]], obj)


def refused(objects: client.CustomObjectsApi, obj: dict[str, Any]) -> dict[str, Any]:
    """The Status of the 422 that creating ``obj`` answers."""
    with pytest.raises(ApiException) as caught:
        create(objects, obj)
    assert caught.value.status == 422, caught.value.body
    status: dict[str, Any] = json.loads(caught.value.body)
    assert status["reason"] == "Invalid" and status["code"] == 422
    name = obj["metadata"]["name"]
    assert status["message"].startswith(f'{obj["kind"]}.{GROUP} "{name}" is invalid: ')
    assert status["details"]["name"] == name and status["details"]["kind"] == obj["kind"]
    return status


def assert_names(status: dict[str, Any], field: str, why: str) -> None:
    """A cause names ``field`` and its message says ``why``; the Status message too."""
    causes = status["details"]["causes"]
    hits = [c for c in causes if c["field"] == field and why in c["message"]]
    assert hits, f"no cause on {field} saying {why!r}: {causes}"
    assert f"{field}: " in status["message"] and why in status["message"]


# --- what kubectl shows --------------------------------------------------------------------


@needs_kubectl
def test_kubectl_explain_reads_every_field_description(kubectl: Any) -> None:
    out = kubectl("explain", "subnets.spec").stdout
    assert "The address block and who may use it." in out
    for field in ("provider", "cidrBlock", "gateway", "excludeIPs", "namespaces",
                  "namespaceSelector", "nodeSelector", "default", "parameters"):
        assert field in out
    gateway = kubectl("explain", "subnet.spec.gateway").stdout
    assert "Default: each block's first host address" in " ".join(gateway.split())
    selector = kubectl("explain", "pnsubnet.spec.nodeSelector.matchExpressions.operator")
    assert "In, NotIn, Exists, DoesNotExist" in selector.stdout
    pool = kubectl("explain", "ippools.spec.addresses").stdout
    assert "FIRST..LAST" in pool
    rules = " ".join(kubectl("explain", "pnsg.spec.ingress.port").stdout.split())
    assert "tcp and udp only" in rules
    status = kubectl("explain", "subnets.status.v6AvailableIPs").stdout
    assert "a /64 does not fit an integer" in " ".join(status.split())


@needs_kubectl
def test_kubectl_get_shows_the_printer_columns(kubectl: Any, objects: Any) -> None:
    name = unique("cols")
    create(objects, body("Subnet", {**SUBNET, "cidrBlock": "10.77.0.0/24"}, name))
    objects.patch_cluster_custom_object_status(
        GROUP, VERSION, "subnets", name,
        {"status": {"phase": "Ready", "v4AvailableIPs": 250, "v4UsingIPs": 3}})
    out = kubectl("get", "subnets", name).stdout.splitlines()
    assert out[0].split() == ["NAME", "PROVIDER", "CIDR", "AVAILABLE", "INUSE", "PHASE", "AGE"]
    assert out[1].split()[:6] == [name, "ovn", "10.77.0.0/24", "250", "3", "Ready"]
    wide = kubectl("get", "pnsubnet", name, "-o", "wide").stdout.splitlines()[0].split()
    assert {"V6AVAILABLE", "GATEWAY", "DEFAULT"} <= set(wide)
    pool = unique("pool")
    create(objects, body("IPPool", {**POOL, "subnet": name}, pool))
    out = kubectl("get", "pnippool", pool).stdout.splitlines()
    assert out[0].split() == ["NAME", "SUBNET", "AVAILABLE", "INUSE", "PHASE", "AGE"]
    assert out[1].split()[:2] == [pool, name]
    group = unique("sg")
    create(objects, body("SecurityGroup", {"ingress": [{"protocol": "tcp", "port": "80"}]},
                         group))
    out = kubectl("get", "securitygroups", group).stdout.splitlines()
    assert out[0].split() == ["NAME", "INGRESS", "EGRESS", "PHASE", "AGE"]
    listed = kubectl("get", "podnet", "-o", "name").stdout.split()
    assert {f"subnet.podnet.io/{name}", f"ippool.podnet.io/{pool}",
            f"securitygroup.podnet.io/{group}"} <= set(listed)


@needs_kubectl
def test_kubectl_apply_prints_the_field_and_why(kubectl: Any, tmp_path: Path) -> None:
    name = unique("apply")
    bad = tmp_path / "bad.yaml"
    bad.write_text(
        f"apiVersion: {GROUP}/{VERSION}\nkind: Subnet\nmetadata: {{name: {name}}}\n"
        "spec: {provider: ovn, cidrBlock: 10.20.0.0/16, gateway: 10.30.0.1}\n")
    done = kubectl("apply", "-f", str(bad), check=False)
    assert done.returncode != 0
    assert f'The Subnet "{name}" is invalid: spec.gateway: Invalid value: "object": ' \
           "gateway must be inside cidrBlock: 10.30.0.1 is not inside 10.20.0.0/16" in done.stderr
    assert kubectl("get", "subnets", name, check=False).returncode != 0  # nothing was made
    good = tmp_path / "good.yaml"
    good.write_text(bad.read_text().replace("10.30.0.1", "10.20.0.1"))
    assert f"subnet.podnet.io/{name} created" in kubectl("apply", "-f", str(good)).stdout
    # an update through apply: the transition rule sees the stored object
    changed = good.read_text().replace("provider: ovn", "provider: ecs")
    good.write_text(changed)
    done = kubectl("apply", "-f", str(good), check=False)
    assert "spec.provider: Invalid value: \"string\": provider is immutable" in done.stderr


@needs_kubectl
def test_multus_attachment_definitions_are_served_namespaced(kubectl: Any) -> None:
    nad = ('{"apiVersion": "k8s.cni.cncf.io/v1", "kind": "NetworkAttachmentDefinition", '
           '"metadata": {"name": "blue-net", "namespace": "default"}, "spec": {"config": '
           + json.dumps(json.dumps({"cniVersion": "1.0.0", "name": "blue-net",
                                    "type": "podnet-cni", "subnet": "blue"})) + "}}")
    assert "created" in kubectl("create", "-f", "-", stdin=nad).stdout
    got = json.loads(kubectl("get", "net-attach-def", "blue-net", "-n", "default", "-o",
                             "json").stdout)
    assert json.loads(got["spec"]["config"])["subnet"] == "blue"
    assert kubectl("get", "network-attachment-definitions", "-A").stdout.split()[:3] == [
        "NAMESPACE", "NAME", "AGE"]
    explained = " ".join(kubectl("explain", "net-attach-def.spec.config").stdout.split())
    assert "A JSON CNI configuration" in explained


# --- good objects ------------------------------------------------------------------------------

GOOD = [
    ("Subnet", SUBNET),
    ("Subnet", {"provider": "ovn", "cidrBlock": "10.20.0.0/16,fd00:20::/64",
                "gateway": "10.20.0.1,fd00:20::1",
                "excludeIPs": ["10.20.0.2..10.20.0.9", "10.20.0.100", "10.20.5.0/24",
                               "fd00:20::5..fd00:20::9", "fd00:20::100/120"],
                "namespaces": ["team-a", "b"], "default": True,
                "namespaceSelector": {"matchLabels": {"example.com/team": "a"},
                                      "matchExpressions": [
                                          {"key": "tier", "operator": "In",
                                           "values": ["web"]},
                                          {"key": "x", "operator": "Exists"}]},
                "nodeSelector": {"matchLabels": {"kubernetes.io/os": "linux"}},
                "parameters": {"logicalSwitch": "blue", "vips": ["a"], "n": 3}}),
    ("Subnet", {"provider": "ecs", "cidrBlock": "fd00::/48", "gateway": "fd00::1"}),
    ("Subnet", {"provider": "reference", "cidrBlock": "10.0.0.0/31", "gateway": "10.0.0.0"}),
    ("IPPool", POOL),
    ("IPPool", {"subnet": "blue.example", "namespaces": ["team-a"],
                "addresses": ["10.20.1.0/28", "10.20.2.5..10.20.2.9", "10.20.3.7",
                              "fd00::1..fd00::9", "fd00::/126"]}),
    ("SecurityGroup", {}),
    ("SecurityGroup", {"ingress": [], "egress": []}),
    ("SecurityGroup", {
        "ingress": [{"protocol": "tcp", "port": "80", "from": ["10.0.0.0/8"],
                     "groups": ["other"]},
                    {"protocol": "udp", "port": "8000-8080"},
                    {"protocol": "icmp", "from": ["fd00::/64"]}, {}],
        "egress": [{"protocol": "all", "to": ["0.0.0.0/0", "10.1.2.3/32"]},
                   {"protocol": "tcp", "port": "1-65535", "groups": ["a.b", "c-d"]}]}),
]


@pytest.mark.parametrize(("kind", "spec"), GOOD, ids=[f"{k}-{i}" for i, (k, _) in
                                                      enumerate(GOOD)])
def test_good_objects_are_accepted(objects: Any, kind: str, spec: dict[str, Any]) -> None:
    made = create(objects, body(kind, spec))
    assert made["spec"] == spec


# --- bad objects: at least 30 a kind, each 422 naming the field and saying why -------------

BAD_SUBNETS: list[tuple[dict[str, Any], str, str]] = [
    ({"cidrBlock": "10.20.0.0"}, "spec.cidrBlock", '"10.20.0.0" is not a CIDR'),
    ({"cidrBlock": "10.20.0.0/33"}, "spec.cidrBlock", '"10.20.0.0/33" is not a CIDR'),
    ({"cidrBlock": "banana"}, "spec.cidrBlock", '"banana" is not a CIDR'),
    ({"cidrBlock": "10.20.0.0/016"}, "spec.cidrBlock", "is not a CIDR"),
    ({"cidrBlock": "::ffff:10.0.0.0/104"}, "spec.cidrBlock", "is not a CIDR"),
    ({"cidrBlock": "10.20.0.0/16,"}, "spec.cidrBlock", '"" is not a CIDR'),
    ({"cidrBlock": "10.20.0.1/16"}, "spec.cidrBlock",
     "no host bits set: 10.20.0.1/16 is not 10.20.0.0/16"),
    ({"cidrBlock": "fd00::1/64"}, "spec.cidrBlock", "fd00::1/64 is not fd00::/64"),
    ({"cidrBlock": "10.20.0.0/16,10.30.0.0/16"}, "spec.cidrBlock",
     "at most two CIDRs, one IPv4 and one IPv6"),
    ({"cidrBlock": "10.20.0.0/16,fd00::/64,fd01::/64"}, "spec.cidrBlock",
     "at most two CIDRs, one IPv4 and one IPv6"),
    ({"cidrBlock": ""}, "spec.cidrBlock", "should be at least 1 chars long"),
    ({"cidrBlock": None}, "spec.cidrBlock", "Required value"),
    ({"cidrBlock": 10}, "spec.cidrBlock", "must be of type string"),
    ({"provider": None}, "spec.provider", "Required value"),
    ({"provider": "OVN"}, "spec.provider", "should match"),
    ({"provider": ""}, "spec.provider", "should be at least 1 chars long"),
    ({"gateway": "10.30.0.1"}, "spec.gateway",
     "gateway must be inside cidrBlock: 10.30.0.1 is not inside 10.20.0.0/16"),
    ({"gateway": "fd00::1"}, "spec.gateway", "gateway must be inside cidrBlock"),
    ({"gateway": "10.20.0.0"}, "spec.gateway",
     "gateway must not be the network address of its block"),
    ({"gateway": "banana"}, "spec.gateway", '"banana" is not an IP address'),
    ({"gateway": "10.20.0.1/16"}, "spec.gateway", "is not an IP address"),
    ({"gateway": "10.20.0.1,10.20.0.2"}, "spec.gateway",
     "at most two addresses, one IPv4 and one IPv6"),
    ({"excludeIPs": ["10.99.0.1"]}, "spec.excludeIPs",
     "excludeIPs entries must be inside cidrBlock 10.20.0.0/16: 10.99.0.1 is not"),
    ({"excludeIPs": ["10.20.0.0/8"]}, "spec.excludeIPs", "10.20.0.0/8 is not"),
    ({"excludeIPs": ["10.20.0.1..10.30.0.1"]}, "spec.excludeIPs", "10.20.0.1..10.30.0.1"),
    ({"excludeIPs": ["10.20.0.9..10.20.0.2"]}, "spec.excludeIPs[0]",
     "the range is backwards: 10.20.0.2 comes before 10.20.0.9"),
    ({"excludeIPs": ["10.20.0.2..fd00::1"]}, "spec.excludeIPs[0]", "a range FIRST..LAST of one"),
    ({"excludeIPs": ["10.20.0.1/24"]}, "spec.excludeIPs[0]", "with no host bits set"),
    ({"excludeIPs": ["nope"]}, "spec.excludeIPs[0]", "must be an IP address"),
    ({"excludeIPs": ["10.20.0.1", "10.20.0.1"]}, "spec.excludeIPs[1]", "Duplicate value"),
    ({"excludeIPs": [f"10.20.{i // 250}.{i % 250 + 1}" for i in range(129)]},
     "spec.excludeIPs", "must have at most 128 items"),
    ({"cidrBlock": "10.20.0.0/16,fd00:aaaa:bbbb:cccc:dddd:eeee:ffff:1111/128,10.30.0.0/16"},
     "spec.cidrBlock", "may not be more than 64"),
    ({"namespaces": ["Team_A"]}, "spec.namespaces[0]", '"Team_A" is not a namespace name'),
    ({"namespaces": ["a" * 64]}, "spec.namespaces[0]", "may not be more than 63"),
    ({"namespaces": [""]}, "spec.namespaces[0]", "should be at least 1 chars long"),
    ({"namespaceSelector": {"matchExpressions": [{"key": "a", "operator": "Foo"}]}},
     "spec.namespaceSelector.matchExpressions[0].operator", 'Unsupported value: "Foo"'),
    ({"namespaceSelector": {"matchExpressions": [{"key": "a", "operator": "In"}]}},
     "spec.namespaceSelector.matchExpressions[0].values",
     "values must be non-empty when operator is In"),
    ({"nodeSelector": {"matchExpressions": [{"key": "a", "operator": "Exists",
                                             "values": ["x"]}]}},
     "spec.nodeSelector.matchExpressions[0].values",
     "values must be empty when operator is Exists"),
    ({"nodeSelector": {"matchExpressions": [{"operator": "Exists"}]}},
     "spec.nodeSelector.matchExpressions[0].key", "Required value"),
    ({"nodeSelector": {"matchLabels": {"bad key!": "v"}}}, "spec.nodeSelector.matchLabels",
     'label keys must be qualified names'),
    ({"nodeSelector": {"matchLabels": {"k": "bad value!"}}}, "spec.nodeSelector.matchLabels[k]",
     "should match"),
    ({"default": "yes"}, "spec.default", "must be of type boolean"),
    ({"parameters": "x"}, "spec.parameters", "must be of type object"),
]

BAD_POOLS: list[tuple[dict[str, Any], str, str]] = [
    ({"subnet": None}, "spec.subnet", "Required value"),
    ({"addresses": None}, "spec.addresses", "Required value"),
    ({"addresses": []}, "spec.addresses", "should have at least 1 items"),
    ({"subnet": "Blue"}, "spec.subnet", '"Blue" is not a Subnet name'),
    ({"subnet": "blue_1"}, "spec.subnet", '"blue_1" is not a Subnet name'),
    ({"subnet": "-blue"}, "spec.subnet", "is not a Subnet name"),
    ({"subnet": ""}, "spec.subnet", "should be at least 1 chars long"),
    ({"subnet": "a" * 254}, "spec.subnet", "may not be more than 253"),
    ({"subnet": 5}, "spec.subnet", "must be of type string"),
    ({"addresses": ["banana"]}, "spec.addresses[0]", "must be an IP address"),
    ({"addresses": ["10.0.0.1/24"]}, "spec.addresses[0]", "with no host bits set"),
    ({"addresses": ["10.0.0.0/33"]}, "spec.addresses[0]", "must be an IP address"),
    ({"addresses": ["2001:db8::/129"]}, "spec.addresses[0]", "must be an IP address"),
    ({"addresses": ["10.0.0.9..10.0.0.2"]}, "spec.addresses[0]",
     "the range is backwards: 10.0.0.2 comes before 10.0.0.9"),
    ({"addresses": ["10.0.1.0..10.0.0.255"]}, "spec.addresses[0]", "the range is backwards"),
    ({"addresses": ["10.0.0.1..fd00::1"]}, "spec.addresses[0]", "of one family"),
    ({"addresses": ["10.0.0.1..10.0.0.2..10.0.0.3"]}, "spec.addresses[0]",
     "must be an IP address"),
    ({"addresses": ["10.0.0.1.."]}, "spec.addresses[0]", "must be an IP address"),
    ({"addresses": ["10.0.0.256"]}, "spec.addresses[0]", "must be an IP address"),
    ({"addresses": ["01.2.3.4"]}, "spec.addresses[0]", "must be an IP address"),
    ({"addresses": ["::ffff:1.2.3.4"]}, "spec.addresses[0]", "must be an IP address"),
    ({"addresses": ["fe80::1%eth0"]}, "spec.addresses[0]", "must be an IP address"),
    ({"addresses": ["10.0.0.1", "10.0.0.1"]}, "spec.addresses[1]", "Duplicate value"),
    ({"addresses": [""]}, "spec.addresses[0]", "should be at least 1 chars long"),
    ({"addresses": ["1" * 82]}, "spec.addresses[0]", "may not be more than 81"),
    ({"addresses": [f"10.0.{i // 250}.{i % 250}" for i in range(257)]}, "spec.addresses",
     "must have at most 256 items"),
    ({"addresses": [5]}, "spec.addresses[0]", "must be of type string"),
    ({"addresses": "10.0.0.1"}, "spec.addresses", "must be of type array"),
    ({"namespaces": ["Bad"]}, "spec.namespaces[0]", '"Bad" is not a namespace name'),
    ({"namespaces": ["a-"]}, "spec.namespaces[0]", '"a-" is not a namespace name'),
    ({"namespaces": ["a.b"]}, "spec.namespaces[0]", '"a.b" is not a namespace name'),
    ({"namespaces": ["a", "a"]}, "spec.namespaces[1]", "Duplicate value"),
    ({"namespaces": "team-a"}, "spec.namespaces", "must be of type array"),
]


def _rule(**fields: Any) -> dict[str, Any]:
    return fields


BAD_GROUPS: list[tuple[dict[str, Any], str, str]] = [
    ({"ingress": [_rule(protocol="sctp")]}, "spec.ingress[0].protocol",
     'Unsupported value: "sctp"'),
    ({"egress": [_rule(protocol="gre")]}, "spec.egress[0].protocol", 'Unsupported value: "gre"'),
    ({"ingress": [_rule(protocol="icmp", port="80")]}, "spec.ingress[0].port",
     "Forbidden: port is only allowed with protocol tcp or udp, not icmp"),
    ({"ingress": [_rule(port="80")]}, "spec.ingress[0].port",
     "port is only allowed with protocol tcp or udp, not all"),
    ({"egress": [_rule(protocol="all", port="80")]}, "spec.egress[0].port",
     "port is only allowed with protocol tcp or udp, not all"),
    ({"ingress": [_rule(protocol="tcp", port="0")]}, "spec.ingress[0].port",
     "ports are 1 to 65535"),
    ({"ingress": [_rule(protocol="tcp", port="65536")]}, "spec.ingress[0].port",
     "ports are 1 to 65535"),
    ({"egress": [_rule(protocol="udp", port="70000-70001")]}, "spec.egress[0].port",
     "ports are 1 to 65535"),
    ({"egress": [_rule(protocol="udp", port="0-10")]}, "spec.egress[0].port",
     "ports are 1 to 65535"),
    ({"ingress": [_rule(protocol="tcp", port="80-70")]}, "spec.ingress[0].port",
     "the port range is backwards: 70 is below 80"),
    ({"ingress": [_rule(protocol="tcp", port="abc")]}, "spec.ingress[0].port", "should match"),
    ({"ingress": [_rule(protocol="tcp", port="80-")]}, "spec.ingress[0].port", "should match"),
    ({"ingress": [_rule(protocol="tcp", port="-80")]}, "spec.ingress[0].port", "should match"),
    ({"ingress": [_rule(protocol="tcp", port="123456")]}, "spec.ingress[0].port",
     "should match"),
    ({"ingress": [_rule(protocol="tcp", port="")]}, "spec.ingress[0].port",
     "should be at least 1 chars long"),
    ({"ingress": [_rule(protocol="tcp", port=80)]}, "spec.ingress[0].port",
     "must be of type string"),
    ({"ingress": [_rule(**{"from": ["10.0.0.0/33"]})]}, "spec.ingress[0].from[0]",
     '"10.0.0.0/33" is not a CIDR'),
    ({"ingress": [_rule(**{"from": ["10.0.0.1"]})]}, "spec.ingress[0].from[0]",
     '"10.0.0.1" is not a CIDR'),
    ({"ingress": [_rule(**{"from": ["banana"]})]}, "spec.ingress[0].from[0]",
     '"banana" is not a CIDR'),
    ({"ingress": [_rule(**{"from": ["10.0.0.1/8"]})]}, "spec.ingress[0].from[0]",
     "the CIDR has host bits set: 10.0.0.1/8 is not 10.0.0.0/8"),
    ({"ingress": [_rule(**{"from": ["10.0.0.0/8", "10.0.0.0/8"]})]},
     "spec.ingress[0].from[1]", "Duplicate value"),
    ({"egress": [_rule(to=["nope"])]}, "spec.egress[0].to[0]", '"nope" is not a CIDR'),
    ({"egress": [_rule(to=["fd00::1/64"])]}, "spec.egress[0].to[0]",
     "fd00::1/64 is not fd00::/64"),
    ({"egress": [_rule(to=[f"10.{i}.0.0/16" for i in range(65)])]}, "spec.egress[0].to",
     "must have at most 64 items"),
    ({"ingress": [_rule(groups=["Bad_Name"])]}, "spec.ingress[0].groups[0]",
     '"Bad_Name" is not a SecurityGroup name'),
    ({"egress": [_rule(groups=["UPPER"])]}, "spec.egress[0].groups[0]",
     '"UPPER" is not a SecurityGroup name'),
    ({"ingress": [_rule(groups=[""])]}, "spec.ingress[0].groups[0]",
     "should be at least 1 chars long"),
    ({"ingress": [_rule(groups=["a", "a"])]}, "spec.ingress[0].groups[1]", "Duplicate value"),
    ({"ingress": [_rule(groups="a")]}, "spec.ingress[0].groups", "must be of type array"),
    ({"ingress": {"protocol": "tcp"}}, "spec.ingress", "must be of type array"),
    ({"ingress": [{} for _ in range(129)]}, "spec.ingress", "must have at most 128 items"),
    ({"egress": ["tcp"]}, "spec.egress[0]", "must be of type object"),
]


def _spec(base: dict[str, Any], change: dict[str, Any]) -> dict[str, Any]:
    spec = {**base, **change}
    return {k: v for k, v in spec.items() if v is not None}


CASES = ([("Subnet", _spec(SUBNET, c), f, w) for c, f, w in BAD_SUBNETS]
         + [("IPPool", _spec(POOL, c), f, w) for c, f, w in BAD_POOLS]
         + [("SecurityGroup", c, f, w) for c, f, w in BAD_GROUPS])


def test_every_kind_has_30_bad_cases() -> None:
    assert min(len(BAD_SUBNETS), len(BAD_POOLS), len(BAD_GROUPS)) >= 30


@pytest.mark.parametrize(("kind", "spec", "field", "why"), CASES,
                         ids=[f"{k}-{i}-{f}" for i, (k, _, f, _) in enumerate(CASES)])
def test_bad_objects_are_refused_naming_the_field(objects: Any, kind: str,
                                                  spec: dict[str, Any], field: str,
                                                  why: str) -> None:
    obj = body(kind, spec)
    assert_names(refused(objects, obj), field, why)
    with pytest.raises(ApiException) as gone:
        objects.get_cluster_custom_object(GROUP, VERSION, PLURALS[kind], obj["metadata"]["name"])
    assert gone.value.status == 404  # nothing half-made


def test_a_subnet_without_spec_is_refused(objects: Any) -> None:
    obj = body("Subnet", None)
    del obj["spec"]
    assert_names(refused(objects, obj), "spec", "Required value")


def test_a_type_error_skips_the_rules_and_says_so(objects: Any) -> None:
    status = refused(objects, body("Subnet", {**SUBNET, "gateway": 5,
                                              "excludeIPs": ["10.99.0.1"]}))
    fields = [c["field"] for c in status["details"]["causes"]]
    assert fields == ["spec.gateway", "<nil>"]  # the excludeIPs rule did not run
    assert "some validation rules were not checked" in status["details"]["causes"][1]["message"]


def test_schema_and_rule_errors_are_reported_together(objects: Any) -> None:
    status = refused(objects, body("Subnet", {**SUBNET, "provider": "OVN",
                                              "gateway": "10.30.0.1"}))
    assert_names(status, "spec.provider", "should match")
    assert_names(status, "spec.gateway", "gateway must be inside cidrBlock")
    # two errors: Go's aggregate, "[first, second]"
    assert 'is invalid: [spec.provider: ' in status["message"]
    assert [c["field"] for c in status["details"]["causes"]] == ["spec.provider", "spec.gateway"]


# --- updates -------------------------------------------------------------------------------------


def _patch(objects: Any, plural: str, name: str, spec: dict[str, Any]) -> Any:
    return objects.patch_cluster_custom_object(GROUP, VERSION, plural, name, {"spec": spec})


def _patch_refused(objects: Any, plural: str, name: str, spec: dict[str, Any]
                   ) -> dict[str, Any]:
    with pytest.raises(ApiException) as caught:
        _patch(objects, plural, name, spec)
    assert caught.value.status == 422, caught.value.body
    return dict(json.loads(caught.value.body))


def test_subnet_updates_provider_immutable_widening_allowed_family_fixed(objects: Any) -> None:
    name = unique("upd")
    create(objects, body("Subnet", {**SUBNET, "cidrBlock": "10.40.0.0/24"}, name))
    status = _patch_refused(objects, "subnets", name, {"provider": "ecs"})
    assert_names(status, "spec.provider", "provider is immutable")
    widened = _patch(objects, "subnets", name, {"cidrBlock": "10.40.0.0/16"})
    assert widened["spec"]["cidrBlock"] == "10.40.0.0/16"
    assert widened["metadata"]["generation"] == 2
    # narrowing is allowed too: held addresses are reported, never taken
    assert _patch(objects, "subnets", name, {"cidrBlock": "10.40.0.0/20"})
    for other in ("fd00:40::/64", "10.40.0.0/16,fd00:40::/64"):
        status = _patch_refused(objects, "subnets", name, {"cidrBlock": other})
        assert_names(status, "spec.cidrBlock", "the families of cidrBlock are immutable")
    stored = objects.get_cluster_custom_object(GROUP, VERSION, "subnets", name)
    assert stored["spec"]["cidrBlock"] == "10.40.0.0/20" and stored["spec"]["provider"] == "ovn"
    # the rules that do not compare with the old object still hold on an update
    status = _patch_refused(objects, "subnets", name, {"excludeIPs": ["10.41.0.1"]})
    assert_names(status, "spec.excludeIPs", "10.41.0.1 is not")


def test_dual_stack_subnet_keeps_both_families(objects: Any) -> None:
    name = unique("dual")
    create(objects, body("Subnet", {**SUBNET, "cidrBlock": "10.50.0.0/24,fd00:50::/64"}, name))
    assert _patch(objects, "subnets", name, {"cidrBlock": "10.50.0.0/23,fd00:50::/56"})
    assert _patch(objects, "subnets", name, {"cidrBlock": "fd00:50::/56,10.50.0.0/23"})
    status = _patch_refused(objects, "subnets", name, {"cidrBlock": "10.50.0.0/23"})
    assert_names(status, "spec.cidrBlock", "the families of cidrBlock are immutable")


def test_pool_subnet_is_immutable_and_addresses_may_change(objects: Any) -> None:
    name = unique("pool")
    create(objects, body("IPPool", POOL, name))
    status = _patch_refused(objects, "ippools", name, {"subnet": "green"})
    assert_names(status, "spec.subnet", "subnet is immutable")
    changed = _patch(objects, "ippools", name, {"addresses": ["10.20.9.0/29"]})
    assert changed["spec"]["addresses"] == ["10.20.9.0/29"]


def test_status_writes_do_not_touch_spec_rules(objects: Any) -> None:
    name = unique("st")
    create(objects, body("Subnet", SUBNET, name))
    done = objects.patch_cluster_custom_object_status(
        GROUP, VERSION, "subnets", name,
        {"status": {"phase": "NotReady", "conditions": [
            {"type": "Ready", "status": "False", "reason": "Overlaps", "message": "x",
             "lastTransitionTime": "2026-01-01T00:00:00Z"}]}})
    assert done["status"]["phase"] == "NotReady"
    with pytest.raises(ApiException) as caught:
        objects.patch_cluster_custom_object_status(GROUP, VERSION, "subnets", name,
                                                   {"status": {"phase": "Broken"}})
    assert caught.value.status == 422
    assert "status.phase" in json.loads(caught.value.body)["message"]


@pytest.mark.parametrize(("ip", "prefix", "accepted"), [
    ("10.0.0.5", 24, True), ("fd00:10::5", 64, True), ("fd00:10::5", 128, True),
    ("10.0.0.5/24", 24, False), ("pod-a", 24, False), ("fd00:10::5", 129, False)])
def test_a_pod_network_records_an_address_of_either_family(
        objects: Any, ip: str, prefix: int, accepted: bool) -> None:
    """``status.ip`` is IPv6 where the pod's subnet has no IPv4 (an OVN IPv6-only
    subnet), with its prefix length up to 128; anything but an address is refused
    naming the field."""
    name = unique("pn")
    objects.create_namespaced_custom_object(GROUP, VERSION, "default", "podnetworks", {
        "apiVersion": f"{GROUP}/{VERSION}", "kind": "PodNetwork", "metadata": {"name": name},
        "spec": {"podName": "a", "podUid": "u-1", "nodeName": "n-1", "provider": "ovn"}})
    status = {"status": {"phase": "Routed", "ip": ip, "prefixLength": prefix}}
    if accepted:
        done = objects.patch_namespaced_custom_object_status(
            GROUP, VERSION, "default", "podnetworks", name, status)
        assert done["status"]["ip"] == ip and done["status"]["prefixLength"] == prefix
        return
    with pytest.raises(ApiException) as caught:
        objects.patch_namespaced_custom_object_status(
            GROUP, VERSION, "default", "podnetworks", name, status)
    assert caught.value.status == 422
    message = json.loads(caught.value.body)["message"]
    assert ("status.prefixLength" if prefix > 128 else "status.ip") in message, message
