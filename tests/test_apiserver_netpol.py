"""networking.k8s.io/v1 NetworkPolicy in the API emulator, as kube-apiserver v1.32 serves
it, driven by kubectl and the official client. Each test names what upstream does
(kubernetes/kubernetes v1.32): the schema (api/openapi-spec), the defaults
(pkg/apis/networking/v1/defaults.go), the validation (pkg/apis/networking/validation,
apimachinery's metav1 and util validation), the strategy (pkg/registry/networking/
networkpolicy) and the printer (pkg/printers/internalversion)."""

from __future__ import annotations

import http.client
import ipaddress
import json
import re
import shutil
import subprocess
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kubernetes import client, watch
from kubernetes.client.rest import ApiException

from podnet.sim.apiserver import ApiServer
from podnet.sim.builtin_schema import schemas
from podnet.sim.sloppy_ip import parse_cidr, parse_ip
from podnet.sim.tables import format_label_selector

KUBECTL = shutil.which("kubectl")
needs_kubectl = pytest.mark.skipif(KUBECTL is None, reason="kubectl is not on PATH")
MERGE = "application/merge-patch+json"


@pytest.fixture(scope="module")
def server() -> Iterator[ApiServer]:
    with ApiServer() as srv:
        yield srv


@pytest.fixture(scope="module")
def api(server: ApiServer) -> Iterator[client.ApiClient]:
    with client.ApiClient(client.Configuration(host=server.url)) as api:
        yield api


@pytest.fixture(scope="module")
def net(api: client.ApiClient) -> client.NetworkingV1Api:
    return client.NetworkingV1Api(api)


@pytest.fixture
def ns(api: client.ApiClient) -> Iterator[str]:
    core = client.CoreV1Api(api)
    name = f"np-{uuid.uuid4().hex[:12]}"
    core.create_namespace({"metadata": {"name": name}})
    try:
        yield name
    finally:
        core.delete_namespace(name, grace_period_seconds=0)


@pytest.fixture
def kubectl(server: ApiServer, tmp_path: Path) -> Any:
    kubeconfig = server.write_kubeconfig(tmp_path / "kubeconfig")

    def run(*args: str, stdin: str | None = None, check: bool = True
            ) -> subprocess.CompletedProcess[str]:
        assert KUBECTL is not None
        done = subprocess.run(
            [KUBECTL, "--kubeconfig", str(kubeconfig), "--cache-dir", str(tmp_path / "cache"),
             "--request-timeout=5s", *args],
            input=stdin, capture_output=True, text=True, timeout=30)
        if check and done.returncode != 0:
            raise AssertionError(f"kubectl {' '.join(args)} failed: {done.stderr}")
        return done

    return run


def policy(name: str, **spec: Any) -> dict[str, Any]:
    return {"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
            "metadata": {"name": name}, "spec": spec}


def plain(api: client.ApiClient, obj: Any) -> dict[str, Any]:
    out: dict[str, Any] = api.sanitize_for_serialization(obj)
    return out


def post(server: ApiServer, path: str, body: Any, query: str = ""
         ) -> tuple[int, Any, http.client.HTTPResponse]:
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=5)
    conn.request("POST", path + query, body=json.dumps(body),
                 headers={"Content-Type": "application/json"})
    resp = conn.getresponse()
    data = json.loads(resp.read())
    conn.close()
    return resp.status, data, resp


def refused(call: Any) -> tuple[int, dict[str, Any]]:
    with pytest.raises(ApiException) as info:
        call()
    return info.value.status, json.loads(info.value.body)


def causes(status: dict[str, Any]) -> list[tuple[str, str, str]]:
    return [(c["field"], c["reason"], c["message"]) for c in status["details"]["causes"]]


# --- the schema -------------------------------------------------------------------------


def test_the_schema_has_upstreams_networkpolicy_types() -> None:
    """api/openapi-spec v1.32: the NetworkPolicy types, their fields and JSON types;
    ``port`` an IntOrString, ``endPort`` an int32, ``podSelector`` the one required field
    of the spec, ``cidr`` of an ipBlock."""
    defs = schemas().definitions
    base = "io.k8s.api.networking.v1."
    props = {name: set(defs[base + name]["properties"]) for name in (
        "NetworkPolicy", "NetworkPolicyList", "NetworkPolicySpec", "NetworkPolicyIngressRule",
        "NetworkPolicyEgressRule", "NetworkPolicyPeer", "NetworkPolicyPort", "IPBlock")}
    assert props["NetworkPolicy"] == {"apiVersion", "kind", "metadata", "spec"}  # no status
    assert props["NetworkPolicySpec"] == {"podSelector", "ingress", "egress", "policyTypes"}
    assert props["NetworkPolicyIngressRule"] == {"from", "ports"}
    assert props["NetworkPolicyEgressRule"] == {"to", "ports"}
    assert props["NetworkPolicyPeer"] == {"podSelector", "namespaceSelector", "ipBlock"}
    assert props["NetworkPolicyPort"] == {"protocol", "port", "endPort"}
    assert props["IPBlock"] == {"cidr", "except"}
    assert props["NetworkPolicyList"] == {"apiVersion", "kind", "metadata", "items"}
    port = defs[base + "NetworkPolicyPort"]["properties"]
    assert port["port"]["$ref"].endswith("io.k8s.apimachinery.pkg.util.intstr.IntOrString")
    assert (port["endPort"]["type"], port["endPort"]["format"]) == ("integer", "int32")
    assert defs[base + "NetworkPolicySpec"]["required"] == ["podSelector"]
    assert defs[base + "IPBlock"]["required"] == ["cidr"]
    assert defs[base + "NetworkPolicySpec"]["properties"]["policyTypes"][
        "x-kubernetes-list-type"] == "atomic"


