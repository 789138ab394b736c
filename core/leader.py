"""Leader election on a ``coordination.k8s.io/v1`` Lease, through the cluster port.

The official Python client ships no lock, so this is one: every write is an update
guarded by the Lease's resourceVersion, so two replicas can never both believe they
renewed. A holder renews every ``retry_period`` and gives up leadership when it could not
renew for ``renew_deadline``; a candidate takes the Lease once ``lease_duration`` has
passed since the holder's last renewal (measured on the candidate's own clock from when it
last saw the renewal change, so clock skew between replicas does not matter).

Leadership is valid only until the start of the last successful renewal plus
``renew_deadline`` on this replica's monotonic clock, as in client-go: the elector keeps a
:class:`~podnet.core.fence.Fence` open that long, and every write of the engine checks it.
A replica that finds the deadline passed (it was paused, or could not renew) stops
leading before it tries the Lease again, even if nobody took it meanwhile.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from podnet.core.clock import Clock, SystemClock, format_micro_time
from podnet.core.cluster.port import LEASE, AlreadyExists, ApiError, Cluster, Conflict, NotFound
from podnet.core.errors import one_line
from podnet.core.fence import Fence

log = logging.getLogger("podnet.leader")


class LeaderElector:
    def __init__(
        self,
        cluster: Cluster,
        *,
        namespace: str,
        name: str,
        identity: str,
        lease_duration: float = 15.0,
        renew_deadline: float = 10.0,
        retry_period: float = 2.0,
        clock: Clock | None = None,
        fence: Fence | None = None,
    ) -> None:
        if not lease_duration > renew_deadline > retry_period > 0:
            raise ValueError("need lease_duration > renew_deadline > retry_period > 0")
        self.cluster = cluster
        self.namespace = namespace
        self.name = name
        self.identity = identity
        self.lease_duration = lease_duration
        self.renew_deadline = renew_deadline
        self.retry_period = retry_period
        self.clock = clock or SystemClock()
        #: open while this replica may write: until the start of its last successful
        #: renewal plus ``renew_deadline`` (``lease_duration - renew_deadline`` earlier than
        #: anyone else may take the Lease over: the margin of a write already under way)
        self.fence = fence or Fence(self.clock)
        self.leading = False
        self.transitions = 0
        # what we last saw of someone else's lease, and when (our monotonic clock)
        self._observed: tuple[str | None, str | None] = (None, None)
        self._observed_at = 0.0
        self._last_renew = 0.0
        #: the holder this candidate last said it waits for (said once per holder)
        self._standing_by: str | None = None
        #: the API server stopped answering the lease's requests (said once, until it does)
        self._unanswered = False

    def try_acquire_or_renew(self) -> bool:
        """One attempt. :return: whether this replica holds the Lease now."""
        now_mono = self.clock.monotonic()
        if self.leading and now_mono - self._last_renew >= self.renew_deadline:
            # past the renew deadline without a renewal (paused, or the API unreachable):
            # leadership ended then, whatever the Lease says now
            return self._lost("its renew deadline passed")
        now = format_micro_time(self.clock.now())
        try:
            lease = self.cluster.get(LEASE, self.name, self.namespace)
        except NotFound:
            self._answering()
            return self._create(now)
        except ApiError as exc:
            self._failing("read", exc)
            return self._still_leading(now_mono)
        self._answering()
        spec = lease.setdefault("spec", {})
        holder = spec.get("holderIdentity") or None
        seen = (holder, spec.get("renewTime"))
        if seen != self._observed:
            self._observed, self._observed_at = seen, now_mono
        duration = float(spec.get("leaseDurationSeconds") or self.lease_duration)
        if holder not in (None, self.identity) and now_mono - self._observed_at < duration:
            if not self.leading and holder != self._standing_by:
                self._standing_by = holder
                log.info("%s stands by: %s holds the lease %s/%s", self.identity, holder,
                         self.namespace, self.name)
            return self._lost(f"{holder} holds it")
        if holder != self.identity:
            spec["acquireTime"] = now
            spec["leaseTransitions"] = int(spec.get("leaseTransitions") or 0) + 1
        spec.update(holderIdentity=self.identity, renewTime=now,
                    leaseDurationSeconds=int(self.lease_duration))
        try:
            self.cluster.update(LEASE, lease)
        except (Conflict, NotFound):
            return self._still_leading(now_mono, lost_race=True)
        except ApiError as exc:
            self._failing("update", exc)
            return self._still_leading(now_mono)
        return self._won(now_mono)

    def _create(self, now: str) -> bool:
        lease = {
            "metadata": {"name": self.name, "namespace": self.namespace},
            "spec": {"holderIdentity": self.identity, "acquireTime": now, "renewTime": now,
                     "leaseDurationSeconds": int(self.lease_duration), "leaseTransitions": 0},
        }
        try:
            self.cluster.create(LEASE, lease)
        except (AlreadyExists, Conflict):
            return False
        except ApiError as exc:
            self._failing("create", exc)
            return False
        return self._won(self.clock.monotonic())

    def _failing(self, verb: str, exc: ApiError) -> None:
        """Said once per outage, not per attempt (every retry period)."""
        if not self._unanswered:
            log.warning("the lease %s/%s cannot be %s (%s): retrying every %g s",
                        self.namespace, self.name, {"read": "read", "update": "renewed",
                                                    "create": "created"}[verb],
                        one_line(exc), self.retry_period)
            self._unanswered = True
        else:
            log.debug("lease %s failed: %s", verb, exc)

    def _answering(self) -> None:
        if self._unanswered:
            log.warning("the lease %s/%s can be read again", self.namespace, self.name)
            self._unanswered = False

    def _won(self, now_mono: float) -> bool:
        if not self.leading:
            self.transitions += 1
            log.info("%s became leader of %s/%s", self.identity, self.namespace, self.name)
            self._standing_by = None
        self.leading = True
        self._last_renew = now_mono
        self.fence.extend(now_mono + self.renew_deadline)
        return True

    def _still_leading(self, now_mono: float, lost_race: bool = False) -> bool:
        """After a failed renewal: keep leading only within the renew deadline."""
        if self.leading and not lost_race and now_mono - self._last_renew < self.renew_deadline:
            return True
        return self._lost("it could not renew")

    def _lost(self, why: str) -> bool:
        self.fence.close()
        if self.leading:
            log.warning("%s lost the lease %s/%s: %s", self.identity, self.namespace,
                        self.name, why)
        self.leading = False
        return False

    def release(self) -> None:
        """Hand the Lease back on a clean shutdown so the next replica need not wait."""
        self.fence.close()  # before the Lease is free: nothing may write after it
        if not self.leading:
            return
        self.leading = False
        try:
            lease = self.cluster.get(LEASE, self.name, self.namespace)
            if lease.get("spec", {}).get("holderIdentity") == self.identity:
                lease["spec"]["holderIdentity"] = None
                lease["spec"]["leaseDurationSeconds"] = 1
                self.cluster.update(LEASE, lease)
        except ApiError as exc:
            log.debug("lease release failed: %s", exc)

    def run(self, stop: threading.Event, on_started: Callable[[], None],
            on_stopped: Callable[[], None]) -> None:
        """Campaign until ``stop``; call back when leadership starts and when it ends."""
        while not stop.is_set():
            was = self.leading
            now = self.try_acquire_or_renew()
            if now and not was:
                on_started()
            elif was and not now:
                on_stopped()
                return  # like controller-runtime: a replica that lost the lease exits
            stop.wait(self.retry_period)
        if self.leading:
            # in-flight work finishes while the Lease is still ours (and the fence open,
            # up to the renew deadline), then the Lease is handed back
            on_stopped()
            self.release()
