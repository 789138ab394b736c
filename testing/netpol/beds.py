"""Where the truth table runs: a cluster as processes (``podnet apiserver``, the
controller, node agents) whose pods are network namespaces, the upstream suite's world
created in it (namespaces x, y, z; pods a, b, c each, with their labels and named ports),
and a :class:`~podnet.testing.netpol.prober.Prober` serving in every pod.

:class:`PolicyBed` is what a test drives: apply policies (``kubectl apply``, as an
operator does), relabel a pod or a namespace, delete a policy, wait until the policies
say they are programmed (their ``podnet.io/status`` annotation's ``Programmed``
condition at their generation; bounded, and not an assertion: probing until the matrix
matches is the proof), and probe the matrix. :func:`run_case` does all of it for one
:class:`~podnet.testing.netpol.cases.Case` and undoes it after.

Two beds: :class:`NodeBed` (the reference provider; its pods on two node agents, which
enforce with nftables) and :class:`OvnPolicyBed` (the OVN provider; a real chassis,
dual-stack, its policies as ACLs written by the controller). Both start in tens of
seconds: a test module keeps one for all its cases.
"""

from __future__ import annotations

import contextlib
import http.client
import ipaddress
import json
import re
import socket
import time
import urllib.parse
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import attrs

from podnet.testing.netpol.cases import (
    NAMESPACES,
    PODS,
    PORTS,
    Case,
    LabelChange,
    base_cluster,
    pod_object,
    relabelled,
)
from podnet.testing.netpol.matrix import Cell, Matrix, Verdict
from podnet.testing.netpol.oracle import Cluster, expected
from podnet.testing.netpol.prober import Endpoint, Prober, protocols

__all__ = ["CaseResult", "NodeBed", "OvnPolicyBed", "PolicyBed", "programmed", "run_case"]

STATUS = "podnet.io/status"


def programmed(policy: Mapping[str, Any]) -> bool:
    """Whether a NetworkPolicy as read says it is programmed at its generation."""
    meta = policy.get("metadata") or {}
    raw = (meta.get("annotations") or {}).get(STATUS)
    if not raw:
        return False
    try:
        status = json.loads(raw)
    except ValueError:
        return False
    if status.get("observedGeneration") != meta.get("generation", 1):
        return False
    return any(c.get("type") == "Programmed" and c.get("status") == "True"
               for c in status.get("conditions") or ())


