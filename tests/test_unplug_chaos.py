"""The release handshake explored by hypothesis: the controller (the real engine) and the
node agent (the real ``NodeAgent``: its cache, its plug decisions, its report) over one
in-memory API server, in any interleaving of pods made and deleted, the runtime's ADD and
DEL, the agent's cache and report running behind, and either side restarting; and of what
others do to the report (GOALS.md R8): deleted or unlabelled by hand, its lists edited, a
second agent under the node's name on another host (its report refused while the first
one's is live, taken over once it runs out), or an agent that does not check writing over
it.

The host is a dict: a provider plugin whose dataplane keeps each plugged interface and
the address it carries (netlink is what the packet tests are for; here the point is the
order of events). ``unplug_timeout`` is out of reach, so no release may lean on it.

Invariants, after every step: no address is on two interfaces (also checked at the
moment each interface is plugged); an address on a plugged interface is recorded by no
other PodNetwork than the one it was plugged for, and that record still exists (its
address was not given back while the interface holds it). At the end, once every sandbox
is deleted, the second agent stopped, its report run out and both sides caught up: every
deleted pod's record is gone (nothing waits for ever), and no interface is left.

Sandboxes are real network namespaces (the agent checks that a sandbox is one, and not
the node's own): root is needed.
"""

from __future__ import annotations

import json
import os
import subprocess
import tempfile
import threading
import uuid
from collections.abc import Callable
from typing import Any

import hypothesis.strategies as st
import pytest
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from podnet.app.demo import node_obj, pod_obj
from podnet.core.clock import FakeClock, format_micro_time
from podnet.core.cluster.port import LEASE, NAMESPACE, NODE, POD, POD_NETWORK, NotFound
from podnet.core.convert import from_wire
from podnet.core.engine import Engine, EngineOptions
from podnet.core.models import AgentReport, Phase
from podnet.core.models import PodNetwork as PodNetworkModel
from podnet.core.objects import (
    ANNOTATION_PLUGGED_ON,
    LABEL_AGENT_NODE,
    agent_lease_name,
    agent_report_lease,
    release_token,
)
from podnet.core.plugin import Providers, new_plugin_manager
from podnet.core.policy import PoolPolicy
from podnet.hookspecs import hookimpl
from podnet.hookspecs.errors import ErrorKind, ProviderError
from podnet.hookspecs.types import Plug, PlugContext, PlugResult, ProviderInfo, UnplugContext
from podnet.node import CniError, NodeAgent
from podnet.plugins.reference.provider import ReferenceCloud, ReferenceProvider
from podnet.sim.memory import InMemoryCluster
from podnet.testing.chaos import chaos_settings
from podnet.testing.harness import EngineFactory
from podnet.testing.netns import netns_unavailable

WHY = netns_unavailable()
pytestmark = pytest.mark.skipif(WHY is not None, reason=WHY or "")

NS = "demo"
AGENTS = "kube-system"
#: the host of the second agent under the node's name
OTHER_HOST = "other-host.1"
PODS = 3
NEVER = 1e9  # the unplug timeout: out of the machine's reach
ATTACHMENT = "blue"


