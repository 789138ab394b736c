"""The wire format of podnet's records: camelCase JSON in, frozen records out."""

from __future__ import annotations

import copy
import json
import pickle
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest

from podnet.core import models as m
from podnet.core.convert import RecordError, converter, from_wire, to_wire

T0 = datetime(2026, 1, 1, tzinfo=UTC)
T1 = datetime(2026, 1, 1, 0, 5, 30, tzinfo=UTC)


def full_pod_network() -> m.PodNetwork:
    return m.PodNetwork(
        metadata=m.ObjectMeta(
            name="web-0",
            namespace="shop",
            uid="6a1c3b2e-0000-4000-8000-000000000001",
            resource_version="4711",
            generation=2,
            creation_timestamp=T0,
            deletion_timestamp=T1,
            labels={m.LABEL_NODE: "node-a", m.LABEL_POD: "web-0"},
            annotations={"note": "hand-made"},
            finalizers=(m.FINALIZER,),
            owner_references=(m.OwnerReference("v1", "Pod", "web-0", "pod-uid-1", True, True),),
        ),
        spec=m.PodNetworkSpec(
            pod_name="web-0",
            pod_uid="pod-uid-1",
            node_name="node-a",
            provider="ecs",
            network="storage",
            sticky=True,
            requests=m.NetworkRequest(
                subnets=("vsw-1", "vsw-2"),
                ip_address="10.0.0.5,fd00::5",
                ip_pool=(),
                mac_address="02:42:ac:11:00:02",
                security_groups=("sg-abc",),
                port_security=True,
                vips=("10.0.0.100",),
                eip="203.0.113.7",
                snat=True,
            ),
        ),
        status=m.PodNetworkStatus(
            phase=m.Phase.ROUTED,
            ip="10.0.0.5",
            ipv6="fd00::5",
            mac="02:42:ac:11:00:02",
            subnet="vsw-1",
            gateway="10.0.0.1",
            interface="eni-7",
            conditions=(
                m.Condition("Allocated", "True", "Allocated", "address assigned", T0),
                m.Condition("Routed", "True", "Routed", "", T1),
            ),
            last_transition_time=T1,
            traceparent="00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
        ),
    )


def full_node_network() -> m.NodeNetwork:
    return m.NodeNetwork(
        metadata=m.ObjectMeta(name="node-a", uid="node-uid", resource_version="9"),
        spec=m.NodeNetworkSpec(
            provider="ecs",
            instance_id="i-0123",
            subnets=("vsw-1",),
            pool=m.PoolBounds(min_idle=2, max_idle=8),
        ),
        status=m.NodeNetworkStatus(
            interfaces=(
                m.InterfaceStatus(
                    id="eni-primary",
                    state=m.InterfaceState.READY,
                    mac="02:00:00:00:00:01",
                    subnet="vsw-1",
                    primary=True,
                    ips=(m.IpStatus("10.0.0.2"),),
                ),
                m.InterfaceStatus(
                    id="eni-7",
                    state=m.InterfaceState.INHIBITED,
                    mac="02:00:00:00:00:07",
                    subnet="vsw-1",
                    trunk=True,
                    ips=(
                        m.IpStatus("10.0.0.5", owner="shop/web-0", subnet="vsw-1"),
                        m.IpStatus("fd00::5", owner="shop/web-0"),
                        m.IpStatus("10.0.0.6"),
                    ),
                    inhibited_until=T1,
                ),
            ),
            last_inventory_sync=T0,
            conditions=(m.Condition("Synced", "True"),),
        ),
    )


def wire(obj: Any) -> dict[str, Any]:
    """to_wire, then through real JSON, as the API server would hand it back."""
    result: dict[str, Any] = json.loads(json.dumps(to_wire(obj)))
    return result


def rejects(cls: type, data: dict[str, Any]) -> RecordError:
    with pytest.raises(RecordError) as info:
        from_wire(cls, data)
    return info.value


# --- round trips and output shape -------------------------------------------------------------


@pytest.mark.parametrize("record", [full_pod_network(), full_node_network()], ids=["pod", "node"])
def test_round_trip_through_json(record: Any) -> None:
    assert from_wire(type(record), wire(record)) == record


