"""A real container on the pod network: containerd (a private daemon, the test kit's
:mod:`podnet.testing.containerd`) runs busybox from an OCI image built here from the
host's ``/bin/busybox``, in a network namespace ``podnet-cni ADD`` wired against the real
agent (the kit's node bed: ``podnet apiserver``, ``podnet run`` with the reference
provider and ``podnet node`` as processes, the agent in a node namespace of its own).
Inside the container ``eth0`` holds the record's address and MAC, busybox pings the
other pod and talks TCP to it (the other pod sees the container's address); after DEL
the same container reaches nothing.

Needs root, network namespaces, kubectl, containerd, runc and busybox-static; skipped
with the reason otherwise (docs/node.md: running it by hand).
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from podnet.testing.cni import pod_args, run_cni
from podnet.testing.containerd import (
    Containerd,
    containerd_unavailable,
    private_containerd,
    write_busybox_image,
)
from podnet.testing.netns import netns_unavailable
from podnet.testing.nodebed import (
    NODE,
    POD_CIDR,
    Host,
    NodeNamespace,
    Stack,
    TcpServer,
    Underlay,
    node_object,
    pod,
)
from podnet.testing.waiting import wait_for

pytest_plugins = ["podnet.testing"]

WHY = (netns_unavailable() or (None if shutil.which("kubectl") else "kubectl is not installed")
       or containerd_unavailable())
pytestmark = [pytest.mark.slow, pytest.mark.skipif(WHY is not None, reason=WHY or "")]


@pytest.fixture
def node(underlay: Underlay) -> NodeNamespace:
    # the agent's links and bridge in a namespace of their own: another run's agent on
    # this host (its start, its GC) would take every podnet veth of the host's namespace
    # for its own leftovers
    return underlay.add_node(NODE, POD_CIDR)


@pytest.fixture
def stack(tmp_path: Path, underlay: Underlay, node: NodeNamespace) -> Iterator[Stack]:
    s = Stack(tmp_path, netns=underlay.router, address=underlay.router_address)
    try:
        s.create([node_object(NODE, POD_CIDR, node.address)])
        s.agent(NODE, netns=node.netns)
        yield s
    finally:
        s.close()


@pytest.fixture
def containerd() -> Iterator[Containerd]:
    with private_containerd() as ctrd:
        yield ctrd


def test_a_containerd_container_in_a_podnet_netns_reaches_another_pod(
        stack: Stack, host: Host, containerd: Containerd) -> None:
    image = containerd.import_image(write_busybox_image(containerd.base / "busybox.tar"))
    config = {"cniVersion": "1.0.0", "name": "podnet", "type": "podnet-cni",
              "agentSocket": stack.socket}
    wait_for("the agent ready", lambda: run_cni("STATUS", {**config, "cniVersion": "1.1.0"},
                                               {}).ok)
    stack.create([pod("web"), pod("box")])
    wired = {}
    for name in ("web", "box"):
        ns, path = host.netns()
        env = {"CNI_CONTAINERID": host.container(), "CNI_NETNS": path,
               "CNI_ARGS": pod_args(name=name, uid=None)}
        done = run_cni("ADD", config, env)
        assert done.ok, done.stdout + done.stderr
        wired[name] = (ns, path, env)
    records = stack.records()
    box, web = records["box"]["status"], records["web"]["status"]
    web_ns = wired["web"][0]
    box_path, box_env = wired["box"][1], wired["box"][2]

    # the container joins the netns podnet wired: its eth0 is the record's
    shown = containerd.run(image, ["ip", "addr", "show", "eth0"], netns=box_path)
    assert shown.returncode == 0, shown.stderr
    assert f"inet {box['ip']}/{box['prefixLength']}" in shown.stdout, shown.stdout
    assert f"link/ether {box['mac']}" in shown.stdout, shown.stdout

    pinged = containerd.run(image, ["ping", "-c", "3", "-W", "2", web["ip"]], netns=box_path)
    assert pinged.returncode == 0, pinged.stdout + pinged.stderr
    assert "3 packets received" in pinged.stdout, pinged.stdout

    # TCP to a server in the other pod, which sees the container's own address
    with TcpServer(web_ns, web["ip"]):
        talked = containerd.run(image, ["sh", "-c", f"echo from-box | nc -w 5 {web['ip']} 8080"],
                                netns=box_path)
    assert talked.returncode == 0, talked.stderr
    assert talked.stdout.strip() == f"hello {box['ip']} from-box", talked.stdout

    # DEL takes the interface away: the same container reaches nothing any more
    assert run_cni("DEL", config, box_env).ok
    cut = containerd.run(image, ["ping", "-c", "1", "-W", "2", web["ip"]], netns=box_path)
    assert cut.returncode != 0, cut.stdout
    assert "eth0" not in containerd.run(image, ["ip", "link"], netns=box_path).stdout
    # every container ran with --rm: nothing is left in the daemon
    assert containerd.ctr("containers", "list", "--quiet").stdout.split() == []
    assert run_cni("DEL", config, box_env).ok, "DEL must be idempotent"
