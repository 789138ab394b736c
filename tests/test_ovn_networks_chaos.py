"""Random histories of a Subnet and an IPPool changing under the OVN provider while pods
come and go, against a real NB server: the Subnet widened, narrowed, given exclusions
over addresses pods hold, removed and given back, its pool edited mid-burst, the
provider restarted (a new instance rebuilding its IPAM from NB) while the Subnet is being
created. After every step: no address on two ports, every live record's address on its
own port and held for it, no port of a released record left (0 owned twice, 0 leaked),
and every address handed out was one the Subnet allowed when it was handed out.

``PODNET_CHAOS_EXAMPLES`` sets the example count (50 by default here: each example is a
fresh database)."""

from __future__ import annotations

import ipaddress
import os
from collections.abc import Iterator

import attrs
import pytest
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from podnet.hookspecs.errors import ErrorKind, InvalidRequest, ProviderError
from podnet.hookspecs.models import (
    NetworkRequest,
    NodeInfo,
    ObjectMeta,
    OwnerReference,
    Phase,
    PodNetwork,
    PodNetworkSpec,
    PodNetworkStatus,
)
from podnet.hookspecs.networks import IPPoolInfo, Networks, SubnetInfo
from podnet.hookspecs.types import AllocateContext, NodeContext, PodNetworkContext
from podnet.plugins.ovn.nbserver import NbServer, ovsdb_server_available
from podnet.plugins.ovn.rows import KEY, OWNER, OWNER_VALUE, ROLE
from podnet.testing.chaos import EXAMPLES_ENV, chaos_settings

_MISSING = ovsdb_server_available()
pytestmark = pytest.mark.skipif(_MISSING is not None, reason=_MISSING or "")

NODE = NodeContext(node=NodeInfo(name="node-1", uid="u-node-1"))
PODS = [f"web-{i}" for i in range(6)] + [f"p{i}" for i in range(6)]
#: the Subnet's blocks over time: a /28 widened to a /27 and a /26, narrowed back
BLOCKS = ["10.90.0.0/28", "10.90.0.0/27", "10.90.0.0/26"]


class _Server:
    server: NbServer | None = None


def _record(pod: str) -> PodNetwork:
    sts = pod.startswith("web-")
    owners = (OwnerReference("apps/v1", "StatefulSet", "web", "u-web", True),) if sts else ()
    return PodNetwork(
        metadata=ObjectMeta(name=f"{pod}.default", namespace="chaos", owner_references=owners),
        spec=PodNetworkSpec(pod_name=pod, pod_uid=f"u-{pod}", node_name="node-1",
                            provider="ovn", sticky=sts, requests=NetworkRequest()))


