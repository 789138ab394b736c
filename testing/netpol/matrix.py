"""The truth table: a verdict per (source pod, destination pod, port, protocol), and its
printer, which shows the expected and the observed matrix of every port side by side and
marks where they differ (as the upstream e2e suite prints its reachability tables).

The diagonal (a pod to itself) is never judged: those packets never leave the pod's
namespace, so no dataplane sees them.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Iterator, Mapping, Sequence

import attrs

__all__ = ["Cell", "Matrix", "Mismatch", "Verdict", "render"]


class Verdict(enum.StrEnum):
    #: connected (TCP, SCTP) or the echo came back (UDP)
    PASS = "pass"
    #: nothing came back before the timeout: a drop
    DROP = "drop"
    #: refused (an RST, an ICMP port unreachable): no server there, not a policy
    REFUSED = "refused"
    #: another error (no route, host unreachable): not a policy either
    ERROR = "error"

    @property
    def mark(self) -> str:
        return {"pass": ".", "drop": "X", "refused": "R", "error": "E"}[self.value]


#: a cell: (source pod key, destination pod key, port, protocol)
Cell = tuple[str, str, int, str]


@attrs.frozen
class Mismatch:
    src: str
    dst: str
    port: int
    protocol: str
    expected: Verdict
    observed: Verdict

    def __str__(self) -> str:
        return (f"{self.src} -> {self.dst} {self.protocol}/{self.port}: expected "
                f"{self.expected}, observed {self.observed}")


@attrs.define
class Matrix:
    """Verdicts over ``pods`` (keys, in order) by ``ports`` (``(port, protocol)``)."""

    pods: tuple[str, ...]
    ports: tuple[tuple[int, str], ...]
    cells: dict[Cell, Verdict] = attrs.field(factory=dict)

    def judged(self) -> Iterator[Cell]:
        """Every judged cell (the diagonal left out)."""
        for port, protocol in self.ports:
            for src in self.pods:
                for dst in self.pods:
                    if src != dst:
                        yield (src, dst, port, protocol)

    @classmethod
    def of(cls, pods: Sequence[str], ports: Sequence[tuple[int, str]],
           verdict: Mapping[Cell, Verdict] | None = None) -> Matrix:
        return cls(tuple(pods), tuple(ports), dict(verdict or {}))

    def __getitem__(self, cell: Cell) -> Verdict:
        return self.cells[cell]

    def __setitem__(self, cell: Cell, verdict: Verdict) -> None:
        self.cells[cell] = verdict

    def mismatches(self, observed: Matrix) -> list[Mismatch]:
        """The cells where ``observed`` says otherwise than this (the expected) matrix;
        a cell ``observed`` lacks counts as a mismatch."""
        out = []
        for cell in self.judged():
            got = observed.cells.get(cell, Verdict.ERROR)
            if got != self.cells[cell]:
                out.append(Mismatch(*cell, expected=self.cells[cell], observed=got))
        return out

    def count(self, verdict: Verdict) -> int:
        return sum(1 for c in self.judged() if self.cells.get(c) == verdict)


def _short(key: str) -> str:
    return key.replace("/", "")


def _table(matrix: Matrix, port: int, protocol: str, other: Matrix | None) -> list[str]:
    """One port's table; with ``other`` (the expected), a differing cell is shown as
    ``!`` followed by the observed mark."""
    width = max(len(_short(p)) for p in matrix.pods)
    head = " " * width + " " + " ".join(f"{_short(p):>{max(width, 2)}}" for p in matrix.pods)
    lines = [head]
    for src in matrix.pods:
        row = []
        for dst in matrix.pods:
            if src == dst:
                mark = "-"
            else:
                got = matrix.cells.get((src, dst, port, protocol))
                mark = got.mark if got is not None else "?"
                if other is not None and other.cells.get((src, dst, port, protocol)) != got:
                    mark = "!" + mark
            row.append(f"{mark:>{max(width, 2)}}")
        lines.append(f"{_short(src):<{width}} " + " ".join(row))
    return lines


def render(expected: Matrix, observed: Matrix | None = None, title: str = "") -> str:
    """The whole truth table: per port, the expected matrix and (when given) the observed
    one beside it, differences marked ``!`` (rows: from, columns: to; ``.`` pass, ``X``
    drop, ``R`` refused, ``E`` error, ``-`` not judged), then the differences listed."""
    out = [title] if title else []
    out.append("rows: from, columns: to; . pass, X drop, R refused (no server), E error, "
               "- not judged, ! differs from expected")
    for port, protocol in expected.ports:
        left = _table(expected, port, protocol, None)
        if observed is None:
            out.append(f"{protocol}/{port} expected")
            out.extend(left)
            continue
        right = _table(observed, port, protocol, expected)
        width = max(len(line) for line in left)
        out.append(f"{f'{protocol}/{port} expected':<{width}}    observed")
        out.extend(f"{a:<{width}}    {b}" for a, b in zip(left, right, strict=True))
    if observed is not None:
        wrong = expected.mismatches(observed)
        out.append(f"{len(wrong)} of {sum(1 for _ in expected.judged())} cells differ")
        out.extend(f"  {m}" for m in wrong)
    return "\n".join(out)


def expected_matrix(pods: Sequence[str], ports: Iterable[tuple[int, str]],
                    verdict: Mapping[Cell, bool]) -> Matrix:
    """A matrix of PASS/DROP from booleans."""
    m = Matrix.of(pods, list(ports))
    for cell in m.judged():
        m[cell] = Verdict.PASS if verdict[cell] else Verdict.DROP
    return m
