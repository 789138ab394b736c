"""Kubernetes NetworkPolicy, resolved: what a dataplane must let through, as providers see it.

Core reads every ``networking.k8s.io/v1`` NetworkPolicy, checks it field by field, and
resolves its selectors against the pods and namespaces it watches: a
:class:`ResolvedPolicy` names the pods the policy selects (:class:`PolicyMember`, with
their addresses and the node and host interface they are plugged on) and, per direction,
the traffic it allows as a list of :class:`PolicyRule` — peers flattened to CIDRs (a pod
as its host prefix, an ``ipBlock`` with its ``except`` blocks already cut out), ports as
numbers or ranges per protocol (a named port already resolved, per pod). A dataplane never
evaluates a selector or a port name itself.

The semantics every dataplane keeps (the upstream API's):

- a pod that no policy selects for a direction is open that way; a selected pod gets
  only what the union of its policies' rules allow that way (policies are additive, an
  empty rule list denies all);
- replies to an allowed connection always pass, and so does related ICMP (connection
  tracking); a dataplane judges new connections only;
- traffic between a pod and its own node (kubelet probes) always passes;
- host-network pods are never members (core leaves them out) and are matched as peers
  by ``ipBlock`` only.

Enforcement is where the provider plumbs (:attr:`ProviderInfo.network_policy
<podnet.hookspecs.types.ProviderInfo.network_policy>`): an overlay programs it from the
controller through ``podnet_network_policy``; every other dataplane leaves it to the node
agent, which programs nftables for the pods it plugged.

Like :mod:`podnet.hookspecs.models`, these classes carry no wire rules: core maps them
from the object's JSON. Providers may import this module.

.. versionadded:: 0.8.0
"""

from __future__ import annotations

import enum

import attrs

#: the API group and kind core reads
NETWORK_POLICY_GROUP = "networking.k8s.io"
NETWORK_POLICY_KIND = "NetworkPolicy"


class Enforcement(enum.StrEnum):
    """Who enforces NetworkPolicy for a provider's pods (``ProviderInfo.network_policy``)."""

    #: the node agent, in nftables, for the pods it plugged (the default: every routed or
    #: bridged veth dataplane)
    NODE = "node"
    #: the provider itself, from the controller, through ``podnet_network_policy`` (an
    #: overlay whose switch applies ACLs: OVN)
    PROVIDER = "provider"


class Protocol(enum.StrEnum):
    TCP = "TCP"
    UDP = "UDP"
    SCTP = "SCTP"


@attrs.frozen
class PolicyPort:
    """One port (``port``), one range (``port`` .. ``end_port``, both included) or every
    port (``port`` None) of one protocol."""

    protocol: Protocol = Protocol.TCP
    port: int | None = None
    end_port: int | None = None


@attrs.frozen
class PolicyRule:
    """One allowed clause: traffic from (ingress) or to (egress) any of ``peers``, on any
    of ``ports``, passes — for the members ``members`` names.

    ``peers`` are CIDRs, sorted, both families mixed (a pod is its host prefix, ``/32`` or
    ``/128``; an ``ipBlock`` is its CIDR minus its ``except`` blocks, as the fewest
    prefixes that cover the rest); ``None``: any peer at all (a rule with no ``from``/``to``),
    an empty tuple: no peer (selectors that match no pod yet — the rule allows nothing).
    ``ports``: empty is every port of every protocol. ``members``: ``None`` is every
    member of the policy; a tuple of member keys limits the clause to those members (an
    ingress port given by name resolves per member: a clause per distinct number, each for
    the members whose container port of that name has it).
    """

    peers: tuple[str, ...] | None = None
    ports: tuple[PolicyPort, ...] = ()
    members: tuple[str, ...] | None = None


@attrs.frozen
class PolicyMember:
    """A pod the policy selects, where podnet plumbed its default network."""

    #: ``namespace/name`` of the pod
    key: str
    #: its default network's addresses (both families for a dual-stack pod)
    addresses: tuple[str, ...]
    node: str
    #: the provider whose record it is (a policy's members may span providers)
    provider: str
    #: the node's own addresses (``InternalIP``): traffic between them and the pod passes
    node_addresses: tuple[str, ...] = ()


class FindingReason(enum.StrEnum):
    """Why part of a policy is not enforced as written."""

    #: a field podnet does not enforce (named on the finding); the rest of the policy is
    UNSUPPORTED_FIELD = "UnsupportedField"
    #: a value that cannot be read (an ``ipBlock`` that is not a CIDR, an ``except`` outside
    #: its block, a selector with a bad operator); its peer matches nothing
    INVALID_VALUE = "InvalidValue"
    #: a port name no container port of a pod it applies to has (for that pod the port
    #: matches nothing, as upstream)
    UNRESOLVED_NAMED_PORT = "UnresolvedNamedPort"


@attrs.frozen
class PolicyFinding:
    """One thing core could not enforce as written, naming the field
    (``spec.ingress[0].from[1].ipBlock.cidr``)."""

    field: str
    reason: FindingReason
    message: str


@attrs.frozen
class ResolvedPolicy:
    """A NetworkPolicy after core read and resolved it.

    ``ingress`` / ``egress``: ``None`` when the policy does not restrict that direction
    (its ``policyTypes``, given or defaulted), else the clauses it allows (an empty tuple
    denies all). A direction that is restricted but whose rules failed to read is
    restricted with what could be read: a finding never opens traffic.
    """

    namespace: str
    name: str
    uid: str
    generation: int
    members: tuple[PolicyMember, ...] = ()
    ingress: tuple[PolicyRule, ...] | None = None
    egress: tuple[PolicyRule, ...] | None = None
    findings: tuple[PolicyFinding, ...] = ()

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"


@attrs.frozen
class PolicyRealization:
    """What ``podnet_network_policy`` did with a policy: programmed, or why not.

    ``waiting`` (with ``programmed=False``): nothing is wrong, the dataplane has not
    caught up yet (the flows are written but not installed everywhere): core shows the
    policy ``Pending`` with ``message``, raises no Event, and asks again soon (a wait is
    not a failure).

    .. versionchanged:: 0.9.0 ``waiting``
    """

    programmed: bool
    #: on ``programmed=False``: why (it is shown on the policy's condition and, unless
    #: waiting, in a Warning Event)
    message: str = ""
    #: what the dataplane could not enforce of it (a protocol it lacks), as core's own
    findings: tuple[PolicyFinding, ...] = ()
    #: not programmed yet, only waiting for the dataplane to catch up
    waiting: bool = False