def test_a_wrong_json_type_is_400_and_unknown_fields_follow_field_validation(
        server: ApiServer, ns: str) -> None:
    """The Go decoder: a string endPort is a decoding error (400); an unknown field is
    dropped with a warning, or refused with fieldValidation=Strict."""
    path = f"/apis/networking.k8s.io/v1/namespaces/{ns}/networkpolicies"
    body = policy("p", podSelector={}, ingress=[{"ports": [{"port": 80, "endPort": "90"}]}])
    def send(body: Any, query: str = "") -> tuple[int, Any, Any]:
        return post(server, path, body, query)

    code, status, _ = send(body)
    assert code == 400
    assert status["message"] == (
        'NetworkPolicy in version "v1" cannot be handled as a NetworkPolicy: json: cannot '
        "unmarshal string into Go struct field NetworkPolicyPort.spec.ingress.ports.endPort "
        "of type int32")
    extra = policy("extra", podSelector={}, ingress=[{"from": [{"ipBlock": {
        "cidr": "10.0.0.0/8", "exceptions": ["10.1.0.0/16"]}}]}])
    code, status, _ = send(extra, "?fieldValidation=Strict")
    assert code == 400 and 'unknown field "spec.ingress[0].from[0].ipBlock.exceptions"' in (
        status["message"])
    code, stored, resp = send(extra)
    assert code == 201
    assert stored["spec"]["ingress"][0]["from"][0]["ipBlock"] == {"cidr": "10.0.0.0/8"}
    assert resp.getheader("Warning") == (
        '299 - "unknown field \\"spec.ingress[0].from[0].ipBlock.exceptions\\""')


# --- defaults ---------------------------------------------------------------------------


def test_policy_types_and_protocols_are_defaulted_on_write(
        api: client.ApiClient, net: client.NetworkingV1Api, ns: str) -> None:
    """SetDefaults_NetworkPolicy: empty policyTypes become [Ingress], plus Egress when
    egress rules exist; a set value is kept. SetDefaults_NetworkPolicyPort: an absent
    protocol is TCP, in ingress and egress rules."""
    made = plain(api, net.create_namespaced_network_policy(ns, policy(
        "ingress-only", podSelector={"matchLabels": {"app": "web"}},
        ingress=[{"ports": [{"port": 80}, {"port": "http", "protocol": "UDP"}]}])))
    assert made["spec"]["policyTypes"] == ["Ingress"]
    assert made["spec"]["ingress"][0]["ports"] == [
        {"port": 80, "protocol": "TCP"}, {"port": "http", "protocol": "UDP"}]
    both = plain(api, net.create_namespaced_network_policy(ns, policy(
        "both", podSelector={}, egress=[{"ports": [{"port": 53, "endPort": 60}]}])))
    assert both["spec"]["policyTypes"] == ["Ingress", "Egress"]
    assert both["spec"]["egress"][0]["ports"] == [{"port": 53, "endPort": 60, "protocol": "TCP"}]
    egress_only = plain(api, net.create_namespaced_network_policy(ns, policy(
        "deny-egress", podSelector={}, policyTypes=["Egress"])))
    assert egress_only["spec"]["policyTypes"] == ["Egress"]
    # read back: what was stored is what a later reader sees
    listed = {p["metadata"]["name"]: p["spec"]["policyTypes"] for p in
              plain(api, net.list_namespaced_network_policy(ns))["items"]}
    assert listed == {"ingress-only": ["Ingress"], "both": ["Ingress", "Egress"],
                      "deny-egress": ["Egress"]}
    # defaulting runs on every write: an update that empties policyTypes gets them again
    patched = plain(api, net.patch_namespaced_network_policy(
        "both", ns, {"spec": {"policyTypes": None, "egress": None}}))
    assert patched["spec"]["policyTypes"] == ["Ingress"] and "egress" not in patched["spec"]


def test_go_encoding_writes_the_spec_and_leaves_empty_lists_out(
        server: ApiServer, ns: str) -> None:
    """A v1.32 server encodes the stored Go struct: ``spec`` and ``spec.podSelector`` are
    structs (always written, ``{}`` when empty); empty ``omitempty`` lists and maps
    (``ingress: []``, ``matchLabels: {}``, ``except: []``) are not written, so an empty
    ``ingress`` list and an absent one read back the same."""
    path = f"/apis/networking.k8s.io/v1/namespaces/{ns}/networkpolicies"
    _, made, _ = post(server, path, {"metadata": {"name": "bare"}})
    assert made["spec"] == {"podSelector": {}, "policyTypes": ["Ingress"]}
    _, deny, _ = post(server, path, policy(
        "deny", podSelector={"matchLabels": {}}, ingress=[], egress=[],
        policyTypes=["Ingress", "Egress"]))
    assert deny["spec"] == {"podSelector": {}, "policyTypes": ["Ingress", "Egress"]}
    _, rules, _ = post(server, path, policy(
        "rules", podSelector={}, ingress=[{"from": [], "ports": []},
                                          {"from": [{"ipBlock": {"cidr": "10.0.0.0/8",
                                                                 "except": []}}]}]))
    assert rules["spec"]["ingress"] == [{}, {"from": [{"ipBlock": {"cidr": "10.0.0.0/8"}}]}]
    # cidr has no omitempty: left out, it is the empty string, which validation refuses
    code, status, _ = post(server, path, policy("nocidr", podSelector={}, ingress=[
        {"from": [{"ipBlock": {"except": ["10.0.0.0/8"]}}]}]))
    assert (code, causes(status)) == (422, [("spec.ingress[0].from[0].ipBlock.cidr",
                                             "FieldValueRequired", "Required value")])


