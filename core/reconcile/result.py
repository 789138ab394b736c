"""What a reconcile returns, in the shape of controller-runtime's ``reconcile.Result``."""

from __future__ import annotations

from collections.abc import Iterable

import attrs


@attrs.frozen
class Result:
    """``requeue_after`` seconds from now the key is looked at again; ``None``: only on
    the next change. Errors are raised, not returned: the queue backs off per item."""

    requeue_after: float | None = None
    #: the key comes back for a slot reserved for it then (a cloud call's, under the
    #: client-side rate limit): it goes before the keys ready at that time, so the slot
    #: is not spent waiting behind them
    at_slot: bool = False

    @staticmethod
    def soonest(results: Iterable[Result]) -> Result:
        timed = [r for r in results if r.requeue_after is not None]
        return min(timed, key=lambda r: r.requeue_after or 0.0) if timed else Result()


DONE = Result()
