"""podnet.sim.cel: x-kubernetes-validations as kube-apiserver evaluates them, alone and
through the emulator (the official client, kubectl)."""

from __future__ import annotations

import json
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client
from kubernetes.client.rest import ApiException

from podnet.sim import cel, schema
from podnet.sim.apiserver import ApiServer

REPO = Path(__file__).resolve().parent.parent
KUBECTL = shutil.which("kubectl")
needs_kubectl = pytest.mark.skipif(KUBECTL is None, reason="kubectl is not on PATH")


def run(rule: str, value: Any, schema_: dict[str, Any] | None = None, old: Any = None,
        **extra: Any) -> cel.Outcome:
    """One rule on ``value`` (wrapped as field ``f`` of an object, so paths show)."""
    node = {"type": "string", **(schema_ or {}),
            "x-kubernetes-validations": [{"rule": rule, **extra}]}
    root = {"type": "object", "properties": {"f": node}}
    validator = cel.compile_schema(root)
    return cel.evaluate(validator, {"f": value}, None if old is None else {"f": old})


def holds(rule: str, value: Any = "", **kw: Any) -> bool:
    out = run(rule, value, **kw)
    assert all("evaluating rule" not in e.message for e in out.errors), out.errors
    return not out.errors


# --- the IP and CIDR library -------------------------------------------------------------


@pytest.mark.parametrize(("rule", "expected"), [
    ("isIP('10.0.0.1')", True),
    ("isIP('fd00::1')", True),
    ("isIP('::1.2.3.4')", True),
    ("isIP('10.0.0.256')", False),
    ("isIP('01.2.3.4')", False),  # leading zeros
    ("isIP('::ffff:1.2.3.4')", False),  # IPv4-mapped
    ("isIP('fe80::1%eth0')", False),  # zone
    ("isIP('10.0.0.1/32')", False),
    ("isIP('')", False),
    ("ip('10.0.0.1').family() == 4", True),
    ("ip('fd00::1').family() == 6", True),
    ("ip('fd00::1') == ip('fd00:0::1')", True),
    ("ip('10.0.0.1') != ip('10.0.0.2')", True),
    ("string(ip('FD00:0:0::1')) == 'fd00::1'", True),
    ("string(ip('::1.2.3.4')) == '::102:304'", True),
    ("ip.isCanonical('fd00::1')", True),
    ("ip.isCanonical('FD00::1')", False),
    ("ip.isCanonical('2001:db8::0:0:0:abcd')", False),
    ("ip.isCanonical('127.0.0.1')", True),
    ("ip('0.0.0.0').isUnspecified() && ip('::').isUnspecified()", True),
    ("ip('10.0.0.1').isUnspecified()", False),
    ("ip('127.1.2.3').isLoopback() && ip('::1').isLoopback()", True),
    ("ip('224.0.0.1').isLinkLocalMulticast() && ip('ff02::1').isLinkLocalMulticast()", True),
    ("ip('224.0.1.1').isLinkLocalMulticast()", False),
    ("ip('169.254.169.254').isLinkLocalUnicast() && ip('fe80::1').isLinkLocalUnicast()", True),
    ("ip('192.168.0.1').isGlobalUnicast() && ip('2001:db8::abcd').isGlobalUnicast()", True),
    ("ip('255.255.255.255').isGlobalUnicast() || ip('ff00::1').isGlobalUnicast()", False),
    ("isCIDR('10.0.0.0/8')", True),
    ("isCIDR('10.0.0.1/8')", True),  # host bits parse; masked() is how to refuse them
    ("isCIDR('fd00::/64')", True),
    ("isCIDR('10.0.0.0/33')", False),
    ("isCIDR('::1/129')", False),
    ("isCIDR('10.0.0.0')", False),
    ("isCIDR('10.0.0.0/08')", False),  # no leading zeros in the length
    ("isCIDR('::ffff:1.2.3.0/120')", False),
    ("isCIDR('10.0.0.0/-1')", False),
    ("cidr('10.0.0.0/8').containsIP('10.255.0.1')", True),
    ("cidr('10.0.0.0/8').containsIP(ip('11.0.0.1'))", False),
    ("cidr('10.0.0.0/8').containsIP('fd00::1')", False),  # another family
    ("cidr('10.0.0.1/8').containsIP('10.9.9.9')", True),
    ("cidr('10.0.0.0/8').containsCIDR('10.2.0.0/16')", True),
    ("cidr('10.0.0.0/8').containsCIDR(cidr('10.0.0.0/8'))", True),
    ("cidr('10.2.0.0/16').containsCIDR('10.0.0.0/8')", False),
    ("cidr('10.0.0.0/8').containsCIDR('fd00::/8')", False),
    ("cidr('fd00::/48').containsCIDR('fd00:0:0:1::/64')", True),
    ("cidr('10.0.0.1/24').ip() == ip('10.0.0.1')", True),
    ("cidr('10.0.0.1/24').ip().family() == 4", True),
    ("cidr('10.0.0.1/24').masked() == cidr('10.0.0.0/24')", True),
    ("cidr('10.0.0.1/24') == cidr('10.0.0.1/24').masked()", False),
    ("string(cidr('10.0.0.1/24').masked()) == '10.0.0.0/24'", True),
    ("cidr('fd00::/64').prefixLength() == 64", True),
])
def test_ip_and_cidr_library(rule: str, expected: bool) -> None:
    assert holds(rule) is expected


