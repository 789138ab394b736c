"""The converter's one-pass functions (``podnet.core.structgen``): what they read equals
what the detailed parse reads, and what they refuse goes to it, so errors still name the
field."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest

from podnet.core import convert
from podnet.core.convert import RecordError, converter, from_wire, to_wire
from podnet.core.models import NodeNetwork, PodNetwork

POD_NETWORK: dict[str, Any] = {
    "apiVersion": "podnet.io/v1alpha1", "kind": "PodNetwork",
    "metadata": {"name": "pod-1.default.ab12cd34", "namespace": "ns", "uid": "u-1",
                 "resourceVersion": "17", "generation": 2,
                 "creationTimestamp": "2026-12-01T10:00:00Z",
                 "labels": {"podnet.io/node": "node-1", "podnet.io/pod": "pod-1"},
                 "annotations": {"note": "kept"}, "finalizers": ["podnet.io/release"],
                 "ownerReferences": [{"apiVersion": "v1", "kind": "Pod", "name": "pod-1",
                                      "uid": "p-1", "controller": True}],
                 "managedFields": [{"manager": "kubectl"}]},
    "spec": {"podName": "pod-1", "podUid": "p-1", "nodeName": "node-1",
             "provider": "reference", "sticky": True,
             "requests": {"subnets": ["s-1"], "ipAddress": "10.0.0.9", "snat": True}},
    "status": {"phase": "Routed", "ip": "10.0.0.9", "mac": "0a:00:00:00:00:01",
               "subnet": "10.0.0.0/24", "gateway": "10.0.0.1", "interface": "eth0",
               "prefixLength": 24, "mtu": 1500,
               "routes": [{"dst": "0.0.0.0/0", "gw": "10.0.0.1"}, {"dst": "10.1.0.0/16"}],
               "conditions": [{"type": "Ready", "status": "True", "reason": "Routed",
                               "lastTransitionTime": "2026-12-01T10:00:01Z",
                               "observedGeneration": 2}],
               "lastTransitionTime": "2026-12-01T10:00:01Z", "traceparent": "00-ab-cd-01"},
}

NODE_NETWORK: dict[str, Any] = {
    "apiVersion": "podnet.io/v1alpha1", "kind": "NodeNetwork",
    "metadata": {"name": "node-1"},
    "spec": {"provider": "reference", "instanceId": "i-1", "subnets": ["s-1"],
             "pool": {"minIdle": 2, "maxIdle": 8}},
    "status": {"interfaces": [{"id": "eth0", "state": "Ready", "mac": "0a:00:00:00:00:02",
                               "primary": True, "pooled": False,
                               "ips": [{"address": "10.0.0.9", "owner": "ns/pod-1"},
                                       {"address": "10.0.0.10"}]}],
               "lastInventorySync": "2026-12-01T10:00:00Z"},
}


def _one_pass(cls: type) -> Any:
    return convert._INLINE[converter.get_structure_hook(cls)].names["read"]


class _Other(dict[str, Any]):
    """An object that is not a plain dict: the one-pass functions leave it to the
    detailed parse."""


def _others(value: Any) -> Any:
    if isinstance(value, Mapping):
        return _Other({k: _others(v) for k, v in value.items()})
    if isinstance(value, list):
        return [_others(v) for v in value]
    return value


@pytest.mark.parametrize(("cls", "wire"), [(PodNetwork, POD_NETWORK),
                                           (NodeNetwork, NODE_NETWORK)])
def test_the_one_pass_read_equals_the_detailed_one(cls: type, wire: dict[str, Any]) -> None:
    fast, detailed = from_wire(cls, wire), from_wire(cls, _others(wire))
    assert fast == detailed
    # the one-pass function takes the whole record itself (it raises on what it leaves)
    assert _one_pass(cls)(wire) == fast
    assert from_wire(cls, to_wire(fast)) == fast


def test_the_optional_fields_read_their_defaults_and_null() -> None:
    bare = {"metadata": {"name": "x", "uid": None},
            "spec": {"podName": "p", "podUid": "u", "nodeName": "n", "provider": "r"},
            "status": {"ip": None, "phase": "Pending"}}
    record = from_wire(PodNetwork, bare)
    assert record == from_wire(PodNetwork, _others(bare))
    assert record.metadata.uid is None and record.metadata.labels == {}
    assert record.status.ip is None and record.api_version == "podnet.io/v1alpha1"


@pytest.mark.parametrize(("path", "value", "field"), [
    (("status", "ip"), "10.0.0.300", "status.ip"),
    (("status", "phase"), "Flying", "status.phase"),
    (("status", "mtu"), -1, "status.mtu"),
    (("status", "prefixLength"), True, "status.prefixLength"),
    (("status", "lastTransitionTime"), "yesterday", "status.lastTransitionTime"),
    (("status", "routes"), [{"dst": ""}], "status.routes[0].dst"),
    (("status", "conditions"), [{"type": "Ready", "status": "Maybe"}],
     "status.conditions[0].status"),
    (("metadata", "labels"), {"a": 1}, "metadata.labels[a]"),
    (("metadata", "finalizers"), ["ok", 2], "metadata.finalizers[1]"),
    (("metadata", "ownerReferences"), [{"apiVersion": "v1", "kind": "Pod", "name": "p"}],
     "metadata.ownerReferences[0].uid"),
    (("spec", "requests"), {"ipAddress": "10.0.0.1", "ipPool": ["10.0.0.2"]},
     "spec.requests.ipPool"),
    (("spec", "nodeName"), "", "spec.nodeName"),
    (("apiVersion",), "v1", "apiVersion"),
    (("kind",), "Pod", "kind"),
    (("status", "colour"), "red", "status.colour"),
])
def test_what_the_one_pass_read_refuses_names_its_field(path: tuple[str, ...], value: Any,
                                                        field: str) -> None:
    wire: dict[str, Any] = {k: dict(v) if isinstance(v, dict) else v
                            for k, v in POD_NETWORK.items()}
    where = wire
    for key in path[:-1]:
        where = where[key]
    where[path[-1]] = value
    with pytest.raises(RecordError) as err:
        from_wire(PodNetwork, wire)
    assert err.value.field == field
