"""Subnets, IPPools and SecurityGroups declared as objects, end to end on the in-memory
cluster: checked (``podnet_subnet_parameters``), published to their provider
(``podnet_networks_changed``), chosen for pod networks, counted, kept while in use. The
provider is the test kit's ``lab`` (``podnet.testing.networklab``), which serves pod
networks from the Subnet core chose."""

from __future__ import annotations

from typing import Any

import pytest

from podnet.core.cluster.port import (
    IP_POOL,
    NAMESPACE,
    POD,
    POD_NETWORK,
    SECURITY_GROUP,
    SUBNET,
    NotFound,
    Obj,
)
from podnet.hookspecs import hookimpl
from podnet.hookspecs.networks import NETWORK_FINALIZER, Networks, SubnetInfo
from podnet.testing.harness import EngineRig
from podnet.testing.networklab import LAB, NetworkLab

NS = "team-a"


class Lab(EngineRig):
    def __init__(self, **kw: Any) -> None:
        self.lab = NetworkLab()
        super().__init__([(LAB, self.lab)], config={"defaultProvider": LAB},
                         namespaces=(NS, "team-b"), **kw)
        self.nodes = [self.node(0)]

    def subnet(self, name: str, cidr: str, **spec: Any) -> Obj:
        obj = self.cluster.create(SUBNET, {"metadata": {"name": name},
                                           "spec": {"provider": LAB, "cidrBlock": cidr, **spec}})
        self.clock.advance(1.0)  # creation times a second apart: "the later" is defined
        return obj

    def pool(self, name: str, subnet: str, addresses: list[str], **spec: Any) -> Obj:
        obj = self.cluster.create(IP_POOL, {"metadata": {"name": name}, "spec": {
            "subnet": subnet, "addresses": addresses, **spec}})
        self.clock.advance(1.0)
        return obj

    def edit(self, kind: Any, name: str, **spec: Any) -> None:
        self.cluster.patch(kind, name, {"spec": spec})

    def get(self, kind: Any, name: str) -> Obj:
        return self.cluster.get(kind, name)

    def add_pod(self, name: str, namespace: str = NS, **annotations: str) -> Obj:
        obj = {"metadata": {"name": name, "namespace": namespace,
                            "annotations": {f"podnet.io/{k.replace('_', '-')}": v
                                            for k, v in annotations.items()}},
               "spec": {"nodeName": self.nodes[0], "containers": [{"name": "c", "image": "i"}]},
               "status": {"phase": "Running"}}
        return self.cluster.create(POD, obj)

    def record_of(self, pod: str, namespace: str = NS) -> Obj:
        (found,) = [r for r in self.cluster.list(POD_NETWORK, namespace).items
                    if r["spec"]["podName"] == pod]
        return found

    def ready(self, kind: Any, name: str) -> dict[str, Any]:
        return condition(self.get(kind, name), "Ready")

    def warnings(self, name: str, reason: str | None = None) -> list[Obj]:
        return [e for e in self.cluster.events_for(name, reason=reason)
                if e.get("type") == "Warning"]


def condition(obj: Obj, kind: str) -> dict[str, Any]:
    for c in obj.get("status", {}).get("conditions", ()):
        if c["type"] == kind:
            return dict(c)
    return {}


def test_the_provider_hears_the_empty_set_once_before_any_pod_pass() -> None:
    rig = Lab()
    assert len(rig.lab.published) == 1
    assert rig.lab.networks.subnets == ()


def test_a_subnet_created_at_run_time_serves_pods_without_a_restart() -> None:
    rig = Lab()
    rig.subnet("blue", "10.20.0.0/24", default=True)
    rig.settle()
    assert rig.get(SUBNET, "blue")["status"]["phase"] == "Ready"
    assert NETWORK_FINALIZER in rig.get(SUBNET, "blue")["metadata"]["finalizers"]
    assert [s.name for s in rig.lab.networks.subnets] == ["blue"]
    rig.add_pod("web-0")
    rig.settle()
    rec = rig.record_of("web-0")
    assert rec["status"]["phase"] == "Routed"
    assert rec["status"]["ip"] == "10.20.0.2"  # .1 is the gateway

    # a second Subnet for team-b, made while everything runs
    rig.subnet("green", "10.21.0.0/24", namespaces=["team-b"])
    rig.settle()
    rig.add_pod("api-0", namespace="team-b")
    rig.settle()
    assert rig.record_of("api-0", "team-b")["status"]["ip"] == "10.21.0.2"
    assert [s.name for s in rig.lab.networks.subnets] == ["blue", "green"]
    revisions = [n.revision for n in rig.lab.published]
    assert revisions == sorted(set(revisions))