class DictDataplane:
    """The ``reference`` provider as the node agent sees it: plugs kept in a dict."""

    def __init__(self) -> None:
        #: (container, interface) -> (the plug, the address it carries)
        self.plugged: dict[tuple[str, str], tuple[Plug, str]] = {}
        #: an address plugged while another interface still had it (at that moment)
        self.doubled: list[str] = []
        #: called once, inside the next plug (a second request arriving meanwhile)
        self.during_plug: Callable[[], None] | None = None
        #: the next plug fails once its interface is made; the next unplug fails before
        #: it removes anything (a dataplane that fails halfway)
        self.plug_fails_halfway = False
        self.unplug_fails = False
        #: how often the agent read what is plugged (a netlink dump on a real host)
        self.listed = 0

    @hookimpl
    def podnet_register_provider(self) -> ProviderInfo:
        return ProviderInfo(name="reference", version="test")

    @hookimpl
    def podnet_plug(self, context: PlugContext) -> PlugResult:
        pn = context.pod_network
        assert pn.status.ip is not None and pn.status.mac is not None
        hook, self.during_plug = self.during_plug, None
        if hook is not None:
            hook()
        here = (context.container_id, context.if_name)
        self.doubled += [f"{pn.status.ip} plugged on {here} while {where} has it"
                         for where, (_, ip) in list(self.plugged.items())
                         if ip == pn.status.ip and where != here]
        # a host end named as a veth's is (the agent keeps it in its view of the host)
        host = f"h{context.container_id[:8]}{context.if_name}"
        self.plugged[here] = (
            Plug(container_id=context.container_id, if_name=context.if_name,
                 network=pn.spec.network, owner=pn.key, host_interface=host), pn.status.ip)
        if self.plug_fails_halfway:
            self.plug_fails_halfway = False
            raise ProviderError(ErrorKind.TRANSIENT, f"{host}: made, then the plug failed")
        return PlugResult(name=context.if_name, mac=pn.status.mac,
                          sandbox=context.netns or "", host_interface=host)

    @hookimpl
    def podnet_unplug(self, context: UnplugContext) -> None:
        if self.unplug_fails:
            self.unplug_fails = False
            raise ProviderError(ErrorKind.TRANSIENT, "the unplug failed")
        self.plugged.pop((context.container_id, context.if_name), None)

    @hookimpl
    def podnet_plugs(self, provider: str, node: str) -> list[Plug]:
        self.listed += 1
        return [plug for plug, _ in self.plugged.values()]


class HandshakeMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.clock = FakeClock()
        self.cluster = InMemoryCluster(clock=self.clock)
        self.cloud = ReferenceCloud()
        # a pool of one idle address: a freed address is the next one handed out
        self.policy = PoolPolicy(min_idle=0, max_idle=1, batch_size=1, max_batch_size=1,
                                 reuse_cooldown=0.0,
                                 unplug_timeout=NEVER)
        for ns in (NS, "kube-system"):
            self.cluster.create(NAMESPACE, {"metadata": {"name": ns}})
        self.node = str(self.cluster.create(NODE, node_obj(0))["metadata"]["name"])
        self.engine = self._engine()
        self.dataplane = DictDataplane()
        self.agent = self._agent()
        #: a second agent under the node's name on another host (its own empty host)
        self.second: NodeAgent | None = None
        # the sandboxes' namespace (the dict dataplane plugs nothing into it), and one
        # whose eth0 is another's link
        self.namespaces = [f"pnchaos-{uuid.uuid4().hex[:8]}" for _ in range(2)]
        for name in self.namespaces:
            subprocess.run(["ip", "netns", "add", name], check=True)
        self.netns, self.taken_netns = (f"/run/netns/{n}" for n in self.namespaces)
        subprocess.run(["ip", "-n", self.namespaces[1], "link", "add", "eth0", "type", "veth",
                        "peer", "name", "other0"], check=True)
        #: pod index -> the live sandbox's container id; a counter for new ones
        self.sandboxes: dict[int, str] = {}
        self.made = 0
        #: sandboxes the runtime replaced by a new one before their DEL: it sends that
        #: DEL some time (the CNI spec's promise), here at the end
        self.replaced: list[tuple[int, str]] = []

    def teardown(self) -> None:
        EngineFactory.stop(self.engine)
        self.agent.records.stop()
        if self.second is not None:
            self.second.records.stop()
        for name in self.namespaces:
            subprocess.run(["ip", "netns", "del", name], check=False)

    def _engine(self) -> Engine:
        pm = new_plugin_manager()
        pm.register(ReferenceProvider(self.cloud, policy=self.policy), name="reference")
        engine = Engine(self.cluster, pm, clock=self.clock,
                        options=EngineOptions(default_provider="reference",
                                              networks={ATTACHMENT: "reference"}))
        engine.start()
        return engine

    def _agent(self, dataplane: DictDataplane | None = None,
               host_id: str | None = None) -> NodeAgent:
        pm = new_plugin_manager()
        pm.register(dataplane or self.dataplane, name="dict-dataplane")
        agent = NodeAgent(self.cluster, Providers(pm), self.node, add_timeout=0,
                          host_id=host_id)
        # the parts of start() without its threads: the machine runs them as rules
        agent.records.start()
        agent.remove_leftovers()
        agent.reporter.flush()
        return agent

    def _records_of_running_pod(self, i: int) -> set[str]:
        """The keys of the records of the pod now named ``p{i}`` (its uid's)."""
        try:
            uid = self.cluster.get(POD, f"p{i}", NS)["metadata"]["uid"]
        except Exception:
            return set()  # no pod by that name now
        return {f"{NS}/{obj['metadata']['name']}" for obj in self.cluster.list(POD_NETWORK).items
                if obj["spec"].get("podUid") == uid}

    def _body(self, i: int, container: str) -> dict[str, Any]:
        return {"cniVersion": "1.1.0", "containerId": container, "netns": self.netns,
                "ifName": "eth0", "podNamespace": NS, "podName": f"p{i}", "podUid": None,
                "network": "podnet", "config": {}}

    # --- the cluster and the runtime ----------------------------------------------------

    @rule(i=st.integers(0, PODS - 1))
    def create_pod(self, i: int) -> None:
        try:
            self.cluster.create(POD, pod_obj(f"p{i}", self.node))
        except Exception:
            pass  # it exists

    @rule(i=st.integers(0, PODS - 1))
    def delete_pod(self, i: int) -> None:
        try:
            self.cluster.delete(POD, f"p{i}", NS, grace_period_seconds=0)
        except NotFound:
            pass

    @rule(i=st.integers(0, PODS - 1), fresh=st.booleans())
    def add(self, i: int, fresh: bool) -> None:
        """The runtime's ADD: a new sandbox (after a DEL, or the kubelet's new one) or the
        same one retried."""
        if fresh or i not in self.sandboxes:
            if i in self.sandboxes:
                self.replaced.append((i, self.sandboxes[i]))
            self.made += 1
            self.sandboxes[i] = f"c{self.made}"
        try:
            self.agent.add(self._body(i, self.sandboxes[i]))
        except CniError:
            pass  # not Routed yet, being released, ...: the runtime retries

    @rule(i=st.integers(0, PODS - 1))
    def pod_runs(self, i: int) -> None:
        """A pod made, routed, seen by the agent and ADDed in one go: interfaces for the
        faults below to act on (each step of it is a rule of its own too)."""
        self.create_pod(i)
        self.engine.run_until_idle()
        self.agent.records.pump(0)
        self.add(i, fresh=i not in self.sandboxes)

    @precondition(lambda self: bool(self.sandboxes))
    @rule(data=st.data())
    def delete(self, data: st.DataObject) -> None:
        i = data.draw(st.sampled_from(sorted(self.sandboxes)))
        self.agent.delete(self._body(i, self.sandboxes.pop(i)))

    # --- the two sides, each behind the other -----------------------------------------

    @rule(advance=st.sampled_from([0.0, 1.0, 30.0]))
    def controller_runs(self, advance: float) -> None:
        self.engine.run_until_idle(advance=advance)

    @rule()
    def controller_step(self) -> None:
        self.engine.step()

    @rule()
    def agent_watch(self) -> None:
        self.agent.records.pump(0)

    @rule()
    def agent_reports(self) -> None:
        self.agent.reporter.flush()

    @rule()
    def agent_restarts(self) -> None:
        self.agent.records.stop()
        self.agent = self._agent()

    @rule()
    def controller_restarts(self) -> None:
        EngineFactory.stop(self.engine)
        self.engine = self._engine()

    # --- what others do to the report (R8) --------------------------------------------

    def _lease_name(self) -> str:
        return agent_lease_name(self.node)

    def report_deleted(self) -> None:
        """Someone deletes the agent's report by hand."""
        try:
            self.cluster.delete(LEASE, self._lease_name(), AGENTS)
        except NotFound:
            pass

    def report_unlabelled(self) -> None:
        """Someone removes the report's podnet.io/agent-node label."""
        try:
            self.cluster.patch(LEASE, self._lease_name(),
                               {"metadata": {"labels": {LABEL_AGENT_NODE: None}}}, AGENTS)
        except NotFound:
            pass

    def _releasing_tokens(self) -> list[str]:
        return [release_token(pn) for pn in (
            from_wire(PodNetworkModel, obj) for obj in self.cluster.list(POD_NETWORK).items)
            if pn.status.phase is Phase.RELEASING]

    def report_edited(self) -> None:
        """Someone edits the report's list: every Releasing record acknowledged."""
        try:
            self.cluster.patch(LEASE, self._lease_name(), {"metadata": {"annotations": {
                "podnet.io/unplugged": json.dumps(self._releasing_tokens())}}}, AGENTS)
        except NotFound:
            pass

    def report_overwritten(self) -> None:
        """An agent of another host that does not check the holder writes the report: it
        holds nothing, so every Releasing record is unplugged there."""
        lease = agent_report_lease(
            AgentReport(node=self.node, holder=f"{OTHER_HOST}/unchecked",
                        unplugged=frozenset(self._releasing_tokens())),
            AGENTS, format_micro_time(self.clock.now()))
        try:
            current = self.cluster.get(LEASE, self._lease_name(), AGENTS)
        except NotFound:
            self.cluster.create(LEASE, lease)
            return
        lease["metadata"]["resourceVersion"] = current["metadata"]["resourceVersion"]
        self.cluster.update(LEASE, lease)

    def report_runs_out(self) -> None:
        """Its holder has not renewed it for longer than its duration (time passes for
        the Lease: the agents' clocks are real ones)."""
        try:
            self.cluster.patch(LEASE, self._lease_name(), {"spec": {
                "renewTime": "2020-01-01T00:00:00.000000Z"}}, AGENTS)
        except NotFound:
            pass

    @rule(how=st.sampled_from(["deleted", "unlabelled", "edited", "overwritten", "runs_out"]))
    def report_tampered(self, how: str) -> None:
        """What others do to the agent's report."""
        getattr(self, f"report_{how}")()

    @rule(stop=st.booleans())
    def second_agent(self, stop: bool) -> None:
        """A second agent under the node's name on another host (its own empty host)
        starts or reports; or is stopped."""
        if stop:
            if self.second is not None:
                self.second.records.stop()
                self.second = None
        elif self.second is None:
            self.second = self._agent(DictDataplane(), host_id=OTHER_HOST)
        else:
            self.second.records.pump(0)
            self.second.reporter.flush()

    # --- what must hold ---------------------------------------------------------------

    @invariant()
    def a_plugged_address_is_its_records_alone(self) -> None:
        recorded: dict[str, set[str]] = {}
        for obj in self.cluster.list(POD_NETWORK).items:
            ip = (obj.get("status") or {}).get("ip")
            if ip:
                key = f"{obj['metadata']['namespace']}/{obj['metadata']['name']}"
                recorded.setdefault(ip, set()).add(key)
        on: dict[str, tuple[str, str]] = {}
        for (container, if_name), (plug, address) in self.dataplane.plugged.items():
            assert address not in on, (f"{address} is on {on[address]} and on "
                                       f"{(container, if_name)}")
            on[address] = (container, if_name)
            others = recorded.get(address, set()) - {plug.owner}
            assert not others, (f"{address} is on {plug.container_id}'s interface, plugged "
                                f"for {plug.owner}, and recorded by {sorted(others)}")
            assert plug.owner in recorded.get(address, set()), (
                f"{address} is on {plug.container_id}'s interface, plugged for "
                f"{plug.owner}, whose record gave it back")

    # === node-side request faults: concurrent ADDs of one pod, attachments taken off
    # running pods, ADDs with bad namespaces and names ===================================

    def _new_container(self) -> str:
        self.made += 1
        return f"c{self.made}"

    @rule(i=st.integers(0, PODS - 1))
    def create_pod_with_attachment(self, i: int) -> None:
        try:
            self.cluster.create(POD, pod_obj(f"p{i}", self.node, (ATTACHMENT,)))
        except Exception:
            pass  # it exists

    @rule(i=st.integers(0, PODS - 1))
    def take_attachment_off(self, i: int) -> None:
        """``podnet.io/networks`` edited on the running pod: no DEL comes for net1."""
        try:
            obj = self.cluster.get(POD, f"p{i}", NS)
        except NotFound:
            return
        if (obj["metadata"].get("annotations") or {}).pop("podnet.io/networks", None):
            self.cluster.update(POD, obj)

    @rule()
    def agent_unplugs_dropped(self) -> None:
        self.agent.unplug_dropped()

    @rule(i=st.integers(0, PODS - 1))
    def plug_fails_halfway(self, i: int) -> None:
        """A new sandbox's ADD whose plug made the interface, then failed: the agent's
        view of the host cannot know what is left, and reads the host again."""
        self.dataplane.plug_fails_halfway = True
        self.add(i, fresh=True)
        self.dataplane.plug_fails_halfway = False

    @precondition(lambda self: bool(self.sandboxes))
    @rule(data=st.data())
    def unplug_fails(self, data: st.DataObject) -> None:
        """A DEL whose unplug fails: the interface stays, the runtime retries the DEL
        later (here, at once or at the end)."""
        i = data.draw(st.sampled_from(sorted(self.sandboxes)))
        self.dataplane.unplug_fails = True
        try:
            self.agent.delete(self._body(i, self.sandboxes[i]))
        except CniError:
            pass  # the sandbox stays the pod's: its DEL comes again
        else:
            self.sandboxes.pop(i)
        self.dataplane.unplug_fails = False

    @rule(i=st.integers(0, PODS - 1))
    def concurrent_adds(self, i: int) -> None:
        """Two sandboxes of one pod ADDed at the same moment (the second arrives while
        the first is plugging); the runtime keeps the one that holds the interface and
        DELs the other."""
        first, second = self._new_container(), self._new_container()
        late: list[threading.Thread] = []

        def add(container: str) -> None:
            try:
                self.agent.add(self._body(i, container))
            except CniError:
                pass

        def second_arrives() -> None:
            thread = threading.Thread(target=add, args=(second,))
            thread.start()
            late.append(thread)
            # a bounded look: an agent that lets it plug now has two interfaces, one
            # that serializes per record makes it wait (it goes on below)
            thread.join(timeout=0.02)

        self.dataplane.during_plug = second_arrives
        add(first)
        self.dataplane.during_plug = None
        for thread in late:
            thread.join()
        holders = {c for c, _ in self.dataplane.plugged if c in (first, second)}
        for container in (first, second):
            if container not in holders:
                self.agent.delete(self._body(i, container))
        if holders:
            old = self.sandboxes.get(i)
            self.sandboxes[i] = max(holders, key=lambda c: int(c[1:]))
            if old is not None and old not in holders:
                self.agent.delete(self._body(i, old))

    @precondition(lambda self: bool(self.sandboxes))
    @rule(data=st.data())
    def same_container_second_ifname(self, data: st.DataObject) -> None:
        i = data.draw(st.sampled_from(sorted(self.sandboxes)))
        container = self.sandboxes[i]
        routed = {f"{NS}/{obj['metadata']['name']}" for obj in self.cluster.list(POD_NETWORK).items
                  if obj["spec"]["podName"] == f"p{i}"
                  and (obj.get("status") or {}).get("phase") == "Routed"}
        # the container's interface of the pod's live default record under another name
        # than eth1 (a pod made again under its name has other records: the runtime
        # would make it a sandbox of its own)
        before = {k: v for k, v in self.dataplane.plugged.items()
                  if k[0] == container and k[1] != "eth1" and v[0].owner in routed
                  and v[0].network == "default"}
        try:
            self.agent.add({**self._body(i, container), "ifName": "eth1"})
        except CniError as exc:
            # its record has an interface: refused, naming the field (11: its record is
            # being released, a wait)
            assert exc.code == 11 or exc.msg.startswith("ifName"), exc.msg
        else:
            assert not before, f"{container} ADDed as eth1 beside {sorted(before)}"

    @rule(i=st.integers(0, PODS - 1),
          bad=st.sampled_from(["plain file", "missing", "the host's", "the agent's",
                               "eth0 taken", "ifName a/b", "ifName too long",
                               "containerId ../x"]))
    def add_with_bad_sandbox(self, i: int, bad: str) -> None:
        """A new sandbox's ADD with a namespace that is none, or the node's, or whose
        eth0 is taken, or a malformed name: error 7, and the pod's live sandbox keeps
        every interface it had."""
        before = dict(self.dataplane.plugged)
        body = self._body(i, self._new_container())
        with tempfile.NamedTemporaryFile(prefix="podnet-chaos-plain-") as plain:
            body.update({
                "plain file": {"netns": plain.name},
                "missing": {"netns": plain.name + "-gone"},
                "the host's": {"netns": "/proc/1/ns/net"},
                "the agent's": {"netns": f"/proc/{os.getpid()}/ns/net"},
                "eth0 taken": {"netns": self.taken_netns},
                "ifName a/b": {"ifName": "a/b"},
                "ifName too long": {"ifName": "x" * 16},
                "containerId ../x": {"containerId": "../x"},
            }[bad])
            try:
                self.agent.add(body)
            except CniError as exc:
                if bad != "eth0 taken" or exc.code != 11:  # 11: not Routed yet
                    assert exc.code == 7, (bad, exc.msg)
            else:
                # a taken name with no other sandbox of this pod to unplug: the
                # provider's plug decides (the dict dataplane plugs into no namespace).
                # A pod made again under its name has records of its own: its old
                # instance's sandbox is not this one's to unplug or to guard
                mine = self._records_of_running_pod(i)
                live = [p for p, _ in before.values() if p.owner in mine]
                assert bad == "eth0 taken" and not live, (bad, live)
                self.agent.delete(body)
                return
        assert self.dataplane.plugged == before, f"{bad}: a refused ADD changed the host"

    @invariant()
    def no_address_on_two_interfaces(self) -> None:
        assert not self.dataplane.doubled, self.dataplane.doubled
        seen: dict[str, tuple[str, str]] = {}
        for where, (_, address) in self.dataplane.plugged.items():
            assert address not in seen, f"{address} is on {seen[address]} and {where}"
            seen[address] = where

    @rule()
    def dropped_attachments_are_released(self) -> None:
        """Both sides caught up: an attachment taken off a running pod does not wait for
        the unplug timeout (the agent took its interface away and said so). Not while an
        agent of another host holds the node's report (it won the race for a deleted
        one): this agent cannot say so, and its records wait, as the unplug timeout is
        for."""
        for _ in range(3):
            self.engine.run_until_idle(advance=1.0)
            self.agent.records.pump(0)
            self.agent.unplug_dropped()
            self.agent.reporter.flush()
        self.engine.run_until_idle(advance=1.0)
        if self.agent.reporter.conflict is not None:
            return
        for obj in self.cluster.list(POD_NETWORK).items:
            if obj["spec"].get("network") != ATTACHMENT:
                continue
            try:
                pod = self.cluster.get(POD, obj["spec"]["podName"], NS)
            except NotFound:
                continue
            asked = (pod["metadata"].get("annotations") or {}).get("podnet.io/networks")
            dropped = pod["metadata"]["uid"] == obj["spec"]["podUid"] and not asked
            assert not dropped, (f"{obj['metadata']['name']}: its pod no longer asks for "
                                 f"{ATTACHMENT}, and it still waits: "
                                 f"{obj.get('status', {}).get('phase')}")

    # === end of the node-side request faults ============================================

    def check_the_end(self) -> None:
        # the operator stops the second agent; its report runs out; the first one's
        # agent takes it back
        self.second_agent(stop=True)
        self.report_runs_out()
        self.agent.reporter.flush()
        assert self.agent.ready, self.agent.reporter.conflict
        for i in sorted(self.sandboxes):
            self.agent.delete(self._body(i, self.sandboxes.pop(i)))
        for i, container in self.replaced:
            self.agent.delete(self._body(i, container))
        self.replaced.clear()
        for i in range(PODS):
            self.delete_pod(i)
        for _ in range(5):
            self.engine.run_until_idle(advance=30.0)
            self.agent.records.pump(0)
            self.agent.reporter.flush()
        self.engine.run_until_idle(advance=30.0)
        assert self.dataplane.plugged == {}
        left = [obj["metadata"]["name"] for obj in self.cluster.list(POD_NETWORK).items]
        assert left == [], f"records still waiting once every interface is gone: {left}"


