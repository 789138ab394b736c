"""The Kubernetes CEL libraries the emulator's CRD rules may call, for :mod:`podnet.sim.cel`.

kube-apiserver adds these to CEL's standard functions: the IP and CIDR library
(k8s.io/apiserver/pkg/cel/library/ip.go, cidr.go), cel-go's string extensions, the list
and regex libraries, and the optionals ``oldSelf`` is under ``optionalOldSelf``.
:data:`FUNCTIONS` maps each name to its implementation (cel-python's calling convention:
the receiver first), :data:`KNOWN_FUNCTIONS` is every name a rule may call.
"""

from __future__ import annotations

import ipaddress
import itertools
import json
import re
from collections.abc import Callable
from typing import Any, Final

from celpy import celtypes
from celpy.evaluation import CELEvalError, base_functions

#: CEL's macros: names a rule may call that are not functions
MACROS: Final = frozenset({"has", "all", "exists", "exists_one", "map", "filter"})

# --- the IP and CIDR library (k8s.io/apiserver/pkg/cel/library/ip.go, cidr.go) ---------


class IP:
    """A ``net.IP`` value: one IPv4 or IPv6 address (no zone, not IPv4-mapped)."""

    __slots__ = ("addr",)

    def __init__(self, addr: ipaddress.IPv4Address | ipaddress.IPv6Address) -> None:
        self.addr = addr

    def __eq__(self, other: object) -> bool:
        return isinstance(other, IP) and self.addr == other.addr

    def __hash__(self) -> int:
        return hash(self.addr)

    def __str__(self) -> str:
        return str(self.addr)

    def __repr__(self) -> str:
        return f"ip({str(self.addr)!r})"


class CIDR:
    """A ``net.CIDR`` value: an address and a prefix length (host bits as written)."""

    __slots__ = ("addr", "bits")

    def __init__(self, addr: ipaddress.IPv4Address | ipaddress.IPv6Address, bits: int) -> None:
        self.addr = addr
        self.bits = bits

    @property
    def network(self) -> ipaddress.IPv4Network | ipaddress.IPv6Network:
        return ipaddress.ip_network(f"{self.addr}/{self.bits}", strict=False)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, CIDR) and (self.addr, self.bits) == (other.addr, other.bits)

    def __hash__(self) -> int:
        return hash((self.addr, self.bits))

    def __str__(self) -> str:
        return f"{self.addr}/{self.bits}"

    def __repr__(self) -> str:
        return f"cidr({str(self)!r})"


class _IPNamespace:
    """The value of the identifier ``ip`` in ``ip.isCanonical(...)``."""


IP_NAMESPACE: Final = _IPNamespace()
_DECIMAL: Final = re.compile(r"0|[1-9][0-9]{0,2}")


def _error(message: str) -> CELEvalError:
    return CELEvalError(message, ValueError, (message,))


def _no_overload(*args: Any) -> CELEvalError:
    return CELEvalError("no such overload", TypeError, args)