@pytest.mark.parametrize(("rule", "error"), [
    ("ip('banana').family() == 4", 'IP Address "banana" parse error during conversion'),
    ("ip('fe80::1%eth0').family() == 6", 'IP address "fe80::1%eth0" with zone value is not'),
    ("ip('::ffff:1.2.3.4').family() == 6", 'IPv4-mapped IPv6 address "::ffff:1.2.3.4" is not'),
    ("cidr('10.0.0.0').prefixLength() == 8", "network address parse error"),
    ("cidr('10.0.0.0/8').containsIP('x')", 'IP Address "x" parse error'),
    ("ip(1) == ip(1)", "no such overload"),
])
def test_library_errors_are_runtime_errors_naming_the_rule(rule: str, error: str) -> None:
    out = run(rule, "x")
    assert len(out.errors) == 1
    e = out.errors[0]
    assert e.field == "f" and e.reason == "FieldValueInvalid"
    assert e.message.startswith('Invalid value: "string": ')
    assert error in e.message and rule in e.message


# --- string, list and regex extensions, and CEL's own rules ------------------------------------


@pytest.mark.parametrize("rule", [
    "'a,b,,c'.split(',') == ['a', 'b', '', 'c']",
    "'a,b,c'.split(',', 2) == ['a', 'b,c']",
    "'a,b'.split(',', 0) == []",
    "''.split(',') == ['']",
    "['a', 'b'].join('-') == 'a-b' && ['a', 'b'].join() == 'ab'",
    "'  x '.trim() == 'x'",
    "'AbC'.lowerAscii() == 'abc' && 'abc'.upperAscii() == 'ABC'",
    "'aaa'.replace('a', 'b') == 'bbb' && 'aaa'.replace('a', 'b', 1) == 'baa'",
    "'hello'.charAt(1) == 'e' && 'hello'.charAt(5) == ''",
    "'hello'.substring(1, 3) == 'el' && 'hello'.substring(3) == 'lo'",
    "'hello'.indexOf('l') == 2 && 'hello'.lastIndexOf('l') == 3 && 'hello'.indexOf('z') == -1",
    "[1, 2, 3].isSorted() && ![3, 1].isSorted()",
    "[1, 2, 3].sum() == 6 && [1, 5, 2].max() == 5 && [4, 2, 3].min() == 2",
    "[1, 2, 2].indexOf(2) == 1 && [1, 2, 2].lastIndexOf(2) == 2",
    "'abc123'.find('[0-9]+') == '123' && 'a1b2'.findAll('[0-9]') == ['1', '2']",
    "'abc'.matches('^a') && !'abc'.matches('^b')",
    "[1, 2].map(x, x * 2) == [2, 4] && [1, 2].filter(x, x > 1) == [2]",
    "[1, 2].all(x, x > 0) && [1, 2].exists(x, x == 2) && [1, 2].exists_one(x, x == 1)",
    "{'a': 1}.all(k, k == 'a')",
    # an error is a value: || and && absorb it, in macros too
    "true || ['a'].map(x, int(x))[0] == 1",
    "['x'].map(x, int(x))[0] == 1 || true",
    "!(false && [1][5] == 1)",
])
def test_extension_functions_and_error_absorption(rule: str) -> None:
    assert holds(rule)