class _Machine(HandshakeMachine):
    @rule()
    def the_end(self) -> None:
        """Now and then, the whole story's end (its checks) in the middle of one."""
        self.check_the_end()


TestHandshake = _Machine.TestCase
TestHandshake.settings = chaos_settings(step_count=40)


def test_the_agent_writes_its_host_onto_a_record_before_it_plugs_it() -> None:
    """The durable half of the handshake: the record names the host before the interface
    exists; a record that turned Releasing meanwhile is neither written nor plugged."""
    machine = HandshakeMachine()
    try:
        machine.pod_runs(0)
        (plug, _address), = machine.dataplane.plugged.values()
        record = machine.cluster.get(POD_NETWORK, plug.owner.split("/")[1], NS)
        assert record["metadata"]["annotations"][ANNOTATION_PLUGGED_ON] == machine.agent.host

        machine.create_pod(1)
        machine.engine.run_until_idle()
        machine.agent.records.pump(0)
        machine.delete_pod(1)
        machine.engine.run_until_idle()  # Releasing; the agent's cache still says Routed
        machine.add(1, fresh=True)
        assert len(machine.dataplane.plugged) == 1, "a Releasing record was plugged"
        released = [obj for obj in machine.cluster.list(POD_NETWORK).items
                    if obj["spec"]["podName"] == "p1"]
        assert all(ANNOTATION_PLUGGED_ON not in (obj["metadata"].get("annotations") or {})
                   for obj in released)
    finally:
        machine.teardown()


