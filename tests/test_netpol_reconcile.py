"""The NetworkPolicy reconciler end to end on the API emulator: two providers, the
reference one (its pods enforced by node agents) and ``enforcer``, a reference provider
that enforces policy itself (``Enforcement.PROVIDER``) and records what it was handed.
Its share, the policy's status annotation, the agents' reports, Events, the requeues, the
sweep at start, and ``networkPolicy: none``."""

from __future__ import annotations

import json
from typing import Any

import attrs
import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from podnet.core.cluster.port import LEASE, NAMESPACE, NETWORK_POLICY, POD, Obj
from podnet.core.engine import Engine
from podnet.core.netpol.status import AGENT_REPORT_ANNOTATION, STATUS_ANNOTATION
from podnet.core.objects import LABEL_AGENT_NODE, agent_lease_name
from podnet.core.tracing import Tracing
from podnet.hookspecs import hookimpl
from podnet.hookspecs.errors import ErrorKind, ProviderError
from podnet.hookspecs.netpol import (
    Enforcement,
    PolicyPort,
    PolicyRealization,
    PolicyRule,
    Protocol,
    ResolvedPolicy,
)
from podnet.hookspecs.types import ProviderInfo
from podnet.plugins.reference.provider import ReferenceProvider
from podnet.testing.harness import EngineRig

ENFORCER = "enforcer"
ENFORCED = "podnet.test/enforced"


class Enforcer(ReferenceProvider):
    """The reference provider under another name, enforcing policy itself: it keeps the
    policies it was handed, as a dataplane would, and answers as told."""

    def __init__(self) -> None:
        super().__init__(name=ENFORCER)
        self.calls: list[tuple[str, ResolvedPolicy | None]] = []
        self.programmed: dict[str, ResolvedPolicy | None] = {}
        self.failure: str | None = None
        self.refusal: str | None = None
        #: the dataplane catching up: answered waiting with this message
        self.waiting: str | None = None

    @hookimpl
    def podnet_register_provider(self) -> ProviderInfo:
        return attrs.evolve(super().podnet_register_provider(),
                            network_policy=Enforcement.PROVIDER)

    @hookimpl
    def podnet_network_policy(self, provider: str, key: str, policy: ResolvedPolicy | None
                              ) -> PolicyRealization | None:
        self.calls.append((key, policy))
        if self.failure is not None:
            raise ProviderError(ErrorKind.TRANSIENT, self.failure)
        if self.refusal is not None:
            return PolicyRealization(programmed=False, message=self.refusal)
        if self.waiting is not None and policy is not None:
            return PolicyRealization(programmed=False, waiting=True, message=self.waiting)
        if policy is None:
            self.programmed.pop(key, None)
        else:
            self.programmed[key] = policy
        return None

    @hookimpl
    def podnet_network_policy_keys(self, provider: str) -> list[str]:
        return sorted(self.programmed)

    def last(self, key: str) -> ResolvedPolicy | None:
        return [p for k, p in self.calls if k == key][-1]


