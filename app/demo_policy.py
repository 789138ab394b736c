"""The demo's NetworkPolicy part: the two policies each node stage applies, the pair
probes that show them enforced (an allowed connect, a denied one dropped), and whether
this machine can enforce them on a node (``nft``)."""

from __future__ import annotations

import os
import shutil
import socket
from typing import Any

import attrs

#: the node stage's two pods (``podnet.app.demo_node.PODS``)
PODS = ("pod-a", "pod-b")
#: the NetworkPolicy part of each stage, after the ping: the stage's namespace denies
#: all ingress (:data:`DENY_POLICY`, ``podSelector: {}``) and :data:`ALLOW_POLICY` lets
#: the client (pod-a) reach the server (pod-b) on TCP :data:`POLICY_PORT`; so pod-a ->
#: pod-b is the allowed pair and pod-b -> pod-a the denied one (a drop: a timeout)
ROLE_LABEL = "role"
ROLES = {PODS[0]: "client", PODS[1]: "server"}
DENY_POLICY = "default-deny"
ALLOW_POLICY = "allow-client-to-server"
POLICY_PORT = 8080
#: an allowed connect answers at once; a denied one is never answered, so its wait is
#: the verdict's whole cost (the same pair connected in milliseconds before the policy)
ALLOWED_TIMEOUT_S = 5.0
DENIED_TIMEOUT_S = 0.5



def policy_objects(namespace: str) -> list[dict[str, Any]]:
    """The stage's two NetworkPolicies in ``namespace``: default deny of ingress, and
    one allowed pair (client -> server, TCP :data:`POLICY_PORT`)."""
    return [
        {"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
         "metadata": {"name": DENY_POLICY, "namespace": namespace},
         "spec": {"podSelector": {}, "policyTypes": ["Ingress"]}},
        {"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
         "metadata": {"name": ALLOW_POLICY, "namespace": namespace},
         "spec": {"podSelector": {"matchLabels": {ROLE_LABEL: ROLES[PODS[1]]}},
                  "policyTypes": ["Ingress"],
                  "ingress": [{"from": [{"podSelector": {"matchLabels": {
                                   ROLE_LABEL: ROLES[PODS[0]]}}}],
                               "ports": [{"protocol": "TCP", "port": POLICY_PORT}]}]}},
    ]


def nft_unavailable() -> str | None:
    """Why a node agent cannot enforce NetworkPolicy here (no ``nft``), or None."""
    if shutil.which("nft") or any(os.path.exists(p) for p in ("/usr/sbin/nft", "/sbin/nft")):
        return None
    return ("nft is not installed (Debian package nftables): the node agent enforces "
            "NetworkPolicy with it")


@attrs.define
class PolicyProbe:
    """One pair under the stage's policies: a TCP connect from ``source`` to ``target``'s
    :data:`POLICY_PORT`, before the policies and once they are programmed. Verdicts:
    ``ok`` (connected), ``timeout`` (no answer: dropped), ``refused`` (a reset or an
    ICMP error: something answered)."""

    source: str
    target: str
    port: int
    #: "allowed" or "denied", as the policies say
    expected: str
    before: str = ""
    after: str = ""

    @property
    def ok(self) -> bool:
        """Open before the policies, and after them as they say (denied: dropped)."""
        return self.before == "ok" and self.after == (
            "ok" if self.expected == "allowed" else "timeout")


def tcp_connect(address: str, port: int, timeout: float) -> str:
    """A new TCP connection to ``address:port`` (the socket made in this thread's
    namespace): ``ok`` (the handshake completed), ``timeout`` (no answer within
    ``timeout`` seconds: dropped), ``refused`` (a reset or an ICMP error)."""
    family = socket.AF_INET6 if ":" in address else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as sock:
        sock.settimeout(timeout)
        try:
            sock.connect((address, port))
        except TimeoutError:
            return "timeout"
        except OSError:
            return "refused"
        return "ok"
