"""NetworkPolicy on OVN proven by packets: the cluster as processes (``podnet run
--provider ovn`` writing the pods' ports into a real NB, ``podnet node`` plugging them into
a real ``br-int``), the provider's ``podnet_network_policy`` called with hand-made
resolved policies, enforced by a real ``ovn-controller`` and the userspace datapath's
conntrack.

Three pods: a policy allowing tcp/8080 into b from a only lets a connect and answer (the
reply passes) while c's SYN gets no answer at all (dropped, not refused); changed to allow
c instead, the verdicts swap; an egress policy on a lets it reach b only; deleted, every
pair connects again. Each change is waited for with ``ovn-nbctl --wait=hv sync`` (the
chassis applied it), never with a sleep."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from podnet.hookspecs.netpol import PolicyMember, PolicyPort, PolicyRule, ResolvedPolicy
from podnet.testing.netns import netns_unavailable
from podnet.testing.nodebed import NODE, TcpServer, in_netns, pod
from podnet.testing.ovnbed import OvnBed, OvnNodeBed, bed_unavailable

pytest_plugins = ["podnet.testing"]

_MISSING = netns_unavailable() or bed_unavailable()
pytestmark = [pytest.mark.slow, pytest.mark.skipif(_MISSING is not None, reason=_MISSING or "")]

SUBNETS = [{"name": "np-blue", "cidr": "10.36.0.0/24", "default": True}]


def _config(bed: OvnBed) -> dict[str, Any]:
    return {"defaultProvider": "ovn",
            "providers": {"ovn": {"remote": bed.nb_remote, "ovs_db": bed.ovs_remote,
                                  "subnets": SUBNETS}},
            "listen": "127.0.0.1:0"}


@pytest.fixture
def bed(tmp_path: Path) -> Iterator[OvnNodeBed]:
    made = OvnNodeBed(tmp_path, _config, pod_cidr="10.95.0.0/24", underlay="192.168.77.0/24")
    try:
        yield made
    finally:
        made.close()


def _connect(netns: str, address: str, port: int) -> str:
    """``ok`` (connected, sent, the answer came back), ``refused`` or ``timeout``."""
    done = in_netns(netns, f"""
        import socket
        try:
            c = socket.create_connection(({address!r}, {port}), timeout=3)
            c.sendall(b"x")
            c.recv(100)
        except ConnectionRefusedError:
            print("refused")
        except (TimeoutError, socket.timeout):
            print("timeout")
        else:
            print("ok")
    """, timeout=20)
    return done.stdout.strip()


def test_a_policy_denies_one_pair_allows_another_follows_changes_and_goes(
        bed: OvnNodeBed) -> None:
    from podnet.plugins.ovn.provider import OvnProvider

    stack, client, ovn = bed.stack, bed.client, bed.ovn
    assert stack is not None and ovn is not None
    stack.create([pod("a"), pod("b"), pod("c")])
    pods: dict[str, dict[str, str]] = {}
    for name in ("a", "b", "c"):
        netns, path = bed.host.netns()
        status, result = client.add(bed.host.container(), path, name)
        assert status == 200, result
        pods[name] = {"netns": netns, "ip": result["ips"][0]["address"].split("/")[0]}
    a, b, c = pods["a"], pods["b"], pods["c"]

    def member(name: str) -> PolicyMember:
        return PolicyMember(f"default/{name}", (pods[name]["ip"],), NODE, "ovn")

    def verdict(src: dict[str, str], dst: dict[str, str], port: int = 8080) -> str:
        with TcpServer(dst["netns"], dst["ip"], port=port):
            return _connect(src["netns"], dst["ip"], port)

    provider = OvnProvider(ovn.nb_remote, SUBNETS)
    try:
        def program(key: str, policy: ResolvedPolicy | None) -> None:
            done = provider.podnet_network_policy("ovn", key, policy)
            assert done is not None and done.programmed, done
            ovn.nbctl("--timeout=30", "--wait=hv", "sync")  # the chassis applied it

        # no policy: everyone connects
        assert verdict(c, b) == "ok" and verdict(a, b) == "ok"
        into_b = ResolvedPolicy("default", "into-b", "u1", 1, (member("b"),), ingress=(
            PolicyRule((f"{a['ip']}/32",), (PolicyPort(port=8080),)),))
        program("default/into-b", into_b)
        assert verdict(a, b) == "ok"          # allowed, and b's answer comes back
        assert verdict(c, b) == "timeout"     # dropped: no answer, not a refusal
        assert verdict(a, b, 8081) == "timeout"
        assert verdict(b, c) == "ok"          # b's egress is not restricted
        # the policy changes: c now, a no longer
        program("default/into-b", ResolvedPolicy(
            "default", "into-b", "u1", 2, (member("b"),), ingress=(
                PolicyRule((f"{c['ip']}/32",), (PolicyPort(port=8080),)),)))
        assert verdict(c, b) == "ok" and verdict(a, b) == "timeout"
        # a may start connections to b only (its answers to others still pass)
        program("default/a-out", ResolvedPolicy(
            "default", "a-out", "u2", 1, (member("a"),), egress=(
                PolicyRule((f"{b['ip']}/32",)),)))
        assert verdict(a, c) == "timeout"
        assert verdict(c, a) == "ok"
        # deleted: every pair connects again
        program("default/into-b", None)
        program("default/a-out", None)
        assert provider.podnet_network_policy_keys("ovn") == []
        for src, dst in ((a, b), (c, b), (a, c), (b, a)):
            assert verdict(src, dst) == "ok", (src, dst)
    finally:
        provider.close()


GROUPS = {"web": {"ingress": [{"protocol": "tcp", "port": "8080-8081"}]}}


def _config_with_group(bed: OvnBed) -> dict[str, Any]:
    config = _config(bed)
    config["providers"]["ovn"]["security_groups"] = GROUPS
    return config


@pytest.fixture
def grouped_bed(tmp_path: Path) -> Iterator[OvnNodeBed]:
    made = OvnNodeBed(tmp_path, _config_with_group, pod_cidr="10.95.0.0/24",
                      underlay="192.168.77.0/24")
    try:
        yield made
    finally:
        made.close()


def test_a_pod_under_a_security_group_and_a_policy_gets_what_both_allow(
        grouped_bed: OvnNodeBed) -> None:
    """s is in security group web (tcp 8080-8081 in) and selected by a policy allowing
    tcp/8081 and tcp/9090 from a: only 8081 from a connects; w, in web only, takes
    8080 from anyone; p, under the policy only, takes 9090 from a."""
    from podnet.plugins.ovn.provider import OvnProvider

    bed = grouped_bed
    stack, client, ovn = bed.stack, bed.client, bed.ovn
    assert stack is not None and ovn is not None
    web = {"podnet.io/security-groups": "web"}
    stack.create([pod("a"), pod("s", annotations=web), pod("w", annotations=web), pod("p")])
    pods: dict[str, dict[str, str]] = {}
    for name in ("a", "s", "w", "p"):
        netns, path = bed.host.netns()
        status, result = client.add(bed.host.container(), path, name)
        assert status == 200, result
        pods[name] = {"netns": netns, "ip": result["ips"][0]["address"].split("/")[0]}

    def verdict(src: str, dst: str, port: int) -> str:
        with TcpServer(pods[dst]["netns"], pods[dst]["ip"], port=port):
            return _connect(pods[src]["netns"], pods[dst]["ip"], port)

    # (no pod named "n": the bed writes pods as YAML, where n is false)

    provider = OvnProvider(ovn.nb_remote, SUBNETS, security_groups=GROUPS)
    try:
        members = tuple(PolicyMember(f"default/{n}", (pods[n]["ip"],), NODE, "ovn")
                        for n in ("p", "s"))
        done = provider.podnet_network_policy("ovn", "default/np", ResolvedPolicy(
            "default", "np", "u", 1, members, ingress=(PolicyRule(
                (f"{pods['a']['ip']}/32",), (PolicyPort(port=8081), PolicyPort(port=9090))),)))
        assert done is not None and done.programmed, done
        ovn.nbctl("--timeout=30", "--wait=hv", "sync")
        got = {(src, dst, port): verdict(src, dst, port) for src, dst, port in (
            ("a", "s", 8081), ("a", "s", 8080), ("a", "s", 9090), ("w", "s", 8081),
            ("a", "w", 8080), ("p", "w", 8080), ("a", "w", 9090),
            ("a", "p", 9090), ("a", "p", 8080), ("w", "p", 9090))}
        want = {("a", "s", 8081): "ok", ("a", "s", 8080): "timeout",
                ("a", "s", 9090): "timeout", ("w", "s", 8081): "timeout",
                ("a", "w", 8080): "ok", ("p", "w", 8080): "ok", ("a", "w", 9090): "timeout",
                ("a", "p", 9090): "ok", ("a", "p", 8080): "timeout",
                ("w", "p", 9090): "timeout"}
        assert got == want, "\n".join(f"{k}: {got[k]}, expected {want[k]}"
                                      for k in want if got[k] != want[k])
    finally:
        provider.close()