class Bed(EngineRig):
    def __init__(self, enforcer: Enforcer | None = None, start: bool = True,
                 **config: Any) -> None:
        self.enforcer = enforcer or Enforcer()
        super().__init__(
            [("reference", ReferenceProvider()), (ENFORCER, self.enforcer)],
            config={"nodeProviders": [{"provider": ENFORCER,
                                       "nodeSelector": f"{ENFORCED}=yes"}], **config},
            namespaces=("x", "y"), start=start)
        self.plain = self.node(0)
        self.enforced = self.node(1, {ENFORCED: "yes"})

    def start_traced(self, exporter: InMemorySpanExporter) -> TracerProvider:
        from opentelemetry.sdk.trace.export import SimpleSpanProcessor
        provider = TracerProvider()
        provider.add_span_processor(SimpleSpanProcessor(exporter))
        self.engine = Engine(self.cluster, self.pm, clock=self.clock, options=self.options,
                             tracing=Tracing(provider))
        self.engine.start()
        return provider

    def add_pod(self, ns: str, name: str, node: str, labels: dict[str, str],
                ports: list[dict[str, Any]] | None = None) -> Obj:
        container: dict[str, Any] = {"name": "app", "image": "i"}
        if ports:
            container["ports"] = ports
        return self.cluster.create(POD, {
            "metadata": {"name": name, "namespace": ns, "labels": labels},
            "spec": {"nodeName": node, "containers": [container]},
            "status": {"phase": "Running"}})

    def policy(self, name: str, spec: dict[str, Any], ns: str = "x") -> Obj:
        return self.cluster.create(NETWORK_POLICY, {
            "metadata": {"name": name, "namespace": ns}, "spec": spec})

    def status(self, name: str, ns: str = "x") -> dict[str, Any]:
        obj = self.cluster.get(NETWORK_POLICY, name, ns)
        text = (obj["metadata"].get("annotations") or {}).get(STATUS_ANNOTATION)
        return json.loads(text) if text else {}

    def condition(self, name: str, kind: str, ns: str = "x") -> dict[str, Any]:
        (found,) = [c for c in self.status(name, ns)["conditions"] if c["type"] == kind]
        return dict(found)

    def report(self, node: str, programmed: dict[str, int],
               failed: dict[str, str] | None = None) -> None:
        """What the node's agent writes on its report Lease."""
        name = agent_lease_name(node)
        annotation = json.dumps({"programmed": programmed, "failed": failed or {}})
        try:
            self.cluster.patch(LEASE, name, {"metadata": {"annotations": {
                AGENT_REPORT_ANNOTATION: annotation}}}, "kube-system")
        except Exception:
            self.cluster.create(LEASE, {"metadata": {
                "name": name, "namespace": "kube-system", "labels": {LABEL_AGENT_NODE: node},
                "annotations": {AGENT_REPORT_ANNOTATION: annotation}},
                "spec": {"holderIdentity": "h/1"}})

    def warnings(self, name: str) -> list[Obj]:
        return [e for e in self.cluster.events_for(name) if e.get("type") == "Warning"]


DENY_DB = {"podSelector": {"matchLabels": {"app": "db"}},
           "ingress": [{"from": [{"podSelector": {"matchLabels": {"app": "web"}}}],
                        "ports": [{"port": 5432}]}]}


def three_pods(bed: Bed) -> None:
    bed.add_pod("x", "db0", bed.plain, {"app": "db"})
    bed.add_pod("x", "db1", bed.enforced, {"app": "db"})
    bed.add_pod("x", "web", bed.enforced, {"app": "web"})


def addresses(bed: Bed, pod: str) -> tuple[str, ...]:
    status = bed.record(pod)["status"]
    return tuple(a for a in (status.get("ip"), status.get("ipv6")) if a)


def test_the_enforcing_provider_gets_its_own_members_and_every_peer() -> None:
    bed = Bed()
    three_pods(bed)
    bed.policy("db", DENY_DB)
    bed.settle()
    policy = bed.enforcer.last("x/db")
    assert policy is not None
    assert [m.key for m in policy.members] == ["x/db1"]
    (member,) = policy.members
    assert (member.node, member.provider, member.addresses) == (
        bed.enforced, ENFORCER, addresses(bed, "db1"))
    assert member.node_addresses == ("192.168.0.1",)
    (web,) = addresses(bed, "web")
    assert policy.ingress == (PolicyRule((f"{web}/32",), (PolicyPort(Protocol.TCP, 5432),)),)
    assert policy.egress is None
    # the reference provider's member waits for its node agent: pending, not failed
    status = bed.status("db")
    assert status["members"] == 2
    assert status["nodes"] == {"programmed": 1, "pending": [bed.plain], "failed": {}}
    assert bed.condition("db", "Accepted")["status"] == "True"
    programmed = bed.condition("db", "Programmed")
    assert (programmed["status"], programmed["reason"]) == ("Unknown", "Pending")
    assert bed.warnings("db") == []