class PolicyBed:
    """A running cluster with the world of the truth table, and a prober in its pods.

    Subclasses start the cluster (:attr:`kubectl`, :attr:`plug`) and call
    :meth:`_populate`; :meth:`close` stops everything, also after a failed start."""

    name = "bed"
    #: the IP versions its pods have
    families: tuple[int, ...] = (4,)

    def __init__(self) -> None:
        self.cluster: Cluster | None = None
        self.prober: Prober | None = None
        self.endpoints: dict[str, Endpoint] = {}
        self.timings: dict[str, float] = {}
        #: what :meth:`revive` found dead and restarted
        self.revived: list[str] = []
        #: the reports of cases whose first attempt differed and whose second did not
        #: (:attr:`second_attempts`), printed in the module's summary
        self.flaked: list[str] = []

    #: a case whose matrix differs is applied once more from scratch on this bed, and
    #: passes only when that attempt matches in full (the first report is kept in
    #: :attr:`flaked`, never dropped): 0 on every bed (OVN's had 1, see there)
    second_attempts = 0

    # what a subclass gives
    def kubectl(self, *args: str, input: str | None = None) -> str:
        raise NotImplementedError

    def nodes(self) -> Sequence[str]:
        raise NotImplementedError

    def node_addresses(self) -> Mapping[str, tuple[str, ...]]:
        return {}

    def plug(self, namespace: str, name: str, node: str) -> tuple[str, tuple[str, ...]]:
        """Plug pod ``namespace/name`` on ``node``: its namespace's path, its addresses."""
        raise NotImplementedError

    def trouble(self) -> str | None:
        """What broke under the bed itself (a daemon of its dataplane died), or None: a
        matrix probed then says nothing about podnet."""
        return None

    def revive(self) -> None:
        """Restart what :meth:`trouble` found dead (where the bed knows how)."""
        raise AssertionError(self.trouble())

    def between_cases(self) -> None:
        """Clear what the dataplane keeps of a case once it is undone (none here), so the
        next case starts from the bed's base state."""

    def diagnose(self, wrong: Mapping[int, Mapping[Cell, Verdict]]) -> str | None:
        """What the dataplane holds for the cells a case got wrong (per IP version, each
        with its expected verdict), while the case is still applied; for the report
        only, never a verdict."""
        return None

    def close(self) -> None:
        if self.prober is not None:
            self.prober.close()
            self.prober = None

    # the world
    def _populate(self) -> None:
        started = time.monotonic()
        nodes = list(self.nodes())
        docs: list[dict[str, Any]] = [
            {"apiVersion": "v1", "kind": "Namespace",
             "metadata": {"name": ns, "labels": {"ns": ns}}} for ns in NAMESPACES]
        placement = {f"{ns}/{p}": nodes[i % len(nodes)]
                     for i, (ns, p) in enumerate((ns, p) for ns in NAMESPACES for p in PODS)}
        docs += [pod_object(*_split(key), node) for key, node in placement.items()]
        self.kubectl("create", "-f", "-", input=_as_list(docs))
        addresses: dict[str, tuple[str, ...]] = {}
        for key, node in placement.items():
            netns, ips = self.plug(*_split(key), node)
            addresses[key] = ips
            self.endpoints[key] = Endpoint(key, netns, ips)
        families = {ipaddress.ip_address(a).version for ips in addresses.values() for a in ips}
        self.families = tuple(sorted(f for f in families
                                     if all(any(ipaddress.ip_address(a).version == f
                                                for a in ips) for ips in addresses.values())))
        self.cluster = base_cluster(addresses, placement, self.node_addresses())
        self.timings["plug"] = time.monotonic() - started
        self.prober = Prober(list(self.endpoints.values()), PORTS, protocols())
        self.prober.__enter__()

    @property
    def ports(self) -> list[tuple[int, str]]:
        assert self.prober is not None
        return self.prober.matrix_ports()

    # changes
    def apply(self, policies: Sequence[Mapping[str, Any]]) -> None:
        if policies:
            self.kubectl("apply", "-f", "-", input=_as_list(policies))

    def delete_policy(self, namespace: str, name: str) -> None:
        self.kubectl("delete", "networkpolicy", "-n", namespace, name, "--wait=false")

    def label_pod(self, key: str, change: LabelChange) -> None:
        namespace, name = key.split("/")
        self.kubectl("label", "pod", "-n", namespace, name, "--overwrite", *_label_args(change))

    def label_namespace(self, namespace: str, change: LabelChange) -> None:
        self.kubectl("label", "namespace", namespace, "--overwrite", *_label_args(change))

    def policies(self) -> list[dict[str, Any]]:
        return list(json.loads(self.kubectl("get", "networkpolicies", "-A", "-o", "json"))
                    ["items"])

    def _stack_policies(self, stack: Any) -> list[dict[str, Any]]:
        """The policies read from ``stack``'s apiserver over HTTP, in its namespace: the
        wait polls them every 0.2 s, and a kubectl run per poll (a process, its decoding
        and printing) made the polls slower than that and took the CPU of the agents
        and the controller being waited for."""
        answer = _get_json(stack.netns, stack.url, "/apis/networking.k8s.io/v1/networkpolicies")
        return list(answer["items"])

    def wait_programmed(self, policies: Sequence[Mapping[str, Any]], timeout: float = 20.0
                        ) -> str | None:
        """Wait until every policy of ``policies`` (as applied) says it is programmed;
        None when they do, else what they say at ``timeout`` (not a failure: the matrix
        is the proof)."""
        wanted = {(p["metadata"]["namespace"], p["metadata"]["name"]) for p in policies}
        if not wanted:
            return None
        deadline = time.monotonic() + timeout
        while True:
            seen = {(p["metadata"]["namespace"], p["metadata"]["name"]): p
                    for p in self.policies()}
            waiting = sorted(k for k in wanted if not (k in seen and programmed(seen[k])))
            if not waiting:
                return None
            if time.monotonic() > deadline:
                return "; ".join(
                    f"{ns}/{name}: "
                    f"{(seen.get((ns, name), {}).get('metadata', {}).get('annotations') or {}).get(STATUS, 'no status')}"  # noqa: E501
                    for ns, name in waiting)
            time.sleep(0.2)

    def observe(self, want: Matrix, family: int, deadline: float = 30.0) -> Matrix:
        assert self.prober is not None
        return self.prober.converge(want, family, deadline)