def test_generation_follows_the_spec(api: client.ApiClient, net: client.NetworkingV1Api,
                                     ns: str) -> None:
    """The networkpolicy strategy: generation 1 on create, +1 when the (defaulted) spec
    changes; a write that changes only metadata, or leaves out what defaulting fills in,
    keeps it."""
    made = net.create_namespaced_network_policy(ns, policy("gen", podSelector={}))
    assert made.metadata.generation == 1
    same = net.replace_namespaced_network_policy("gen", ns, policy("gen", podSelector={}))
    assert same.metadata.generation == 1  # policyTypes defaulted to the stored value
    labelled = net.patch_namespaced_network_policy(
        "gen", ns, {"metadata": {"labels": {"team": "a"}}})
    assert labelled.metadata.generation == 1
    changed = net.patch_namespaced_network_policy(
        "gen", ns, {"spec": {"ingress": [{"ports": [{"port": 80}]}]}})
    assert changed.metadata.generation == 2
    ignored = net.create_namespaced_network_policy(ns, {
        "metadata": {"name": "gen2", "generation": 7}, "spec": {"podSelector": {}}})
    assert ignored.metadata.generation == 1
    del api


# --- validation -------------------------------------------------------------------------

INVALID: dict[str, tuple[dict[str, Any], list[tuple[str, str, str]]]] = {
    # ValidateLabelSelector / ValidateLabelSelectorRequirement (metav1 validation)
    "podSelector matchLabels key and value": (
        {"podSelector": {"matchLabels": {"a/b/c": "ok", "app": "no way"}}},
        [("spec.podSelector.matchLabels", "FieldValueInvalid",
          "Invalid value: \"a/b/c\": a qualified name must consist of alphanumeric characters, "
          "'-', '_' or '.', and must start and end with an alphanumeric character (e.g. "
          "'MyName',  or 'my.name',  or '123-abc', regex used for validation is "
          "'([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]') with an optional DNS subdomain prefix "
          "and '/' (e.g. 'example.com/MyName')"),
         ("spec.podSelector.matchLabels", "FieldValueInvalid",
          "Invalid value: \"no way\": a valid label must be an empty string or consist of "
          "alphanumeric characters, '-', '_' or '.', and must start and end with an "
          "alphanumeric character (e.g. 'MyValue',  or 'my_value',  or '12345', regex used "
          "for validation is '(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')")]),
    "In without values": (
        {"podSelector": {"matchExpressions": [{"key": "app", "operator": "In"}]}},
        [("spec.podSelector.matchExpressions[0].values", "FieldValueRequired",
          "Required value: must be specified when `operator` is 'In' or 'NotIn'")]),
    "NotIn without values": (
        {"podSelector": {"matchExpressions": [{"key": "app", "operator": "NotIn",
                                               "values": []}]}},
        [("spec.podSelector.matchExpressions[0].values", "FieldValueRequired",
          "Required value: must be specified when `operator` is 'In' or 'NotIn'")]),
    "Exists with values": (
        {"podSelector": {"matchExpressions": [{"key": "app", "operator": "Exists",
                                               "values": ["x"]}]}},
        [("spec.podSelector.matchExpressions[0].values", "FieldValueForbidden",
          "Forbidden: may not be specified when `operator` is 'Exists' or 'DoesNotExist'")]),
    "DoesNotExist with values": (
        {"podSelector": {"matchExpressions": [{"key": "app", "operator": "DoesNotExist",
                                               "values": ["x"]}]}},
        [("spec.podSelector.matchExpressions[0].values", "FieldValueForbidden",
          "Forbidden: may not be specified when `operator` is 'Exists' or 'DoesNotExist'")]),
    "an unknown operator": (
        {"podSelector": {"matchExpressions": [{"key": "app", "operator": "Equals"}]}},
        [("spec.podSelector.matchExpressions[0].operator", "FieldValueInvalid",
          'Invalid value: "Equals": not a valid selector operator')]),
    "a bad requirement key and value": (
        {"podSelector": {"matchExpressions": [{"key": "-app", "operator": "In",
                                               "values": ["ok", "-bad"]}]}},
        [("spec.podSelector.matchExpressions[0].key", "FieldValueInvalid",
          "Invalid value: \"-app\": name part must consist of alphanumeric characters, '-', "
          "'_' or '.', and must start and end with an alphanumeric character (e.g. "
          "'MyName',  or 'my.name',  or '123-abc', regex used for validation is "
          "'([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')"),
         ("spec.podSelector.matchExpressions[0].values[1]", "FieldValueInvalid",
          "Invalid value: \"-bad\": a valid label must be an empty string or consist of "
          "alphanumeric characters, '-', '_' or '.', and must start and end with an "
          "alphanumeric character (e.g. 'MyValue',  or 'my_value',  or '12345', regex used "
          "for validation is '(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')")]),
    "a peer's namespaceSelector": (
        {"podSelector": {}, "ingress": [{"from": [{"namespaceSelector": {"matchExpressions": [
            {"key": "team", "operator": "Exists", "values": ["a"]}]}}]}]},
        [("spec.ingress[0].from[0].namespaceSelector.matchExpressions[0].values",
          "FieldValueForbidden",
          "Forbidden: may not be specified when `operator` is 'Exists' or 'DoesNotExist'")]),
    "an egress peer's podSelector": (
        {"podSelector": {}, "egress": [{"to": [{"podSelector": {"matchLabels": {
            "app": "a b"}}}]}]},
        [("spec.egress[0].to[0].podSelector.matchLabels", "FieldValueInvalid",
          "Invalid value: \"a b\": a valid label must be an empty string or consist of "
          "alphanumeric characters, '-', '_' or '.', and must start and end with an "
          "alphanumeric character (e.g. 'MyValue',  or 'my_value',  or '12345', regex used "
          "for validation is '(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')")]),
    # ValidateNetworkPolicyPeer
    "an empty peer": (
        {"podSelector": {}, "ingress": [{"from": [{}]}]},
        [("spec.ingress[0].from[0]", "FieldValueRequired", "Required value: must specify a peer")]),
    "ipBlock with a podSelector": (
        {"podSelector": {}, "egress": [{"to": [{"ipBlock": {"cidr": "10.0.0.0/8"},
                                                "podSelector": {}}]}]},
        [("spec.egress[0].to[0]", "FieldValueForbidden",
          "Forbidden: may not specify both ipBlock and another peer")]),
    "ipBlock with a namespaceSelector": (
        {"podSelector": {}, "ingress": [{"from": [{"ipBlock": {"cidr": "10.0.0.0/8"},
                                                   "namespaceSelector": {}}]}]},
        [("spec.ingress[0].from[0]", "FieldValueForbidden",
          "Forbidden: may not specify both ipBlock and another peer")]),
    # ValidateIPBlock
    "ipBlock with an empty cidr": (
        {"podSelector": {}, "ingress": [{"from": [{"ipBlock": {"cidr": "",
                                                               "except": ["10.0.0.0/8"]}}]}]},
        [("spec.ingress[0].from[0].ipBlock.cidr", "FieldValueRequired", "Required value")]),
    "ipBlock cidr not a CIDR": (
        {"podSelector": {}, "ingress": [{"from": [{"ipBlock": {"cidr": "10.0.0.0"}}]}]},
        [("spec.ingress[0].from[0].ipBlock.cidr", "FieldValueInvalid",
          'Invalid value: "10.0.0.0": must be a valid CIDR value, (e.g. 10.9.8.0/24 or '
          "2001:db8::/64)")]),
    "ipBlock cidr prefix too long": (
        {"podSelector": {}, "ingress": [{"from": [{"ipBlock": {"cidr": "10.0.0.0/33"}}]}]},
        [("spec.ingress[0].from[0].ipBlock.cidr", "FieldValueInvalid",
          'Invalid value: "10.0.0.0/33": must be a valid CIDR value, (e.g. 10.9.8.0/24 or '
          "2001:db8::/64)")]),
    "except not a CIDR, outside, equal and wider": (
        {"podSelector": {}, "egress": [{"to": [{"ipBlock": {"cidr": "10.0.0.0/16", "except": [
            "10.0.300.0/24", "10.1.0.0/24", "10.0.0.0/16", "10.0.0.0/8", "fd00::/120"]}}]}]},
        [("spec.egress[0].to[0].ipBlock.except[0]", "FieldValueInvalid",
          'Invalid value: "10.0.300.0/24": must be a valid CIDR value, (e.g. 10.9.8.0/24 or '
          "2001:db8::/64)"),
         ("spec.egress[0].to[0].ipBlock.except[1]", "FieldValueInvalid",
          'Invalid value: "10.1.0.0/24": must be a strict subset of `cidr`'),
         ("spec.egress[0].to[0].ipBlock.except[2]", "FieldValueInvalid",
          'Invalid value: "10.0.0.0/16": must be a strict subset of `cidr`'),
         ("spec.egress[0].to[0].ipBlock.except[3]", "FieldValueInvalid",
          'Invalid value: "10.0.0.0/8": must be a strict subset of `cidr`'),
         ("spec.egress[0].to[0].ipBlock.except[4]", "FieldValueInvalid",
          'Invalid value: "fd00::/120": must be a strict subset of `cidr`')]),
    # ValidateNetworkPolicyPort (IsValidPortNum, IsValidPortName)
    "a protocol that is not TCP, UDP or SCTP": (
        {"podSelector": {}, "ingress": [{"ports": [{"protocol": "ICMP"}]}]},
        [("spec.ingress[0].ports[0].protocol", "FieldValueNotSupported",
          'Unsupported value: "ICMP": supported values: "TCP", "UDP", "SCTP"')]),
    "an empty protocol (not defaulted)": (
        {"podSelector": {}, "egress": [{"ports": [{"protocol": "", "port": 53}]}]},
        [("spec.egress[0].ports[0].protocol", "FieldValueNotSupported",
          'Unsupported value: "": supported values: "TCP", "UDP", "SCTP"')]),
    "port 0 and 65536": (
        {"podSelector": {}, "ingress": [{"ports": [{"port": 0}, {"port": 65536}]}]},
        [("spec.ingress[0].ports[0].port", "FieldValueInvalid",
          "Invalid value: 0: must be between 1 and 65535, inclusive"),
         ("spec.ingress[0].ports[1].port", "FieldValueInvalid",
          "Invalid value: 65536: must be between 1 and 65535, inclusive")]),
    "a port name too long, upper case, without a letter": (
        {"podSelector": {}, "ingress": [{"ports": [{"port": "a-very-long-port-name"},
                                                   {"port": "HTTP"}, {"port": "8080"}]}]},
        [("spec.ingress[0].ports[0].port", "FieldValueInvalid",
          'Invalid value: "a-very-long-port-name": must be no more than 15 characters'),
         ("spec.ingress[0].ports[1].port", "FieldValueInvalid",
          'Invalid value: "HTTP": must contain only alpha-numeric characters (a-z, 0-9), and '
          "hyphens (-)"),
         ("spec.ingress[0].ports[1].port", "FieldValueInvalid",
          'Invalid value: "HTTP": must contain at least one letter (a-z)'),
         ("spec.ingress[0].ports[2].port", "FieldValueInvalid",
          'Invalid value: "8080": must contain at least one letter (a-z)')]),
    "a port name with hyphens at the ends and doubled": (
        {"podSelector": {}, "egress": [{"ports": [{"port": "-web"}, {"port": "we--b"}]}]},
        [("spec.egress[0].ports[0].port", "FieldValueInvalid",
          'Invalid value: "-web": must not begin or end with a hyphen'),
         ("spec.egress[0].ports[1].port", "FieldValueInvalid",
          'Invalid value: "we--b": must not contain consecutive hyphens')]),
    "endPort below port (upstream names the port)": (
        {"podSelector": {}, "ingress": [{"ports": [{"port": 90, "endPort": 80}]}]},
        [("spec.ingress[0].ports[0].endPort", "FieldValueInvalid",
          "Invalid value: 90: must be greater than or equal to `port`")]),
    "endPort above 65535": (
        {"podSelector": {}, "ingress": [{"ports": [{"port": 90, "endPort": 70000}]}]},
        [("spec.ingress[0].ports[0].endPort", "FieldValueInvalid",
          "Invalid value: 70000: must be between 1 and 65535, inclusive")]),
    "endPort with a named port": (
        {"podSelector": {}, "egress": [{"ports": [{"port": "dns", "endPort": 60}]}]},
        [("spec.egress[0].ports[0].endPort", "FieldValueInvalid",
          "Invalid value: 60: may not be specified when `port` is non-numeric")]),
    "endPort without a port": (
        {"podSelector": {}, "ingress": [{"ports": [{"protocol": "UDP", "endPort": 60}]}]},
        [("spec.ingress[0].ports[0].endPort", "FieldValueInvalid",
          "Invalid value: 60: may not be specified when `port` is not specified")]),
    # policyTypes
    "an unknown policy type": (
        {"podSelector": {}, "policyTypes": ["Ingress", "ingress"]},
        [("spec.policyTypes[1]", "FieldValueNotSupported",
          'Unsupported value: "ingress": supported values: "Ingress", "Egress"')]),
    "three policy types": (
        {"podSelector": {}, "policyTypes": ["Ingress", "Egress", "Other"]},
        [("spec.policyTypes", "FieldValueInvalid",
          'Invalid value: []networking.PolicyType{"Ingress", "Egress", "Other"}: may not '
          "specify more than two policyTypes")]),
}