def test_an_agent_report_programs_its_node() -> None:
    bed = Bed()
    three_pods(bed)
    bed.policy("db", DENY_DB)
    bed.settle()
    generation = bed.status("db")["observedGeneration"]
    bed.report(bed.plain, {"x/db": generation})
    bed.settle()
    assert bed.status("db")["nodes"] == {"programmed": 2, "pending": [], "failed": {}}
    programmed = bed.condition("db", "Programmed")
    assert (programmed["status"], programmed["reason"]) == ("True", "Programmed")
    bed.report(bed.plain, {}, {"x/db": "nft: no table"})
    bed.settle()
    assert bed.status("db")["nodes"]["failed"] == {bed.plain: "nft: no table"}
    assert bed.condition("db", "Programmed")["status"] == "False"


def test_status_is_written_only_when_it_changes() -> None:
    bed = Bed()
    three_pods(bed)
    bed.policy("db", DENY_DB)
    bed.settle()
    writes = bed.engine.stats.writes["networkpolicy_status"]
    before = bed.cluster.get(NETWORK_POLICY, "db", "x")["metadata"]["resourceVersion"]
    bed.engine.queue.add(("netpol", "x/db"))
    bed.settle()
    assert bed.engine.stats.writes["networkpolicy_status"] == writes
    assert bed.cluster.get(NETWORK_POLICY, "db", "x")["metadata"]["resourceVersion"] == before


def test_a_relabelled_pod_leaves_and_the_provider_removes_the_policy() -> None:
    bed = Bed()
    three_pods(bed)
    bed.policy("db", DENY_DB)
    bed.settle()
    assert "x/db" in bed.enforcer.programmed
    bed.cluster.patch(POD, "db1", {"metadata": {"labels": {"app": "cache"}}}, "x")
    bed.settle()
    assert bed.enforcer.last("x/db") is None and "x/db" not in bed.enforcer.programmed
    assert bed.status("db")["members"] == 1
    # back: programmed again
    bed.cluster.patch(POD, "db1", {"metadata": {"labels": {"app": "db"}}}, "x")
    bed.settle()
    assert [m.key for m in bed.enforcer.programmed["x/db"].members] == ["x/db1"]  # type: ignore[union-attr]


def test_a_peer_relabelled_or_gone_changes_the_peers() -> None:
    bed = Bed()
    three_pods(bed)
    bed.policy("db", DENY_DB)
    bed.settle()
    bed.add_pod("x", "web2", bed.plain, {"app": "web"})
    bed.settle()
    policy = bed.enforcer.programmed["x/db"]
    assert policy is not None and policy.ingress is not None
    assert len(policy.ingress[0].peers or ()) == 2
    bed.cluster.delete(POD, "web", "x", grace_period_seconds=0)
    bed.settle()
    policy = bed.enforcer.programmed["x/db"]
    assert policy is not None and policy.ingress is not None
    assert policy.ingress[0].peers == tuple(f"{a}/32" for a in addresses(bed, "web2"))


def test_a_namespace_relabelled_changes_the_peers() -> None:
    bed = Bed()
    three_pods(bed)
    bed.add_pod("y", "client", bed.plain, {"app": "client"})
    bed.policy("db", {"podSelector": {"matchLabels": {"app": "db"}},
                      "ingress": [{"from": [{"namespaceSelector": {
                          "matchLabels": {"team": "a"}}}]}]})
    bed.settle()
    policy = bed.enforcer.programmed["x/db"]
    assert policy is not None and policy.ingress == (PolicyRule(()),)
    bed.cluster.patch(NAMESPACE, "y", {"metadata": {"labels": {"team": "a"}}})
    bed.settle()
    policy = bed.enforcer.programmed["x/db"]
    (client,) = addresses(bed, "client")
    assert policy is not None and policy.ingress == (PolicyRule((f"{client}/32",)),)


def test_named_ports_resolve_per_member() -> None:
    bed = Bed()
    bed.add_pod("x", "db1", bed.enforced, {"app": "db"},
                ports=[{"name": "sql", "containerPort": 5433}])
    bed.add_pod("x", "db2", bed.enforced, {"app": "db"})
    bed.policy("db", {"podSelector": {"matchLabels": {"app": "db"}},
                      "ingress": [{"ports": [{"port": "sql"}]}]})
    bed.settle()
    policy = bed.enforcer.programmed["x/db"]
    assert policy is not None
    assert policy.ingress == (PolicyRule(None, (PolicyPort(Protocol.TCP, 5433),),
                                         members=("x/db1",)),)


