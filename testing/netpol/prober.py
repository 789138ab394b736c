"""Probing a truth table with real packets.

:class:`Servers` listens in every pod's network namespace on each port, TCP and UDP
(echo), and SCTP where the kernel has it (:func:`sctp_unavailable`), both address
families; one thread of this process serves them all (a socket keeps the namespace it was
made in, so nothing here changes any thread's namespace for longer than making a socket).

:func:`probe` is one attempt from inside the source's namespace: a connect (TCP, SCTP) or
a datagram and its echo (UDP), with a short timeout. Nothing back in time is a drop; a
refusal (an RST, an ICMP port unreachable) is reported apart: it means no server, not a
policy. :class:`Prober` probes a whole matrix concurrently (threads: 9 x 9 pods x 4 ports
in about a timeout) and :meth:`Prober.converge` probes until the matrix matches the
expected one or a deadline passes, re-probing what differs (a dataplane being programmed,
a probe lost on a loaded machine), then confirms with a full matrix: what it answers is
what the packets said last.
"""

from __future__ import annotations

import contextlib
import errno
import os
import selectors
import socket
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor

import attrs

from podnet.linux.netns import run_in_netns
from podnet.testing.netpol.matrix import Cell, Matrix, Verdict

__all__ = ["Endpoint", "Prober", "Servers", "probe", "protocols", "sctp_unavailable"]

_SCTP = getattr(socket, "IPPROTO_SCTP", 132)


def sctp_unavailable() -> str | None:
    """Why SCTP cannot be probed here (the kernel lacks it), or None when it can."""
    try:
        socket.socket(socket.AF_INET, socket.SOCK_STREAM, _SCTP).close()
    except OSError as exc:
        return f"the kernel has no SCTP sockets: {exc.strerror}"
    return None


def protocols() -> tuple[str, ...]:
    """The protocols this kernel can probe: TCP, UDP, and SCTP when it has it."""
    return ("TCP", "UDP") + (() if sctp_unavailable() else ("SCTP",))


def _socket_args(address: str, protocol: str) -> tuple[int, int, int]:
    family = socket.AF_INET6 if ":" in address else socket.AF_INET
    if protocol == "UDP":
        return family, socket.SOCK_DGRAM, 0
    return family, socket.SOCK_STREAM, _SCTP if protocol == "SCTP" else 0


class Servers:
    """TCP and SCTP listeners and UDP echo servers on ``ports`` in namespaces added with
    :meth:`serve`, served by one thread until :meth:`close`."""

    def __init__(self, ports: Sequence[int] = (80, 81),
                 protocols: Sequence[str] = ("TCP", "UDP")) -> None:
        self.ports = tuple(ports)
        self.protocols = tuple(protocols)
        self._selector = selectors.DefaultSelector()
        self._sockets: list[socket.socket] = []
        self._wake_r, self._wake_w = socket.socketpair()
        self._selector.register(self._wake_r, selectors.EVENT_READ, "wake")
        self._lock = threading.Lock()
        self._stopped = False
        self._thread = threading.Thread(target=self._run, name="netpol-servers", daemon=True)
        self._thread.start()

    def serve(self, netns: str) -> None:
        """Listen in the namespace at path ``netns`` on every port and protocol, IPv4 and
        IPv6 (IPv6 left out where the namespace has none)."""
        def make() -> list[socket.socket]:
            made: list[socket.socket] = []
            try:
                for family, wildcard in ((socket.AF_INET, "0.0.0.0"), (socket.AF_INET6, "::")):
                    for protocol in self.protocols:
                        for port in self.ports:
                            _, kind, proto = _socket_args(wildcard, protocol)
                            try:
                                s = socket.socket(family, kind, proto)
                            except OSError as exc:
                                if family == socket.AF_INET6 and exc.errno == errno.EAFNOSUPPORT:
                                    break
                                raise
                            made.append(s)
                            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                            if family == socket.AF_INET6:
                                s.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
                            s.bind((wildcard, port))
                            if kind == socket.SOCK_STREAM:
                                s.listen(256)
                            s.setblocking(False)
            except BaseException:
                for s in made:
                    s.close()
                raise
            return made

        made = run_in_netns(netns, make)
        with self._lock:
            self._sockets.extend(made)
            for s in made:
                self._selector.register(s, selectors.EVENT_READ, "serve")
        self._wake_w.send(b"w")

    def _run(self) -> None:
        while True:
            with self._lock:
                if self._stopped:
                    return
            for key, _ in self._selector.select(timeout=1.0):
                sock = key.fileobj
                assert isinstance(sock, socket.socket)
                if key.data == "wake":
                    with contextlib.suppress(OSError):
                        sock.recv(4096)
                    continue
                with contextlib.suppress(OSError):
                    if sock.type == socket.SOCK_DGRAM:
                        data, peer = sock.recvfrom(2048)
                        sock.sendto(data, peer)
                    else:
                        conn, _ = sock.accept()
                        conn.close()

    def close(self) -> None:
        with self._lock:
            self._stopped = True
        with contextlib.suppress(OSError):
            self._wake_w.send(b"w")
        self._thread.join(timeout=10)
        for s in [*self._sockets, self._wake_r, self._wake_w]:
            s.close()
        self._selector.close()