def _get_json(netns: str | None, url: str, path: str) -> Any:
    """GET ``path`` of the server at ``url``, from network namespace ``netns`` (a name
    of ``ip netns``; None: this one); its JSON."""
    from podnet.linux.netns import run_in_netns

    where = urllib.parse.urlsplit(url)
    host, port = where.hostname or "127.0.0.1", where.port or 80

    def connect() -> socket.socket:
        return socket.create_connection((host, port), timeout=20)

    conn = http.client.HTTPConnection(host, port, timeout=20)
    conn.sock = run_in_netns(f"/run/netns/{netns}", connect) if netns else connect()
    try:
        conn.request("GET", path)
        response = conn.getresponse()
        body = response.read()
        assert response.status == 200, f"GET {path}: {response.status} {body[:300]!r}"
        return json.loads(body)
    finally:
        conn.close()


def _naming(text: str, a: str, b: str, *, both: bool) -> list[str]:
    """The lines of ``text`` naming address ``a`` and (``both``) or ``b``."""
    def named(address: str) -> re.Pattern[str]:
        return re.compile(rf"(?<![0-9a-fA-F.:]){re.escape(address)}(?![0-9a-fA-F.:])")

    first, second = named(a), named(b)
    join = all if both else any
    return [line for line in text.splitlines()
            if join((first.search(line), second.search(line)))]


def _split(key: str) -> tuple[str, str]:
    namespace, _, name = key.partition("/")
    return namespace, name


def _as_list(docs: Sequence[Mapping[str, Any]]) -> str:
    """Objects as one JSON List for ``kubectl -f -`` (JSON: YAML 1.1 would read the
    namespace ``y`` as a boolean)."""
    return json.dumps({"apiVersion": "v1", "kind": "List", "items": [dict(d) for d in docs]})


def _label_args(change: LabelChange) -> list[str]:
    return [f"{k}-" if v is None else f"{k}={v}" for k, v in change.items()]


def _undo(base: Mapping[str, str], change: LabelChange) -> dict[str, str | None]:
    return {k: base.get(k) for k in change}


@attrs.frozen
class CaseResult:
    """One case on one bed: per IP version, the expected and the observed matrix."""

    case: str
    bed: str
    matrices: dict[int, tuple[Matrix, Matrix]]
    #: what the policies' status said when it did not say programmed in time (or None)
    status: str | None
    seconds: float
    #: what the bed found in its dataplane for the wrong cells (:meth:`PolicyBed.diagnose`)
    diagnosis: str | None = None

    @property
    def mismatches(self) -> int:
        return sum(len(e.mismatches(o)) for e, o in self.matrices.values())

    def report(self) -> str:
        from podnet.testing.netpol.matrix import render

        parts = [f"case {self.case} on {self.bed} ({self.seconds:.1f} s)"]
        if self.status:
            parts.append(f"not programmed in time: {self.status}")
        for family, (want, got) in sorted(self.matrices.items()):
            parts.append(render(want, got, f"IPv{family}"))
        if self.diagnosis:
            parts.append(self.diagnosis)
        return "\n".join(parts)


@contextlib.contextmanager
def applied(bed: PolicyBed, case: Case) -> Iterator[tuple[Cluster, list[dict[str, Any]]]]:
    """The case's label changes and policies in place for the ``with`` block; undone
    after it (policies deleted, labels as they were), also when the block fails."""
    assert bed.cluster is not None
    world = case.cluster(bed.cluster)
    policies = case.policies(world)
    try:
        for key, change in case.pod_labels.items():
            bed.label_pod(key, change)
        for ns, change in case.namespace_labels.items():
            bed.label_namespace(ns, change)
        bed.apply(policies)
        yield world, policies
    finally:
        for p in policies:
            bed.delete_policy(p["metadata"]["namespace"], p["metadata"]["name"])
        for key, change in case.pod_labels.items():
            bed.label_pod(key, _undo(bed.cluster.pod(key).labels, change))
        for ns, change in case.namespace_labels.items():
            bed.label_namespace(ns, _undo(bed.cluster.namespaces[ns], change))
        bed.between_cases()