def test_the_later_of_two_overlapping_subnets_is_not_ready_and_serves_no_pod() -> None:
    rig = Lab()
    rig.subnet("blue", "10.20.0.0/16", default=True)
    rig.subnet("green", "10.20.5.0/24", namespaces=["team-b"])
    rig.settle()
    ready = rig.ready(SUBNET, "green")
    assert (ready["status"], ready["reason"]) == ("False", "Overlaps")
    assert "Subnet blue (10.20.0.0/16)" in ready["message"]
    assert rig.get(SUBNET, "green")["status"]["phase"] == "NotReady"
    assert rig.warnings("green", "Overlaps")
    assert rig.ready(SUBNET, "blue")["status"] == "True"
    assert all(n.subnet("green") is None for n in rig.lab.published)

    # named by the pod: refused, naming the annotation and the Subnet
    rig.add_pod("named", subnets="green")
    # listed for team-b: it is not Ready, so team-b's pod takes the default
    rig.add_pod("listed", namespace="team-b")
    rig.settle()
    named = rig.record_of("named")
    ready = condition(named, "Ready")
    assert ready["reason"] == "InvalidRequest"
    assert "metadata.annotations[podnet.io/subnets]" in ready["message"]
    assert "Subnet green is not Ready" in ready["message"]
    assert "ip" not in named["status"]
    assert rig.record_of("listed", "team-b")["status"]["ip"].startswith("10.20.0.")

    # the older one goes: green is Ready, and the refused pod is looked at again
    rig.cluster.delete(SUBNET, "blue")
    rig.settle()
    assert rig.ready(SUBNET, "green")["status"] == "False"  # blue's pod still holds it
    rig.cluster.delete(POD, "listed", "team-b", grace_period_seconds=0)
    rig.settle()
    assert rig.ready(SUBNET, "green")["status"] == "True"
    assert rig.record_of("named")["status"]["ip"].startswith("10.20.5.")


def test_an_excluded_address_a_pod_holds_is_kept_and_reported() -> None:
    rig = Lab()
    rig.subnet("blue", "10.30.0.0/24", default=True)
    rig.add_pod("web-0")
    rig.settle()
    ip = rig.record_of("web-0")["status"]["ip"]
    assert ip == "10.30.0.2"
    rig.edit(SUBNET, "blue", excludeIPs=["10.30.0.2..10.30.0.9"])
    rig.settle(advance=5)
    rec = rig.record_of("web-0")
    assert rec["status"]["ip"] == ip and rec["status"]["phase"] == "Routed"
    excluded = condition(rec, "AddressExcluded")
    assert excluded["status"] == "True" and "Subnet blue" in excluded["message"]
    assert [e for e in rig.cluster.events_for(rec) if e["reason"] == "Excluded"]
    subnet = rig.get(SUBNET, "blue")
    assert condition(subnet, "AddressesOutside")["status"] == "True"
    assert subnet["status"]["outsideIPs"] == [f"{NS}/{rec['metadata']['name']} {ip} excluded"]
    assert subnet["status"]["v4ExcludedIPs"] == 8
    assert rig.warnings("blue", "AddressesOutside")
    # a new pod never gets an excluded address
    rig.add_pod("web-1")
    rig.settle()
    assert rig.record_of("web-1")["status"]["ip"] == "10.30.0.10"
    # the exclusion is lifted: the record says so, the Subnet too
    rig.edit(SUBNET, "blue", excludeIPs=[])
    rig.settle(advance=5)
    assert condition(rig.record_of("web-0"), "AddressExcluded")["status"] == "False"
    subnet = rig.get(SUBNET, "blue")
    assert condition(subnet, "AddressesOutside")["status"] == "False"
    assert "outsideIPs" not in subnet["status"]