def test_minimal_records_round_trip() -> None:
    pn = m.PodNetwork(
        metadata=m.ObjectMeta(name="a", namespace="ns"),
        spec=m.PodNetworkSpec(pod_name="a", pod_uid="u", node_name="n", provider="p"),
    )
    nn = m.NodeNetwork(metadata=m.ObjectMeta(name="n"), spec=m.NodeNetworkSpec(provider="p"))
    assert from_wire(m.PodNetwork, wire(pn)) == pn
    assert from_wire(m.NodeNetwork, wire(nn)) == nn


def test_keys_are_camel_case() -> None:
    out = to_wire(full_pod_network())
    assert set(out) == {"apiVersion", "kind", "metadata", "spec", "status"}
    assert out["apiVersion"] == "podnet.io/v1alpha1"
    assert {"resourceVersion", "creationTimestamp", "deletionTimestamp", "ownerReferences"} <= set(
        out["metadata"]
    )
    assert out["metadata"]["ownerReferences"][0] == {
        "apiVersion": "v1",
        "kind": "Pod",
        "name": "web-0",
        "uid": "pod-uid-1",
        "controller": True,
        "blockOwnerDeletion": True,
    }
    assert {"podName", "podUid", "nodeName"} <= set(out["spec"])
    assert {"ipAddress", "macAddress", "securityGroups", "portSecurity"} <= set(
        out["spec"]["requests"]
    )
    assert "lastTransitionTime" in out["status"]
    assert "lastTransitionTime" in out["status"]["conditions"][0]
    node = to_wire(full_node_network())
    assert node["spec"]["pool"] == {"minIdle": 2, "maxIdle": 8}
    assert node["spec"]["instanceId"] == "i-0123"
    assert node["status"]["interfaces"][1]["inhibitedUntil"] == "2026-01-01T00:05:30Z"
    assert "lastInventorySync" in node["status"]


def test_all_keys_camel_case_everywhere() -> None:
    def keys(value: Any) -> list[str]:
        if isinstance(value, dict):
            found = list(value)
            for v in value.values():
                found += keys(v)
            return found
        if isinstance(value, list):
            return [k for v in value for k in keys(v)]
        return []

    for record in (full_pod_network(), full_node_network()):
        out = to_wire(record)
        wire_keys = [k for k in keys(out) if "/" not in k and " " not in k]
        assert wire_keys
        assert not [k for k in wire_keys if "_" in k]


def test_none_and_empty_collections_are_omitted() -> None:
    pn = m.PodNetwork(
        metadata=m.ObjectMeta(name="a", namespace="ns"),
        spec=m.PodNetworkSpec(pod_name="a", pod_uid="u", node_name="n", provider="p"),
    )
    out = to_wire(pn)
    assert out["metadata"] == {"name": "a", "namespace": "ns"}
    assert out["status"] == {"phase": "Pending"}  # phase is always written
    assert "ipAddress" not in out["spec"]["requests"]
    assert "subnets" not in out["spec"]["requests"]
    assert "null" not in json.dumps(out)


def test_output_is_plain_json() -> None:
    out = to_wire(full_pod_network())
    assert type(out["status"]["phase"]) is str
    assert out["status"]["phase"] == "Routed"
    assert isinstance(out["spec"]["requests"]["subnets"], list)
    assert isinstance(out["metadata"]["finalizers"], list)
    json.dumps(out)


def test_to_wire_copies_dicts() -> None:
    pn = full_pod_network()
    out = to_wire(pn)
    out["metadata"]["labels"]["x"] = "y"
    assert "x" not in pn.metadata.labels


def test_from_wire_does_not_alias_input() -> None:
    data = wire(full_pod_network())
    pn = from_wire(m.PodNetwork, data)
    data["metadata"]["labels"]["x"] = "y"
    assert "x" not in pn.metadata.labels


def test_converter_is_public_and_shared() -> None:
    status = converter.structure({"phase": "Allocated"}, m.PodNetworkStatus)
    assert status.phase is m.Phase.ALLOCATED


# --- datetimes ----------------------------------------------------------------------------------


def test_datetime_written_rfc3339_utc_seconds() -> None:
    cond = m.Condition("A", "True", last_transition_time=datetime(2026, 1, 1, 1, 2, 3, 456789, UTC))
    assert to_wire(cond)["lastTransitionTime"] == "2026-01-01T01:02:03Z"
    plus_two = timezone(timedelta(hours=2))
    at = datetime(2026, 1, 1, 2, 0, tzinfo=plus_two)
    cond = m.Condition("A", "True", last_transition_time=at)
    assert to_wire(cond)["lastTransitionTime"] == "2026-01-01T00:00:00Z"