def test_self_is_typed_by_the_schema_and_missing_fields_are_errors() -> None:
    obj_schema = {"type": "object", "properties": {
        "n": {"type": "number"}, "i": {"type": "integer"}, "s": {"type": "string"}}}
    assert holds("self.n == 2.0 && self.i == 2 && has(self.s) == false", {"n": 2, "i": 2},
                 schema_=obj_schema)
    out = run("self.s == 'x'", {"n": 1}, schema_=obj_schema)
    assert out.errors[0].message == ('Invalid value: "object": no such key: s evaluating '
                                     "rule: self.s == 'x'")


# --- transition rules, messages, field paths, reasons, ratcheting -----------------------------


def test_transition_rules_run_only_with_an_old_value() -> None:
    assert holds("self == oldSelf", "new")  # a create: no old value, the rule is skipped
    out = run("self == oldSelf", "new", old="old", message="f is immutable")
    assert [str(e) for e in out.errors] == ['f: Invalid value: "string": f is immutable']
    assert holds("self == oldSelf", "same", old="same")


def test_optional_old_self_runs_on_create_with_an_empty_optional() -> None:
    rule = "!oldSelf.hasValue() || oldSelf.value() == self"
    assert holds(rule, "new", optionalOldSelf=True)
    assert not holds(rule, "new", old="old", optionalOldSelf=True)
    assert holds("oldSelf.orValue('new') == self", "new", optionalOldSelf=True)


def test_old_self_correlates_map_list_items_by_key_only() -> None:
    item = {"type": "object", "properties": {"k": {"type": "string"}, "v": {"type": "string"}},
            "x-kubernetes-validations": [{"rule": "self.v == oldSelf.v",
                                          "message": "v is immutable"}]}
    root = {"type": "object", "properties": {"l": {
        "type": "array", "x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["k"],
        "items": item}}}
    v = cel.compile_schema(root)
    old = {"l": [{"k": "a", "v": "1"}, {"k": "b", "v": "2"}]}
    # reordered, one changed, one new: only the changed item that correlates fails
    new = {"l": [{"k": "b", "v": "3"}, {"k": "a", "v": "1"}, {"k": "c", "v": "9"}]}
    out = cel.evaluate(v, new, old)
    assert [str(e) for e in out.errors] == ['l[0]: Invalid value: "object": v is immutable']


def test_old_self_on_an_uncorrelatable_list_is_refused_at_load() -> None:
    root = {"type": "object", "properties": {"l": {"type": "array", "items": {
        "type": "string", "x-kubernetes-validations": [{"rule": "self == oldSelf"}]}}}}
    with pytest.raises(cel.CompileError) as caught:
        cel.compile_schema(root)
    assert str(caught.value).endswith("oldSelf cannot be used on the uncorrelatable portion of "
                                      "the schema within openAPIV3Schema.properties[l].items")


def test_message_expression_and_its_fallbacks() -> None:
    out = run("self.size() < 3", "abcd", messageExpression="'too long: ' + self")
    assert out.errors[0].message == 'Invalid value: "string": too long: abcd'
    for bad in ("''", "'  '", "'a\\nb'", "1", "self.missing"):
        out = run("self.size() < 3", "abcd", message="static", messageExpression=bad)
        assert out.errors[0].message == 'Invalid value: "string": static', bad
    out = run("self.size() < 3", "abcd")
    assert out.errors[0].message == 'Invalid value: "string": failed rule: self.size() < 3'


def test_field_path_and_reasons() -> None:
    obj = {"type": "object", "properties": {"a": {"type": "string"},
                                            "m": {"type": "object",
                                                  "additionalProperties": {"type": "string"}}}}
    for reason, shown in [
        ("FieldValueInvalid", 'f.a: Invalid value: "object": bad'),
        ("FieldValueForbidden", "f.a: Forbidden: bad"),
        ("FieldValueRequired", "f.a: Required value: bad"),
        ("FieldValueDuplicate", 'f.a: Duplicate value: "object"'),
    ]:
        out = run("false", {"a": "x"}, schema_=obj, message="bad", fieldPath=".a",
                  reason=reason)
        assert [str(e) for e in out.errors] == [shown]
        assert out.errors[0].reason == reason
    out = run("false", {}, schema_=obj, message="bad", fieldPath=".m['x.y']")
    assert out.errors[0].field == "f.m[x.y]"