def test_a_narrowed_subnet_keeps_the_pod_whose_address_it_lost() -> None:
    rig = Lab()
    rig.subnet("blue", "10.40.0.0/16", default=True)
    rig.add_pod("far", ip_address="10.40.9.9")
    rig.add_pod("near")
    rig.settle()
    assert rig.record_of("far")["status"]["ip"] == "10.40.9.9"
    rig.edit(SUBNET, "blue", cidrBlock="10.40.0.0/24")
    rig.settle(advance=5)
    far = rig.record_of("far")
    assert far["status"]["ip"] == "10.40.9.9"
    excluded = condition(far, "AddressExcluded")
    assert (excluded["status"], excluded["reason"]) == ("True", "OutsideSubnet")
    assert condition(rig.record_of("near"), "AddressExcluded") == {}
    status = rig.get(SUBNET, "blue")["status"]
    assert any("10.40.9.9 outside cidrBlock" in line for line in status["outsideIPs"])
    # counted where the address is: the block holds one record's address now
    assert status["v4UsingIPs"] == 1


def test_a_subnet_in_use_is_kept_until_its_last_address_is_released() -> None:
    rig = Lab()
    rig.subnet("blue", "10.50.0.0/24", default=True)
    for i in range(4):
        rig.add_pod(f"web-{i}")
    rig.settle()
    rig.cluster.delete(SUBNET, "blue")
    rig.settle()
    subnet = rig.get(SUBNET, "blue")
    assert NETWORK_FINALIZER in subnet["metadata"]["finalizers"]
    assert subnet["status"]["phase"] == "Terminating"
    ready = rig.ready(SUBNET, "blue")
    assert ready["reason"] == "InUse" and "4 records" in ready["message"]
    assert rig.lab.networks.subnets == ()  # no new pod from it
    rig.add_pod("late")
    rig.settle()
    assert condition(rig.record_of("late"), "Ready")["reason"] == "NoSubnet"
    for i in range(4):
        rig.cluster.delete(POD, f"web-{i}", NS, grace_period_seconds=0)
        rig.settle(advance=2)
        if i < 3:
            assert f"{4 - i - 1} record" in rig.ready(SUBNET, "blue")["message"]
    assert rig.cluster.list(SUBNET).items == []


def test_one_subnet_in_use_does_not_keep_another_from_going() -> None:
    rig = Lab()
    rig.subnet("blue", "10.50.0.0/24", default=True)
    rig.subnet("spare", "10.51.0.0/24", namespaces=["nobody"])
    rig.add_pod("web-0")
    rig.settle()
    rig.cluster.delete(SUBNET, "blue")
    rig.cluster.delete(SUBNET, "spare")
    rig.settle()
    assert [s["metadata"]["name"] for s in rig.cluster.list(SUBNET).items] == ["blue"]


def test_a_pool_outside_its_subnet_is_not_ready_and_a_pod_naming_it_is_refused() -> None:
    rig = Lab()
    rig.subnet("blue", "10.60.0.0/24", default=True)
    rig.pool("outside", "blue", ["10.60.0.10..10.60.0.20", "10.61.0.1"])
    rig.pool("missing", "nope", ["10.60.0.30"])
    rig.settle()
    ready = rig.ready(IP_POOL, "outside")
    assert ready["reason"] == "OutsideSubnet" and "spec.addresses[1]" in ready["message"]
    assert rig.ready(IP_POOL, "missing")["reason"] == "SubnetNotFound"
    assert rig.warnings("outside", "OutsideSubnet")
    rig.add_pod("web-0", ip_pool="outside")
    rig.settle()
    ready = condition(rig.record_of("web-0"), "Ready")
    assert ready["reason"] == "InvalidRequest"
    assert "metadata.annotations[podnet.io/ip-pool]" in ready["message"]
    assert "IPPool outside is not Ready" in ready["message"]
    # fixed: the refused pod gets a member without being recreated
    rig.edit(IP_POOL, "outside", addresses=["10.60.0.10..10.60.0.20"])
    rig.settle()
    assert rig.ready(IP_POOL, "outside")["status"] == "True"
    assert rig.record_of("web-0")["status"]["ip"] == "10.60.0.10"


