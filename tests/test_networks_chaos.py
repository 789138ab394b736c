"""The networks' chaos machine: hypothesis drives pods through Subnets and an IPPool that
are created, deleted, narrowed, widened and excluded while pods hold their addresses, a
pool edited mid-burst, Subnets created while the controller restarts, in any
interleaving. After every step: no address is recorded by two PodNetworks, and the
provider never allocated from a Subnet or pool it was not told is usable, nor an
excluded address. At the end, with every pod gone and every Subnet deleted: no record,
no address the provider still holds (0 leaked), no Subnet or IPPool left (their
finalizers came off once their last address was released).

``PODNET_CHAOS_EXAMPLES`` sets how many examples run (default 200)."""

from __future__ import annotations

from collections import Counter
from typing import Any

import hypothesis.strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule
from test_networks_engine import NS, Lab

from podnet.core.cluster.port import IP_POOL, POD, POD_NETWORK, SUBNET, ApiError
from podnet.testing.chaos import chaos_settings
from podnet.testing.networklab import in_block

SUBNETS = {
    "blue": ("10.110.0.0/24", "10.110.0.0/25", "10.110.0.0/23"),
    "green": ("10.111.0.0/24", "10.111.0.0/26", "10.111.0.0/22"),
    # overlaps blue: whichever is later is refused
    "teal": ("10.110.0.128/25", "10.110.0.192/26", "10.110.0.0/24"),
}
PODS = [f"p{i}" for i in range(8)]
POOL_ADDRESSES = (["10.110.0.20..10.110.0.23"], ["10.110.0.30..10.110.0.31", "10.110.0.21"],
                  ["10.110.0.100..10.110.0.140"])


