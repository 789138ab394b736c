"""What a reconcile returns, in the shape of controller-runtime's ``reconcile.Result``."""

from __future__ import annotations

from collections.abc import Iterable

import attrs


@attrs.frozen
class Result:
    """``requeue_after`` seconds from now the key is looked at again; ``None``: only on
    the next change. Errors are raised, not returned: the queue backs off per item."""

    requeue_after: float | None = None

    @staticmethod
    def soonest(results: Iterable[Result]) -> Result:
        delays = [r.requeue_after for r in results if r.requeue_after is not None]
        return Result(min(delays)) if delays else Result()


DONE = Result()