def test_an_edited_pool_serves_its_new_members_and_counts_what_is_held() -> None:
    rig = Lab()
    rig.subnet("blue", "10.70.0.0/24", default=True)
    rig.pool("db", "blue", ["10.70.0.100..10.70.0.101"], namespaces=["team-b"])
    rig.add_pod("db-0", namespace="team-b")
    rig.settle(advance=2)
    assert rig.record_of("db-0", "team-b")["status"]["ip"] == "10.70.0.100"
    status = rig.get(IP_POOL, "db")["status"]
    assert (status["v4UsingIPs"], status["v4AvailableIPs"]) == (1, 1)
    assert status["held"] == [{"ip": "10.70.0.100", "podNetwork": status["held"][0]["podNetwork"]}]
    rig.edit(IP_POOL, "db", addresses=["10.70.0.100", "10.70.0.150..10.70.0.151"])
    rig.settle()
    rig.add_pod("db-1", namespace="team-b")
    rig.settle(advance=2)
    assert rig.record_of("db-1", "team-b")["status"]["ip"] == "10.70.0.150"
    status = rig.get(IP_POOL, "db")["status"]
    assert (status["v4UsingIPs"], status["v4AvailableIPs"]) == (2, 1)
    # a pod of another namespace does not take from the pool
    rig.add_pod("web-0")
    rig.settle()
    assert rig.record_of("web-0")["status"]["ip"] == "10.70.0.2"


def test_a_pod_no_subnet_selects_waits_without_failing_and_goes_on_once_one_does() -> None:
    rig = Lab()
    rig.subnet("blue", "10.80.0.0/24", namespaces=["team-b"])
    rig.add_pod("web-0")
    rig.settle(advance=30)
    rec = rig.record_of("web-0")
    ready = condition(rec, "Ready")
    assert (ready["status"], ready["reason"]) == ("False", "NoSubnet")
    assert "team-a" in ready["message"]
    assert rig.warnings(rec["metadata"]["name"]) == []
    assert rig.warnings("web-0") == []
    stats = rig.engine.stats
    assert not stats.failed_transitions and not stats.reconcile_errors
    # a default Subnet appears: the waiting pod goes on, no restart
    rig.subnet("main", "10.81.0.0/24", default=True)
    rig.settle()
    assert rig.record_of("web-0")["status"]["ip"] == "10.81.0.2"


def test_a_namespace_selector_reads_the_namespace_labels() -> None:
    rig = Lab()
    rig.subnet("blue", "10.90.0.0/24", default=True)
    rig.subnet("gold", "10.91.0.0/24", namespaceSelector={
        "matchExpressions": [{"key": "tier", "operator": "In", "values": ["gold"]}]})
    rig.cluster.patch(NAMESPACE, "team-b", {"metadata": {"labels": {"tier": "gold"}}})
    rig.add_pod("a")
    rig.add_pod("b", namespace="team-b")
    rig.settle()
    assert rig.record_of("a")["status"]["ip"] == "10.90.0.2"
    assert rig.record_of("b", "team-b")["status"]["ip"] == "10.91.0.2"


def test_a_node_selector_keeps_a_subnet_to_its_nodes() -> None:
    rig = Lab()
    rig.subnet("edge", "10.92.0.0/24", default=True,
               nodeSelector={"matchLabels": {"zone": "edge"}})
    rig.add_pod("a")
    rig.settle()
    assert condition(rig.record_of("a"), "Ready")["reason"] == "NoSubnet"
    rig.add_pod("b", subnets="edge")
    rig.settle()
    ready = condition(rig.record_of("b"), "Ready")
    assert ready["reason"] == "InvalidRequest" and "nodeSelector" in ready["message"]


def test_provider_parameters_are_checked_and_realized() -> None:
    rig = Lab()
    rig.subnet("blue", "10.93.0.0/24", default=True, parameters={"zone": "z1"})
    rig.subnet("bad", "10.94.0.0/24", parameters={"vswitch": "x"})
    rig.settle()
    status = rig.get(SUBNET, "blue")["status"]
    assert status["provider"] == {"summary": "zone z1", "details": {"zone": "z1"}}
    assert rig.lab.networks.subnet("blue").realized == {"zone": "z1"}  # type: ignore[union-attr]
    ready = rig.ready(SUBNET, "bad")
    assert ready["reason"] == "InvalidParameters"
    assert "spec.parameters.vswitch" in ready["message"]
    # a spec that does not read: named field, nothing else stops
    rig.cluster.create(SUBNET, {"metadata": {"name": "worse"},
                                "spec": {"provider": LAB, "cidrBlock": "10.95.0.1/24"}})
    rig.settle()
    ready = rig.ready(SUBNET, "worse")
    assert ready["reason"] == "InvalidSpec" and "spec.cidrBlock" in ready["message"]
    assert rig.warnings("worse", "InvalidSpec")
    assert rig.ready(SUBNET, "blue")["status"] == "True"