def _parse_addr(raw: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address:
    """netip.ParseAddr with the library's refusals (zones, IPv4-mapped addresses)."""
    why = f"IP Address {json.dumps(raw)} parse error during conversion from string: "
    if not raw.isascii() or "%" in raw:
        if "%" in raw:
            raise ValueError(f"IP address {json.dumps(raw)} with zone value is not allowed")
        raise ValueError(why + f"ParseAddr({json.dumps(raw)}): unexpected character")
    try:
        addr = ipaddress.ip_address(raw)
    except ValueError:
        raise ValueError(why + f"ParseAddr({json.dumps(raw)}): unable to parse IP") from None
    if isinstance(addr, ipaddress.IPv6Address) and addr.ipv4_mapped is not None:
        raise ValueError(f"IPv4-mapped IPv6 address {json.dumps(raw)} is not allowed")
    return addr


def _parse_cidr(raw: str) -> CIDR:
    """netip.ParsePrefix (the prefix length decimal, without leading zeros), not
    IPv4-mapped; host bits may be set (``masked()`` clears them)."""
    why = ("network address parse error during conversion from string: "
           f"netip.ParsePrefix({json.dumps(raw)}): ")
    addr_s, slash, bits_s = raw.partition("/")
    if not slash:
        raise ValueError(why + "no '/'")
    if "%" in addr_s:
        raise ValueError(why + "IPv6 zones cannot be present in a prefix")
    try:
        addr = ipaddress.ip_address(addr_s) if addr_s.isascii() else None
    except ValueError:
        addr = None
    if addr is None:
        raise ValueError(why + f"ParseAddr({json.dumps(addr_s)}): unable to parse IP")
    if (not bits_s.isascii() or _DECIMAL.fullmatch(bits_s) is None
            or int(bits_s) > addr.max_prefixlen):
        raise ValueError(why + f"bad bits after slash: {json.dumps(bits_s)}")
    if isinstance(addr, ipaddress.IPv6Address) and addr.ipv4_mapped is not None:
        raise ValueError(f"IPv4-mapped IPv6 address {json.dumps(raw)} is not allowed")
    return CIDR(addr, int(bits_s))


def _string_arg(value: Any) -> str | None:
    return str(value) if isinstance(value, str) else None


def f_ip(value: Any) -> Any:
    if isinstance(value, CIDR):
        return IP(value.addr)
    raw = _string_arg(value)
    if raw is None:
        return _no_overload(value)
    try:
        return IP(_parse_addr(raw))
    except ValueError as exc:
        return _error(str(exc))


def f_is_ip(value: Any) -> Any:
    raw = _string_arg(value)
    if raw is None:
        return _no_overload(value)
    try:
        _parse_addr(raw)
    except ValueError:
        return celtypes.BoolType(False)
    return celtypes.BoolType(True)


def f_cidr(value: Any) -> Any:
    raw = _string_arg(value)
    if raw is None:
        return _no_overload(value)
    try:
        return _parse_cidr(raw)
    except ValueError as exc:
        return _error(f"network address parse error during conversion from string: {exc}")


def f_is_cidr(value: Any) -> Any:
    raw = _string_arg(value)
    if raw is None:
        return _no_overload(value)
    try:
        _parse_cidr(raw)
    except ValueError:
        return celtypes.BoolType(False)
    return celtypes.BoolType(True)


def f_is_canonical(namespace: Any, value: Any) -> Any:
    if namespace is not IP_NAMESPACE:
        return _no_overload(namespace, value)
    raw = _string_arg(value)
    if raw is None:
        return _no_overload(value)
    try:
        addr = _parse_addr(raw)
    except ValueError as exc:
        return _error(str(exc))
    return celtypes.BoolType(str(addr) == raw)


def _ip_predicate(test: Callable[[ipaddress.IPv4Address | ipaddress.IPv6Address], bool]
                  ) -> Callable[[Any], Any]:
    def predicate(value: Any) -> Any:
        if not isinstance(value, IP):
            return _no_overload(value)
        return celtypes.BoolType(test(value.addr))
    return predicate


def _link_local_multicast(a: ipaddress.IPv4Address | ipaddress.IPv6Address) -> bool:
    if a.version == 4:
        return a in ipaddress.ip_network("224.0.0.0/24")
    return a in ipaddress.ip_network("ff02::/16")


def _global_unicast(a: ipaddress.IPv4Address | ipaddress.IPv6Address) -> bool:
    # Go's netip: not unspecified, loopback, multicast, link-local; nor 255.255.255.255
    if a.version == 4 and a == ipaddress.IPv4Address("255.255.255.255"):
        return False
    return not (a.is_unspecified or a.is_loopback or a.is_multicast or a.is_link_local)


def f_family(value: Any) -> Any:
    if not isinstance(value, IP):
        return _no_overload(value)
    return celtypes.IntType(value.addr.version)


def f_contains_ip(block: Any, other: Any) -> Any:
    if not isinstance(block, CIDR):
        return _no_overload(block, other)
    if isinstance(other, str):
        other = f_ip(other)
        if isinstance(other, CELEvalError):
            return other
    if not isinstance(other, IP):
        return _no_overload(block, other)
    return celtypes.BoolType(other.addr.version == block.addr.version
                             and other.addr in block.network)


def f_contains_cidr(block: Any, other: Any) -> Any:
    if not isinstance(block, CIDR):
        return _no_overload(block, other)
    if isinstance(other, str):
        other = f_cidr(other)
        if isinstance(other, CELEvalError):
            return other
    if not isinstance(other, CIDR):
        return _no_overload(block, other)
    if other.addr.version != block.addr.version:
        return celtypes.BoolType(False)
    inside = ipaddress.ip_network(f"{other.addr}/{block.bits}", strict=False)
    return celtypes.BoolType(inside == block.network and block.bits <= other.bits)


def f_masked(value: Any) -> Any:
    if not isinstance(value, CIDR):
        return _no_overload(value)
    return CIDR(value.network.network_address, value.bits)


def f_prefix_length(value: Any) -> Any:
    if not isinstance(value, CIDR):
        return _no_overload(value)
    return celtypes.IntType(value.bits)


_base_string = base_functions["string"]


def f_string(value: Any) -> Any:
    if isinstance(value, IP | CIDR):
        return celtypes.StringType(str(value))
    return _base_string(value)


# --- cel-go's string extensions (ext.Strings, version 2) and the list library ----------


def _str(value: Any) -> str:
    if not isinstance(value, str):
        raise TypeError("no such overload")
    return str(value)


def f_split(text: Any, sep: Any, limit: Any = None) -> Any:
    s, d = _str(text), _str(sep)
    n = -1 if limit is None else int(limit)
    if n == 0:
        return celtypes.ListType()
    if d == "":
        parts = list(s)
        if n > 0 and len(parts) > n:
            parts = [*parts[: n - 1], "".join(parts[n - 1:])]
    else:
        parts = s.split(d) if n < 0 else s.split(d, n - 1)
    return celtypes.ListType(celtypes.StringType(p) for p in parts)


def f_join(items: Any, sep: Any = "") -> Any:
    if not isinstance(items, list):
        return _no_overload(items)
    return celtypes.StringType(_str(sep).join(_str(i) for i in items))


def f_trim(text: Any) -> Any:
    return celtypes.StringType(_str(text).strip())


def f_lower_ascii(text: Any) -> Any:
    return celtypes.StringType("".join(c.lower() if c.isascii() else c for c in _str(text)))


def f_upper_ascii(text: Any) -> Any:
    return celtypes.StringType("".join(c.upper() if c.isascii() else c for c in _str(text)))


def f_replace(text: Any, old: Any, new: Any, limit: Any = None) -> Any:
    n = -1 if limit is None else int(limit)
    return celtypes.StringType(_str(text).replace(_str(old), _str(new), n))


def f_char_at(text: Any, index: Any) -> Any:
    s, i = _str(text), int(index)
    if i < 0 or i > len(s):
        return _error(f"index out of range: {i}")
    return celtypes.StringType(s[i:i + 1])


def f_substring(text: Any, start: Any, end: Any = None) -> Any:
    s = _str(text)
    b = int(start)
    e = len(s) if end is None else int(end)
    if b < 0 or b > len(s):
        return _error(f"index out of range: {b}")
    if e < 0 or e > len(s):
        return _error(f"index out of range: {e}")
    if b > e:
        return _error(f"invalid substring range. start: {b}, end: {e}")
    return celtypes.StringType(s[b:e])


def f_index_of(container: Any, item: Any, offset: Any = None) -> Any:
    if isinstance(container, list):
        return celtypes.IntType(next((i for i, v in enumerate(container) if v == item), -1))
    s, sub = _str(container), _str(item)
    start = 0 if offset is None else int(offset)
    if start < 0 or start > len(s):
        return _error(f"index out of range: {start}")
    return celtypes.IntType(s.find(sub, start))


def f_last_index_of(container: Any, item: Any, offset: Any = None) -> Any:
    if isinstance(container, list):
        found = [i for i, v in enumerate(container) if v == item]
        return celtypes.IntType(found[-1] if found else -1)
    s, sub = _str(container), _str(item)
    end = len(s) if offset is None else int(offset)
    if end < 0 or end > len(s):
        return _error(f"index out of range: {end}")
    return celtypes.IntType(s.rfind(sub, 0, end + len(sub)))


def f_is_sorted(items: Any) -> Any:
    if not isinstance(items, list):
        return _no_overload(items)
    return celtypes.BoolType(all(a <= b for a, b in itertools.pairwise(items)))


def f_sum(items: Any) -> Any:
    if not isinstance(items, list):
        return _no_overload(items)
    if not items:
        return celtypes.IntType(0)
    total = items[0]
    for v in items[1:]:
        total = total + v
    return total


def f_max(items: Any) -> Any:
    if not isinstance(items, list):
        return _no_overload(items)
    if not items:
        return _error("max of empty list")
    return max(items)


def f_find(text: Any, pattern: Any) -> Any:
    m = re.search(_str(pattern), _str(text))
    return celtypes.StringType(m.group(0) if m else "")


def f_find_all(text: Any, pattern: Any, limit: Any = None) -> Any:
    found = [m.group(0) for m in re.finditer(_str(pattern), _str(text))]
    if limit is not None and int(limit) >= 0:
        found = found[: int(limit)]
    return celtypes.ListType(celtypes.StringType(f) for f in found)


# --- optionals (oldSelf of an optionalOldSelf rule) ------------------------------------


class Optional:
    """An optional value (``optional.none()`` when ``value`` is the sentinel)."""

    __slots__ = ("value",)
    NONE: Final = object()

    def __init__(self, value: Any) -> None:
        self.value = value


def f_has_value(opt: Any) -> Any:
    if not isinstance(opt, Optional):
        return _no_overload(opt)
    return celtypes.BoolType(opt.value is not Optional.NONE)


def f_value(opt: Any) -> Any:
    if not isinstance(opt, Optional):
        return _no_overload(opt)
    if opt.value is Optional.NONE:
        return _error("optional.none() dereference")
    return opt.value


def f_or_value(opt: Any, default: Any) -> Any:
    if not isinstance(opt, Optional):
        return _no_overload(opt, default)
    return default if opt.value is Optional.NONE else opt.value


FUNCTIONS: Final[dict[str, Callable[..., Any]]] = {
    "ip": f_ip,
    "isIP": f_is_ip,
    "isCanonical": f_is_canonical,
    "family": f_family,
    "isUnspecified": _ip_predicate(lambda a: a.is_unspecified),
    "isLoopback": _ip_predicate(lambda a: a.is_loopback),
    "isLinkLocalMulticast": _ip_predicate(_link_local_multicast),
    "isLinkLocalUnicast": _ip_predicate(lambda a: a.is_link_local),
    "isGlobalUnicast": _ip_predicate(_global_unicast),
    "cidr": f_cidr,
    "isCIDR": f_is_cidr,
    "containsIP": f_contains_ip,
    "containsCIDR": f_contains_cidr,
    "masked": f_masked,
    "prefixLength": f_prefix_length,
    "string": f_string,
    "split": f_split,
    "join": f_join,
    "trim": f_trim,
    "lowerAscii": f_lower_ascii,
    "upperAscii": f_upper_ascii,
    "replace": f_replace,
    "charAt": f_char_at,
    "substring": f_substring,
    "indexOf": f_index_of,
    "lastIndexOf": f_last_index_of,
    "isSorted": f_is_sorted,
    "sum": f_sum,
    "max": f_max,
    "find": f_find,
    "findAll": f_find_all,
    "hasValue": f_has_value,
    "value": f_value,
    "orValue": f_or_value,
}
KNOWN_FUNCTIONS: Final = frozenset(FUNCTIONS) | frozenset(
    name for name in base_functions if name.isidentifier()) | MACROS | {"dyn", "min"}