def run_case(bed: PolicyBed, case: Case, deadline: float = 30.0) -> CaseResult:
    """Apply ``case``, wait for it, probe every family's matrix; undo it after. On a bed
    with :attr:`PolicyBed.second_attempts`, a case whose matrix differs is run once more
    from scratch; its first report is kept in :attr:`PolicyBed.flaked`."""
    result = _run_case(bed, case, deadline)
    for _ in range(bed.second_attempts):
        if not result.mismatches:
            break
        first = result.report()
        result = _run_case(bed, case, deadline)
        if not result.mismatches:
            bed.flaked.append(first)
    return result


def _run_case(bed: PolicyBed, case: Case, deadline: float) -> CaseResult:
    started = time.monotonic()
    for attempt in range(2):
        if bed.trouble() is not None:
            bed.revive()
        matrices: dict[int, tuple[Matrix, Matrix]] = {}
        diagnosis = None
        with applied(bed, case) as (world, policies):
            status = bed.wait_programmed(policies)
            for family in bed.families:
                want = expected(policies, world, bed.ports, family, pods=list(bed.endpoints))
                matrices[family] = (want, bed.observe(want, family, deadline))
            broken = bed.trouble()
            wrong = {family: {(m.src, m.dst, m.port, m.protocol): m.expected
                              for m in want.mismatches(got)}
                     for family, (want, got) in matrices.items()}
            if broken is None and any(wrong.values()):
                diagnosis = bed.diagnose({f: cells for f, cells in wrong.items() if cells})
        if broken is None:
            break
        # the dataplane's own daemon died under the probes: its matrix says nothing of
        # podnet; once more on a revived one
        assert attempt == 0, f"the bed broke twice during case {case.name}: {broken}"
    return CaseResult(case.name, bed.name, matrices, status, time.monotonic() - started,
                      diagnosis)


# --- the beds --------------------------------------------------------------------------------


class NodeBed(PolicyBed):
    """The reference provider on two nodes (namespaces on an underlay), an agent each;
    the nine pods spread over both."""

    name = "node"
    NODES = (("node-a", "10.97.0.0/24"), ("node-b", "10.97.1.0/24"))

    def __init__(self, tmp: Path, *, agent_args: Sequence[str] = ()) -> None:
        from podnet.testing.nodebed import (
            AgentClient,
            Host,
            Stack,
            Underlay,
            node_object,
            reference_config,
        )
        from podnet.testing.waiting import wait_for

        super().__init__()
        self.host = Host()
        self.underlay: Any = None
        self.stack: Any = None
        self.clients: dict[str, Any] = {}
        try:
            started = time.monotonic()
            self.underlay = Underlay("192.168.81.0/24")
            nodes = [self.underlay.add_node(n, cidr) for n, cidr in self.NODES]
            self.stack = Stack(tmp, controller_config=reference_config(tmp),
                               netns=self.underlay.router,
                               address=self.underlay.router_address)
            self.stack.create([node_object(n.name, n.pod_cidr, n.address) for n in nodes])
            for n in nodes:
                self.stack.agent(n.name, netns=n.netns, args=list(agent_args))
                self.clients[n.name] = AgentClient(self.stack.socket_of(n.name))
            for n in nodes:
                wait_for(f"the agent of {n.name} ready", self.clients[n.name].ready, 90)
            self._addresses = {n.name: (n.address,) for n in nodes}
            self.timings["start"] = time.monotonic() - started
            self._populate()
        except BaseException:
            self.close()
            raise

    def kubectl(self, *args: str, input: str | None = None) -> str:
        return str(self.stack.kubectl(*args, input=input))

    def policies(self) -> list[dict[str, Any]]:
        return self._stack_policies(self.stack)

    def nodes(self) -> Sequence[str]:
        return [n for n, _ in self.NODES]

    def node_addresses(self) -> Mapping[str, tuple[str, ...]]:
        return self._addresses

    def plug(self, namespace: str, name: str, node: str) -> tuple[str, tuple[str, ...]]:
        _, path = self.host.netns()
        status, result = self.clients[node].add(self.host.container(), path, name,
                                                namespace=namespace)
        assert status == 200, f"ADD of {namespace}/{name}: {status} {result}"
        return path, tuple(ip["address"].split("/")[0] for ip in result["ips"])

    def close(self) -> None:
        super().close()
        for step in (self.stack and self.stack.close, self.host.cleanup,
                     self.underlay and self.underlay.cleanup):
            if step:
                try:
                    step()
                except Exception as exc:  # every step runs, whatever failed before
                    print(f"cleanup: {step}: {exc}")


