"""The reference provider's bridge dataplane on real network namespaces: plug twice makes
one interface, unplug twice is fine, unplug of a gone namespace is fine, check compares.

Needs root and network namespaces; skipped with the reason otherwise.
"""

from __future__ import annotations

import subprocess
import uuid
from collections.abc import Iterator

import pytest

from podnet.core.models import (
    ObjectMeta,
    Phase,
    PodNetwork,
    PodNetworkSpec,
    PodNetworkStatus,
    Route,
)
from podnet.hookspecs.types import PlugContext, UnplugContext
from podnet.testing.netns import netns_unavailable

WHY = netns_unavailable()
pytestmark = pytest.mark.skipif(WHY is not None, reason=WHY or "")

NETWORK = f"t{uuid.uuid4().hex[:6]}"


@pytest.fixture
def netns() -> Iterator[str]:
    name = f"pntest-{uuid.uuid4().hex[:8]}"
    subprocess.run(["ip", "netns", "add", name], check=True)
    try:
        yield f"/run/netns/{name}"
    finally:
        subprocess.run(["ip", "netns", "del", name], check=False)


@pytest.fixture
def dataplane() -> Iterator[object]:
    from podnet.plugins.reference.dataplane import BridgeDataplane, bridge_name

    try:
        yield BridgeDataplane()
    finally:
        from pyroute2 import IPRoute

        with IPRoute() as ipr:
            for index in ipr.link_lookup(ifname=bridge_name(NETWORK)):
                ipr.link("del", index=index)


def record(ip: str = "10.77.0.5") -> PodNetwork:
    return PodNetwork(
        metadata=ObjectMeta(name="web-default", namespace="default"),
        spec=PodNetworkSpec(pod_name="web", pod_uid="u1", node_name="n1",
                            provider="reference", network=NETWORK),
        status=PodNetworkStatus(phase=Phase.ROUTED, ip=ip, mac="0a:11:22:33:44:55",
                                gateway="10.77.0.1", prefix_length=24,
                                routes=(Route(dst="0.0.0.0/0", gw="10.77.0.1"),), mtu=1400),
    )


def links_in(netns: str) -> list[str]:
    from pyroute2 import NetNS

    with NetNS(netns) as ns:
        return sorted(str(link.get_attr("IFLA_IFNAME")) for link in ns.get_links())


def host_links(prefix: str) -> list[str]:
    from pyroute2 import IPRoute

    with IPRoute() as ipr:
        return sorted(name for link in ipr.get_links()
                      if (name := str(link.get_attr("IFLA_IFNAME"))).startswith(prefix))


def test_plug_twice_makes_one_interface_and_unplug_is_idempotent(dataplane, netns) -> None:
    from podnet.plugins.reference.dataplane import veth_names

    cid = uuid.uuid4().hex
    ctx = PlugContext(pod_network=record(), container_id=cid, if_name="eth0", netns=netns)
    host, _ = veth_names(cid, "eth0")
    first = dataplane.plug(ctx)
    second = dataplane.plug(ctx)
    assert first == second
    assert first.name == "eth0" and first.mac == "0a:11:22:33:44:55"
    assert first.host_interface == host
    assert links_in(netns) == ["eth0", "lo"]
    assert host_links(host) == [host]
    assert dataplane.check(ctx).ok
    assert [p.container_id for p in dataplane.plugs() if p.host_interface == host] == [cid]
    # a record with another address: check says so
    other = PlugContext(pod_network=record("10.77.0.9"), container_id=cid, if_name="eth0",
                        netns=netns)
    verdict = dataplane.check(other)
    assert not verdict.ok and "10.77.0.9" in verdict.reason

    gone = UnplugContext(provider="reference", network=NETWORK, container_id=cid,
                         if_name="eth0", netns=netns)
    dataplane.unplug(gone)
    dataplane.unplug(gone)
    assert host_links(host) == []
    assert links_in(netns) == ["lo"]
    assert not dataplane.check(ctx).ok


def test_unplug_succeeds_when_the_namespace_is_gone(dataplane) -> None:
    from podnet.plugins.reference.dataplane import veth_names

    name = f"pntest-{uuid.uuid4().hex[:8]}"
    subprocess.run(["ip", "netns", "add", name], check=True)
    path = f"/run/netns/{name}"
    cid = uuid.uuid4().hex
    try:
        dataplane.plug(PlugContext(pod_network=record(), container_id=cid, if_name="eth0",
                                   netns=path))
    finally:
        subprocess.run(["ip", "netns", "del", name], check=False)
    dataplane.unplug(UnplugContext(provider="reference", network=NETWORK, container_id=cid,
                                   if_name="eth0", netns=path))
    assert host_links(veth_names(cid, "eth0")[0]) == []