VALID: dict[str, dict[str, Any]] = {
    "every selector operator": {"podSelector": {"matchLabels": {"example.com/app": "web"},
                                                "matchExpressions": [
        {"key": "tier", "operator": "In", "values": ["a", "b"]},
        {"key": "env", "operator": "NotIn", "values": ["prod"]},
        {"key": "team", "operator": "Exists"},
        {"key": "legacy", "operator": "DoesNotExist"}]}},
    "both selectors in one peer": {"podSelector": {}, "ingress": [{"from": [
        {"podSelector": {"matchLabels": {"app": "a"}},
         "namespaceSelector": {"matchLabels": {"team": "x"}}}]}]},
    "empty selectors as peers": {"podSelector": {}, "egress": [{"to": [
        {"podSelector": {}}, {"namespaceSelector": {}}]}]},
    "ipBlock with except, IPv4 and IPv6": {"podSelector": {}, "egress": [{"to": [
        {"ipBlock": {"cidr": "10.0.0.0/8", "except": ["10.1.0.0/16", "10.2.3.4/32"]}},
        {"ipBlock": {"cidr": "2001:db8::/32", "except": ["2001:db8:1::/48"]}}]}]},
    # ParseCIDRSloppy in v1.32: leading zeros and host bits are accepted (1.33 warns)
    "sloppy CIDRs as v1.32 takes them": {"podSelector": {}, "ingress": [{"from": [
        {"ipBlock": {"cidr": "010.000.0.1/8", "except": ["10.1.0.0/016"]}}]}]},
    "every protocol, a range, a name, no port": {"podSelector": {}, "ingress": [{"ports": [
        {"protocol": "TCP", "port": 1, "endPort": 65535}, {"protocol": "UDP", "port": 53},
        {"protocol": "SCTP", "port": "sctp-svc"}, {"port": "h2c-web-8080"},
        {"protocol": "UDP"}, {"port": 100, "endPort": 100}]}]},
    "policyTypes Egress only": {"podSelector": {}, "policyTypes": ["Egress"]},
    # upstream checks the count and each value, not duplicates
    "policyTypes repeated": {"podSelector": {}, "policyTypes": ["Ingress", "Ingress"]},
    "empty rules (allow all)": {"podSelector": {}, "ingress": [{}], "egress": [{}]},
}


