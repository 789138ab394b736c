"""Which of a pod's requests (``podnet.io/*``) may change once its address is given.

A pod network's requests are copied from its pod's annotations while it is Pending.
Afterwards the pod may change them; two kinds of fields are told apart:

- **dataplane fields** (port security, security groups, VIPs, EIP, SNAT) shape what the
  provider writes around the address, never the address: a change is adopted into
  ``spec.requests`` and the dataplane rewritten (``repair`` → ``route``);
- **address fields** (subnets, a static address, an IP pool, a MAC) chose the address:
  an allocated address is never moved for them. The record keeps what it was given and
  says so in a ``RequestsApplied=False`` condition until the pod asks for what it has
  again (or is recreated).
"""

from __future__ import annotations

import attrs

from podnet.core.annotations import (
    EIP,
    IP_ADDRESS,
    IP_POOL,
    MAC_ADDRESS,
    PORT_SECURITY,
    SECURITY_GROUPS,
    SNAT,
    SUBNETS,
    VIPS,
)
from podnet.core.models import NetworkRequest

#: NetworkRequest field -> the annotation that sets it
DATAPLANE_FIELDS = {
    "port_security": PORT_SECURITY,
    "security_groups": SECURITY_GROUPS,
    "vips": VIPS,
    "eip": EIP,
    "snat": SNAT,
}
ADDRESS_FIELDS = {
    "subnets": SUBNETS,
    "ip_address": IP_ADDRESS,
    "ip_pool": IP_POOL,
    "mac_address": MAC_ADDRESS,
}

REQUESTS_APPLIED = "RequestsApplied"


@attrs.frozen
class RequestChange:
    #: the requests the record should carry now: the new dataplane fields, the old
    #: address fields
    merged: NetworkRequest
    #: annotations whose change is applied (dataplane fields)
    applied: tuple[str, ...]
    #: annotations whose change is refused (address fields), sorted
    frozen: tuple[str, ...]


def compare(recorded: NetworkRequest, wanted: NetworkRequest) -> RequestChange:
    """Split the difference between what a record carries and what its pod asks."""
    changed = {f: getattr(wanted, f) for f in DATAPLANE_FIELDS
               if getattr(recorded, f) != getattr(wanted, f)}
    frozen = tuple(sorted(a for f, a in ADDRESS_FIELDS.items()
                          if getattr(recorded, f) != getattr(wanted, f)))
    return RequestChange(merged=attrs.evolve(recorded, **changed),
                         applied=tuple(DATAPLANE_FIELDS[f] for f in changed), frozen=frozen)
