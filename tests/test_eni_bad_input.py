"""The ENI dataplane (``podnet.linux.eni``) refuses a record it cannot plug before it
touches the host, with an error naming the record and the field; no root needed."""

from __future__ import annotations

import attrs
import pytest

from podnet.hookspecs.errors import ErrorKind, ProviderError
from podnet.hookspecs.models import (
    ObjectMeta,
    Phase,
    PodNetwork,
    PodNetworkSpec,
    PodNetworkStatus,
)
from podnet.hookspecs.types import PlugContext
from podnet.linux.eni import EniDataplane, pod_mac

RECORD = PodNetwork(
    metadata=ObjectMeta(name="web-0.default.1", namespace="default"),
    spec=PodNetworkSpec(pod_name="web-0", pod_uid="u", node_name="n", provider="ecs"),
    status=PodNetworkStatus(phase=Phase.ROUTED, ip="10.70.0.4", gateway="10.70.0.1",
                            interface="eni-1", subnet="vsw-1"))


def _never(pn: PodNetwork) -> str | None:
    raise AssertionError("the cloud was asked before the record was checked")


@pytest.mark.parametrize("field", ["ip", "interface", "gateway"])
def test_a_record_without_what_the_dataplane_needs_is_fatal_naming_the_field(
        field: str) -> None:
    record = attrs.evolve(RECORD, status=attrs.evolve(RECORD.status, **{field: None}))
    context = PlugContext(pod_network=record, container_id="c", if_name="eth0",
                          netns="/nonexistent")
    with pytest.raises(ProviderError) as caught:
        EniDataplane("ecs", _never).plug(context)
    assert caught.value.kind is ErrorKind.FATAL
    assert caught.value.field == f"status.{field}"
    assert "default/web-0.default.1" in str(caught.value)


def test_a_missing_network_namespace_is_fatal_naming_netns() -> None:
    context = PlugContext(pod_network=RECORD, container_id="c", if_name="eth0",
                          netns="/nonexistent/netns")
    with pytest.raises(ProviderError) as caught:
        EniDataplane("ecs", _never).plug(context)
    assert caught.value.kind is ErrorKind.FATAL and caught.value.field == "netns"


def test_an_eni_the_cloud_does_not_know_is_not_found_naming_the_interface() -> None:
    with pytest.raises(ProviderError) as caught:
        EniDataplane("ecs", lambda pn: None).eni_mac(RECORD)
    assert caught.value.kind is ErrorKind.NOT_FOUND
    assert caught.value.field == "status.interface" and "eni-1" in str(caught.value)


def test_the_derived_pod_mac_is_stable_unicast_and_locally_administered() -> None:
    mac = pod_mac("10.70.0.4")
    assert mac == pod_mac("10.70.0.4") != pod_mac("10.70.0.5")
    first = int(mac.split(":")[0], 16)
    assert first & 0b10 and not first & 0b1