class NetworksChaos(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.rig = Lab()
        self.rig.subnet("blue", SUBNETS["blue"][0], default=True)
        self.rig.settle()
        #: each Subnet's cidrBlock as last seen
        self.seen: dict[str, str] = {}
        #: (record uid, address, the Subnet the lab served it from) as last seen
        self.held: set[tuple[str, str, str]] = set()

    # --- pods ----------------------------------------------------------------------------

    @rule(pod=st.sampled_from(PODS), subnet=st.sampled_from([None, *SUBNETS]),
          pool=st.booleans())
    def add_pod(self, pod: str, subnet: str | None, pool: bool) -> None:
        annotations = {}
        if subnet is not None:
            annotations["subnets"] = subnet
        if pool:
            annotations["ip_pool"] = "db"
        try:
            self.rig.add_pod(pod, **annotations)
        except ApiError:
            pass  # it exists

    @rule(pod=st.sampled_from(PODS))
    def delete_pod(self, pod: str) -> None:
        try:
            self.rig.cluster.delete(POD, pod, NS, grace_period_seconds=0)
        except ApiError:
            pass

    # --- Subnets -----------------------------------------------------------------------------

    @rule(name=st.sampled_from(sorted(SUBNETS)), default=st.booleans())
    def create_subnet(self, name: str, default: bool) -> None:
        try:
            self.rig.subnet(name, SUBNETS[name][0], default=default)
        except ApiError:
            pass

    @rule(name=st.sampled_from(sorted(SUBNETS)), size=st.integers(0, 2))
    def resize_subnet(self, name: str, size: int) -> None:
        """Narrowed or widened while pods hold its addresses."""
        self._edit(SUBNET, name, cidrBlock=SUBNETS[name][size])

    @rule(name=st.sampled_from(sorted(SUBNETS)), first=st.integers(1, 40),
          count=st.integers(0, 20))
    def exclude(self, name: str, first: int, count: int) -> None:
        base = SUBNETS[name][0].rsplit(".", 1)[0]
        excluded = [f"{base}.{first}..{base}.{first + count}"] if count else []
        self._edit(SUBNET, name, excludeIPs=excluded)

    @rule(name=st.sampled_from(sorted(SUBNETS)))
    def delete_subnet(self, name: str) -> None:
        try:
            self.rig.cluster.delete(SUBNET, name)
        except ApiError:
            pass

    @rule(name=st.sampled_from(sorted(SUBNETS)), steps=st.integers(0, 20))
    def subnet_created_while_the_controller_restarts(self, name: str, steps: int) -> None:
        self.step(steps)
        try:
            self.rig.subnet(name, SUBNETS[name][0])
        except ApiError:
            pass
        self.rig.start()  # a new process: its first list finds the Subnet

    # --- the pool ------------------------------------------------------------------------------

    @rule(which=st.integers(0, len(POOL_ADDRESSES) - 1))
    def create_pool(self, which: int) -> None:
        try:
            self.rig.pool("db", "blue", POOL_ADDRESSES[which])
        except ApiError:
            self._edit(IP_POOL, "db", addresses=POOL_ADDRESSES[which])

    @rule(which=st.integers(0, len(POOL_ADDRESSES) - 1), burst=st.integers(1, 4),
          steps=st.integers(0, 10))
    def pool_edited_mid_burst(self, which: int, burst: int, steps: int) -> None:
        for pod in PODS[:burst]:
            self.add_pod(pod, None, True)
        self.step(steps)
        self._edit(IP_POOL, "db", addresses=POOL_ADDRESSES[which])

    @rule()
    def delete_pool(self) -> None:
        try:
            self.rig.cluster.delete(IP_POOL, "db")
        except ApiError:
            pass

    # --- time --------------------------------------------------------------------------------

    @rule(n=st.integers(1, 30))
    def step(self, n: int) -> None:
        for _ in range(n):
            if not self.rig.engine.step():
                break

    @rule(seconds=st.sampled_from([0.0, 0.5, 2.0, 10.0]))
    def settle(self, seconds: float) -> None:
        self.rig.settle(advance=seconds)

    @rule()
    def restart(self) -> None:
        self.rig.start()

    def _edit(self, kind: Any, name: str, **spec: Any) -> None:
        try:
            self.rig.cluster.patch(kind, name, {"spec": spec})
        except ApiError:
            pass

    # --- invariants ----------------------------------------------------------------------------

    @invariant()
    def no_address_owned_twice(self) -> None:
        owned = Counter(r["status"]["ip"] for r in self.rig.cluster.list(POD_NETWORK).items
                        if r.get("status", {}).get("ip"))
        assert not [a for a, n in owned.items() if n > 1], owned

    @invariant()
    def nothing_unusable_was_handed_out(self) -> None:
        assert self.rig.lab.violations == []

    @invariant()
    def no_subnet_went_while_a_record_held_its_address(self) -> None:
        now = {o["metadata"]["name"]: o["spec"]["cidrBlock"]
               for o in self.rig.cluster.list(SUBNET).items}
        served_by = self.rig.lab.subnet_of
        held = {(r["metadata"]["uid"], r["status"]["ip"],
                 served_by.get(f"{NS}/{r['metadata']['name']}", ""))
                for r in self.rig.cluster.list(POD_NETWORK).items if r.get("status", {}).get("ip")}
        # held before the Subnet went and still held, from that Subnet: it went too early
        # (a Subnet that never served the address, e.g. one refused for overlapping the
        # one that did, may go before its finalizer was ever put on)
        kept = held & self.held
        for name, cidr in self.seen.items():
            if name not in now:
                inside = [ip for _, ip, subnet in kept if subnet == name and in_block(ip, cidr)]
                assert not inside, f"Subnet {name} ({cidr}) went while {inside} held"
        self.seen, self.held = now, held

    def teardown(self) -> None:
        rig = self.rig
        rig.settle(advance=10)
        for pod in PODS:
            self.delete_pod(pod)
        self.delete_pool()
        for name in SUBNETS:
            self.delete_subnet(name)
        rig.settle(advance=30)
        assert rig.cluster.list(POD_NETWORK).items == []
        assert rig.lab.held == {}, f"leaked: {rig.lab.held}"
        left = [o["metadata"]["name"] for k in (SUBNET, IP_POOL) for o in rig.cluster.list(k).items]
        assert left == [], f"kept after their last address went: {left}"
        assert rig.lab.violations == []


TestNetworksChaos = NetworksChaos.TestCase
TestNetworksChaos.settings = chaos_settings(step_count=40)
