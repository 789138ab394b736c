"""NetworkPolicy on OVN: what ``podnet_network_policy`` writes and what a change costs,
for ``--policies`` policies (default 100) over ``--pods`` pods (default 100) on one
throwaway NB server.

Each policy selects 5 pods (their node's address allowed too) and has two ingress rules
(10 pods' addresses on tcp/80 and tcp/8000-8080; an ipBlock 10.0.0.0/8 with 3 except
blocks cut out, as core hands it, on udp/53) and one egress rule (10 pods' addresses, all
ports). Phases, each timed per call: create every policy, update every one (a peer more),
call each again unchanged (no-op), delete every one. Run twice: the pods in no security
group, then every pod in a security group with two ingress rules (the policies' clauses
are written once more ANDed with the group's rules: see plugins/ovn/README.md).

Reported per scenario: ``acl_rows_per_policy``, ``address_set_rows_per_policy`` (and the
addresses they hold), per phase ``p50_ms``/``p99_ms``/``max_ms`` of a call and
``nb_transactions_per_change`` (mean and max; the no-op's should be 0); with ``--northd``
(default when ovn-northd is installed) ``sb_p50_ms``/``sb_p99_ms``: a call plus ``ovn-nbctl
--wait=sb sync`` (northd turned it into logical flows), for the create phase.

Prints one JSON object on stdout; progress on stderr. Needs ovsdb-server and ovn-nbctl
(Debian ``ovn-central``).
"""

from __future__ import annotations

import argparse
import ipaddress
import json
import statistics
import subprocess
import sys
import time
from typing import Any

from podnet.hookspecs.netpol import PolicyMember, PolicyPort, PolicyRule, Protocol, ResolvedPolicy
from podnet.plugins.ovn.nbserver import NbServer, ovsdb_server_available
from podnet.plugins.ovn.netpol import NP_KEY
from podnet.plugins.ovn.provider import OvnProvider

GROUPS = {"web": {"ingress": [{"protocol": "tcp", "port": 80},
                              {"protocol": "tcp", "port": "8000-9000", "from": "10.0.0.0/8"}]}}


def _ip(i: int) -> str:
    return f"10.16.{i // 250}.{i % 250 + 2}"


def _ports(server: NbServer, pods: int, group: str | None) -> None:
    """The pods' ports as allocate writes them, in one ovn-nbctl run."""
    args = ["ls-add", "ovn-default"]
    for i in range(pods):
        port = f"default/p{i}-rec"
        args += ["--", "lsp-add", "ovn-default", port, "--", "lsp-set-addresses", port,
                 f"0a:00:00:00:{i // 256:02x}:{i % 256:02x} {_ip(i)}", "--", "set",
                 "Logical_Switch_Port", port, "external_ids:podnet/owner=podnet",
                 f"external_ids:pod=p{i}", "external_ids:namespace=default",
                 f"external_ids:podnet/ip={_ip(i)}"]
    subprocess.run(["ovn-nbctl", f"--db={server.remote}", *args], check=True,
                   capture_output=True, text=True, timeout=120)
    if group:
        uuids = subprocess.run(
            ["ovn-nbctl", f"--db={server.remote}", "--bare", "--columns=_uuid", "find",
             "Logical_Switch_Port", "external_ids:namespace=default"],
            check=True, capture_output=True, text=True, timeout=60).stdout.split()
        subprocess.run(["ovn-nbctl", f"--db={server.remote}", "add", "Port_Group", group,
                        "ports", *uuids], check=True, capture_output=True, timeout=60)


def _policy(i: int, pods: int, generation: int) -> ResolvedPolicy:
    members = tuple(PolicyMember(f"default/p{(i + k) % pods}", (_ip((i + k) % pods),),
                                 "node-0", "ovn", ("192.168.0.10",)) for k in range(5))
    peers = tuple(sorted(f"{_ip((i + 7 * k + generation) % pods)}/32" for k in range(
        10 + generation)))
    block = [ipaddress.ip_network("10.0.0.0/8")]
    for cut in ("10.16.0.0/16", "10.99.0.0/16", "10.200.3.0/24"):
        net = ipaddress.ip_network(cut)
        block = [n for b in block for n in (b.address_exclude(net) if net.subnet_of(b)
                                            else (b,))]
    return ResolvedPolicy(
        "default", f"np{i}", f"uid-{i}", generation, members,
        ingress=(PolicyRule(peers, (PolicyPort(Protocol.TCP, 80),
                                    PolicyPort(Protocol.TCP, 8000, 8080))),
                 PolicyRule(tuple(sorted(str(n) for n in block)),
                            (PolicyPort(Protocol.UDP, 53),))),
        egress=(PolicyRule(peers),))


