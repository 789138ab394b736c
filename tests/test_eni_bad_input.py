"""The ENI dataplane (``podnet.linux.eni``) refuses a record it cannot plug before it
touches the host, with an error naming the record and the field (no root needed); and an
ENI whose device came down is brought up rather than refused (in a namespace: root)."""

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


def test_an_eni_device_that_came_down_is_brought_up_for_its_table() -> None:
    """A hot-plugged ENI's device appears down until the node's setup runs: the ENI's
    table is still made (its device brought up), not refused with ENETDOWN."""
    from podnet.linux.netns import iproute
    from podnet.testing.netns import netns_unavailable

    why = netns_unavailable()
    if why is not None:
        pytest.skip(why)
    import contextlib
    import subprocess
    import uuid

    name = f"pneni-{uuid.uuid4().hex[:6]}"
    mac = "02:00:00:aa:bb:01"
    subprocess.run(["ip", "netns", "add", name], check=True)
    try:
        subprocess.run(["ip", "-n", name, "link", "add", "eth1", "address", mac, "type",
                        "veth", "peer", "name", "vpc1"], check=True)
        # the VPC's end up, the ENI's device left down, as a fresh attach is (and the
        # namespace's loopback up, as a node's is: the kernel checks gateways against it)
        for link in ("vpc1", "lo"):
            subprocess.run(["ip", "-n", name, "link", "set", link, "up"], check=True)
        dataplane = EniDataplane("ecs", lambda pn: mac)
        with contextlib.closing(iproute(f"/run/netns/{name}")) as ipr:
            table = dataplane._table(ipr, RECORD, "10.70.0.1", None)
            (link,) = ipr.get_links(ipr.link_lookup(ifname="eth1")[0])
            assert link["flags"] & 1, "the ENI's device is still down"
            routes = ipr.get_routes(table=table)
            assert any(r.get_attr("RTA_GATEWAY") == "10.70.0.1" for r in routes), routes
    finally:
        subprocess.run(["ip", "netns", "del", name], check=False)
