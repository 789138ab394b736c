"""Whether this machine can run the packet tests (network namespaces, veth, bridges).

The probe is ``podnet.linux.netns``'s (the demo's node stage and the dataplanes use the
same), re-exported here for the tests' ``skipif``.
"""

from __future__ import annotations

from podnet.linux.netns import netns_unavailable

__all__ = ["netns_unavailable"]
