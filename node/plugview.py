"""What the providers' dataplanes have plugged on this host, as the node agent knows it
(``PlugView``), so that an ADD, a DEL, a report and a NetworkPolicy render do not each
dump every link of the host (quadratic in the pods of a node, and a dump a burst of
plugs interrupts fails its ADD).

The view is the host's truth as last read, with what the agent itself plugged and
unplugged since applied on top. The agent is the only one that plugs on its host, so
the view never misses an interface: it may only still hold one that went without the
agent (a sandbox's namespace deleted takes its veth with it), which costs an idempotent
unplug or a release that waits for the next read, never an address on two interfaces.
What could make it miss one — a plug or an unplug that failed halfway — makes it stale:
the next look reads the host again. It is read again too at the agent's start and on
the report's period, whoever asks.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable

from podnet.hookspecs.types import Plug

#: (container id, interface name): one plug of a provider
PlugKey = tuple[str, str]


class PlugView:
    """Each provider's plugs: read from the host by ``read(provider)`` when stale, when
    asked ``fresh`` or when older than ``period`` seconds for a caller that accepts
    that (:meth:`due`), else as the agent's own plugs and unplugs left them."""

    def __init__(self, providers: Callable[[], Iterable[str]],
                 read: Callable[[str], list[Plug]], *, period: float) -> None:
        self._providers = providers
        self._read = read
        self.period = period
        self._lock = threading.Lock()
        #: provider -> its plugs; None until read (and while stale)
        self._plugs: dict[str, dict[PlugKey, Plug]] | None = None
        #: counts the changes the agent made; the one after which the view went stale
        self._seq = 0
        self._stale_at: int | None = None
        #: the changes made while a read was under way (seq, provider, key, plug or None
        #: for an unplug): applied on top of that read, which may have missed them
        self._changes: list[tuple[int, str, PlugKey, Plug | None]] = []
        self._reading: list[int] = []
        self._read_at = float("-inf")
        #: reads of the host, for the metrics and the tests
        self.reads = 0

    def due(self) -> bool:
        """Whether the host is to be read again (stale, never read, or the period
        passed)."""
        with self._lock:
            return (self._plugs is None or self._stale_at is not None
                    or time.monotonic() - self._read_at >= self.period)

    def plugs(self, *, fresh: bool = False) -> list[tuple[str, Plug]]:
        """Every provider's plugs, (provider, plug); the host read again when ``fresh``
        or when the view is stale. A read's error is raised (the view stays stale)."""
        with self._lock:
            if not fresh and self._plugs is not None and self._stale_at is None:
                return [(p, plug) for p, plugs in self._plugs.items()
                        for plug in plugs.values()]
        return self._read_host()

    def _read_host(self) -> list[tuple[str, Plug]]:
        with self._lock:
            start = self._seq
            self._reading.append(start)
        try:
            read = {p: {(plug.container_id, plug.if_name): plug for plug in self._read(p)}
                    for p in self._providers()}
        except BaseException:
            with self._lock:
                self._reading.remove(start)
                self._drop_changes()
            raise
        with self._lock:
            self._reading.remove(start)
            for seq, provider, key, plug in self._changes:
                if seq > start:
                    _apply(read, provider, key, plug)
            self._drop_changes()
            self._plugs = read
            self.reads += 1
            self._read_at = time.monotonic()
            if self._stale_at is not None and self._stale_at <= start:
                self._stale_at = None  # this read began after what made it stale
            return [(p, plug) for p, plugs in read.items() for plug in plugs.values()]

    def _drop_changes(self) -> None:
        """Keep only the changes a read under way may still need."""
        oldest = min(self._reading, default=None)
        self._changes = ([] if oldest is None
                         else [c for c in self._changes if c[0] > oldest])

    def plugged(self, provider: str, plug: Plug) -> None:
        """The agent plugged ``plug`` (or found it plugged)."""
        self._change(provider, (plug.container_id, plug.if_name), plug)

    def unplugged(self, provider: str, container_id: str, if_name: str) -> None:
        """The agent unplugged this interface (or found it gone)."""
        self._change(provider, (container_id, if_name), None)

    def failed(self) -> None:
        """A plug or unplug failed: what it left on the host is not known; the next
        look reads the host."""
        with self._lock:
            self._seq += 1
            self._stale_at = self._seq

    def _change(self, provider: str, key: PlugKey, plug: Plug | None) -> None:
        with self._lock:
            self._seq += 1
            if self._plugs is not None:
                _apply(self._plugs, provider, key, plug)
            if self._reading:
                self._changes.append((self._seq, provider, key, plug))


def _apply(view: dict[str, dict[PlugKey, Plug]], provider: str, key: PlugKey,
           plug: Plug | None) -> None:
    if plug is None:
        for plugs in view.values():
            plugs.pop(key, None)
    else:
        view.setdefault(provider, {})[key] = plug
