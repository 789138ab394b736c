"""The addresses the node agent has handed to other CNI plugins and not yet taken back.

With ``podnet-ipam`` another plugin (Debian's ``bridge``, ``macvlan``, ...) makes the pod's
interface, so the agent cannot look at the host to tell whether an address is still in
use. It keeps a grant per container and interface instead, from the IPAM ``ADD`` to the
IPAM ``DEL``, and reports the grants' records as plugged: the controller hands a Releasing
record's address to another pod only once its grants are gone (the release handshake).

An IPAM ``DEL`` can come while the container's ``ADD`` still waits for its record (the
runtime gave up on the ADD and cleans up): the waiting ADD is then cancelled and grants
nothing, so no grant outlives the DEL (:meth:`IpamGrants.pending`).

A grant is a file ``<container>:<interface>`` holding the record's key, in a directory
only root may read, so an agent restarted in between still knows them; without a
directory (the demo) they live in memory.
"""

from __future__ import annotations

import contextlib
import os
import re
import threading
from collections.abc import Iterator

from podnet.node.statedir import private_directory

#: what a container id and an interface name may be to name a file: the plugin holds
#: runtimes to the CNI rules, which are narrower still
_SAFE = re.compile(r"[A-Za-z0-9_.-]{1,256}")
_SEPARATOR = ":"


class Cancelled(Exception):
    """An IPAM DEL of the container's interface came while its ADD waited."""


class PendingGrant:
    """An IPAM ADD that has not granted yet: an IPAM DEL of its container and interface
    cancels it."""

    def __init__(self, container_id: str, if_name: str) -> None:
        self.container_id = container_id
        self.if_name = if_name
        self.cancelled = False


class IpamGrants:
    def __init__(self, directory: str | None) -> None:
        self.directory = directory
        self._memory: dict[str, str] = {}
        #: the grants and the pending ADDs change under it: a DEL and the grant of an ADD
        #: it cancels are one before the other, never interleaved
        self._lock = threading.Lock()
        self._pending: set[PendingGrant] = set()
        if directory is not None:
            private_directory(directory, "socket")

    @staticmethod
    def name(container_id: str, if_name: str) -> str:
        """The grant's file name; ValueError when the two cannot make one. The separator
        is one neither a container id nor an interface name has ('.' both may have:
        ``a.b`` + ``c`` and ``a`` + ``b.c`` would share a file)."""
        if not (_SAFE.fullmatch(container_id) and _SAFE.fullmatch(if_name)) or if_name in (
                ".", ".."):
            raise ValueError(f"container {container_id!r} / interface {if_name!r}: not "
                             "usable as a grant's name")
        return f"{container_id}{_SEPARATOR}{if_name}"

    @staticmethod
    def _parts(name: str) -> tuple[str, str]:
        """(container, interface) of a grant's file name; one an older version wrote
        (``<container>.<interface>``) is read as it read it."""
        container, sep, interface = name.partition(_SEPARATOR)
        if not sep:
            container, _, interface = name.rpartition(".")
        return container, interface

    @contextlib.contextmanager
    def pending(self, container_id: str, if_name: str) -> Iterator[PendingGrant]:
        """An ADD of that interface, from before its wait until it granted (or not)."""
        ticket = PendingGrant(container_id, if_name)
        with self._lock:
            self._pending.add(ticket)
        try:
            yield ticket
        finally:
            with self._lock:
                self._pending.discard(ticket)

    def pending_adds(self) -> list[dict[str, str]]:
        """The ADDs that wait for their record, by container and interface."""
        with self._lock:
            return sorted(({"containerId": t.container_id, "ifName": t.if_name}
                           for t in self._pending),
                          key=lambda p: (p["containerId"], p["ifName"]))

    def grant(self, container_id: str, if_name: str, record: str,
              ticket: PendingGrant | None = None) -> None:
        """:raises Cancelled: when a DEL cancelled ``ticket`` (nothing granted)."""
        name = self.name(container_id, if_name)
        with self._lock:
            if ticket is not None and ticket.cancelled:
                raise Cancelled(name)
            self._memory[name] = record
            if self.directory is None:
                return
            path = os.path.join(self.directory, name)
            tmp = f"{path}.tmp"
            with open(tmp, "w") as f:
                f.write(record)
            os.replace(tmp, path)  # a reader never sees half a grant

    def revoke(self, container_id: str, if_name: str | None = None) -> None:
        """The grant of that interface, or every grant of the container; their ADDs
        that still wait are cancelled."""
        with self._lock:
            for ticket in self._pending:
                if ticket.container_id == container_id and if_name in (None, ticket.if_name):
                    ticket.cancelled = True
            for name in list(self._names()):
                container, interface = self._parts(name)
                if container == container_id and (if_name is None or interface == if_name):
                    self._memory.pop(name, None)
                    if self.directory is not None:
                        with contextlib.suppress(FileNotFoundError):
                            os.unlink(os.path.join(self.directory, name))

    def keep_only(self, records: set[str]) -> int:
        """Drop the grants of records not in ``records`` (gone while the agent was down:
        nothing waits for them any more); how many were dropped."""
        dropped = 0
        with self._lock:
            for name in self._names():
                if self._read(name) not in records:
                    self._memory.pop(name, None)
                    if self.directory is not None:
                        with contextlib.suppress(FileNotFoundError):
                            os.unlink(os.path.join(self.directory, name))
                    dropped += 1
        return dropped

    def _read(self, name: str) -> str | None:
        if self.directory is None:
            return self._memory.get(name)
        try:
            with open(os.path.join(self.directory, name)) as f:
                return f.read().strip()
        except FileNotFoundError:
            return None

    def owners(self) -> set[str]:
        """The keys of the records that have a grant."""
        with self._lock:
            return {r for r in map(self._read, self._names()) if r is not None}

    def _names(self) -> list[str]:
        if self.directory is None:
            return list(self._memory)
        return [n for n in os.listdir(self.directory) if not n.endswith(".tmp")]