def test_a_root_rule_names_no_field_and_sees_only_the_name_of_metadata() -> None:
    root = {"type": "object", "x-kubernetes-validations": [
        {"rule": "self.metadata.name.startsWith('ok') && !has(self.metadata.labels)"}],
        "properties": {"metadata": {"type": "object"}}}
    v = cel.compile_schema(root)
    assert not cel.evaluate(v, {"metadata": {"name": "ok-1", "labels": {"a": "b"}}}, None).errors
    out = cel.evaluate(v, {"metadata": {"name": "no"}}, None)
    assert [e.field for e in out.errors] == ["<nil>"]


def test_an_unchanged_failing_value_is_ratcheted_to_a_warning() -> None:
    out = run("self.startsWith('a')", "bad", old="bad", message="must start with a")
    assert out.errors == []
    assert out.warnings == ['f: Invalid value: "string": must start with a']
    out = run("self.startsWith('a')", "worse", old="bad", message="must start with a")
    assert len(out.errors) == 1 and out.warnings == []


@pytest.mark.parametrize(("rule", "extra", "error"), [
    ("self ==", {}, "compilation failed"),
    ("nosuch(self)", {}, "undeclared reference to 'nosuch'"),
    ("self.size() > other", {}, "undeclared reference to 'other'"),
    ("self.nope == 1", {"schema": {"type": "object", "properties": {"a": {"type": "string"}}}},
     "undefined field 'nope'"),
    ("self == 'a'", {"fieldPath": ".nope"}, "does not refer to a valid field"),
    ("self == 'a'", {"reason": "FieldValueWrong"}, "Unsupported value"),
    ("self == 'a'", {"message": "two\nlines"}, "must not contain line breaks"),
    ("self == 'a' ||\nself == 'b'", {}, "message must be specified"),
    ("self == 'a'", {"optionalOldSelf": True}, "may not be set if oldSelf is not used in rule"),
    ("  ", {}, "rule is not specified"),
    ("self == 'a'", {"message": "  "}, "message must be non-empty if specified"),
    ("self == 'a'", {"messageExpression": " "}, "messageExpression must be non-empty"),
    ("self == 'a'", {"messageExpression": "nosuch()"}, "messageExpression compilation failed"),
])
def test_rules_that_upstream_refuses_at_crd_creation(rule: str, extra: dict[str, Any],
                                                     error: str) -> None:
    node = dict(extra.pop("schema", {"type": "string"}))
    node["x-kubernetes-validations"] = [{"rule": rule, **extra}]
    with pytest.raises(cel.CompileError, match="x-kubernetes-validations\\[0\\]") as caught:
        cel.compile_schema({"type": "object", "properties": {"f": node}})
    assert error in str(caught.value)
    assert "properties[f]" in str(caught.value)


def test_a_crd_whose_rule_does_not_compile_stops_the_emulator(tmp_path: Path) -> None:
    crds = tmp_path / "crds"
    shutil.copytree(REPO / "sim" / "crds", crds)
    text = (crds / "subnets.yaml").read_text()
    (crds / "subnets.yaml").write_text(text.replace("rule: self == oldSelf",
                                                    "rule: self == oldSelf &&", 1))
    with pytest.raises(ValueError) as caught:
        schema.load_crds(crds)
    message = str(caught.value)
    assert "CustomResourceDefinition subnets.podnet.io version v1alpha1" in message
    assert "properties[spec].properties[provider].x-kubernetes-validations[0].rule" in message
    assert "compilation failed" in message
    with pytest.raises(ValueError, match=r"subnets\.podnet\.io"):
        ApiServer(crd_dir=crds)


# --- through the emulator ------------------------------------------------------------------------