def test_findings_are_warned_once_per_generation_and_the_rest_enforced() -> None:
    bed = Bed()
    three_pods(bed)
    bed.policy("odd", {"podSelector": {"matchLabels": {"app": "db"}}, "ingress": [
        {"from": [{"ipBlock": {"cidr": "10.0.0.0/33"}}]},
        {"from": [{"podSelector": {"matchLabels": {"app": "web"}}}]}]})
    bed.settle()
    warnings = bed.warnings("odd")
    assert [(e["reason"], e["message"]) for e in warnings] == [
        ("InvalidValue", "spec.ingress[0].from[0].ipBlock.cidr: '10.0.0.0/33' is not a CIDR; "
                         "this peer matches nothing")]
    accepted = bed.condition("odd", "Accepted")
    assert (accepted["status"], accepted["reason"]) == ("False", "InvalidValue")
    assert "spec.ingress[0].from[0].ipBlock.cidr" in accepted["message"]
    policy = bed.enforcer.programmed["x/odd"]
    (web,) = addresses(bed, "web")
    assert policy is not None and policy.ingress == (PolicyRule((f"{web}/32",)),)
    # more passes (a pod came): nothing said again
    bed.add_pod("x", "web3", bed.plain, {"app": "web"})
    bed.settle()
    assert len(bed.warnings("odd")) == 1


def test_a_controller_restart_does_not_warn_again() -> None:
    bed = Bed()
    three_pods(bed)
    bed.policy("odd", {"podSelector": {}, "ingress": [{"ports": [{"protocol": "ICMP"}]}]})
    bed.settle()
    assert len(bed.warnings("odd")) == 1
    bed.start()  # a new engine, no memory: the status says it already
    bed.settle()
    assert len(bed.warnings("odd")) == 1


def test_a_provider_failure_is_said_and_retried() -> None:
    bed = Bed()
    three_pods(bed)
    bed.enforcer.failure = "northbound unreachable"
    bed.policy("db", DENY_DB)
    bed.settle(advance=1.0)
    failed = bed.status("db")["nodes"]["failed"]
    assert failed == {bed.enforced: f"provider {ENFORCER}: northbound unreachable"}
    assert [e["reason"] for e in bed.warnings("db")] == ["NotProgrammed"]
    bed.enforcer.failure = None
    bed.settle(advance=60.0)
    assert bed.status("db")["nodes"]["programmed"] == 1
    assert "x/db" in bed.enforcer.programmed


def test_a_refusal_is_not_programmed() -> None:
    bed = Bed()
    three_pods(bed)
    bed.enforcer.refusal = "SCTP is not supported"
    bed.policy("db", DENY_DB)
    bed.settle()
    programmed = bed.condition("db", "Programmed")
    assert (programmed["status"], programmed["reason"]) == ("False", "Failed")
    assert "SCTP is not supported" in programmed["message"]


def test_a_provider_waiting_for_its_dataplane_is_pending_without_a_warning() -> None:
    bed = Bed()
    three_pods(bed)
    bed.enforcer.waiting = "the chassis have not installed the flows yet"
    bed.policy("db", DENY_DB)
    bed.settle()
    programmed = bed.condition("db", "Programmed")
    assert (programmed["status"], programmed["reason"]) == ("Unknown", "Pending")
    assert "the chassis have not installed the flows yet" in programmed["message"]
    assert bed.status("db")["nodes"].get("failed", {}) == {}
    assert bed.warnings("db") == []  # a wait is no failure
    # asked again soon, not at the next resync: the dataplane caught up meanwhile
    calls = len(bed.enforcer.calls)
    bed.enforcer.waiting = None
    bed.settle(advance=5.0)  # well within the 600 s resync
    assert bed.status("db")["nodes"]["programmed"] == 1
    assert "flows" not in bed.condition("db", "Programmed")["message"]
    assert len(bed.enforcer.calls) > calls
    assert bed.warnings("db") == []


