"""Core's one resolution of a pod network's request against its node's pool
(``podnet.core.resolve``), and ``podnet_address_space`` answers of the built-in pool
providers."""

from __future__ import annotations

import pytest

from podnet.core.errors import InvalidRequest, PoolEmpty
from podnet.core.models import NetworkRequest, NodeInfo
from podnet.core.plugin import Providers, new_plugin_manager
from podnet.core.pool import NodePool
from podnet.core.resolve import POOL_FIELD, STATIC_FIELD, SUBNETS_FIELD, resolve
from podnet.hookspecs.types import (
    AddressSpace,
    CloudInterface,
    Inventory,
    NodeContext,
    PoolEntry,
    ResolvedRequest,
    Subnet,
)
from podnet.plugins.reference.provider import ReferenceCloud, ReferenceProvider

NODE = "node-0"
OWNER = "demo/me"
A = Subnet.first_host_gateway("sbn-a", "10.0.0.0/24")
B = Subnet.first_host_gateway("sbn-b", "10.0.1.0/24", free=50)
SPACE = AddressSpace(subnets=(A, B))


def pool_of(entries: dict[str, str | None], owners: dict[str, str] | None = None
            ) -> NodePool:
    """A synced pool: address -> its subnet, all on one interface per subnet."""
    pool = NodePool(NODE, "p")
    interfaces = {}
    for ip, subnet in entries.items():
        itf = interfaces.setdefault(subnet, CloudInterface(id=f"eth-{subnet}", subnet=subnet))
        interfaces[subnet] = CloudInterface(id=itf.id, subnet=subnet, ips=(*itf.ips, ip))
    inventory = Inventory(interfaces=tuple(interfaces.values()), max_interfaces=4,
                          ips_per_interface=16)
    pool.rebuild(inventory, dict((owners or {}).items()), set(entries), 0.0)
    return pool


def run(request: NetworkRequest, pool: NodePool, space: AddressSpace | None = SPACE
        ) -> ResolvedRequest:
    asked: list[bool] = []

    def read() -> AddressSpace | None:
        asked.append(True)
        return space

    resolved = resolve(request, owner=OWNER, node=NODE, provider="p",
                       pool=pool.reserve(OWNER, 0.0), space=read)
    plain = request == NetworkRequest()
    assert asked == ([] if plain else [True]), "the space is read only when needed"
    return resolved


def refused(request: NetworkRequest, pool: NodePool, space: AddressSpace | None = SPACE
            ) -> InvalidRequest:
    with pytest.raises(InvalidRequest) as info:
        run(request, pool, space)
    return info.value


def test_a_plain_request_takes_the_next_idle_address_without_the_space() -> None:
    pool = pool_of({"10.0.0.5": "sbn-a"})
    resolved = run(NetworkRequest(), pool)
    assert resolved == ResolvedRequest(entry=PoolEntry("10.0.0.5", "eth-sbn-a", "sbn-a"))
    assert pool.owner_of("10.0.0.5") == OWNER
    with pytest.raises(PoolEmpty):
        run(NetworkRequest(), pool_of({}))


def test_a_static_address_idle_in_the_pool_is_taken() -> None:
    pool = pool_of({"10.0.0.5": "sbn-a", "10.0.0.6": "sbn-a"})
    resolved = run(NetworkRequest(ip_address="10.0.0.6"), pool)
    assert resolved.entry is not None and resolved.entry.address == "10.0.0.6"
    assert resolved.subnet == A and resolved.field == STATIC_FIELD
    assert pool.owner_of("10.0.0.6") == OWNER


def test_a_static_address_the_pool_lacks_is_handed_to_the_provider_to_add() -> None:
    pool = pool_of({"10.0.0.5": "sbn-a"})
    resolved = run(NetworkRequest(ip_address="10.0.1.9"), pool)
    assert resolved == ResolvedRequest(address="10.0.1.9", subnet=B, field=STATIC_FIELD)
    assert pool.owner_of("10.0.0.5") is None, "nothing reserved"
    refusal = resolved.refuse("10.0.1.9 is in use outside node node-0")
    assert refusal.field == STATIC_FIELD


