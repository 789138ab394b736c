"""Pool, batching, rate-limit, backoff and inhibit policies, and the work queue's own.

The policies a provider names (``ProviderInfo.policy``) are part of the provider contract:
:class:`PoolPolicy`, :class:`RateLimit` and :class:`Backoff` are defined in
:mod:`podnet.hookspecs.policy` and re-exported here. The work queue's limiter defaults
below are core's alone.
"""

from __future__ import annotations

from podnet.hookspecs.policy import Backoff, PoolPolicy, RateLimit

__all__ = ["QUEUE_ITEM_BACKOFF", "QUEUE_RATE", "Backoff", "PoolPolicy", "RateLimit"]

#: controller-runtime's default queue limiter: per item 5 ms .. 1000 s, and 10/s burst 100.
QUEUE_ITEM_BACKOFF = Backoff(base=0.005, factor=2.0, cap=1000.0)
QUEUE_RATE = RateLimit(rate=10.0, burst=100)