def _subnets(subnet: str) -> list[dict[str, Any]]:
    return [{"name": "np", "cidr": subnet, "default": True}]


def ovn_config(subnet: str = "10.37.0.0/24,fd00:37::/120", *, enforce: bool = True
               ) -> Callable[[Any], dict[str, Any]]:
    """The OVN controller configuration of :class:`OvnPolicyBed`: one dual-stack subnet;
    ``enforce`` False: the controller leaves policy alone (``networkPolicy: none``)."""
    def config(bed: Any) -> dict[str, Any]:
        return {"defaultProvider": "ovn", "networkPolicy": "podnet" if enforce else "none",
                "providers": {"ovn": {"remote": bed.nb_remote, "ovs_db": bed.ovs_remote,
                                      "subnets": _subnets(subnet)}},
                "listen": "127.0.0.1:0"}
    return config


class CoreView:
    """The oracle's world as core's resolver reads it (``podnet.core.netpol.resolve
    .PolicyView``): pods as ``PodInfo`` with their labels and named ports, the addresses
    and node addresses as the world has them."""

    def __init__(self, world: Cluster, provider: str = "ovn") -> None:
        from podnet.hookspecs.models import NamedPort, PodInfo

        self.world = world
        self.provider = provider
        self.infos = {p.key: PodInfo(
            namespace=p.namespace, name=p.name, uid=f"uid-{p.key}", node_name=p.node,
            phase="Running", labels=dict(p.labels), host_network=p.host_network,
            named_ports=tuple(NamedPort(c.name, c.port, c.protocol) for c in p.ports))
            for p in world.pods}

    def pods(self) -> Iterable[Any]:
        return self.infos.values()

    def pods_in(self, namespace: str) -> Iterable[Any]:
        return [p for p in self.infos.values() if p.namespace == namespace]

    def namespace_labels(self, name: str) -> Mapping[str, str] | None:
        return self.world.namespaces.get(name)

    def namespaces(self) -> Iterable[str]:
        return self.world.namespaces

    def addresses_of(self, pod: Any) -> tuple[str, ...]:
        return self.world.pod(pod.key).addresses

    def provider_of(self, pod: Any) -> str | None:
        return self.provider

    def node_addresses(self, node: str) -> tuple[str, ...]:
        return tuple(self.world.node_addresses.get(node, ()))


def resolved(policies: Sequence[Mapping[str, Any]], world: Cluster, provider: str = "ovn"
             ) -> list[Any]:
    """``policies`` read and resolved by core (``podnet.core.netpol``) against ``world``."""
    from podnet.core.netpol.resolve import resolve
    from podnet.core.netpol.wire import read_policy

    view = CoreView(world, provider)
    out = []
    for p in policies:
        meta = p["metadata"]
        obj = {**p, "metadata": {"uid": f"uid-{meta['namespace']}-{meta['name']}",
                                 "generation": 1, **meta}}
        out.append(resolve(read_policy(obj), view))
    return out