@pytest.mark.parametrize(("address", "says"), [
    ("192.0.2.1", "192.0.2.1 is outside every subnet of node node-0 (served: sbn-a "
                  "(10.0.0.0/24), sbn-b (10.0.1.0/24))"),
    ("10.0.0.0", "10.0.0.0 is the network address of 10.0.0.0/24 (subnet sbn-a)"),
    ("10.0.0.1", "10.0.0.1 is the subnet's gateway (subnet sbn-a)"),
    ("10.0.0.255", "10.0.0.255 is the broadcast address of 10.0.0.0/24 (subnet sbn-a)"),
    ("10.0.0.7", "10.0.0.7 is already used by demo/other"),
    ("10.0.0.9,fd00::9", "dual-stack pairs are not served by provider 'p'"),
])
def test_a_static_address_no_pod_may_have_is_refused_naming_the_annotation(
        address: str, says: str) -> None:
    pool = pool_of({"10.0.0.7": "sbn-a"}, owners={"10.0.0.7": "demo/other"})
    refusal = refused(NetworkRequest(ip_address=address), pool)
    assert refusal.field == STATIC_FIELD
    assert says in refusal.message
    assert pool.owner_of("10.0.0.7") == "demo/other"


def test_a_static_address_outside_the_requested_subnets_is_refused() -> None:
    refusal = refused(NetworkRequest(ip_address="10.0.0.9", subnets=("sbn-b",)), pool_of({}))
    assert refusal.field == STATIC_FIELD
    assert refusal.message == "10.0.0.9 is in subnet sbn-a, not in sbn-b"


def test_a_subnet_that_takes_no_static_address_serves_only_what_its_pool_holds() -> None:
    space = AddressSpace(subnets=(A, Subnet.first_host_gateway(
        "sbn-b", "10.0.1.0/24", takes_static=False)))
    pool = pool_of({"10.0.1.5": "sbn-b"})
    assert run(NetworkRequest(ip_address="10.0.1.5"), pool, space).entry is not None
    refusal = refused(NetworkRequest(ip_address="10.0.1.6"), pool_of({}), space)
    assert "adds no requested address to subnet sbn-b" in refusal.message


def test_a_subnet_whose_cidr_is_unknown_holds_no_static_address() -> None:
    space = AddressSpace(subnets=(Subnet("sbn-x"),))
    refusal = refused(NetworkRequest(ip_address="10.9.0.5"), pool_of({}), space)
    assert "outside every subnet" in refusal.message and "sbn-x" in refusal.message


def test_a_provider_without_an_address_space_serves_plain_requests_only() -> None:
    pool = pool_of({"10.0.0.5": "sbn-a"})
    for request, field in ((NetworkRequest(ip_address="10.0.0.5"), STATIC_FIELD),
                           (NetworkRequest(ip_pool=("10.0.0.5",)), POOL_FIELD),
                           (NetworkRequest(subnets=("sbn-a",)), SUBNETS_FIELD)):
        assert refused(request, pool, None).field == field
    assert pool.owner_of("10.0.0.5") is None


def test_subnets_pass_over_unknown_ones_and_refuse_when_none_is_served() -> None:
    pool = pool_of({"10.0.0.5": "sbn-a", "10.0.1.5": "sbn-b"})
    resolved = run(NetworkRequest(subnets=("sbn-nope", "sbn-b")), pool)
    assert resolved.entry is not None and resolved.entry.address == "10.0.1.5"
    assert resolved.subnet == B and resolved.field == SUBNETS_FIELD
    refusal = refused(NetworkRequest(subnets=("sbn-nope",)), pool)
    assert refusal.field == SUBNETS_FIELD
    assert refusal.message == ("none of sbn-nope is served on node node-0 (served: sbn-a "
                               "(10.0.0.0/24), sbn-b (10.0.1.0/24))")


def test_subnets_without_an_idle_address_wait_for_the_one_with_most_room() -> None:
    pool = pool_of({"10.0.0.5": "sbn-a"})
    with pytest.raises(PoolEmpty) as info:
        run(NetworkRequest(subnets=("sbn-c", "sbn-b")), pool, AddressSpace(
            subnets=(A, B, Subnet("sbn-c", free=3))))
    assert info.value.subnet == "sbn-b"
    with pytest.raises(PoolEmpty) as info:
        run(NetworkRequest(subnets=("sbn-c", "sbn-d")), pool, AddressSpace(
            subnets=(Subnet("sbn-c"), Subnet("sbn-d"))))
    assert info.value.subnet == "sbn-c", "nothing known: the pod's order"
    assert pool.owner_of("10.0.0.5") is None