def test_a_subnet_of_a_provider_nobody_registered_says_so() -> None:
    rig = Lab()
    rig.cluster.create(SUBNET, {"metadata": {"name": "x"},
                                "spec": {"provider": "nope", "cidrBlock": "10.96.0.0/24"}})
    rig.settle()
    ready = rig.ready(SUBNET, "x")
    assert ready["reason"] == "UnknownProvider" and "'nope'" in ready["message"]


def test_what_the_first_list_finds_is_published_before_the_first_pod_pass() -> None:
    rig = Lab(start=False)
    rig.cluster.create(SUBNET, {"metadata": {"name": "blue"}, "spec": {
        "provider": LAB, "cidrBlock": "10.97.0.0/24", "default": True}})
    rig.add_pod("web-0")
    rig.start()
    assert [s.name for s in rig.lab.published[0].subnets] == ["blue"]
    assert rig.lab.held == {}  # no pod pass yet
    rig.settle()
    assert rig.record_of("web-0")["status"]["ip"] == "10.97.0.2"
    assert len(rig.lab.published) == 1  # nothing changed since


def test_a_changed_security_group_is_verified_on_the_pods_naming_it() -> None:
    rig = Lab()
    rig.subnet("blue", "10.98.0.0/24", default=True)
    rig.cluster.create(SECURITY_GROUP, {"metadata": {"name": "web"}, "spec": {
        "ingress": [{"protocol": "tcp", "port": "80", "from": ["10.0.0.0/8"]}]}})
    rig.cluster.create(SECURITY_GROUP, {"metadata": {"name": "db"}, "spec": {
        "ingress": [{"protocol": "tcp", "port": "5432", "groups": ["web", "nope"]}]}})
    rig.add_pod("named", security_groups="web")
    rig.add_pod("other")
    rig.settle()
    assert rig.get(SECURITY_GROUP, "web")["status"]["phase"] == "Ready"
    assert rig.get(SECURITY_GROUP, "web")["status"]["ingressRules"] == 1
    ready = rig.ready(SECURITY_GROUP, "db")
    assert ready["reason"] == "UnknownGroup" and "nope" in ready["message"]
    assert [g.name for g in rig.lab.networks.security_groups] == ["web"]
    verified = rig.engine.stats.provider_calls[f"{LAB}.verify"]
    rig.edit(SECURITY_GROUP, "web", ingress=[{"protocol": "tcp", "port": "8000-8080"}])
    rig.settle()
    assert rig.lab.networks.security_group("web").ingress[0].ports == (8000, 8080)  # type: ignore[union-attr]
    assert rig.engine.stats.provider_calls[f"{LAB}.verify"] == verified + 1  # "named" only
    rig.edit(SECURITY_GROUP, "web", ingress=[{"protocol": "icmp", "port": "80"}])
    rig.settle()
    ready = rig.ready(SECURITY_GROUP, "web")
    assert ready["reason"] == "InvalidSpec" and "spec.ingress[0].port" in ready["message"]
    assert rig.lab.networks.security_groups == ()


def test_a_provider_that_cannot_answer_now_leaves_a_ready_subnet_as_it_was() -> None:
    rig = Lab()
    rig.subnet("blue", "10.99.0.0/24", default=True, parameters={"zone": "z1"})
    rig.settle()
    rig.edit(SUBNET, "blue", parameters={"zone": "z2", "fail": "transient"})
    rig.settle(advance=1)
    subnet = rig.get(SUBNET, "blue")
    assert subnet["status"]["phase"] == "Ready"
    assert subnet["status"]["provider"]["details"] == {"zone": "z1"}
    assert rig.engine.stats.reconcile_errors["subnet"] >= 1  # retried with backoff
    assert [s.name for s in rig.lab.networks.subnets] == ["blue"]
    rig.edit(SUBNET, "blue", parameters={"zone": "z2", "fail": None})  # a merge patch
    rig.settle(advance=600)
    assert rig.get(SUBNET, "blue")["status"]["provider"]["details"] == {"zone": "z2"}
    # a new Subnet the provider never accepted is not Ready meanwhile
    rig.subnet("green", "10.99.1.0/24", parameters={"fail": "transient"})
    rig.settle(advance=1)
    ready = rig.ready(SUBNET, "green")
    assert (ready["status"], ready["reason"]) == ("False", "ProviderError")