def test_naive_datetime_is_utc() -> None:
    cond = m.Condition("A", "True", last_transition_time=datetime(2026, 1, 1))
    assert to_wire(cond)["lastTransitionTime"] == "2026-01-01T00:00:00Z"
    data = {"type": "A", "status": "True", "lastTransitionTime": "2026-01-01T00:00:00"}
    parsed = from_wire(m.Condition, data)
    assert parsed.last_transition_time == T0
    assert parsed.last_transition_time is not None
    assert parsed.last_transition_time.tzinfo is UTC


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("2026-01-01T00:00:00Z", T0),
        ("2026-01-01T00:00:00+00:00", T0),
        ("2026-01-01T02:00:00+02:00", T0),
        ("2026-01-01t00:00:00z", T0),
        ("2026-01-01T00:00:00.5Z", T0 + timedelta(microseconds=500000)),
        ("2026-01-01T00:00:00.123456Z", T0 + timedelta(microseconds=123456)),
        ("2026-01-01T00:00:00.123456789Z", T0 + timedelta(microseconds=123456)),
        ("2026-01-01T00:00:00.25+00:00", T0 + timedelta(microseconds=250000)),
    ],
)
def test_datetime_parsing(text: str, expected: datetime) -> None:
    cond = from_wire(m.Condition, {"type": "A", "status": "True", "lastTransitionTime": text})
    assert cond.last_transition_time == expected
    assert cond.last_transition_time is not None
    assert cond.last_transition_time.utcoffset() == timedelta(0)


@pytest.mark.parametrize(
    "text", ["yesterday", "2026-01-01", "2026-13-01T00:00:00Z", "20260101T000000Z", 5]
)
def test_bad_datetime_rejected(text: Any) -> None:
    err = rejects(m.Condition, {"type": "A", "status": "True", "lastTransitionTime": text})
    assert err.field == "lastTransitionTime"
    assert "RFC3339" in err.message
    assert repr(text) in err.message


# --- unknown keys -----------------------------------------------------------------------------


def test_unknown_key_in_spec() -> None:
    data = wire(full_pod_network())
    data["spec"]["fooBar"] = 1
    err = rejects(m.PodNetwork, data)
    assert err.field == "spec.fooBar"
    assert err.message == "unknown field 'fooBar'"
    assert str(err) == "spec.fooBar: unknown field 'fooBar'"
    assert isinstance(err, ValueError)


def test_snake_case_key_is_unknown() -> None:
    data = wire(full_pod_network())
    data["spec"]["pod_uid"] = data["spec"].pop("podUid")
    err = rejects(m.PodNetwork, data)
    # the misspelt key is reported, not the "missing" podUid it stands for
    assert err.field == "spec.pod_uid"
    assert "unknown field" in err.message


def test_unknown_key_deep_in_status_names_index() -> None:
    data = wire(full_node_network())
    data["status"]["interfaces"][1]["ips"][2]["weight"] = 3
    err = rejects(m.NodeNetwork, data)
    assert err.field == "status.interfaces[1].ips[2].weight"
    assert "unknown field 'weight'" in err.message
    data = wire(full_node_network())
    data["status"]["interfaces"][1]["speed"] = "fast"
    assert rejects(m.NodeNetwork, data).field == "status.interfaces[1].speed"


def test_unknown_top_level_key() -> None:
    data = wire(full_pod_network())
    data["extra"] = {}
    err = rejects(m.PodNetwork, data)
    assert err.field == "extra"
    assert "unknown field" in err.message


def test_unknown_metadata_keys_are_ignored() -> None:
    data = wire(full_pod_network())
    data["metadata"]["managedFields"] = [{"manager": "podnet", "operation": "Update"}]
    data["metadata"]["selfLink"] = "/apis/podnet.io/v1alpha1/namespaces/shop/podnetworks/web-0"
    data["metadata"]["generateName"] = "web-"
    data["metadata"]["ownerReferences"][0]["futureField"] = True
    assert from_wire(m.PodNetwork, data) == full_pod_network()


# --- value checks -----------------------------------------------------------------------------


def _pod(**changes: Any) -> dict[str, Any]:
    data = wire(full_pod_network())
    for path, value in changes.items():
        target = data
        *parents, last = path.split("__")
        for part in parents:
            target = target[part]
        if value is _DROP:
            del target[last]
        else:
            target[last] = value
    return data


_DROP = object()