def test_an_agent_that_lost_its_report_to_another_host_takes_it_back_once_deleted() -> None:
    """Found by the machine (CI): the node's report deleted by hand, a second agent under
    the node's name on another host made it first, so this agent stood aside (not
    ready); the report deleted again, this agent wrote it anew — and still said it stood
    aside, not ready for good. Now a report it made itself is its own again."""
    machine = _Machine()
    try:
        machine.report_tampered(how="deleted")
        machine.second_agent(stop=False)
        machine.agent_reports()
        assert not machine.agent.ready and machine.agent.reporter.conflict
        machine.report_tampered(how="deleted")
        machine.agent_reports()
        assert machine.agent.ready, machine.agent.reporter.conflict
        machine.the_end()
    finally:
        machine.teardown()


def test_a_dropped_attachment_waits_while_another_host_holds_the_report() -> None:
    """Found by the machine (CI): a second agent won the race for a deleted report, then
    an attachment was taken off a running pod. This agent unplugged it but cannot say so
    in a report it does not hold: the record waits Releasing (never released on the
    word of a host that has nothing plugged); once the second agent stops and its report
    runs out, this agent takes the report back and the record goes."""
    machine = _Machine()
    try:
        machine.create_pod_with_attachment(i=0)
        machine.pod_runs(i=0)
        machine.report_tampered(how="deleted")
        machine.second_agent(stop=False)
        machine.take_attachment_off(i=0)
        machine.dropped_attachments_are_released()
        phases = {obj["spec"]["network"]: (obj.get("status") or {}).get("phase")
                  for obj in machine.cluster.list(POD_NETWORK).items}
        assert phases.get(ATTACHMENT) == "Releasing", phases
        machine.the_end()
    finally:
        machine.teardown()



