"""IP addresses and CIDRs read as kube-apiserver v1.32 reads them.

Upstream validates its IP and CIDR fields (a pod's IPs, a node's podCIDRs, a
NetworkPolicy's ``ipBlock``) with ``k8s.io/utils/net``'s ``ParseIPSloppy`` and
``ParseCIDRSloppy``: a copy of Go's ``net`` parsers from before Go 1.17, kept so that values
stored by older releases stay valid. They accept what Python's :mod:`ipaddress` refuses:

* IPv4 octets with leading zeros, read as decimal (``010.001.0.0`` is ``10.1.0.0``), also
  inside an IPv6 address (``::ffff:010.1.2.3``);
* a prefix length with leading zeros (``10.0.0.0/08``);
* host bits set after the prefix (``10.0.0.1/8``; the network is ``10.0.0.0/8``).

Only Kubernetes 1.33's StrictIPCIDRValidation began to refuse these, so a v1.32 server
stores them as written. What the parsers return is modelled on Go's ``net.IP`` and
``net.IPNet`` closely enough for ``IPNet.Contains`` and ``IPMask.Size``, which
``ValidateIPBlock`` uses to check an ``except`` entry.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

__all__ = ["GoNet", "parse_cidr", "parse_ip"]

_BIG: Final = 0xFFFFFF  # Go's overflow guard in dtoi and xtoi
_V4_IN_V6: Final = bytes(10) + b"\xff\xff"


def _dtoi(s: str) -> tuple[int, int] | None:
    """Go's ``dtoi``: the decimal number at the start of ``s`` and its length."""
    n = i = 0
    while i < len(s) and "0" <= s[i] <= "9":
        n = n * 10 + ord(s[i]) - 48
        if n >= _BIG:
            return None
        i += 1
    return (n, i) if i else None


def _xtoi(s: str) -> tuple[int, int] | None:
    """Go's ``xtoi``: the hexadecimal number at the start of ``s`` and its length."""
    n = i = 0
    while i < len(s) and s[i] in "0123456789abcdefABCDEF":
        n = n * 16 + int(s[i], 16)
        if n >= _BIG:
            return None
        i += 1
    return (n, i) if i else None


def _ipv4(s: str) -> bytes | None:
    """Four decimal octets (leading zeros allowed), as Go's 16-byte IPv4 form."""
    out = bytearray()
    for i in range(4):
        if not s:
            return None
        if i:
            if s[0] != ".":
                return None
            s = s[1:]
        found = _dtoi(s)
        if found is None or found[0] > 0xFF:
            return None
        out.append(found[0])
        s = s[found[1]:]
    return _V4_IN_V6 + bytes(out) if not s else None


def _ipv6(s: str) -> bytes | None:
    ip = bytearray(16)
    ellipsis = -1
    if s.startswith("::"):
        ellipsis, s = 0, s[2:]
        if not s:
            return bytes(ip)
    i = 0
    while i < 16:
        found = _xtoi(s)
        if found is None or found[0] > 0xFFFF:
            return None
        n, c = found
        if c < len(s) and s[c] == ".":
            if (ellipsis < 0 and i != 12) or i + 4 > 16:
                return None
            v4 = _ipv4(s)
            if v4 is None:
                return None
            ip[i:i + 4] = v4[12:]
            s, i = "", i + 4
            break
        ip[i], ip[i + 1] = n >> 8, n & 0xFF
        i += 2
        s = s[c:]
        if not s:
            break
        if s[0] != ":" or len(s) == 1:
            return None
        s = s[1:]
        if s[0] == ":":
            if ellipsis >= 0:
                return None
            ellipsis, s = i, s[1:]
            if not s:
                break
    if s:
        return None
    if i < 16:
        if ellipsis < 0:
            return None
        gap = 16 - i
        ip[ellipsis + gap:16] = ip[ellipsis:i]
        ip[ellipsis:ellipsis + gap] = bytes(gap)
    elif ellipsis >= 0:
        return None  # "::" must stand for at least one group
    return bytes(ip)


def _to4(ip: bytes) -> bytes | None:
    if len(ip) == 4:
        return ip
    return ip[12:] if ip[:12] == _V4_IN_V6 else None


def parse_ip(value: str) -> bytes | None:
    """``ParseIPSloppy``: 16 bytes (IPv4 in its IPv4-in-IPv6 form), None when invalid."""
    for ch in value:
        if ch == ".":
            return _ipv4(value)
        if ch == ":":
            return _ipv6(value)
    return None


def ip_family(ip: bytes) -> int:
    """4 or 6, as ``netutils.IsIPv4`` decides (an IPv4-mapped IPv6 address is IPv4)."""
    return 4 if _to4(ip) is not None else 6


@dataclass(frozen=True)
class GoNet:
    """A Go ``net.IPNet`` from ``ParseCIDR``: the masked address (4 bytes for an IPv4
    CIDR, 16 for an IPv6 one) and the mask as (ones, bits)."""

    ip: bytes
    ones: int
    bits: int

    @property
    def family(self) -> int:
        return ip_family(self.ip)

    def _mask(self) -> bytes:
        full = ((1 << self.ones) - 1) << (self.bits - self.ones) if self.ones else 0
        return full.to_bytes(self.bits // 8, "big")

    def contains(self, ip: bytes) -> bool:
        """``IPNet.Contains``: an IPv4 network (or an IPv4-mapped IPv6 one) holds IPv4
        addresses only, compared under the mask's last four bytes."""
        mask = self._mask()
        net = _to4(self.ip)
        if net is None:
            net = self.ip
        elif len(mask) == 16:
            mask = mask[12:]
        probe = _to4(ip) or ip
        if len(probe) != len(net):
            return False
        return all(a & m == b & m for a, b, m in zip(net, probe, mask, strict=True))


def parse_cidr(value: str) -> GoNet | None:
    """``ParseCIDRSloppy``'s network, None when ``value`` is not a CIDR."""
    addr, slash, prefix = value.partition("/")
    if not slash:
        return None
    ip, bits = _ipv4(addr), 32
    if ip is None:
        ip, bits = _ipv6(addr), 128
    found = _dtoi(prefix)
    if ip is None or found is None or found[1] != len(prefix) or found[0] > bits:
        return None
    ones = found[0]
    raw = ip[12:] if bits == 32 else ip
    number = int.from_bytes(raw, "big") & (((1 << ones) - 1) << (bits - ones) if ones else 0)
    return GoNet(number.to_bytes(bits // 8, "big"), ones, bits)