@pytest.mark.parametrize(
    ("changes", "field", "needle"),
    [
        ({"status__phase": "Running"}, "status.phase", "'Running'"),
        ({"status__phase": 3}, "status.phase", "expected one of Pending"),
        ({"status__ip": "10.0.0.300"}, "status.ip", "'10.0.0.300'"),
        ({"status__ip": "fd00::5"}, "status.ip", "not an IPv4"),
        ({"status__ipv6": "10.0.0.5"}, "status.ipv6", "not an IPv6"),
        ({"status__gateway": "gw"}, "status.gateway", "invalid IP address 'gw'"),
        ({"status__mac": "02:42:ac:11:00"}, "status.mac", "'02:42:ac:11:00'"),
        ({"status__mac": "01:00:5e:00:00:01"}, "status.mac", "multicast"),
        ({"spec__podUid": _DROP}, "spec.podUid", "required field missing"),
        ({"spec__podUid": ""}, "spec.podUid", "must not be empty"),
        ({"spec__podName": ""}, "spec.podName", "must not be empty"),
        ({"spec__nodeName": None}, "spec.nodeName", "expected string, got None"),
        ({"spec__provider": 7}, "spec.provider", "expected string, got 7"),
        ({"spec__sticky": "yes"}, "spec.sticky", "expected boolean, got 'yes'"),
        ({"spec__requests__ipAddress": "10.0.0.5,10.0.0.6"}, "spec.requests.ipAddress", "IPv6"),
        ({"spec__requests__ipPool": ["pool-a", "10.0.0.9"]}, "spec.requests.ipPool", "pool-a"),
        ({"spec__requests__macAddress": "zz:42:ac:11:00:02"}, "spec.requests.macAddress", "zz:"),
        ({"spec__requests__vips": ["10.0.0.1", "nope"]}, "spec.requests.vips", "'nope'"),
        ({"spec__requests__subnets": "vsw-1"}, "spec.requests.subnets", "expected list"),
        ({"spec__requests__eip": "1.2.3"}, "spec.requests.eip", "'1.2.3'"),
        ({"spec": "web-0"}, "spec", "expected object, got 'web-0'"),
        ({"metadata__name": _DROP}, "metadata.name", "required field missing"),
        ({"metadata__labels": {"a": 1}}, "metadata.labels[a]", "expected string, got 1"),
        ({"metadata__generation": True}, "metadata.generation", "expected integer, got True"),
        ({"metadata__finalizers": ["a", 2]}, "metadata.finalizers[1]", "expected string"),
        (
            {"status__conditions": [{"type": "A", "status": "Maybe"}]},
            "status.conditions[0].status",
            "'Maybe'",
        ),
        (
            {"status__conditions": [{"status": "True"}]},
            "status.conditions[0].type",
            "required field missing",
        ),
        ({"kind": "NodeNetwork"}, "kind", "'NodeNetwork'"),
        ({"apiVersion": "v1"}, "apiVersion", "'v1'"),
    ],
)
def test_bad_pod_network_rejected(changes: dict[str, Any], field: str, needle: str) -> None:
    err = rejects(m.PodNetwork, _pod(**changes))
    assert err.field == field
    assert needle in err.message
    assert str(err) == f"{field}: {err.message}"


def test_long_values_are_truncated_in_messages() -> None:
    err = rejects(m.PodNetwork, _pod(spec__provider=["x" * 500]))
    assert err.field == "spec.provider"
    assert err.message.startswith("expected string, got ['xxx")
    assert len(err.message) < 120


def test_wrong_type_at_top_level() -> None:
    with pytest.raises(RecordError, match="expected object"):
        from_wire(m.PodNetwork, ["not", "a", "dict"])  # type: ignore[arg-type]


def _node(**changes: Any) -> dict[str, Any]:
    data = wire(full_node_network())
    data["spec"].update(changes)
    return data


@pytest.mark.parametrize(
    ("data", "field", "needle"),
    [
        (_node(pool={"minIdle": 9, "maxIdle": 3}), "spec.pool.minIdle", "greater than maxIdle"),
        (_node(pool={"minIdle": -1}), "spec.pool.minIdle", "negative"),
        (_node(pool={"maxIdle": "8"}), "spec.pool.maxIdle", "expected integer, got '8'"),
        (_node(provider=""), "spec.provider", "must not be empty"),
    ],
)
def test_bad_node_network_rejected(data: dict[str, Any], field: str, needle: str) -> None:
    err = rejects(m.NodeNetwork, data)
    assert err.field == field
    assert needle in err.message