class WithoutCRDs:
    """The in-memory cluster as an API server without the networks' CRDs answers: 404
    for their lists and watches, until ``install()``."""

    def __init__(self, cluster: Any) -> None:
        self.cluster = cluster
        self.served = False

    def install(self) -> None:
        self.served = True

    def _check(self, kind: Any) -> None:
        if kind in (SUBNET, IP_POOL, SECURITY_GROUP) and not self.served:
            raise NotFound(f"the server could not find the requested resource ({kind})")

    def list(self, kind: Any, *args: Any, **kw: Any) -> Any:
        self._check(kind)
        return self.cluster.list(kind, *args, **kw)

    def watch(self, kind: Any, *args: Any, **kw: Any) -> Any:
        self._check(kind)
        return self.cluster.watch(kind, *args, **kw)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.cluster, name)


def test_a_cluster_without_the_crds_runs_as_before_and_picks_them_up_later(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from podnet.core.cluster import informer
    from podnet.core.engine import Engine
    from podnet.plugins.reference.provider import ReferenceCloud, ReferenceProvider
    from podnet.testing.harness import EngineRig

    rig = EngineRig([("reference", ReferenceProvider(ReferenceCloud()))], start=False)
    api = WithoutCRDs(rig.cluster)
    rig.engine = Engine(api, rig.pm, clock=rig.clock, options=rig.options)  # type: ignore[arg-type]
    rig.engine.start()
    assert all(i.has_synced for i in rig.engine.informers)  # ready: nothing of them exists
    node = rig.node(0)
    rig.pod("web-0", node)
    rig.settle()
    assert rig.record("web-0")["status"]["phase"] == "Routed"  # the config serves
    # the CRDs are installed while it runs: the next look finds them
    monkeypatch.setattr(informer, "ABSENT_RELIST", 0.0)
    api.install()
    rig.cluster.create(SUBNET, {"metadata": {"name": "ref"}, "spec": {
        "provider": "reference", "cidrBlock": "10.64.0.0/16", "default": True}})
    rig.engine.caches.subnets._absent_until = 0.0  # its next look is due now
    rig.settle()
    assert rig.cluster.get(SUBNET, "ref")["status"]["phase"] == "Ready"


class ConfigNetworks:
    """A plugin of no provider answering ``podnet_config_networks`` (the migration's
    question) for the lab."""

    @hookimpl
    def podnet_config_networks(self, provider: str) -> Networks | None:
        return Networks(subnets=(SubnetInfo(name="cfg", provider=provider,
                                            cidrs=("10.1.0.0/24",)),))


def test_the_gateway_asks_a_provider_what_its_config_declares() -> None:
    rig = Lab(start=False)
    rig.pm.register(ConfigNetworks(), name="config-networks")
    rig.start()
    answer = rig.engine.gateway.config_networks(LAB)
    assert answer is not None and [s.name for s in answer.subnets] == ["cfg"]
    assert rig.engine.stats.provider_calls[f"{LAB}.config_networks"] == 1


def test_a_pool_in_use_is_kept_until_its_last_address_is_released() -> None:
    rig = Lab()
    rig.subnet("blue", "10.88.0.0/24", default=True)
    rig.pool("db", "blue", ["10.88.0.100..10.88.0.103"])
    rig.add_pod("db-0", ip_pool="db")
    rig.add_pod("db-1", ip_pool="db")
    rig.settle()
    rig.cluster.delete(IP_POOL, "db")
    rig.settle(advance=2)
    pool = rig.get(IP_POOL, "db")
    assert pool["status"]["phase"] == "Terminating"
    ready = rig.ready(IP_POOL, "db")
    assert ready["reason"] == "InUse" and "2 records" in ready["message"]
    assert rig.lab.networks.pool("db") is None
    # a pod naming it now is refused, naming the pool
    rig.add_pod("db-2", ip_pool="db")
    rig.settle()
    assert "IPPool db is not Ready" in condition(rig.record_of("db-2"), "Ready")["message"]
    rig.cluster.delete(POD, "db-0", NS, grace_period_seconds=0)
    rig.settle(advance=2)
    assert "1 record " in rig.ready(IP_POOL, "db")["message"]
    rig.cluster.delete(POD, "db-1", NS, grace_period_seconds=0)
    rig.settle(advance=2)
    assert rig.cluster.list(IP_POOL).items == []


def test_a_subnet_refused_for_overlapping_claims_nothing_outside() -> None:
    rig = Lab()
    rig.subnet("blue", "10.87.0.0/24", default=True)
    rig.add_pod("web-0")
    rig.settle()
    ip = rig.record_of("web-0")["status"]["ip"]
    # a later Subnet over the same block, excluding the pod's address: it never served it
    rig.subnet("teal", "10.87.0.0/25", excludeIPs=[ip])
    rig.settle(advance=3)
    assert rig.ready(SUBNET, "teal")["reason"] == "Overlaps"
    assert condition(rig.get(SUBNET, "teal"), "AddressesOutside") == {}
    assert condition(rig.record_of("web-0"), "AddressExcluded") == {}


def test_a_subnet_whose_spec_stopped_reading_is_kept_while_its_addresses_are_held() -> None:
    rig = Lab()
    rig.subnet("blue", "10.86.0.0/24", default=True)
    rig.add_pod("web-0")
    rig.settle()
    rig.edit(SUBNET, "blue", excludeIPs=["10.99.0.1"])  # outside the block: does not read
    rig.settle()
    assert rig.ready(SUBNET, "blue")["reason"] == "InvalidSpec"
    rig.cluster.delete(SUBNET, "blue")
    rig.settle(advance=2)
    assert rig.get(SUBNET, "blue")["status"]["phase"] == "Terminating"
    assert "1 record " in rig.ready(SUBNET, "blue")["message"]
    rig.cluster.delete(POD, "web-0", NS, grace_period_seconds=0)
    rig.settle(advance=2)
    assert rig.cluster.list(SUBNET).items == []


def test_a_finalizer_taken_off_by_hand_is_put_back() -> None:
    rig = Lab()
    rig.subnet("blue", "10.85.0.0/24", default=True)
    rig.settle()
    rig.cluster.patch(SUBNET, "blue", {"metadata": {"finalizers": None}})
    rig.settle()
    assert rig.get(SUBNET, "blue")["metadata"]["finalizers"] == [NETWORK_FINALIZER]


def test_a_restart_says_no_held_outside_address_again() -> None:
    rig = Lab()
    rig.subnet("blue", "10.84.0.0/24", default=True)
    rig.add_pod("web-0")
    rig.settle()
    rig.edit(SUBNET, "blue", excludeIPs=["10.84.0.2"])
    rig.settle(advance=3)
    def said() -> tuple[int, int]:
        # an Event said again is the same Event with its count raised
        return (sum(e.get("count", 1) for e in rig.warnings("blue", "AddressesOutside")),
                sum(e.get("count", 1) for e in rig.cluster.events_for(
                    rig.record_of("web-0"), reason="Excluded")))

    assert said() == (1, 1)
    rig.start()
    rig.settle(advance=3)
    assert said() == (1, 1)


def test_a_ready_subnets_parameters_are_asked_again_on_resync() -> None:
    from podnet.core.reconcile.networks import PARAMETERS_RESYNC

    rig = Lab()
    rig.subnet("blue", "10.83.0.0/24", default=True, parameters={"zone": "z1"})
    rig.settle()
    asked = len(rig.lab.parameter_calls)
    rig.settle(advance=PARAMETERS_RESYNC + 1)
    assert len(rig.lab.parameter_calls) == asked + 1
    assert rig.ready(SUBNET, "blue")["status"] == "True"
    # the cloud no longer has what the Subnet names: found at the next resync
    rig.lab.refuse["blue"] = "zone z1 is gone"
    rig.settle(advance=PARAMETERS_RESYNC + 1)
    ready = rig.ready(SUBNET, "blue")
    assert ready["reason"] == "InvalidParameters" and "zone z1 is gone" in ready["message"]
    assert rig.lab.networks.subnets == ()
    # put right in the cloud: found at the next resync, no edit needed
    del rig.lab.refuse["blue"]
    rig.settle(advance=PARAMETERS_RESYNC + 1)
    assert rig.ready(SUBNET, "blue")["status"] == "True"