@pytest.mark.parametrize("case", sorted(INVALID))
def test_validation_refuses_with_upstreams_causes(
        net: client.NetworkingV1Api, ns: str, case: str) -> None:
    """ValidateNetworkPolicy: 422 Invalid naming each field, upstream's field.Error
    wording, in upstream's order (a rule's ports before its peers)."""
    spec, expected = INVALID[case]
    code, status = refused(lambda: net.create_namespaced_network_policy(ns, policy("bad", **spec)))
    assert code == 422 and status["reason"] == "Invalid"
    assert status["details"]["kind"] == "NetworkPolicy"
    assert status["details"]["group"] == "networking.k8s.io"
    assert causes(status) == expected
    first = f"{expected[0][0]}: {expected[0][2]}"
    assert status["message"].startswith('NetworkPolicy.networking.k8s.io "bad" is invalid: ')
    assert first in status["message"]


@pytest.mark.parametrize("case", sorted(VALID))
def test_validation_accepts_what_upstream_accepts(
        api: client.ApiClient, net: client.NetworkingV1Api, ns: str, case: str) -> None:
    made = plain(api, net.create_namespaced_network_policy(ns, policy("good", **VALID[case])))
    assert made["metadata"]["name"] == "good"
    for key in ("ingress", "egress", "podSelector"):
        if VALID[case].get(key):
            assert made["spec"][key]