def probe(netns: str, address: str, port: int, protocol: str, timeout: float = 1.0
          ) -> Verdict:
    """One attempt from the namespace at path ``netns`` to ``address``:``port``: a
    connect (TCP, SCTP), or a datagram and its echo (UDP, sent again a few times within
    ``timeout``)."""
    family, kind, proto = _socket_args(address, protocol)
    try:
        sock = run_in_netns(netns, lambda: socket.socket(family, kind, proto))
    except OSError:
        return Verdict.ERROR
    with sock:
        try:
            if kind == socket.SOCK_STREAM:
                sock.settimeout(timeout)
                sock.connect((address, port))
                return Verdict.PASS
            sock.connect((address, port))
            nonce = os.urandom(8)
            deadline = time.monotonic() + timeout
            while (left := deadline - time.monotonic()) > 0:
                sock.send(nonce)
                sock.settimeout(min(left, timeout / 3))
                try:
                    while sock.recv(64) != nonce:
                        pass
                    return Verdict.PASS
                except TimeoutError:
                    continue
            return Verdict.DROP
        except TimeoutError:
            return Verdict.DROP
        except ConnectionRefusedError:
            return Verdict.REFUSED
        except OSError:
            return Verdict.ERROR


@attrs.frozen
class Endpoint:
    """A pod as the prober sees it: its key (``x/a``), its namespace's path and its
    addresses."""

    key: str
    netns: str
    addresses: tuple[str, ...]

    def address(self, family: int) -> str | None:
        for a in self.addresses:
            if (":" in a) == (family == 6):
                return a
        return None


class Prober:
    """Probes matrices among ``endpoints`` (servers started in each on entry)."""

    def __init__(self, endpoints: Sequence[Endpoint], ports: Sequence[int] = (80, 81),
                 protocols: Sequence[str] = ("TCP", "UDP"), timeout: float = 0.8,
                 workers: int = 256) -> None:
        self.endpoints = {e.key: e for e in endpoints}
        self.ports = tuple(ports)
        self.protocols = tuple(protocols)
        self.timeout = timeout
        self.workers = workers
        self.servers: Servers | None = None
        #: probes sent, for the report
        self.probes = 0

    def __enter__(self) -> Prober:
        self.servers = Servers(self.ports, self.protocols)
        try:
            for e in self.endpoints.values():
                self.servers.serve(e.netns)
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def close(self) -> None:
        if self.servers is not None:
            self.servers.close()
            self.servers = None

    def matrix_ports(self) -> list[tuple[int, str]]:
        return [(port, protocol) for protocol in self.protocols for port in self.ports]

    def probe(self, cells: Iterable[Cell], family: int = 4, timeout: float | None = None
              ) -> dict[Cell, Verdict]:
        """One attempt per cell, all at once."""
        cells = list(cells)
        wait = timeout or self.timeout

        def one(cell: Cell) -> Verdict:
            src, dst, port, protocol = cell
            address = self.endpoints[dst].address(family)
            if address is None:
                return Verdict.ERROR
            return probe(self.endpoints[src].netns, address, port, protocol, wait)

        self.probes += len(cells)
        with ThreadPoolExecutor(max_workers=max(1, min(self.workers, len(cells)))) as pool:
            return dict(zip(cells, pool.map(one, cells), strict=True))

    def converge(self, expected: Matrix, family: int = 4, deadline: float = 30.0,
                 on_round: Callable[[int, int], None] | None = None) -> Matrix:
        """Probe until the observed matrix equals ``expected`` (re-probing the cells that
        differ) or ``deadline`` seconds pass. When the first probe of every cell already
        matched, that is the answer; else (the dataplane was still changing) probe the
        whole matrix once more and re-probe what differs in it twice, with a longer
        timeout (a probe lost on a loaded machine). The observed matrix the last probes
        gave."""
        end = time.monotonic() + deadline
        observed = Matrix.of(expected.pods, expected.ports)
        observed.cells.update(self.probe(expected.judged(), family))
        rounds = 0
        while True:
            wrong = [c for c in expected.judged() if observed.cells[c] != expected.cells[c]]
            if on_round is not None:
                on_round(rounds, len(wrong))
            if not wrong and rounds == 0:
                return observed
            if not wrong:
                break
            if time.monotonic() > end:
                return observed
            rounds += 1
            time.sleep(0.2)
            observed.cells.update(self.probe(wrong, family, timeout=self.timeout * 2))
        # the confirmation: every cell again, now that the dataplane has settled
        final = Matrix.of(expected.pods, expected.ports)
        final.cells.update(self.probe(expected.judged(), family))
        for _ in range(2):
            wrong = [c for c in expected.judged() if final.cells[c] != expected.cells[c]]
            if not wrong:
                break
            final.cells.update(self.probe(wrong, family, timeout=self.timeout * 3))
        return final
