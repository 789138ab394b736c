"""The OVN bed: a real OVN control plane and one chassis, started for a test and torn down
after it, everything on unix sockets in a private folder. The two classes live in
:mod:`podnet.plugins.ovn.chassis` (production starts them too: the demo's OVN node); this
module adds ``ovn-trace`` as a check (:func:`trace`) and the pytest fixtures.

Two classes, for two kinds of tests:

- :class:`OvnCentral`: the Northbound and Southbound ``ovsdb-server``s and ``ovn-northd``.
  No dataplane: what NB says is checked with :func:`trace` (``ovn-trace`` on the logical
  flows northd computed). Needs Debian's ``ovn-central``. ``OvnCentral(nb_remote=...)``
  starts only SB and northd, on an NB server someone else runs (an
  :class:`~podnet.plugins.ovn.nbserver.NbServer`).
- :class:`OvnBed`: the central part plus one chassis: a local Open vSwitch (its own
  ``ovsdb-server`` and ``ovs-vswitchd`` with the userspace datapath, bridge ``br-int``)
  and ``ovn-controller``. Pods bound to it pass real packets. Needs ``ovn-host`` and
  ``openvswitch-switch`` too, root, and network namespaces.

``ovs-vswitchd`` and ``ovn-controller`` run in a network namespace of the bed's own
(:attr:`OvnBed.netns`, or one you pass, e.g. a node of a
:class:`~podnet.testing.nodebed.Underlay`): the userspace datapath makes tap devices with
fixed names (``ovs-netdev``, the bridge's name), which two beds in one namespace would
share, and which outlive the daemons; a namespace of its own goes with all it holds. A
dataplane under test (the node agent) runs in that namespace too: its host ends must be
where ``ovs-vswitchd`` is.

The ``OVS_*`` and ``OVN_*`` directories point at the bed's folder in the environment of
the processes it runs (:attr:`OvnCentral.env`), never in the test process's own, so
``ovn-nbctl``, ``ovn-sbctl``, ``ovs-vsctl``, ``ovn-trace`` run through :meth:`OvnCentral.tool`
find their sockets without flags.

Usage::

    with OvnBed() as bed:            # raises OvnBedMissing naming what is not installed
        bed.nbctl("ls-add", "ls1")
        ...
        outcome = trace(bed, "ls1", inport="a", eth_src=..., eth_dst=..., ip_src=...,
                        ip_dst=...)
        assert outcome.delivered == ("b",)

Or the pytest fixtures ``ovn_central`` and ``ovn_bed`` (session scope, skipping with the
reason when something is missing): ``pytest_plugins = ["podnet.testing"]`` offers them.
Starting a bed takes 0.2-0.7 s (central alone: about 0.15 s), tearing it down about 0.15 s.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import attrs

from podnet.plugins.ovn.chassis import (
    CENTRAL_HINT,
    CHASSIS_HINT,
    OvnBed,
    OvnBedMissing,
    OvnCentral,
    bed_unavailable,
    central_unavailable,
)

__all__ = [
    "CENTRAL_HINT", "CHASSIS_HINT", "OvnBed", "OvnBedMissing", "OvnCentral", "Trace",
    "bed_unavailable", "central_unavailable", "ovn_bed", "ovn_central", "parse_trace", "trace",
]


# --- ovn-trace as a check ------------------------------------------------------------------


@attrs.frozen
class Trace:
    """What ``ovn-trace`` says becomes of one packet."""

    #: the logical ports it is output to, in order (the last one is where it leaves OVN
    #: for a VIF; router and patch ports on the way are listed too)
    outputs: tuple[str, ...]
    #: the ports of type "" (VIFs: pods) among them: where it is delivered
    delivered: tuple[str, ...]
    #: whether a pipeline dropped it, and where: the stage (``ls_in_apply_port_sec``,
    #: ``ls_out_acl``, ...) and its datapath
    dropped: bool
    stage: str | None
    datapath: str | None
    #: the ``--detailed`` output, for an assertion's message
    text: str

    def __str__(self) -> str:
        if self.dropped:
            return f"dropped in {self.datapath} at {self.stage}"
        return f"delivered to {', '.join(self.delivered) or 'nobody'}"


_PIPELINE = re.compile(r'^\s*(?:ingress|egress)\(dp="([^"]+)"')
_STAGE = re.compile(r"^\s*\d+\.\s+([a-z_0-9]+)\s+\(")
_OUTPUT = re.compile(r'/\* output to "([^"]+)", type "([^"]*)" \*/')
_DROP = re.compile(r"^\s*(?:drop;|/\* drop \*/|.*implicit drop)")


def parse_trace(text: str) -> Trace:
    """Read ``ovn-trace --detailed`` output."""
    outputs: list[str] = []
    delivered: list[str] = []
    datapath: str | None = None
    stage: str | None = None
    drop: tuple[str | None, str | None] | None = None
    for line in text.splitlines():
        found = _PIPELINE.match(line)
        if found:
            datapath, stage = found.group(1), None
            continue
        found = _STAGE.match(line)
        if found:
            stage = found.group(1)
            continue
        found = _OUTPUT.search(line)
        if found:
            outputs.append(found.group(1))
            if found.group(2) == "":
                delivered.append(found.group(1))
            continue
        if drop is None and _DROP.match(line):
            drop = (datapath, stage)
    dropped = not delivered and drop is not None
    return Trace(outputs=tuple(outputs), delivered=tuple(delivered), dropped=dropped,
                 stage=drop[1] if dropped and drop else None,
                 datapath=drop[0] if dropped and drop else None, text=text)


def trace(central: OvnCentral, datapath: str, *, inport: str, eth_src: str, eth_dst: str,
          ip_src: str, ip_dst: str, proto: str = "icmp", dport: int = 80,
          sport: int = 40000, ttl: int = 64, sync: bool = True) -> Trace:
    """Trace one IPv4 packet from logical port ``inport`` of ``datapath`` (the switch):
    an ICMP echo request (``proto="icmp"``) or a TCP SYN to ``dport`` (``"tcp"``).

    ``sync``: first wait until northd has computed the flows of what NB holds now."""
    if sync:
        central.sync()
    flow = [f'inport=="{inport}"', f"eth.src=={eth_src}", f"eth.dst=={eth_dst}",
            f"ip4.src=={ip_src}", f"ip4.dst=={ip_dst}", f"ip.ttl=={ttl}"]
    if proto == "icmp":
        flow.append("icmp4.type==8 && icmp4.code==0")
    elif proto == "tcp":
        flow.append(f"tcp.src=={sport} && tcp.dst=={dport} && tcp.flags==2")
    else:
        raise ValueError(f"proto: expected icmp or tcp, got {proto!r}")
    done = central.tool("ovn-trace", f"--db={central.sb_remote}", "--detailed",
                        datapath, " && ".join(flow))
    return parse_trace(done.stdout)


# --- one node with a real chassis, as the packet tests run it ------------------------------


class OvnNodeBed:
    """A node of an :class:`~podnet.testing.nodebed.Underlay` holding ``br-int``
    (``ovs-vswitchd``, ``ovn-controller``) and the node agent; the apiserver and the
    controller (``podnet run --provider ovn``) in the underlay's router namespace.

    ``controller_config`` gets the started chassis and answers the controller's config
    (the agent reads the same file, for its ``providers.ovn`` section). ``host`` holds the
    pods' namespaces (their host ends live in the node namespace and go with it);
    ``client`` speaks to the agent; ``ovn_start`` is the chassis' start in seconds.
    Everything is removed by :meth:`close`, also when the start fails half way."""

    def __init__(self, tmp: Path, controller_config: Callable[[OvnBed], dict[str, Any]], *,
                 pod_cidr: str = "10.93.0.0/24", underlay: str = "192.168.79.0/24") -> None:
        from podnet.testing.nodebed import NODE, AgentClient, Host, Stack, Underlay, node_object
        from podnet.testing.waiting import wait_for

        self.host = Host(links=lambda container, interface: [])
        self.underlay = Underlay(underlay)
        self.ovn: OvnBed | None = None
        self.stack: Stack | None = None
        try:
            self.node = self.underlay.add_node(NODE, pod_cidr)
            (tmp / "ovn").mkdir(exist_ok=True)
            started = time.monotonic()
            self.ovn = OvnBed(tmp / "ovn", netns=self.node.netns).start()
            self.ovn_start = time.monotonic() - started
            self.stack = Stack(tmp, provider="ovn", controller_config=controller_config(self.ovn),
                               netns=self.underlay.router,
                               address=self.underlay.router_address)
            self.stack.create([node_object(NODE, self.node.pod_cidr, self.node.address)])
            self.stack.agent(NODE, netns=self.node.netns,
                             args=["--config", str(tmp / "controller.yaml")])
            self.client = AgentClient(self.stack.socket)
            # a loaded machine (CI, or two test workers) starts the three processes slowly
            wait_for("the agent to be ready", self.client.ready, 60)
        except BaseException:
            self.close()
            raise

    def close(self) -> None:
        """Processes first, then OVS (bridges before daemons), then the namespaces."""
        steps = [s for s in (self.stack and self.stack.close, self.ovn and self.ovn.close,
                             self.host.cleanup, self.underlay.cleanup) if s]
        for step in steps:
            try:
                step()
            except Exception as exc:  # every step runs, whatever failed before
                print(f"cleanup: {step}: {exc}")


# --- pytest fixtures --------------------------------------------------------------------


try:
    import pytest
except ImportError:  # pragma: no cover - production install without test extras
    pass
else:
    @pytest.fixture(scope="session")
    def ovn_central() -> Iterator[OvnCentral]:
        """NB + SB + northd for the whole session (no dataplane): reset what you write."""
        problem = central_unavailable()
        if problem is not None:
            pytest.skip(problem)
        with OvnCentral() as central:
            yield central

    @pytest.fixture(scope="session")
    def ovn_bed() -> Iterator[OvnBed]:
        """NB + SB + northd + one chassis for the whole session."""
        problem = bed_unavailable()
        if problem is not None:
            pytest.skip(problem)
        with OvnBed() as bed:
            yield bed