def test_entries_whose_subnet_the_inventory_did_not_say_are_matched_by_cidr() -> None:
    pool = pool_of({"10.0.1.5": None})
    resolved = run(NetworkRequest(subnets=("sbn-b",)), pool)
    assert resolved.entry is not None and resolved.entry.address == "10.0.1.5"
    assert resolved.subnet == B


def test_an_ip_pool_takes_its_first_idle_address() -> None:
    pool = pool_of({"10.0.0.5": "sbn-a", "10.0.0.6": "sbn-a", "10.0.1.7": "sbn-b"},
                   owners={"10.0.0.5": "demo/other"})
    resolved = run(NetworkRequest(ip_pool=("10.0.0.5", "10.0.0.6")), pool)
    assert resolved.entry is not None and resolved.entry.address == "10.0.0.6"
    assert resolved.field == POOL_FIELD
    resolved = run(NetworkRequest(ip_pool=("10.0.0.6", "10.0.1.7"), subnets=("sbn-b",)),
                   pool_of({"10.0.0.6": "sbn-a", "10.0.1.7": "sbn-b"}))
    assert resolved.entry is not None and resolved.entry.address == "10.0.1.7"


@pytest.mark.parametrize(("request_", "space", "says"), [
    (NetworkRequest(ip_pool=("gold",)), SPACE,
     "named pool 'gold' is not defined for provider 'p' (give a list of addresses)"),
    (NetworkRequest(ip_pool=("10.0.0.9", "10.0.0.10")), SPACE,
     "no address of the pool is idle on node node-0"),
    (NetworkRequest(ip_pool=("10.0.0.5",)), AddressSpace(subnets=(A,), ip_pools=False),
     "provider 'p' does not serve address pools"),
])
def test_an_ip_pool_that_cannot_be_served_is_refused_naming_the_annotation(
        request_: NetworkRequest, space: AddressSpace, says: str) -> None:
    refusal = refused(request_, pool_of({"10.0.0.5": "sbn-a"}), space)
    assert refusal.field == POOL_FIELD and refusal.message == says


def test_a_static_pair_is_an_idle_pair_of_the_pool() -> None:
    pool = NodePool(NODE, "p")
    pool.rebuild(Inventory(interfaces=(CloudInterface(
        id="eth1", subnet="sbn-a", ips=("10.0.0.5", "10.0.0.6"), ipv6=("fd00::5", "fd00::6")),),
        max_interfaces=2, ips_per_interface=8, dual_stack=True),
        {}, {"10.0.0.5", "10.0.0.6", "fd00::5", "fd00::6"}, 0.0)
    space = AddressSpace(subnets=(A,), pairs=True)
    resolved = run(NetworkRequest(ip_address="10.0.0.6,fd00::6"), pool, space)
    assert resolved.entry is not None
    assert (resolved.entry.address, resolved.entry.ipv6) == ("10.0.0.6", "fd00::6")
    refusal = refused(NetworkRequest(ip_address="10.0.0.5,fd00::6"), pool, space)
    assert refusal.message == "10.0.0.5,fd00::6 is not an idle pair on node node-0"


def test_the_reference_provider_serves_the_nodes_pod_cidr() -> None:
    provider = ReferenceProvider(ReferenceCloud())
    node = NodeContext(node=NodeInfo(name=NODE, uid="u", pod_cidr="10.64.0.0/24"))
    space = provider.podnet_address_space(provider="reference", node=node)
    assert space == AddressSpace(subnets=(
        Subnet(id="10.64.0.0/24", cidr="10.64.0.0/24", gateway="10.64.0.1"),))
    # routed: a call for another provider never reaches the reference plugin
    pm = new_plugin_manager()
    pm.register(provider, name="reference")
    other = Providers(pm).hook("other", "podnet_address_space")
    assert other(provider="other", node=node) is None
    bare = NodeContext(node=NodeInfo(name=NODE, uid="u"))
    assert provider.podnet_address_space(provider="reference", node=bare) == AddressSpace()