def test_an_update_is_validated_too(net: client.NetworkingV1Api, ns: str) -> None:
    """ValidateNetworkPolicyUpdate validates the spec as on create, for an update and a
    patch; the stored object is left as it was."""
    net.create_namespaced_network_policy(ns, policy("p", podSelector={}))
    code, status = refused(lambda: net.patch_namespaced_network_policy(
        "p", ns, {"spec": {"ingress": [{"ports": [{"port": 0}]}]}}))
    assert code == 422
    assert causes(status) == [("spec.ingress[0].ports[0].port", "FieldValueInvalid",
                               "Invalid value: 0: must be between 1 and 65535, inclusive")]
    bad = policy("p", podSelector={"matchExpressions": [{"key": "a", "operator": "In"}]})
    code, status = refused(lambda: net.replace_namespaced_network_policy("p", ns, bad))
    assert code == 422
    assert net.read_namespaced_network_policy("p", ns).spec.ingress is None


def test_names_follow_dns_subdomain(net: client.NetworkingV1Api, ns: str) -> None:
    """ValidateNetworkPolicyName: NameIsDNSSubdomain."""
    code, status = refused(lambda: net.create_namespaced_network_policy(
        ns, policy("Allow_DNS", podSelector={})))
    assert code == 422 and causes(status)[0][:2] == ("metadata.name", "FieldValueInvalid")
    assert net.create_namespaced_network_policy(
        ns, policy("allow.dns-1", podSelector={})).metadata.name == "allow.dns-1"


def test_sloppy_addresses_are_read_as_go_reads_them() -> None:
    """ParseIPSloppy/ParseCIDRSloppy (k8s.io/utils/net, Go 1.16's parsers): IPv4 octets
    and prefix lengths with leading zeros are decimal; host bits are masked; an IPv4
    network holds the IPv4-mapped form of its addresses; garbage is None."""
    net = parse_cidr("010.001.0.7/016")
    assert net is not None and (net.ip, net.ones, net.bits) == (bytes([10, 1, 0, 0]), 16, 32)
    inner = parse_cidr("10.1.2.0/24")
    assert inner is not None and net.contains(inner.ip)
    mapped = parse_ip("::ffff:10.1.9.9")
    assert mapped is not None and net.contains(mapped)
    v6 = parse_cidr("2001:DB8::1/32")
    assert v6 is not None and v6.ip == bytes.fromhex("20010db8" + "00" * 12)
    assert not v6.contains(inner.ip) and not net.contains(v6.ip)
    for bad in ("10.0.0.0", "10.0.0/8", "10.0.0.256/8", "1::2::3/64", "::/129", "10.0.0.0/8/8",
                "10.0.0.0/-1", "fe80::1%eth0/64", ":/0", "1:2:3:4:5:6:7:8:9/64"):
        assert parse_cidr(bad) is None, bad
    assert parse_ip("1.2.3.04") == bytes(10) + b"\xff\xff" + bytes([1, 2, 3, 4])
    assert parse_ip("::") == bytes(16) and parse_ip("1::") is not None
    assert parse_ip("1.2.3") is None and parse_ip("::1:2:3:4:5:6:7:8") is None
    everything6 = parse_cidr("::/0")
    assert everything6 is not None and not everything6.contains(mapped)  # Go reads it as v4


@settings(max_examples=300, deadline=None)
@given(st.one_of(
    st.builds(ipaddress.IPv4Network, st.tuples(st.integers(0, 2**32 - 1), st.integers(0, 32)),
              strict=st.just(False)),
    st.builds(ipaddress.IPv6Network, st.tuples(st.integers(0, 2**128 - 1),
                                               st.integers(0, 128)), strict=st.just(False))),
       st.booleans())
def test_the_sloppy_parser_agrees_with_ipaddress_on_standard_forms(
        network: ipaddress.IPv4Network | ipaddress.IPv6Network, exploded: bool) -> None:
    """On the forms every parser accepts (compressed or exploded), ParseCIDRSloppy's
    network is Python's: the same masked address and prefix; an address inside the
    network is contained, the first one past it is not. (Go's IPNet.Contains reads an
    IPv4-mapped IPv6 address as IPv4, so an IPv6 network never holds one: those are not
    compared with Python's answer.)"""
    text = network.exploded if exploded else str(network)
    parsed = parse_cidr(text)
    assert parsed is not None
    assert (parsed.ip, parsed.ones, parsed.bits) == (
        network.network_address.packed, network.prefixlen, network.max_prefixlen)
    last = network.broadcast_address
    if not (isinstance(last, ipaddress.IPv6Address) and last.ipv4_mapped):
        assert parsed.contains(last.packed)
    past = int(last) + 1
    if past < 2**network.max_prefixlen:
        beyond = last.__class__(past)
        if not (isinstance(beyond, ipaddress.IPv6Address) and beyond.ipv4_mapped):
            assert not parsed.contains(beyond.packed)
    assert parse_ip(str(network.network_address)) is not None