@pytest.fixture
def status_rule_server(tmp_path: Path) -> Iterator[ApiServer]:
    """The emulator with a Subnet CRD that also has a rule on its status."""
    crds = tmp_path / "crds"
    shutil.copytree(REPO / "sim" / "crds", crds)
    doc = yaml.safe_load((crds / "subnets.yaml").read_text())
    status = doc["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["status"]
    status["x-kubernetes-validations"] = [{
        "rule": "!has(self.v4UsingIPs) || !has(self.v4AvailableIPs) || "
                "self.v4UsingIPs <= self.v4AvailableIPs + self.v4UsingIPs",
        "message": "unused"}, {
        "rule": "self.phase != 'Ready' || has(self.conditions)",
        "messageExpression": "'phase ' + self.phase + ' needs conditions'",
        "fieldPath": ".conditions", "reason": "FieldValueRequired"}]
    (crds / "subnets.yaml").write_text(yaml.safe_dump(doc))
    with ApiServer(crd_dir=crds) as srv:
        yield srv


def test_rules_on_status_run_on_status_writes(status_rule_server: ApiServer) -> None:
    with client.ApiClient(client.Configuration(host=status_rule_server.url)) as api:
        objects = client.CustomObjectsApi(api)
        objects.create_cluster_custom_object("podnet.io", "v1alpha1", "subnets", {
            "apiVersion": "podnet.io/v1alpha1", "kind": "Subnet", "metadata": {"name": "s"},
            "spec": {"provider": "ovn", "cidrBlock": "10.0.0.0/24"}})
        with pytest.raises(ApiException) as caught:
            objects.patch_cluster_custom_object_status(
                "podnet.io", "v1alpha1", "subnets", "s", {"status": {"phase": "Ready"}})
        assert caught.value.status == 422
        status = json.loads(caught.value.body)
        assert status["message"] == ('Subnet.podnet.io "s" is invalid: status.conditions: '
                                     "Required value: phase Ready needs conditions")
        assert status["details"]["causes"] == [{
            "reason": "FieldValueRequired", "field": "status.conditions",
            "message": "Required value: phase Ready needs conditions"}]
        done = objects.patch_cluster_custom_object_status(
            "podnet.io", "v1alpha1", "subnets", "s", {"status": {"phase": "Ready", "conditions": [
                {"type": "Ready", "status": "True", "reason": "Valid", "message": "",
                 "lastTransitionTime": "2026-01-01T00:00:00Z"}]}})
        assert done["status"]["phase"] == "Ready"
        # a spec write keeps the stored status, which the rules see as it is
        spec = objects.patch_cluster_custom_object(
            "podnet.io", "v1alpha1", "subnets", "s", {"spec": {"cidrBlock": "10.0.0.0/23"}})
        assert spec["status"]["phase"] == "Ready"


def test_the_422_through_the_official_client_has_upstreams_shape(server: ApiServer) -> None:
    with client.ApiClient(client.Configuration(host=server.url)) as api:
        objects = client.CustomObjectsApi(api)
        with pytest.raises(ApiException) as caught:
            objects.create_cluster_custom_object("podnet.io", "v1alpha1", "subnets", {
                "apiVersion": "podnet.io/v1alpha1", "kind": "Subnet",
                "metadata": {"name": "blue"},
                "spec": {"provider": "ovn", "cidrBlock": "10.20.0.0/16",
                         "gateway": "10.30.0.1"}})
    assert caught.value.status == 422
    status = json.loads(caught.value.body)
    why = "gateway must be inside cidrBlock: 10.30.0.1 is not inside 10.20.0.0/16"
    assert status == {
        "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
        "message": f'Subnet.podnet.io "blue" is invalid: spec.gateway: Invalid value: '
                   f'"object": {why}',
        "reason": "Invalid", "code": 422,
        "details": {"name": "blue", "group": "podnet.io", "kind": "Subnet", "causes": [
            {"reason": "FieldValueInvalid", "message": f'Invalid value: "object": {why}',
             "field": "spec.gateway"}]}}


@needs_kubectl
def test_kubectl_apply_shows_each_rule_that_failed(server: ApiServer, tmp_path: Path) -> None:
    kubeconfig = server.write_kubeconfig(tmp_path / "kubeconfig")
    bad = tmp_path / "bad.yaml"
    bad.write_text("""\
apiVersion: podnet.io/v1alpha1
kind: IPPool
metadata: {name: p}
spec:
  subnet: Blue
  addresses: ["10.0.0.9..10.0.0.2", "10.0.0.1/24"]
""")
    done = subprocess.run([str(KUBECTL), "--kubeconfig", str(kubeconfig), "--cache-dir",
                           str(tmp_path / "cache"), "apply", "-f", str(bad)],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode != 0
    err = done.stderr
    assert 'The IPPool "p" is invalid:' in err
    assert ('* spec.subnet: Invalid value: "string": "Blue" is not a Subnet name' in err)
    assert ('* spec.addresses[0]: Invalid value: "string": the range is backwards: '
            "10.0.0.2 comes before 10.0.0.9") in err
    assert "* spec.addresses[1]: Invalid value: \"string\": must be an IP address" in err