def test_a_path_that_is_no_namespace_is_named_and_nothing_is_made(dataplane, tmp_path
                                                                  ) -> None:
    from podnet.core.errors import ProviderError
    from podnet.plugins.reference.dataplane import veth_names

    not_a_netns = tmp_path / "netns"
    not_a_netns.write_text("")
    cid = uuid.uuid4().hex
    with pytest.raises(ProviderError, match=f"{not_a_netns}: not a network namespace") as err:
        dataplane.plug(PlugContext(pod_network=record(), container_id=cid, if_name="eth0",
                                   netns=str(not_a_netns)))
    assert err.value.field == "netns"
    assert host_links(veth_names(cid, "eth0")[0]) == []


def test_the_lean_link_dump_reads_names_and_aliases_as_ip_sets_them(netns) -> None:
    """``link_aliases`` (what ``plugs`` lists from) against links ``ip`` made in a
    namespace of the test's own: aliased links by name, none without an alias."""
    import json
    import sys

    name = netns.rsplit("/", 1)[1]
    aliases = {f"pnvtest{i}": f"podnet:{{\"c\": \"{i}\", \"note\": \"é\"}}"
               for i in range(40)}
    for link, alias in aliases.items():
        subprocess.run(["ip", "-n", name, "link", "add", link, "type", "veth", "peer", "name",
                        link.replace("pnv", "pnp")], check=True)
        subprocess.run(["ip", "-n", name, "link", "set", link, "alias", alias], check=True)
    listed = subprocess.run(
        ["ip", "netns", "exec", name, sys.executable, "-c",
         "import json; from podnet.linux.veth import link_aliases; "
         "print(json.dumps(link_aliases()))"], capture_output=True, text=True, check=True)
    assert json.loads(listed.stdout) == aliases


_CHURN = """
import json, threading
from pyroute2 import IPRoute
from podnet.linux.veth import link_aliases

stop = threading.Event()

def churn(k):
    with IPRoute() as ipr:
        while not stop.is_set():
            ipr.link("add", ifname=f"pnchurn{k}", kind="veth", peer=f"pnchurp{k}")
            ipr.link("del", ifname=f"pnchurn{k}")

threads = [threading.Thread(target=churn, args=(k,)) for k in range(6)]
for t in threads:
    t.start()
try:
    seen = [link_aliases() for _ in range(300)]
finally:
    stop.set()
    for t in threads:
        t.join()
print(json.dumps(seen))
"""


def test_the_lean_link_dump_lists_every_stable_link_while_others_churn(netns) -> None:
    """A burst of ADDs and DELs on a node changes links while each DEL dumps them: the
    dump is interrupted (``NLM_F_DUMP_INTR``), read again, and in the end complete."""
    import json
    import sys

    name = netns.rsplit("/", 1)[1]
    stable = {f"pnvkeep{i}": f"podnet:{i}" for i in range(60)}
    for link, alias in stable.items():
        subprocess.run(["ip", "-n", name, "link", "add", link, "type", "veth", "peer", "name",
                        link.replace("pnv", "pnp")], check=True)
        subprocess.run(["ip", "-n", name, "link", "set", link, "alias", alias], check=True)
    listed = subprocess.run(["ip", "netns", "exec", name, sys.executable, "-c", _CHURN],
                            capture_output=True, text=True, timeout=120)
    assert listed.returncode == 0, listed.stderr[-2000:]
    dumps = json.loads(listed.stdout)
    assert len(dumps) == 300
    assert all(d == stable for d in dumps)


def test_the_dataplane_hooks_through_the_gateway(netns, dataplane) -> None:
    """``podnet_plug``, ``podnet_check_plug``, ``podnet_plugs`` and ``podnet_unplug``
    reach the reference provider through the gateway's call path, counted."""
    from collections import Counter

    from podnet.core.fence import Fence
    from podnet.core.gateway import ProviderGateway
    from podnet.core.plugin import Providers, new_plugin_manager
    from podnet.core.tracing import Tracing
    from podnet.plugins.reference.provider import ReferenceProvider

    pm = new_plugin_manager()
    pm.register(ReferenceProvider(), name="reference")
    providers = Providers(pm)
    calls: Counter[str] = Counter()
    from podnet.core.clock import SystemClock

    gateway = ProviderGateway(providers, policy=lambda n: providers[n].policy,
                              clock=SystemClock(), fence=Fence(open_forever=True),
                              tracing=Tracing(None), calls=calls)
    cid = uuid.uuid4().hex
    ctx = PlugContext(pod_network=record(), container_id=cid, if_name="eth0", netns=netns)
    assert gateway.plug(ctx).name == "eth0"
    verdict = gateway.check_plug(ctx)
    assert verdict is not None and verdict.ok
    assert [p.if_name for p in gateway.plugs("reference", "n1") if p.container_id == cid] == [
        "eth0"]
    gateway.unplug(UnplugContext(provider="reference", network=NETWORK, container_id=cid,
                                 if_name="eth0", netns=netns))
    assert [p for p in gateway.plugs("reference", "n1") if p.container_id == cid] == []
    assert calls["reference.plug"] == 1 and calls["reference.unplug"] == 1
    assert calls["reference.check_plug"] == 1 and calls["reference.plugs"] == 2