class OvnPolicyBed(PolicyBed):
    """The OVN provider on one chassis (:class:`~podnet.testing.ovnbed.OvnNodeBed`), a
    dual-stack subnet: the policies are the controller's ACLs, enforced by
    ``ovn-controller``.

    ``direct``: the bed resolves the policies itself with core's resolver and calls the
    provider's ``podnet_network_policy`` on every change, waiting for the chassis
    (``ovn-nbctl --wait=hv sync``): the OVN dataplane and core's resolver under test
    without the controller's reconciler."""

    name = "ovn"
    #: none: about one full run in two had a case with one or two cells wrong for the
    #: whole 30 s the prober re-probes them (seen: egress-ipblock-except x/a -> z/c
    #: TCP/80 passing; ingress-tcp-any-port z/a -> x/a TCP/80 dropped), never the same
    #: twice, and ran it once more: a stale megaflow of the userspace datapath, not
    #: conntrack (a flush left the cell wrong, a datapath flow purge made it right),
    #: which the bed now purges before probing (:meth:`purge_datapath_flows`). A case
    #: with wrong cells has its chassis' state in its report (:meth:`diagnose`)
    second_attempts = 0

    def __init__(self, tmp: Path, *, subnet: str = "10.37.0.0/24,fd00:37::/120",
                 direct: bool = False) -> None:
        from podnet.testing.ovnbed import OvnNodeBed

        super().__init__()
        self.bed: Any = None
        self.direct = direct
        self.provider: Any = None
        self._applied: dict[tuple[str, str], Mapping[str, Any]] = {}
        self._world: Cluster | None = None
        if direct:
            self.name = "ovn-direct"
        try:
            started = time.monotonic()
            # direct: the bed is the only writer of the policies' rows
            self.bed = OvnNodeBed(tmp, ovn_config(subnet, enforce=not direct),
                                  pod_cidr="10.98.0.0/24",
                                  underlay="192.168.82.0/24")
            self.timings["start"] = time.monotonic() - started
            self._populate()
            if direct:
                from podnet.plugins.ovn.provider import OvnProvider

                self.provider = OvnProvider(self.bed.ovn.nb_remote, _subnets(subnet))
                self._world = self.cluster
        except BaseException:
            self.close()
            raise

    # direct: every change resolved and programmed by the bed
    def _program(self, gone: Sequence[tuple[str, str]] = ()) -> None:
        if not self.direct:
            return
        assert self._world is not None
        if self.trouble() is not None:
            self.revive()
        for (ns, name) in gone:
            done = self.provider.podnet_network_policy("ovn", f"{ns}/{name}", None)
            assert done is not None and done.programmed, done
        for policy in resolved(list(self._applied.values()), self._world):
            policy = attrs.evolve(policy, members=tuple(
                m for m in policy.members if m.provider == "ovn"))
            done = self.provider.podnet_network_policy("ovn", policy.key, policy)
            assert done is not None and done.programmed, done
        # the chassis has applied it (a loaded machine may take long: waited, not failed)
        self.bed.ovn.tool("ovn-nbctl", f"--db={self.bed.ovn.nb_remote}", "--timeout=120",
                          "--wait=hv", "sync", timeout=130)

    def apply(self, policies: Sequence[Mapping[str, Any]]) -> None:
        super().apply(policies)
        for p in policies:
            self._applied[(p["metadata"]["namespace"], p["metadata"]["name"])] = p
        self._program()

    def delete_policy(self, namespace: str, name: str) -> None:
        super().delete_policy(namespace, name)
        if self._applied.pop((namespace, name), None) is not None:
            self._program(gone=[(namespace, name)])

    def label_pod(self, key: str, change: LabelChange) -> None:
        super().label_pod(key, change)
        if self._world is not None:
            self._world = relabelled(self._world, {key: change}, {})
            self._program()

    def label_namespace(self, namespace: str, change: LabelChange) -> None:
        super().label_namespace(namespace, change)
        if self._world is not None:
            self._world = relabelled(self._world, {}, {namespace: change})
            self._program()

    def wait_programmed(self, policies: Sequence[Mapping[str, Any]], timeout: float = 20.0
                        ) -> str | None:
        if self.direct:
            return None  # programmed and synced to the chassis by the change itself
        return super().wait_programmed(policies, timeout)

    def trouble(self) -> str | None:
        """A daemon of the chassis that died (``ovs-vswitchd``, ``ovn-controller``), with
        the last lines of its log."""
        from podnet.plugins.ovn.chassis import _gone

        folder = self.bed.ovn.folder
        for name in ("vswitchd", "controller"):
            pidfile = folder / f"{name}.pid"
            try:
                pid = int(pidfile.read_text().strip())
            except (OSError, ValueError):
                pid = None
            if pid is None or _gone(pid):
                log = folder / f"{name}.log"
                tail = log.read_text().splitlines()[-3:] if log.exists() else []
                return f"{name} of the chassis is gone: " + " | ".join(tail)
        return None

    def revive(self) -> None:
        """Start ``ovs-vswitchd`` again after it died (Open vSwitch 3.1.0's userspace
        conntrack asserts now and then under many short connections, ``conn_update_state``):
        the bridge and its ports are in its database, ``ovn-controller`` reconnects and
        installs the flows again; waited for until the chassis caught up with NB."""
        problem = self.trouble()
        if problem is None:
            return
        assert problem.startswith("vswitchd "), problem  # only that one is revived
        self.revived.append(problem)
        ovn = self.bed.ovn
        ovn._daemons.pop("vswitchd", None)
        ovn._daemon("vswitchd", ["ovs-vswitchd", ovn.ovs_remote], netns=ovn.netns)
        ovn.tool("ovn-nbctl", f"--db={ovn.nb_remote}", "--timeout=120", "--wait=hv", "sync",
                 timeout=130)

    def between_cases(self) -> None:
        """Nothing of a case outlives it in the chassis: its connections (conntrack
        flushed) and its datapath flows (purged, see :meth:`purge_datapath_flows`)."""
        if self.bed is not None and self.bed.ovn is not None and self.trouble() is None:
            said = self._appctl("dpctl/flush-conntrack")
            assert not said.startswith("(") or self.trouble() is not None, (
                f"the chassis' conntrack was not flushed: {said}")
            self.purge_datapath_flows()

    def purge_datapath_flows(self) -> None:
        """Drop every datapath flow (megaflow) of ``ovs-vswitchd``: the next packets are
        translated afresh by the OpenFlow tables ``ovn-controller`` holds now.

        Open vSwitch 3.1.0's userspace datapath can keep a megaflow translated by tables
        that changed while the upcall was translated (a probe sent while
        ``ovn-controller`` was still installing a case's flows): its revalidators take it
        for current, and it decides its cell until the tables change again, which they do
        not while a case is probed (seen: x/c -> x/a UDP/81 dropped for the whole 30 s by
        a megaflow ``ct_state(+new+trk),udp(dst=81) actions:drop``, with the right
        OpenFlow tables and no conntrack entry to blame; ``revalidator/purge`` made it
        right). The matrix is the OpenFlow tables' verdict, which podnet's ACLs decide,
        never a stale cache's: purged before a matrix is probed and before each
        re-probe of cells that differ."""
        said = self._appctl("revalidator/purge")
        # a vswitchd that died meanwhile is the case's trouble (revived, the case run again)
        assert not said.startswith("(") or self.trouble() is not None, (
            f"the chassis' datapath flows were not purged: {said}")

    def observe(self, want: Matrix, family: int, deadline: float = 30.0) -> Matrix:
        assert self.prober is not None
        if self.trouble() is None:
            self.purge_datapath_flows()

        def purge(rounds: int, wrong: int) -> None:
            if wrong and self.trouble() is None:
                self.purge_datapath_flows()

        return self.prober.converge(want, family, deadline, on_round=purge)

    def _appctl(self, *args: str, target: str = "ovs-vswitchd") -> str:
        """``ovs-appctl`` (``ovn-appctl`` for ``ovn-controller``) to a daemon of the
        chassis: its control socket is named after its pid, whose file the bed names
        after it (``vswitchd.pid``, ``controller.pid``); what it printed, or its error."""
        ovn = self.bed.ovn
        folder = Path(ovn.folder)
        daemon = "controller" if target == "ovn-controller" else "vswitchd"
        tool = "ovn-appctl" if target == "ovn-controller" else "ovs-appctl"
        try:
            pid = int((folder / f"{daemon}.pid").read_text().strip())
        except (OSError, ValueError) as exc:
            return f"({' '.join(args)}: no pid of {target}: {exc})"
        done = ovn.tool(tool, "-t", str(folder / f"{target}.{pid}.ctl"), *args, check=False,
                        timeout=60)
        return done.stdout if done.returncode == 0 else f"({' '.join(args)}: {done.stderr})"

    def diagnose(self, wrong: Mapping[int, Mapping[Cell, Verdict]]) -> str | None:
        """The chassis' state for the wrong cells: their conntrack entries, datapath flows
        and OpenFlow flows naming their addresses (the whole dumps in a file of the bed's
        folder), then which clearing makes the cells right, step by step (each step
        re-probes them three times): none (they were slow), a conntrack flush (stale
        connection state), a datapath flow purge (stale megaflows), ``ovn-controller``
        recomputing every flow (its incremental processing)."""
        assert self.prober is not None
        ovn = self.bed.ovn
        dumps = {
            "conntrack": self._appctl("dpctl/dump-conntrack", "-m"),
            "datapath flows": self._appctl("dpctl/dump-flows", "-m"),
            "openflow": ovn.tool("ovs-ofctl", "-O", "OpenFlow15", "dump-flows", ovn.bridge,
                                 check=False, timeout=60).stdout,
        }
        folder = Path(ovn.folder)
        path = folder / f"diagnosis-{len(list(folder.glob('diagnosis-*')))}.txt"
        path.write_text("\n\n".join(f"== {k}\n{v}" for k, v in dumps.items()))
        lines = [f"diagnosis (whole dumps in {path}):"]
        for family, cells in sorted(wrong.items()):
            for (src, dst, port, protocol), verdict in cells.items():
                a = self.endpoints[src].address(family) or "?"
                b = self.endpoints[dst].address(family) or "?"
                lines.append(f"  {src} ({a}) -> {dst} ({b}) {protocol}/{port}, expected "
                             f"{verdict}:")
                for name, text in dumps.items():
                    # OpenFlow's ACL flows are conjunctions: one address a line
                    hits = _naming(text, a, b, both=name != "openflow")
                    lines.append(f"    {name}: {len(hits)} lines naming "
                                 f"{'both addresses' if name != 'openflow' else 'either'}")
                    lines += [f"      {h.strip()}" for h in hits[:30]]
        def recompute() -> str:
            said = self._appctl("recompute", target="ovn-controller")
            ovn.tool("ovn-nbctl", f"--db={ovn.nb_remote}", "--timeout=60", "--wait=hv",
                     "sync", check=False, timeout=70)
            return said

        steps: list[tuple[str, Callable[[], str]]] = [
            ("nothing cleared", lambda: ""),
            ("conntrack flushed", lambda: self._appctl("dpctl/flush-conntrack")),
            ("datapath flows purged", lambda: self._appctl("revalidator/purge")),
            ("ovn-controller recomputed", recompute),
        ]
        left = {f: list(c) for f, c in wrong.items()}
        for step, clear in steps:
            said = clear()
            if said.startswith("("):
                lines.append(f"  {step} failed: {said}")
            for family in list(left):
                for _ in range(3):
                    got = self.prober.probe(left[family], family, timeout=2.0)
                    left[family] = [c for c in left[family] if got[c] != wrong[family][c]]
                    if not left[family]:
                        break
                if not left[family]:
                    del left[family]
            lines.append(f"  after {step}: {sum(len(c) for c in left.values())} cells wrong")
            if not left:
                break
        return "\n".join(lines)

    def kubectl(self, *args: str, input: str | None = None) -> str:
        return str(self.bed.stack.kubectl(*args, input=input))

    def policies(self) -> list[dict[str, Any]]:
        return self._stack_policies(self.bed.stack)

    def nodes(self) -> Sequence[str]:
        from podnet.testing.nodebed import NODE

        return [NODE]

    def node_addresses(self) -> Mapping[str, tuple[str, ...]]:
        from podnet.testing.nodebed import NODE

        return {NODE: (self.bed.node.address,)}

    def plug(self, namespace: str, name: str, node: str) -> tuple[str, tuple[str, ...]]:
        _, path = self.bed.host.netns()
        status, result = self.bed.client.add(self.bed.host.container(), path, name,
                                             namespace=namespace)
        assert status == 200, f"ADD of {namespace}/{name}: {status} {result}"
        return path, tuple(ip["address"].split("/")[0] for ip in result["ips"])

    def close(self) -> None:
        super().close()
        if self.bed is not None:
            self.bed.close()