def test_bad_values_deep_in_node_status() -> None:
    data = wire(full_node_network())
    data["status"]["interfaces"][1]["ips"][1]["address"] = "fd00::zz"
    err = rejects(m.NodeNetwork, data)
    assert err.field == "status.interfaces[1].ips[1].address"
    assert "'fd00::zz'" in err.message

    data = wire(full_node_network())
    data["status"]["interfaces"][0]["mac"] = "00:00:00:00:00:00"
    assert rejects(m.NodeNetwork, data).field == "status.interfaces[0].mac"

    data = wire(full_node_network())
    data["status"]["interfaces"][0]["state"] = "Broken"
    err = rejects(m.NodeNetwork, data)
    assert err.field == "status.interfaces[0].state"
    assert "Initializing" in err.message

    data = wire(full_node_network())
    data["status"]["interfaces"] = [{"id": "eni-1"}, {"state": "Ready"}]
    err = rejects(m.NodeNetwork, data)
    assert (err.field, err.message) == ("status.interfaces[1].id", "required field missing")


def test_ip_address_and_ip_pool_conflict_on_the_wire() -> None:
    data = _pod(spec__requests__ipPool=["10.0.0.9"])
    err = rejects(m.PodNetwork, data)
    assert err.field == "spec.requests.ipPool"
    assert "ipAddress" in err.message


def test_record_error_pickles() -> None:
    err = pickle.loads(pickle.dumps(RecordError("spec.podUid", "required field missing")))
    assert (err.field, err.message) == ("spec.podUid", "required field missing")
    assert str(err) == "spec.podUid: required field missing"


def test_pool_bounds_equal_is_fine() -> None:
    nn = from_wire(m.NodeNetwork, _node(pool={"minIdle": 4, "maxIdle": 4}))
    assert nn.spec.pool == m.PoolBounds(4, 4)


def test_input_is_not_mutated() -> None:
    data = wire(full_pod_network())
    before = copy.deepcopy(data)
    from_wire(m.PodNetwork, data)
    assert data == before


def test_unpooled_interfaces_and_pairs_keep_older_records_readable() -> None:
    """``pooled`` (default true) and an address's ``ipv6`` are left out when unset: a
    record written before them reads the same, and one written now looks the same."""
    old = {"id": "eni-1", "state": "Ready", "primary": False, "trunk": False,
           "ips": [{"address": "10.0.0.5", "owner": "ns/a"}]}
    itf = from_wire(m.InterfaceStatus, old)
    assert itf.pooled and itf.ips[0].ipv6 is None
    assert to_wire(itf) == old
    new = m.InterfaceStatus(id="eni-0", primary=True, pooled=False, ips=(
        m.IpStatus("10.0.0.6", ipv6="2408:4005::6"),))
    data = to_wire(new)
    assert data["pooled"] is False and data["ips"][0]["ipv6"] == "2408:4005::6"
    assert from_wire(m.InterfaceStatus, data) == new
    with pytest.raises(RecordError) as info:
        from_wire(m.InterfaceStatus, {**data, "ips": [{"address": "10.0.0.6",
                                                        "ipv6": "10.0.0.7"}]})
    assert info.value.field == "ips[0].ipv6"


def test_values_records_repeat_are_held_once_across_records() -> None:
    """Two records read from two separate JSON documents share the strings many records
    repeat (the namespace, the node, the subnet, label keys and values, the condition)
    and their parsed moment: each distinct value is held once (memory at scale)."""
    a = from_wire(m.PodNetwork, wire(full_pod_network()))
    b = from_wire(m.PodNetwork, wire(full_pod_network()))
    assert a == b and a.metadata.labels and a.status.conditions and a.status.subnet
    assert a.metadata.namespace is b.metadata.namespace
    assert a.spec.node_name is b.spec.node_name and a.spec.provider is b.spec.provider
    assert a.status.subnet is b.status.subnet and a.status.gateway is b.status.gateway
    for (ka, va), (kb, vb) in zip(a.metadata.labels.items(), b.metadata.labels.items(),
                                  strict=True):
        assert ka is kb and va is vb
    ca, cb = a.status.conditions[0], b.status.conditions[0]
    assert ca.type is cb.type and ca.reason is cb.reason
    assert ca.last_transition_time is cb.last_transition_time
