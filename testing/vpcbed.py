"""The simulated VPC (:mod:`podnet.sim.vpc`) on the test kit's underlay: a VPC that
forwards the way the cloud says, for packet tests of an ENI dataplane (the ECS provider's,
or a third-party cloud provider's with its own simulator).

Nodes are the network namespaces of an :class:`podnet.testing.nodebed.Underlay`; the
underlay stays the nodes' control network (the apiserver, the cloud's API), apart from
the VPC, the namespace ``pnvpc-<the underlay's suffix>``::

    underlay = Underlay()
    vpc = VpcBed(underlay, lambda: attached_state(sim))
    vpc.add_node(node, "i-123")   # a NodeNamespace of the underlay and its instance
    vpc.follow()
    ...
    vpc.cleanup()                 # in a finally, before underlay.cleanup()
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from podnet.sim.vpc import DEVICE_PREFIX, AttachedEni, Vpc, attached_state
from podnet.testing.nodebed import Underlay

__all__ = ["DEVICE_PREFIX", "AttachedEni", "VpcBed", "attached_state"]


class VpcBed(Vpc):
    """The VPC of an underlay's nodes (see :class:`podnet.sim.vpc.Vpc`)."""

    def __init__(self, underlay: Underlay, state: Callable[[], Iterable[AttachedEni]]) -> None:
        self.underlay = underlay
        super().__init__(f"pnvpc-{underlay.suffix}", state)