def test_add_and_del_read_the_agents_view_not_the_host() -> None:
    """An ADD, a DEL and the NetworkPolicy's ports take what is plugged from the agent's
    view of the host (read at start, then kept by its own plugs and unplugs): one dump of
    every link per request made a burst quadratic in the node's pods. A record that has
    an interface already (its pod's sandbox made again) is decided on the host's word."""
    machine = HandshakeMachine()
    try:
        for i in range(PODS):
            machine.create_pod(i)
        machine.engine.run_until_idle()
        machine.agent.records.pump(0)
        listed = machine.dataplane.listed
        for i in range(PODS):
            machine.add(i, fresh=True)
        assert len(machine.dataplane.plugged) == PODS
        assert len(machine.agent.policy_ports()) == PODS
        machine.agent.delete(machine._body(0, machine.sandboxes.pop(0)))
        assert len(machine.dataplane.plugged) == PODS - 1
        assert machine.dataplane.listed == listed, "the host was read for every request"

        machine.add(1, fresh=True)  # pod 1's new sandbox: its old one's interface goes
        assert machine.dataplane.listed == listed + 1
        assert sorted(c for c, _ in machine.dataplane.plugged) == ["c3", "c4"]
        # what the view says is what the host has
        assert ({(c, plug.owner) for c, (plug, _) in machine.dataplane.plugged.items()}
                == {((plug.container_id, plug.if_name), plug.owner)
                    for _, plug in machine.agent.plug_view.plugs()})
    finally:
        machine.teardown()


