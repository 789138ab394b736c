"""Multus's delegate calls served by the node agent, with real packets: ``podnet
apiserver`` (serving Multus's NetworkAttachmentDefinition), ``podnet run`` (the reference
provider) and ``podnet node`` as processes, pods as network namespaces (the kit's node
bed). ``podnet-cni`` is run as Multus runs it: the cluster network's delegate with the
runtime's ``CNI_IFNAME`` and podnet's own config, then one delegate per NAD with
``CNI_IFNAME=net1`` (or the entry's interface), the NAD's config on stdin and Multus's
``CNI_ARGS``. Each call plugs its own interface only: ``net1`` gets the NAD record's
address, two pods' ``net1`` reach each other over the NAD's bridge, and a DEL of ``net1``
leaves ``eth0`` as it was.

Needs root, network namespaces and kubectl; skipped with the reason otherwise.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections.abc import Callable
from typing import Any

import pytest

from podnet.testing.cni import run_cni
from podnet.testing.netns import netns_unavailable
from podnet.testing.nodebed import (
    NODE,
    POD_CIDR,
    Host,
    NodeNamespace,
    Stack,
    addresses_in,
    links_in,
    ping,
    pod,
)
from podnet.testing.waiting import wait_for as _wait_for

pytest_plugins = ["podnet.testing"]

WHY = netns_unavailable() or (None if shutil.which("kubectl") else "kubectl is not installed")
pytestmark = [pytest.mark.slow, pytest.mark.skipif(WHY is not None, reason=WHY or "")]

MULTUS = "k8s.v1.cni.cncf.io/networks"
NS = "default"


def wait_for(what: str, check: Callable[[], bool], timeout: float = 60.0) -> None:
    _wait_for(what, check, timeout, interval=0.3)


def nad_config(stack: Stack, name: str = "blue-net") -> dict[str, Any]:
    # the reference provider serves one subnet on a node, named by its podCIDR
    return {"cniVersion": "1.0.0", "name": name, "type": "podnet-cni", "subnet": POD_CIDR,
            "agentSocket": stack.socket}


def nad(name: str, config: dict[str, Any]) -> dict[str, Any]:
    return {"apiVersion": "k8s.cni.cncf.io/v1", "kind": "NetworkAttachmentDefinition",
            "metadata": {"name": name, "namespace": NS},
            "spec": {"config": json.dumps(config)}}


def multus_env(cid: str, path: str, pod_name: str, uid: str, if_name: str) -> dict[str, str]:
    """The environment Multus gives a delegate."""
    return {"CNI_CONTAINERID": cid, "CNI_NETNS": path, "CNI_IFNAME": if_name,
            "CNI_ARGS": f"IgnoreUnknown=true;K8S_POD_NAMESPACE={NS};K8S_POD_NAME={pod_name};"
                        f"K8S_POD_INFRA_CONTAINER_ID={cid};K8S_POD_UID={uid}"}


def uid_of(stack: Stack, name: str) -> str:
    return str(json.loads(stack.kubectl("get", "pod", name, "-n", NS, "-o", "json"))
               ["metadata"]["uid"])


def ip(netns: str, *args: str) -> None:
    subprocess.run(["ip", "netns", "exec", netns, "ip", *args], check=True,
                   capture_output=True)


def test_multus_delegates_plug_net1_alone_and_two_pods_reach_each_other_over_it(
        stack: Stack, node: NodeNamespace, host: Host) -> None:
    from podnet.plugins.reference.dataplane import veth_names

    stack.agent(NODE, netns=node.netns)
    podnet = {"cniVersion": "1.0.0", "name": "podnet", "type": "podnet-cni",
              "agentSocket": stack.socket}
    wait_for("the agent ready", lambda: run_cni("STATUS", {**podnet, "cniVersion": "1.1.0"},
                                               {}).ok)
    blue = nad_config(stack)
    stack.create([nad("blue", blue)])
    stack.create([pod(name, annotations={MULTUS: "blue"}) for name in ("a", "b")])
    network = f"{NS}/blue"
    wait_for("the NAD records Routed", lambda: all(
        stack.records(network).get(name, {}).get("status", {}).get("phase") == "Routed"
        for name in ("a", "b")))

    pods: dict[str, dict[str, Any]] = {}
    for name in ("a", "b"):
        ns, path = host.netns()
        cid = host.container()
        uid = uid_of(stack, name)
        # the cluster network's delegate (the runtime's interface, podnet's config)
        main = run_cni("ADD", podnet, multus_env(cid, path, name, uid, "eth0"))
        assert main.ok, main.stdout + main.stderr
        assert [i["name"] for i in main.output["interfaces"]] == ["eth0"]
        # the NAD's delegate
        env = multus_env(cid, path, name, uid, "net1")
        extra = run_cni("ADD", blue, env)
        assert extra.ok, extra.stdout + extra.stderr
        pods[name] = {"ns": ns, "path": path, "cid": cid, "env": env, "main": main.output,
                      "extra": extra.output}

    records = stack.records(network)
    defaults = stack.records()
    for name, p in pods.items():
        st, default = records[name]["status"], defaults[name]["status"]
        assert p["extra"]["interfaces"] == [{"name": "net1", "mac": st["mac"],
                                             "sandbox": p["path"]}]
        assert p["extra"]["ips"] == [{"address": f"{st['ip']}/24", "gateway": st["gateway"],
                                      "interface": 0}]
        assert p["extra"]["routes"] == []  # the default route stays the default network's
        assert p["main"]["ips"][0]["address"] == f"{default['ip']}/24"
        assert addresses_in(p["path"]) == {"lo": ["127.0.0.1/8"],
                                           "eth0": [f"{default['ip']}/24"],
                                           "net1": [f"{st['ip']}/24"]}
        # the pod answers on net1 from its net1 address (as a multi-homed pod's own
        # routing would have it): the two interfaces share the node's podCIDR here
        ip(p["ns"], "rule", "add", "from", st["ip"], "lookup", "100")
        ip(p["ns"], "route", "add", POD_CIDR, "dev", "net1", "table", "100")
        assert run_cni("CHECK", blue, p["env"]).ok
    a, b = pods["a"], pods["b"]
    ip_b = records["b"]["status"]["ip"]
    assert ping(a["ns"], ip_b, device="net1"), "a cannot reach b's net1 over the NAD's bridge"

    # a DEL of net1 takes net1 alone; eth0 keeps its address and its default route
    assert run_cni("DEL", blue, b["env"]).ok
    assert run_cni("DEL", blue, b["env"]).ok  # idempotent
    assert "net1" not in addresses_in(b["path"])
    assert addresses_in(b["path"])["eth0"] == [f"{defaults['b']['status']['ip']}/24"]
    assert veth_names(b["cid"], "net1")[0] not in links_in(node.netns)
    assert veth_names(b["cid"], "eth0")[0] in links_in(node.netns)
    assert not ping(a["ns"], ip_b, count=2, device="net1")
    # CHECK of the default network still passes; ADD of net1 again brings it back
    assert run_cni("CHECK", podnet, {**b["env"], "CNI_IFNAME": "eth0"}).ok
    assert run_cni("ADD", blue, b["env"]).ok
    assert addresses_in(b["path"])["net1"] == [f"{ip_b}/24"]


def test_a_delegate_for_a_nad_podnet_cannot_read_is_refused_with_the_reason(
        stack: Stack, node: NodeNamespace, host: Host) -> None:
    stack.agent(NODE, netns=node.netns)
    broken = {"cniVersion": "1.0.0", "name": "broken", "type": "podnet-cni",
              "agentSocket": stack.socket}  # no subnet
    wait_for("the agent ready", lambda: run_cni("STATUS", {**broken, "cniVersion": "1.1.0"},
                                               {}).ok)
    stack.create([nad("broken", broken), pod("c", annotations={MULTUS: "broken@data0"})])
    wait_for("the record says why", lambda: "broken" in json.dumps(
        stack.records(f"{NS}/broken").get("c", {}).get("status", {})))
    _, path = host.netns()
    cid = host.container()
    done = run_cni("ADD", broken, multus_env(cid, path, "c", uid_of(stack, "c"), "data0"))
    done.check_error(7, "NetworkAttachmentDefinition default/broken", "subnet")
    assert "data0" not in addresses_in(path)


DEBIAN_BRIDGE = "/usr/lib/cni/bridge"


@pytest.mark.skipif(not os.path.exists(DEBIAN_BRIDGE),
                    reason=f"the Debian plugin {DEBIAN_BRIDGE} is missing")
def test_podnet_ipam_in_a_nad_answers_for_the_nads_record_not_the_default_one(
        stack: Stack, node: NodeNamespace, host: Host, tmp_path: Any) -> None:
    """Another plugin plumbs (Debian's bridge), podnet-ipam its IPAM, no ``ipam.network``:
    Multus's delegate call for net1 gets the NAD record's address."""
    from podnet.app.install import IPAM_NAME, install_cni

    stack.agent(NODE, netns=node.netns)
    podnet = {"cniVersion": "1.0.0", "name": "podnet", "type": "podnet-cni",
              "agentSocket": stack.socket}
    wait_for("the agent ready", lambda: run_cni("STATUS", {**podnet, "cniVersion": "1.1.0"},
                                               {}).ok)
    bin_dir = tmp_path / "cni-bin"
    install_cni(bin_dir, tmp_path / "net.d")
    bridge = f"pnbg{host.container()[:6]}"
    green = {"cniVersion": "1.0.0", "name": "green", "type": "bridge", "bridge": bridge,
             "ipam": {"type": IPAM_NAME, "subnet": POD_CIDR, "agentSocket": stack.socket}}
    stack.create([nad("green", green), pod("d", annotations={MULTUS: "green"})])
    wait_for("the NAD record Routed", lambda: stack.records(f"{NS}/green").get(
        "d", {}).get("status", {}).get("phase") == "Routed")
    _, path = host.netns()
    cid = host.container()
    uid = uid_of(stack, "d")
    assert run_cni("ADD", podnet, multus_env(cid, path, "d", uid, "eth0")).ok
    env = {**multus_env(cid, path, "d", uid, "net1"), "CNI_PATH": f"{bin_dir}:/usr/lib/cni"}
    argv = ["ip", "netns", "exec", node.netns, DEBIAN_BRIDGE]
    done = run_cni("ADD", green, env, argv=argv)
    assert done.ok, done.stdout + done.stderr
    record = stack.records(f"{NS}/green")["d"]["status"]
    default = stack.records()["d"]["status"]
    assert addresses_in(path)["net1"] == [f"{record['ip']}/24"]
    assert addresses_in(path)["eth0"] == [f"{default['ip']}/24"]
    # CHECK as a runtime sends it, with the ADD's result
    assert run_cni("CHECK", {**green, "prevResult": done.output}, env, argv=argv).ok
    assert run_cni("DEL", green, env, argv=argv).ok
    assert "net1" not in addresses_in(path)
    assert addresses_in(path)["eth0"] == [f"{default['ip']}/24"]