def test_an_interrupted_link_dump_slower_than_the_patience_is_read_again(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """On a loaded node one dump alone can outlast the patience: a dump interrupted by a
    burst of plugs is still read again (a few times) before the DEL fails with error 11.
    The kernel's side of it is the churn test above; this is the retry rule's timing."""
    import time

    from podnet.linux import veth

    answers = iter([({}, True), ({}, True), ({}, True), ({"pnv1": "podnet:1"}, False)])

    def slow_dump() -> tuple[dict[str, str], bool]:
        time.sleep(0.03)  # longer than the patience below
        return next(answers)

    monkeypatch.setattr(veth, "_dump_aliases", slow_dump)
    assert veth.link_aliases(patience=0.01) == {"pnv1": "podnet:1"}
    with pytest.raises(Exception, match="interrupted by changes 8 times"):
        monkeypatch.setattr(veth, "_dump_aliases", lambda: ({}, True))
        veth.link_aliases(patience=0.0)


def _bridge_mac_now() -> str:
    from pyroute2 import IPRoute

    from podnet.plugins.reference.dataplane import bridge_name

    with IPRoute() as ipr:
        (link,) = ipr.get_links(ifname=bridge_name(NETWORK))
        return str(link.get_attr("IFLA_ADDRESS")).lower()


def _gateway_mac_seen_from(netns: str) -> str | None:
    from pyroute2 import NetNS

    with NetNS(netns) as ns:
        for entry in ns.get_neighbours(dst="10.77.0.1"):
            return str(entry.get_attr("NDA_LLADDR")).lower()
    return None


def test_the_bridge_keeps_one_mac_as_pods_come_and_go(dataplane) -> None:
    """The bridge is the pods' gateway: its MAC is set when it is made and stays while
    ports come and go, the last one included (an unset one follows the lowest port's
    and is zeroed with the last: every pod's cached gateway went stale). By packets: a
    pod that learned the gateway's MAC still reaches it after another pod came and went,
    and a pod plugged after the bridge had no port at all reaches it too."""
    from podnet.app.demo_node import icmp_echo
    from podnet.linux.netns import run_in_netns
    from podnet.plugins.reference.dataplane import bridge_mac, bridge_name

    names = [f"pntest-{uuid.uuid4().hex[:8]}" for _ in range(3)]
    plugged: list[UnplugContext] = []

    def plug(i: int, ip: str) -> str:
        path = f"/run/netns/{names[i]}"
        cid = uuid.uuid4().hex
        dataplane.plug(PlugContext(pod_network=record(ip), container_id=cid, if_name="eth0",
                                   netns=path))
        plugged.append(UnplugContext(provider="reference", network=NETWORK, container_id=cid,
                                     if_name="eth0", netns=path))
        return path

    def gateway_answers(path: str) -> bool:
        # any of three echoes: a port just added to a bridge that had none may lose the
        # first while the bridge comes up (a loaded machine's CI once did)
        return run_in_netns(path, lambda: icmp_echo("10.77.0.1", 3, 1.0)) >= 1

    for name in names:
        subprocess.run(["ip", "netns", "add", name], check=True)
    try:
        a = plug(0, "10.77.0.5")
        mac = _bridge_mac_now()
        assert mac == bridge_mac(bridge_name(NETWORK))
        assert gateway_answers(a)
        assert _gateway_mac_seen_from(a) == mac
        plug(1, "10.77.0.6")
        dataplane.unplug(plugged.pop())
        assert _bridge_mac_now() == mac
        assert _gateway_mac_seen_from(a) == mac and gateway_answers(a)
        dataplane.unplug(plugged.pop())  # the bridge's last port
        c = plug(2, "10.77.0.7")
        assert _bridge_mac_now() == mac
        assert gateway_answers(c) and _gateway_mac_seen_from(c) == mac
    finally:
        for ctx in plugged:
            dataplane.unplug(ctx)
        for name in names:
            subprocess.run(["ip", "netns", "del", name], check=False)


def test_a_bridge_made_without_a_mac_of_its_own_gets_one_at_the_next_plug(dataplane,
                                                                           netns) -> None:
    """A bridge an older version made (its MAC the kernel's) is given its own at the
    next plug, once."""
    from podnet.plugins.reference.dataplane import bridge_mac, bridge_name

    subprocess.run(["ip", "link", "add", bridge_name(NETWORK), "type", "bridge"], check=True)
    dataplane.plug(PlugContext(pod_network=record(), container_id=uuid.uuid4().hex,
                               if_name="eth0", netns=netns))
    assert _bridge_mac_now() == bridge_mac(bridge_name(NETWORK))
