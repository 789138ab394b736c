"""The OVN test bed itself: it starts a chassis that registers, and leaves nothing behind
(no daemon, no namespace, no tap device in this namespace, no folder), also when its
start fails half way; ovn-trace's verdicts are read as delivered or dropped. And the OVN
dataplane on a host without OVS lists nothing (no bed needed)."""

from __future__ import annotations

import os
import subprocess

import pytest

from podnet.testing.nodebed import links_in
from podnet.testing.ovnbed import (
    OvnBed,
    OvnCentral,
    bed_unavailable,
    central_unavailable,
    parse_trace,
    trace,
)

pytest_plugins = ["podnet.testing"]

_NO_BED = bed_unavailable()
_NO_CENTRAL = central_unavailable()
TAPS = {"ovs-netdev", "br-int"}


def _pids(folder: str) -> list[int]:
    out = []
    for name in os.listdir(folder):
        if name.endswith(".pid"):
            with open(os.path.join(folder, name)) as f:
                out.append(int(f.read().strip()))
    return out


def _running_in(folder: str) -> list[str]:
    """The live processes whose command line names ``folder`` (the bed's daemons)."""
    out = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                argv = f.read().decode(errors="replace").split("\0")
        except OSError:
            continue
        if any(folder in a for a in argv) and _alive(int(pid)):
            out.append(" ".join(argv))
    return out


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def _namespaces() -> set[str]:
    out = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, check=True)
    return {line.split()[0] for line in out.stdout.splitlines() if line.strip()}


@pytest.mark.skipif(_NO_BED is not None, reason=_NO_BED or "")
def test_the_bed_registers_a_chassis_and_leaves_nothing_behind() -> None:
    before = set(links_in())
    bed = OvnBed()
    try:
        bed.start()
        assert "chassis-1" in bed.sbctl("--bare", "--columns=name", "list", "Chassis")
        assert bed.vsctl("list-br").split() == ["br-int"]
        # the userspace datapath's taps are in the bed's namespace, not here
        assert set(links_in(bed.netns)) >= TAPS
        assert not (TAPS & (set(links_in()) - before))
        pids = _pids(str(bed.folder))
        assert len(pids) == 6, pids  # nb, sb, northd, ovsdb, vswitchd, controller
        assert all(_alive(p) for p in pids)
        # the tools find the bed's sockets through the environment the bed gives them,
        # and the test process's own environment is untouched
        assert "OVS_RUNDIR" not in os.environ and "OVN_RUNDIR" not in os.environ
        assert bed.tool("ovs-vsctl", "br-exists", "br-int").returncode == 0
    finally:
        bed.close()
    assert not any(_alive(p) for p in pids)
    assert _running_in(str(bed.folder)) == []
    assert bed.netns not in _namespaces()
    assert not bed.folder.exists()
    assert not (TAPS & (set(links_in()) - before))


@pytest.mark.skipif(_NO_BED is not None, reason=_NO_BED or "")
def test_a_failed_start_stops_what_it_started(tmp_path: os.PathLike[str]) -> None:
    folder = os.path.join(str(tmp_path), "bed")
    os.mkdir(folder)
    # a namespace that does not exist: ovs-vswitchd cannot start in it
    bed = OvnBed(folder, netns="pnovn-missing-namespace")
    with pytest.raises(RuntimeError, match="ovs-vswitchd"):
        bed.start()
    # nb, sb, northd and the local ovsdb-server had started: all stopped
    assert _running_in(folder) == []


@pytest.mark.skipif(_NO_CENTRAL is not None, reason=_NO_CENTRAL or "")
def test_trace_delivers_and_drops(ovn_central: OvnCentral) -> None:
    central = ovn_central
    try:
        a, b = "0a:00:00:00:00:01 10.0.0.1", "0a:00:00:00:00:02 10.0.0.2"
        central.nbctl(
            "ls-add", "ls1",
            "--", "lsp-add", "ls1", "a", "--", "lsp-set-addresses", "a", a,
            "--", "lsp-set-port-security", "a", a,
            "--", "lsp-add", "ls1", "b", "--", "lsp-set-addresses", "b", b)
        packet = {"inport": "a", "eth_src": "0a:00:00:00:00:01",
                  "eth_dst": "0a:00:00:00:00:02", "ip_dst": "10.0.0.2"}
        for proto in ("icmp", "tcp"):
            ok = trace(central, "ls1", ip_src="10.0.0.1", proto=proto, **packet)
            assert ok.delivered == ("b",) and not ok.dropped, ok.text
            spoofed = trace(central, "ls1", ip_src="10.0.0.9", proto=proto, **packet)
            assert spoofed.dropped and spoofed.delivered == (), spoofed.text
            assert (spoofed.datapath, spoofed.stage) == ("ls1", "ls_in_apply_port_sec")
        # an ACL dropping tcp/23 to b: in the egress pipeline, while tcp/24 passes
        central.nbctl("acl-add", "ls1", "to-lport", "1000",
                      'outport == "b" && tcp.dst == 23', "drop")
        blocked = trace(central, "ls1", ip_src="10.0.0.1", proto="tcp", dport=23, **packet)
        assert blocked.dropped and blocked.stage == "ls_out_acl", blocked.text
        assert trace(central, "ls1", ip_src="10.0.0.1", proto="tcp", dport=24,
                     **packet).delivered == ("b",)
    finally:  # the session's central: leave it as it was
        central.nbctl("--if-exists", "ls-del", "ls1")


def test_parse_trace_reads_a_routed_path() -> None:
    text = """\
ingress(dp="ls1", inport="a")
-----------------------------
 25. ls_in_l2_lkup (northd.c:1): eth.dst == 0e:00:00:00:00:01, priority 50, uuid 1
    outport = "ls1-lr";
    output;

egress(dp="ls1", inport="a", outport="ls1-lr")
 9. ls_out_apply_port_sec (northd.c:2): 1, priority 0, uuid 2
    output;
    /* output to "ls1-lr", type "patch" */

ingress(dp="lr", inport="lr-ls1")
 13. lr_in_ip_routing (northd.c:3): ip4.dst == 10.1.0.0/24, priority 74, uuid 3
    ip.ttl--;

egress(dp="ls2", inport="ls2-lr", outport="c")
 9. ls_out_apply_port_sec (northd.c:2): 1, priority 0, uuid 2
    output;
    /* output to "c", type "" */
"""
    got = parse_trace(text)
    assert got.outputs == ("ls1-lr", "c") and got.delivered == ("c",) and not got.dropped


def test_a_host_without_ovs_has_nothing_plugged(tmp_path: os.PathLike[str]) -> None:
    from podnet.plugins.ovn.dataplane import OvsDataplane

    dataplane = OvsDataplane(f"unix:{tmp_path}/no-such/db.sock")
    assert dataplane.plugs() == []
