"""A dataplane's optional capability (``podnet.linux.hooks``): the node agent finds it on
each provider's ``dataplane`` whatever its class, asks one dataplane of a class once, and
writes what it says into its node's report (the Lease)."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

from podnet.core.cluster.port import LEASE, NAMESPACE, NODE
from podnet.core.objects import agent_lease_name
from podnet.core.plugin import Providers, new_plugin_manager
from podnet.hookspecs import hookimpl
from podnet.hookspecs.types import ProviderInfo
from podnet.linux.hooks import ReportsAnnotations
from podnet.node import DEFAULT_NAMESPACE, NodeAgent
from podnet.sim.memory import InMemoryCluster

NODE_NAME = "node-a"
SUMMARY = "example.io/summary"


class SummaryDataplane:
    """Says what it has in place on the host; counts how often it is asked."""

    def __init__(self) -> None:
        self.asked = 0
        self.says = "first"
        self.broken = False

    def report_annotations(self) -> dict[str, str]:
        self.asked += 1
        if self.broken:
            raise OSError("netlink unreadable")
        return {SUMMARY: self.says}


class PlainDataplane:
    """A dataplane offering no capability."""


class Provider:
    def __init__(self, name: str, dataplane: object | None) -> None:
        self.name = name
        if dataplane is not None:
            self.dataplane = dataplane

    @hookimpl
    def podnet_register_provider(self) -> ProviderInfo:
        return ProviderInfo(name=self.name, version="test")


@pytest.fixture
def cluster() -> InMemoryCluster:
    cluster = InMemoryCluster()
    cluster.create(NAMESPACE, {"metadata": {"name": DEFAULT_NAMESPACE}})
    cluster.create(NODE, {"metadata": {"name": NODE_NAME}})
    return cluster


@contextmanager
def _agent(cluster: InMemoryCluster, *providers: Provider) -> Iterator[NodeAgent]:
    pm = new_plugin_manager()
    for p in providers:
        pm.register(p, name=p.name)
    agent = NodeAgent(cluster, Providers(pm), NODE_NAME, add_timeout=0)
    agent.records.start()
    try:
        yield agent
    finally:
        agent.records.stop()


def test_the_capability_is_a_method_not_a_class() -> None:
    assert isinstance(SummaryDataplane(), ReportsAnnotations)
    assert not isinstance(PlainDataplane(), ReportsAnnotations)


def test_the_report_carries_what_the_dataplanes_say(cluster: InMemoryCluster) -> None:
    one, other = SummaryDataplane(), SummaryDataplane()
    with _agent(cluster, Provider("one", one), Provider("other", other),
                Provider("plain", PlainDataplane()), Provider("none", None)) as agent:
        assert agent.reporter.flush()
        lease = cluster.get(LEASE, agent_lease_name(NODE_NAME), DEFAULT_NAMESPACE)
        assert lease["metadata"]["annotations"][SUMMARY] == "first"
        # what it says is the host's: two dataplanes of one class, one asked
        assert sorted((one.asked, other.asked)) == [0, 1]

        one.says = other.says = "second"
        assert agent.reporter.flush()
        lease = cluster.get(LEASE, agent_lease_name(NODE_NAME), DEFAULT_NAMESPACE)
        assert lease["metadata"]["annotations"][SUMMARY] == "second"


def test_an_unreadable_dataplane_keeps_its_last_answer(cluster: InMemoryCluster) -> None:
    dataplane = SummaryDataplane()
    with _agent(cluster, Provider("one", dataplane)) as agent:
        assert agent.dataplane_annotations() == {SUMMARY: "first"}
        dataplane.broken = True
        assert agent.dataplane_annotations() == {SUMMARY: "first"}
        assert dataplane.asked == 2


def test_no_capability_no_annotation(cluster: InMemoryCluster) -> None:
    with _agent(cluster, Provider("plain", PlainDataplane()),
                Provider("none", None)) as agent:
        assert agent.dataplane_annotations() == {}
        assert agent.reporter.flush()
        lease = cluster.get(LEASE, agent_lease_name(NODE_NAME), DEFAULT_NAMESPACE)
        assert SUMMARY not in lease["metadata"]["annotations"]


_STARTED_AGENT = """
import sys, tempfile
from podnet.core.plugin import Providers, new_plugin_manager
from podnet.node import NodeAgent
from podnet.sim.memory import InMemoryCluster
print("pyroute2" in sys.modules, end=" ")
agent = NodeAgent(InMemoryCluster(), Providers(new_plugin_manager()), "node-a",
                  add_timeout=0, state_dir=tempfile.mkdtemp())
agent.start()
try:
    print("pyroute2" in sys.modules, agent.ready)
finally:
    agent.stop()
"""


def test_an_agent_has_its_netlink_library_loaded_before_its_socket_is_served() -> None:
    """Loaded as the agent is made (its socket is served after that): a burst's first
    ADDs would otherwise all wait on one import's lock (seconds on a loaded host); a
    fresh interpreter, since this one may have imported it already."""
    done = subprocess.run([sys.executable, "-c", _STARTED_AGENT], capture_output=True,
                          text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["False", "True", "True"]
