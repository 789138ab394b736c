"""The reference provider on its in-process cloud, for ``podnet demo --provider reference``.

:data:`DEMO` is what the demo runs (see :mod:`podnet.hookspecs.demo`). The reference
cloud keeps addresses per node in memory; it has no server-side rate limit (the demo's
``--cloud-rate`` sets core's client-side bucket instead) and counts no call as a write.
"""

from __future__ import annotations

from collections import Counter

from podnet.hookspecs.demo import DemoCloud, DemoProvider, DemoSettings
from podnet.plugins.reference.provider import ReferenceCloud, ReferenceProvider

__all__ = ["DEMO", "build"]


def build(settings: DemoSettings) -> DemoCloud:
    """A fresh reference cloud with ``settings``' latency, fault rate and seed, and a
    provider on it."""
    cloud = ReferenceCloud(latency=settings.cloud_latency_ms / 1000,
                           fault_rate=settings.fault_rate, seed=settings.seed)

    def calls() -> Counter[str]:
        return cloud.calls

    return DemoCloud(ReferenceProvider(cloud), cloud.all_addresses, calls)


DEMO = DemoProvider(build)
