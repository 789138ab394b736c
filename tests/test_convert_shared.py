"""The converter's shared records and its one-call string fields (``convert._SHARED``,
``_interned_str``): a repeated flat record is one object, and nothing the full parse
refuses gets through either shortcut."""

from __future__ import annotations

import sys

import pytest

from podnet.core.convert import RecordError, from_wire
from podnet.core.models import Condition, NetworkRequest, OwnerReference, PodNetworkSpec

READY = {"type": "Ready", "status": "True", "reason": "Routed", "message": "",
         "lastTransitionTime": "2026-12-01T10:00:00Z"}


def test_a_repeated_flat_record_is_parsed_once_and_shared() -> None:
    first, again = from_wire(Condition, dict(READY)), from_wire(Condition, dict(READY))
    assert first is again and first.reason == "Routed"
    later = from_wire(Condition, {**READY, "lastTransitionTime": "2026-12-01T10:00:01Z"})
    assert later is not first and later.last_transition_time != first.last_transition_time
    assert from_wire(NetworkRequest, {"snat": False}) is from_wire(NetworkRequest, {"snat": False})


def test_a_value_equal_to_a_shared_one_but_of_another_type_is_refused() -> None:
    """``1 == True`` and they hash alike: the value's type is part of what is shared."""
    assert from_wire(NetworkRequest, {"snat": True}).snat is True
    with pytest.raises(RecordError) as err:
        from_wire(NetworkRequest, {"snat": 1})
    assert err.value.field == "snat"
    from_wire(Condition, {**READY, "observedGeneration": 1})
    with pytest.raises(RecordError) as err:
        from_wire(Condition, {**READY, "observedGeneration": True})
    assert err.value.field == "observedGeneration"


def test_a_refused_record_is_refused_every_time() -> None:
    for _ in range(2):
        with pytest.raises(RecordError) as err:
            from_wire(Condition, {**READY, "status": "Maybe"})
        assert err.value.field == "status"


def test_a_record_with_a_list_is_parsed_as_any_other() -> None:
    request = from_wire(NetworkRequest, {"subnets": ["a", "b"]})
    assert request.subnets == ("a", "b")
    assert from_wire(NetworkRequest, {"subnets": ["a", "b"]}) == request


def test_string_fields_are_interned_and_checked() -> None:
    name = "".join(["pod-", "interned"])  # built at run time: not interned yet
    spec = from_wire(PodNetworkSpec, {"podName": name, "podUid": "u", "nodeName": "n",
                                      "provider": "reference"})
    assert spec.pod_name is sys.intern(name)
    for wire, field in (({"podName": "", "podUid": "u", "nodeName": "n", "provider": "p"},
                         "podName"),
                        ({"podName": 3, "podUid": "u", "nodeName": "n", "provider": "p"},
                         "podName")):
        with pytest.raises(RecordError) as err:
            from_wire(PodNetworkSpec, wire)
        assert err.value.field == field
    ref = {"apiVersion": "v1", "kind": "Pod", "name": "p", "uid": "u"}
    assert from_wire(OwnerReference, ref).name == "p"
    with pytest.raises(RecordError) as err:
        from_wire(OwnerReference, {**ref, "uid": None})
    assert err.value.field == "uid"


def test_labels_and_finalizers_are_interned_and_checked() -> None:
    from podnet.core.models import ObjectMeta

    key = "".join(["podnet.io/", "node"])
    meta = from_wire(ObjectMeta, {"name": "a", "labels": {key: "n"}, "finalizers": ["f"]})
    assert next(iter(meta.labels)) is sys.intern(key) and meta.finalizers == ("f",)
    for wire, field in (({"labels": {"x": 1}}, "labels[x]"), ({"finalizers": [1]}, "finalizers[0]"),
                        ({"finalizers": "f"}, "finalizers"), ({"labels": ["x"]}, "labels")):
        with pytest.raises(RecordError) as err:
            from_wire(ObjectMeta, {"name": "a", **wire})
        assert err.value.field == field