def test_a_deleted_policy_is_removed_from_the_provider() -> None:
    bed = Bed()
    three_pods(bed)
    bed.policy("db", DENY_DB)
    bed.settle()
    bed.cluster.delete(NETWORK_POLICY, "db", "x")
    bed.settle()
    assert bed.enforcer.calls[-1] == ("x/db", None)
    assert bed.enforcer.programmed == {}


def test_the_sweep_at_start_removes_what_deleted_policies_left() -> None:
    enforcer = Enforcer()
    enforcer.programmed = {"x/gone": None, "x/db": None}
    bed = Bed(enforcer)
    three_pods(bed)
    bed.policy("db", DENY_DB)
    bed.settle()
    assert ("x/gone", None) in enforcer.calls
    assert sorted(enforcer.programmed) == ["x/db"]


def test_a_policy_without_the_providers_pods_is_removed_after_a_restart() -> None:
    enforcer = Enforcer()
    enforcer.programmed = {"x/db": None}  # programmed before the restart
    bed = Bed(enforcer)
    bed.add_pod("x", "db0", bed.plain, {"app": "db"})  # none of the enforcer's pods
    bed.policy("db", DENY_DB)
    bed.settle()
    assert enforcer.programmed == {}


def test_network_policy_none_programs_nothing_and_removes_what_was() -> None:
    enforcer = Enforcer()
    enforcer.programmed = {"x/db": None}
    bed = Bed(enforcer, networkPolicy="none")
    three_pods(bed)
    bed.policy("db", DENY_DB)
    bed.settle()
    assert enforcer.calls == [("x/db", None)]
    assert enforcer.programmed == {}
    assert bed.status("db") == {}
    assert not bed.engine.caches.network_policies.has_synced  # not even listed


def test_no_policy_no_work_per_pod() -> None:
    bed = Bed()
    three_pods(bed)
    bed.settle()
    assert bed.engine.stats.reconciles["netpol"] == 0
    assert not bed.engine.netpols.active
    assert bed.enforcer.calls == []


def test_programming_is_traced() -> None:
    exporter = InMemorySpanExporter()
    bed = Bed(start=False)
    provider = bed.start_traced(exporter)
    try:
        three_pods(bed)
        bed.policy("db", DENY_DB)
        bed.settle()
        spans = [s for s in exporter.get_finished_spans() if s.name == "netpol.program"]
        assert spans
        attributes = dict(spans[-1].attributes or {})
        assert attributes["podnet.netpol.key"] == "x/db"
        assert attributes["podnet.netpol.members"] == 2
        assert attributes["podnet.netpol.rules"] == 1
        calls = [s for s in exporter.get_finished_spans()
                 if s.name == f"{ENFORCER}.network_policy"]
        assert calls and calls[-1].parent is not None
        assert calls[-1].parent.span_id == spans[-1].context.span_id
    finally:
        provider.shutdown()


def test_the_config_says_who_enforces() -> None:
    from podnet.core.config import parse_config
    from podnet.core.errors import ConfigError

    assert parse_config({}).network_policy == "podnet"
    assert parse_config({"networkPolicy": "none"}).network_policy == "none"
    with pytest.raises(ConfigError, match="networkPolicy"):
        parse_config({"networkPolicy": "calico"})


class Sloppy(Enforcer):
    """Answers in the wrong shapes."""

    @hookimpl
    def podnet_network_policy(self, provider: str, key: str, policy: ResolvedPolicy | None
                              ) -> Any:
        return "programmed"

    @hookimpl
    def podnet_network_policy_keys(self, provider: str) -> Any:
        return "x/db"


def test_the_gateway_checks_the_answers() -> None:
    bed = Bed(Sloppy())
    with pytest.raises(ProviderError, match="not a PolicyRealization") as caught:
        bed.engine.gateway.network_policy(ENFORCER, "x/db", None)
    assert caught.value.kind is ErrorKind.FATAL
    with pytest.raises(ProviderError, match="not a collection of keys"):
        bed.engine.gateway.network_policy_keys(ENFORCER)
    assert bed.engine.stats.provider_calls[f"{ENFORCER}.network_policy"] == 1