def test_an_add_takes_its_pod_from_the_nodes_pod_informer() -> None:
    """The pod an ADD names is read from the node's pod informer (the NetworkPolicy
    enforcer's, bound to this node) when it has that very pod (its uid); the API server
    is asked only when it does not (not there yet, an earlier pod of that name)."""
    machine = HandshakeMachine()
    pods = machine.agent.policy.pods
    try:
        pods.start()
        for i in range(2):
            machine.create_pod(i)
        machine.engine.run_until_idle()
        machine.agent.records.pump(0)
        pods.pump(0)
        uid = machine.cluster.get(POD, "p0", NS)["metadata"]["uid"]
        gets = machine.cluster.stats[("get", "pods")]
        machine.agent.add({**machine._body(0, "c1"), "podUid": uid})
        assert len(machine.dataplane.plugged) == 1
        assert machine.cluster.stats[("get", "pods")] == gets, "the pod was read again"

        # a uid the informer has not seen: the API server says whose sandbox it is
        with pytest.raises(CniError) as refused:
            machine.agent.add({**machine._body(1, "c2"), "podUid": "an-earlier-pod"})
        assert refused.value.code == 7 and "podUid" in refused.value.msg
        assert machine.cluster.stats[("get", "pods")] == gets + 1
        assert machine.agent.pod_reads == 1
    finally:
        pods.stop()
        machine.teardown()