class OvnNetworksChaos(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        from podnet.plugins.ovn.provider import OvnProvider

        server = _Server.server
        assert server is not None
        server.restart_fresh()
        self.make = lambda: OvnProvider(server.remote, [
            {"name": "cfg", "cidr": "10.91.0.0/24", "default": True}], seed=0)
        self.plugin = self.make()
        self.block = 0
        self.excluded: tuple[str, ...] = ()
        self.served = False
        self.generation = 1
        self.pool: IPPoolInfo | None = None
        #: pod -> its routed record
        self.records: dict[str, PodNetwork] = {}
        self.changes = 0

    # --- the objects -------------------------------------------------------------------

    def _subnet(self) -> SubnetInfo:
        return SubnetInfo(name="blue", provider="ovn", cidrs=(BLOCKS[self.block],),
                          gateways=("10.90.0.1",), excluded=self.excluded,
                          parameters={"logicalSwitch": "ls-blue"},
                          generation=self.generation)

    def _networks(self) -> Networks:
        if not self.served:
            return Networks(revision=self.changes)
        pools = (self.pool,) if self.pool is not None else ()
        return Networks(subnets=(self._subnet(),), pools=pools, revision=self.changes)

    def _tell(self) -> None:
        self.changes += 1
        self.generation += 1
        self.plugin.podnet_networks_changed(provider="ovn", networks=self._networks())

    @rule()
    def subnet_created_or_given_back(self) -> None:
        self.served = True
        self._tell()

    @precondition(lambda self: self.served)
    @rule()
    def subnet_removed(self) -> None:
        self.served = False
        self._tell()

    @rule(block=st.integers(0, len(BLOCKS) - 1))
    def block_widened_or_narrowed(self, block: int) -> None:
        self.block = block
        self._tell()

    @rule(first=st.integers(2, 40), count=st.integers(0, 12))
    def exclusions_set(self, first: int, count: int) -> None:
        """Exclude a range (pods may hold addresses in it), or none."""
        lo = ipaddress.ip_address("10.90.0.0") + first
        self.excluded = (f"{lo}..{lo + count}",) if count else ()
        self._tell()

    @rule(first=st.integers(2, 30), count=st.integers(0, 5))
    def pool_edited(self, first: int, count: int) -> None:
        lo = ipaddress.ip_address("10.90.0.0") + first
        self.pool = IPPoolInfo(name="web-ips", subnet="blue",
                               addresses=(f"{lo}..{lo + count}",),
                               generation=self.generation) if count else None
        self._tell()

    @rule()
    def provider_restarted(self) -> None:
        """A new controller: the IPAM rebuilt from NB, the networks given again (maybe
        changed meanwhile: the Subnet created while it restarts)."""
        self.plugin.close()
        self.plugin = self.make()
        self.plugin.podnet_networks_changed(provider="ovn", networks=self._networks())

    # --- pods -------------------------------------------------------------------------

    @rule(pod=st.sampled_from(PODS))
    def pod_created(self, pod: str) -> None:
        if pod in self.records:
            return
        pn = _record(pod)
        info = self._subnet() if self.served else None
        pool = self.pool if info is not None and pod.startswith("web-") else None
        allowed = self._allowed(info, pool)
        try:
            a = self.plugin.podnet_allocate(AllocateContext(pod_network=pn, node=NODE,
                                                            subnet=info, ip_pool=pool))
        except ProviderError as exc:
            assert exc.kind in (ErrorKind.SUBNET_EXHAUSTED, ErrorKind.INVALID), exc
            assert isinstance(exc, InvalidRequest) or exc.kind is ErrorKind.SUBNET_EXHAUSTED
            return
        assert a is not None
        assert a.ip in allowed, f"{pod} got {a.ip}, not allowed now ({sorted(allowed)[:5]}...)"
        rec = attrs.evolve(pn, status=PodNetworkStatus(
            phase=Phase.ROUTED, ip=a.ip, mac=a.mac, subnet=a.subnet, gateway=a.gateway,
            interface=a.interface, prefix_length=a.prefix_length, mtu=a.mtu))
        self.plugin.podnet_route(PodNetworkContext(pod_network=rec, node=NODE))
        self.records[pod] = rec

    def _allowed(self, info: SubnetInfo | None, pool: IPPoolInfo | None) -> set[str]:
        """The addresses a new pod may get now."""
        if info is None:
            net = ipaddress.ip_network("10.91.0.0/24")
            return {str(a) for a in net.hosts()} - {"10.91.0.1"}
        net = ipaddress.ip_network(BLOCKS[self.block])
        ok = {str(a) for a in net.hosts()} - {"10.90.0.1"}
        ok = {a for a in ok if not info.excludes(a)}
        if pool is not None:
            ok &= set(pool.members())
        elif self.pool is not None:  # a random pick leaves the pool's addresses alone
            ok -= set(self.pool.members())
        return ok

    @precondition(lambda self: self.records)
    @rule(data=st.data())
    def pod_deleted(self, data: st.DataObject) -> None:
        pod = data.draw(st.sampled_from(sorted(self.records)))
        rec = self.records.pop(pod)
        self.plugin.podnet_release(PodNetworkContext(pod_network=rec, node=NODE))

    @invariant()
    def every_pod_verified(self) -> None:
        """A change never breaks a running pod's port: its verify stays ok."""
        for pod, rec in self.records.items():
            got = self.plugin.podnet_verify(PodNetworkContext(pod_network=rec, node=NODE))
            assert got is not None and got.ok, (pod, got)

    # --- what must always hold --------------------------------------------------------

    @invariant()
    def no_address_twice_none_leaked_each_held(self) -> None:
        ports = {}
        for lsp in self.plugin.client.ports():
            ext = lsp.external_ids
            if ext.get(OWNER) == OWNER_VALUE and KEY in ext and ROLE not in ext:
                ports[lsp.name] = ext.get("podnet/ip")
        owners: dict[str, str] = {}
        for name, ip in ports.items():
            assert ip not in owners, f"{ip} is on {owners.get(ip)} and {name}"
            owners[ip] = name
        live = {rec.status.interface: rec.status.ip for rec in self.records.values()}
        assert set(ports) == set(live), f"ports {sorted(ports)}, records {sorted(live)}"
        for name, ip in live.items():
            assert ports[name] == ip, (name, ports[name], ip)
            assert self.plugin.ipam.owner(ip) == name, (ip, self.plugin.ipam.owner(ip), name)

    def teardown(self) -> None:
        self.plugin.close()


@pytest.fixture(scope="module", autouse=True)
def _nb_server() -> Iterator[None]:
    if _MISSING is not None:
        pytest.skip(_MISSING)
    with NbServer() as server:
        _Server.server = server
        yield
        _Server.server = None


TestOvnNetworksChaos = OvnNetworksChaos.TestCase
TestOvnNetworksChaos.settings = chaos_settings(int(os.environ.get(EXAMPLES_ENV, "50")),
                                               step_count=25)