def test_a_pods_status_ip_with_leading_zeros_is_accepted_as_v132_does(
        api: client.ApiClient, ns: str) -> None:
    """validatePodIPs uses IsValidIP (ParseIPSloppy) in v1.32: a leading-zero IPv4 is
    stored (v1.33 warns, a later release refuses); a non-address is still 422."""
    core = client.CoreV1Api(api)
    core.create_namespaced_pod(ns, {"metadata": {"name": "p"}, "spec": {
        "containers": [{"name": "app", "image": "demo:1"}]}})
    done = core.patch_namespaced_pod_status("p", ns, {"status": {"podIPs": [
        {"ip": "10.0.0.07"}]}})
    assert done.status.pod_ips[0].ip == "10.0.0.07"
    code, status = refused(lambda: core.patch_namespaced_pod_status(
        "p", ns, {"status": {"podIP": "10.0.0.7",
                             "podIPs": [{"ip": "10.0.0.7"}, {"ip": "fd00::zz"}]}}))
    assert code == 422 and ("status.podIPs[1]", "FieldValueInvalid") in [
        (f, r) for f, r, _ in causes(status)]


# --- kubectl ----------------------------------------------------------------------------

MANIFEST = """\
apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata:
  name: {name}
spec:
  podSelector: {selector}
  ingress:
  - from:
    - podSelector: {{matchLabels: {{role: client}}}}
    ports:
    - port: 80
"""


def test_label_selectors_print_as_upstream_formats_them() -> None:
    """metav1.FormatLabelSelector: labels.Selector.String (requirements sorted by key,
    set values sorted; ``!key`` for DoesNotExist), ``<none>`` for an empty selector."""
    assert format_label_selector({}) == "<none>"
    assert format_label_selector({"matchLabels": {"b": "2", "a": "1"}}) == "a=1,b=2"
    assert format_label_selector({"matchExpressions": [
        {"key": "tier", "operator": "NotIn", "values": ["web", "db"]},
        {"key": "env", "operator": "In", "values": ["prod"]},
        {"key": "x", "operator": "DoesNotExist"}, {"key": "app", "operator": "Exists"}],
        "matchLabels": {"team": "a"}}) == (
        "app,env in (prod),team=a,tier notin (db,web),!x")
    assert format_label_selector({"matchExpressions": [{"key": "a", "operator": "Is"}]}) == (
        "<error>")


@needs_kubectl
def test_kubectl_get_netpol_columns_and_discovery(kubectl: Any, ns: str) -> None:
    """printNetworkPolicy: NAME, POD-SELECTOR (FormatLabelSelector), AGE; discovery lists
    networkpolicies with the short name netpol and upstream's verbs; kubectl explain reads
    the schema."""
    for name, selector in (("web", "{matchLabels: {app: web, tier: front}}"),
                           ("all", "{}"),
                           ("expr", "{matchExpressions: [{key: env, operator: NotIn, "
                                    "values: [prod, dev]}, {key: canary, operator: "
                                    "DoesNotExist}]}")):
        done = kubectl("apply", "-n", ns, "-f", "-",
                       stdin=MANIFEST.format(name=name, selector=selector))
        assert f"networkpolicy.networking.k8s.io/{name} created" in done.stdout
    lines = kubectl("get", "netpol", "-n", ns).stdout.splitlines()
    assert lines[0].split() == ["NAME", "POD-SELECTOR", "AGE"]
    rows = dict(re.fullmatch(r"(\S+)\s+(.+?)\s+\S+", line).groups()  # type: ignore[union-attr]
                for line in lines[1:])
    assert rows == {"all": "<none>", "web": "app=web,tier=front",
                    "expr": "!canary,env notin (dev,prod)"}
    resources = kubectl("api-resources", "--api-group=networking.k8s.io", "-o", "wide").stdout
    row = next(line.split() for line in resources.splitlines()
               if line.startswith("networkpolicies"))
    assert row[:5] == ["networkpolicies", "netpol", "networking.k8s.io/v1", "true",
                       "NetworkPolicy"]
    assert row[5] == "create,delete,deletecollection,get,list,patch,update,watch"
    explained = kubectl("explain", "networkpolicy.spec.ingress.ports.endPort").stdout
    assert "endPort" in explained and "<integer>" in explained
    shown = json.loads(kubectl("get", "networkpolicy", "web", "-n", ns, "-o", "json").stdout)
    assert shown["spec"]["policyTypes"] == ["Ingress"]
    assert shown["spec"]["ingress"][0]["ports"] == [{"port": 80, "protocol": "TCP"}]


@needs_kubectl
def test_kubectl_refuses_a_bad_policy_with_the_servers_causes(kubectl: Any, ns: str) -> None:
    """The server's 422 as kubectl prints it; a ``kind: List`` is validated by kubectl
    itself against /openapi/v2 (the NetworkPolicy definitions, as protobuf), which names an
    unknown field with upstream's definition name."""
    bad = MANIFEST.format(name="bad", selector="{}").replace("port: 80", "port: 0")
    done = kubectl("apply", "-n", ns, "-f", "-", stdin=bad, check=False)
    assert done.returncode == 1
    assert ('The NetworkPolicy "bad" is invalid: spec.ingress[0].ports[0].port: Invalid '
            "value: 0: must be between 1 and 65535, inclusive") in done.stderr
    item = MANIFEST.format(name="listed", selector="{}").replace("- port: 80",
                                                                   "- {port: 80, x: 1}")
    listed = "apiVersion: v1\nkind: List\nitems:\n- " + item.replace("\n", "\n  ")
    done = kubectl("create", "-n", ns, "-f", "-", stdin=listed, check=False)
    assert done.returncode == 1
    assert ('ValidationError(NetworkPolicy.spec.ingress[0].ports[0]): unknown field "x" in '
            "io.k8s.api.networking.v1.NetworkPolicyPort") in done.stderr
    done = kubectl("create", "-n", ns, "-f", "-", stdin=listed.replace(", x: 1", ""))
    assert "networkpolicy.networking.k8s.io/listed created" in done.stdout


