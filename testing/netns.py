"""Whether this machine can run the packet tests (network namespaces, veth, bridges).

The probe is the application's (the demo's node stage needs the same), re-exported here
for the tests' ``skipif``.
"""

from __future__ import annotations

from podnet.app.netns import netns_unavailable

__all__ = ["netns_unavailable"]