def _stats(times: list[float], txns: list[int]) -> dict[str, Any]:
    ms = sorted(t * 1000 for t in times)
    return {"calls": len(ms), "p50_ms": round(statistics.median(ms), 2),
            "p99_ms": round(ms[min(len(ms) - 1, int(len(ms) * 0.99))], 2),
            "max_ms": round(ms[-1], 2),
            "nb_transactions_per_change": {"mean": round(statistics.mean(txns), 2),
                                           "max": max(txns)}}


def _rows(provider: OvnProvider) -> dict[str, Any]:
    client = provider.client
    with client.reading() as tables:
        acls = [a for a in tables["ACL"].rows.values() if NP_KEY in a.external_ids]
        sets = [s for s in tables["Address_Set"].rows.values() if NP_KEY in s.external_ids]
        groups = [g for g in tables["Port_Group"].rows.values() if NP_KEY in g.external_ids]
        by_priority: dict[int, int] = {}
        for a in acls:
            by_priority[int(a.priority)] = by_priority.get(int(a.priority), 0) + 1
        n = max(len(groups), 1)
        return {"port_groups": len(groups), "acl_rows": len(acls),
                "acl_rows_per_policy": round(len(acls) / n, 2),
                "acl_rows_by_priority": dict(sorted(by_priority.items(), reverse=True)),
                "address_set_rows": len(sets),
                "address_set_rows_per_policy": round(len(sets) / n, 2),
                "addresses_per_policy": round(sum(len(s.addresses) for s in sets) / n, 2)}


def _scenario(server: NbServer, pods: int, policies: int, with_groups: bool,
              northd: bool) -> dict[str, Any]:
    server.restart_fresh()
    provider = OvnProvider(server.remote, seed=0,
                           security_groups=GROUPS if with_groups else None)
    central = None
    try:
        provider.client  # noqa: B018 - the start's sync (the group's port group)
        _ports(server, pods, "sg_web" if with_groups else None)
        # a controller that found the ports at its start (its IPAM knows them, as it
        # does the ports it allocated)
        provider.close()
        provider = OvnProvider(server.remote, seed=0,
                               security_groups=GROUPS if with_groups else None)
        if northd:
            from podnet.plugins.ovn.chassis import OvnCentral

            central = OvnCentral(nb_remote=server.remote).start()
        out: dict[str, Any] = {}
        client = provider.client
        hook = provider.podnet_network_policy
        for phase, make in (("create", lambda i: _policy(i, pods, 1)),
                            ("update", lambda i: _policy(i, pods, 2)),
                            ("noop", lambda i: _policy(i, pods, 2)),
                            ("delete", lambda i: None)):
            times, txns, sb = [], [], []
            for i in range(policies):
                before = client.transactions
                started = time.perf_counter()
                done = hook("ovn", f"default/np{i}", make(i))
                times.append(time.perf_counter() - started)
                assert done is not None and done.programmed, done
                txns.append(client.transactions - before)
                if central is not None and phase == "create":
                    central.sync()
                    sb.append(time.perf_counter() - started)
            out[phase] = _stats(times, txns)
            if sb:
                ms = sorted(t * 1000 for t in sb)
                out[phase]["sb_p50_ms"] = round(statistics.median(ms), 2)
                out[phase]["sb_p99_ms"] = round(ms[min(len(ms) - 1, int(len(ms) * .99))], 2)
            if phase == "update":
                out["rows"] = _rows(provider)
            print(f"{'groups' if with_groups else 'plain'} {phase}: {out[phase]}",
                  file=sys.stderr)
        return out
    finally:
        if central is not None:
            central.close()
        provider.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pods", type=int, default=100)
    parser.add_argument("--policies", type=int, default=100)
    parser.add_argument("--northd", choices=("auto", "yes", "no"), default="auto")
    args = parser.parse_args(argv)
    missing = ovsdb_server_available()
    if missing:
        print(json.dumps({"skipped": missing}))
        return 0
    from podnet.plugins.ovn.chassis import central_unavailable

    northd = args.northd == "yes" or (args.northd == "auto" and central_unavailable() is None)
    result: dict[str, Any] = {"pods": args.pods, "policies": args.policies,
                              "members_per_policy": 5, "northd": northd}
    with NbServer() as server:
        result["policies_only"] = _scenario(server, args.pods, args.policies, False, northd)
        result["with_security_group"] = _scenario(server, args.pods, args.policies, True,
                                                  northd)
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