@needs_kubectl
def test_kubectl_server_side_apply(kubectl: Any, api: client.ApiClient,
                                   net: client.NetworkingV1Api, ns: str) -> None:
    """kubectl apply --server-side creates and updates a NetworkPolicy: defaults on the
    stored object, the manager's fields recorded, the generation bumped by a spec change."""
    first = MANIFEST.format(name="ssa", selector="{matchLabels: {app: web}}")
    kubectl("apply", "--server-side", "-n", ns, "-f", "-", stdin=first)
    made = plain(api, net.read_namespaced_network_policy("ssa", ns))
    assert made["spec"]["policyTypes"] == ["Ingress"]
    assert made["metadata"]["generation"] == 1
    entry = made["metadata"]["managedFields"][0]
    assert (entry["manager"], entry["operation"]) == ("kubectl", "Apply")
    assert "f:podSelector" in entry["fieldsV1"]["f:spec"]
    second = first.replace("port: 80", "port: 8080")
    kubectl("apply", "--server-side", "-n", ns, "-f", "-", stdin=second)
    again = plain(api, net.read_namespaced_network_policy("ssa", ns))
    assert again["spec"]["ingress"][0]["ports"] == [{"port": 8080, "protocol": "TCP"}]
    assert again["metadata"]["generation"] == 2
    bad = first.replace("port: 80", "port: web--x")
    done = kubectl("apply", "--server-side", "-n", ns, "-f", "-", stdin=bad, check=False)
    assert done.returncode == 1 and "must not contain consecutive hyphens" in done.stderr


# --- the official client ----------------------------------------------------------------


def test_the_official_client_round_trips(api: client.ApiClient,
                                         net: client.NetworkingV1Api, ns: str) -> None:
    """NetworkingV1Api: create (a typed model), list, watch, patch (merge and strategic),
    delete; the watch sees each event with the stored (defaulted) object."""
    events: list[tuple[str, str, int | None, list[str] | None]] = []
    started = threading.Event()

    def follow() -> None:
        w = watch.Watch()
        started.set()
        for ev in w.stream(net.list_namespaced_network_policy, ns, timeout_seconds=5):
            obj = ev["object"]
            events.append((ev["type"], obj.metadata.name, obj.metadata.generation,
                           obj.spec.policy_types))
            if ev["type"] == "DELETED":
                w.stop()

    watcher = threading.Thread(target=follow)
    watcher.start()
    started.wait()
    body = client.V1NetworkPolicy(
        metadata=client.V1ObjectMeta(name="typed"),
        spec=client.V1NetworkPolicySpec(
            pod_selector=client.V1LabelSelector(match_labels={"app": "db"}),
            ingress=[client.V1NetworkPolicyIngressRule(
                _from=[client.V1NetworkPolicyPeer(
                    namespace_selector=client.V1LabelSelector(match_labels={"team": "x"}),
                    pod_selector=client.V1LabelSelector(match_labels={"role": "api"}))],
                ports=[client.V1NetworkPolicyPort(port=5432)])],
            egress=[client.V1NetworkPolicyEgressRule(
                to=[client.V1NetworkPolicyPeer(ip_block=client.V1IPBlock(
                    cidr="192.168.0.0/16", _except=["192.168.1.0/24"]))])]))
    made = net.create_namespaced_network_policy(ns, body)
    assert made.spec.policy_types == ["Ingress", "Egress"]
    assert made.spec.ingress[0].ports[0].protocol == "TCP"
    assert made.spec.egress[0].to[0].ip_block._except == ["192.168.1.0/24"]
    listed = net.list_namespaced_network_policy(ns)
    assert [p.metadata.name for p in listed.items] == ["typed"]
    assert net.list_network_policy_for_all_namespaces(
        field_selector=f"metadata.namespace={ns}").items[0].metadata.name == "typed"
    merged = net.patch_namespaced_network_policy(
        "typed", ns, {"spec": {"policyTypes": ["Ingress"], "egress": None}})
    assert merged.spec.policy_types == ["Ingress"] and merged.spec.egress is None
    api.set_default_header("Content-Type", "application/strategic-merge-patch+json")
    try:
        strategic = net.patch_namespaced_network_policy(
            "typed", ns, {"spec": {"ingress": [{"ports": [{"port": 6432}]}]}})
    finally:
        api.default_headers.pop("Content-Type", None)
    assert [p.port for p in strategic.spec.ingress[0].ports] == [6432]  # atomic list
    assert strategic.spec.ingress[0].ports[0].protocol == "TCP"
    net.delete_namespaced_network_policy("typed", ns)
    watcher.join(timeout=10)
    assert not watcher.is_alive()
    assert [e[:3] for e in events] == [("ADDED", "typed", 1), ("MODIFIED", "typed", 2),
                                       ("MODIFIED", "typed", 3), ("DELETED", "typed", 3)]
    assert events[0][3] == ["Ingress", "Egress"] and events[1][3] == ["Ingress"]
    assert net.list_namespaced_network_policy(ns).items == []
