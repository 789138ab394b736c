"""Pod annotations (``podnet.io/*``) parsed into a validated :class:`NetworkRequest`.

Every error is an :class:`InvalidRequest` whose ``field`` names the annotation
(``metadata.annotations[podnet.io/ip-address]``) and whose message quotes the bad value,
so the event a user sees points straight at what to fix. Part of the provider contract
(providers read ``podnet.io/*`` values with it); core re-exports it as
``podnet.core.annotations``.

The value checks (``check_ip``, ``check_mac``, ...) raise plain ``ValueError``; they are
public because core's converter applies the same rules to ``spec.requests`` of a
PodNetwork read from the API server. Parsed values are normalised (compressed IPs,
lower-case MAC, dual-stack pair ordered IPv4 first) so requests compare reliably.
"""

from __future__ import annotations

import difflib
import ipaddress
import re
from collections.abc import Callable, Iterable, Mapping
from typing import TypeVar

from podnet.hookspecs.errors import InvalidRequest
from podnet.hookspecs.models import DEFAULT_NETWORK, NetworkRequest

T = TypeVar("T")

PREFIX = "podnet.io/"

SUBNETS = PREFIX + "subnets"
IP_ADDRESS = PREFIX + "ip-address"
IP_POOL = PREFIX + "ip-pool"
MAC_ADDRESS = PREFIX + "mac-address"
NETWORKS = PREFIX + "networks"
SECURITY_GROUPS = PREFIX + "security-groups"
PORT_SECURITY = PREFIX + "port-security"
VIPS = PREFIX + "vips"
EIP = PREFIX + "eip"
SNAT = PREFIX + "snat"

KNOWN_KEYS = frozenset(
    {
        SUBNETS,
        IP_ADDRESS,
        IP_POOL,
        MAC_ADDRESS,
        NETWORKS,
        SECURITY_GROUPS,
        PORT_SECURITY,
        VIPS,
        EIP,
        SNAT,
    }
)

_DNS1123_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")
_MAC = re.compile(r"[0-9a-fA-F]{2}(:[0-9a-fA-F]{2}){5}")
# Subnet and security-group references: provider ids ("vsw-1a2b", "sg-abc") or names.
# Whitespace and control characters are refused because they are always a typo here.
_REFERENCE = re.compile(r"[^\s,\x00-\x1f\x7f]{1,255}")
_MAX_SHOWN = 64
_NONE: tuple[str, ...] = ()


def annotation_field(key: str) -> str:
    """The error path of an annotation; a bare key (``ip-address``) gets the prefix."""
    if "/" not in key:
        key = PREFIX + key
    return f"metadata.annotations[{key}]"


def unknown_keys(annotations: Mapping[str, str]) -> tuple[str, ...]:
    """``podnet.io/`` keys this parser does not know, sorted, so the engine can warn."""
    return tuple(sorted(k for k in annotations if k.startswith(PREFIX) and k not in KNOWN_KEYS))


def meant_key(key: str) -> str | None:
    """The known key an unknown ``podnet.io/`` key is most likely a misspelling of."""
    # compared without the prefix, which every key shares and would make all look alike
    names = sorted(k.removeprefix(PREFIX) for k in KNOWN_KEYS)
    close = difflib.get_close_matches(key.removeprefix(PREFIX), names, n=1, cutoff=0.75)
    return PREFIX + close[0] if close else None


def check_unknown_keys(annotations: Mapping[str, str]) -> tuple[str, ...]:
    """One warning per unknown ``podnet.io/`` key (naming the key it probably meant).

    :raises InvalidRequest: for an unknown key that is a likely misspelling of a known key
        the pod does not set. Every known key changes what the pod gets (its address, its
        subnet, its MAC, VIPs, EIP, security groups, port security, networks): going on
        without it would silently give the pod something else (a random address for a
        misspelt ``ip-address``), which cannot be taken back once the pod runs. So the
        pod's networks wait, with the reason on the Pod, until the key is fixed. A key
        like no known one (another tool's, a later podnet's) is only warned about.
    """
    warnings: list[str] = []
    for key in unknown_keys(annotations):
        meant = meant_key(key)
        if meant is not None and meant not in annotations:
            raise InvalidRequest(
                annotation_field(key),
                f"unknown annotation {key} (did you mean {meant}?): nothing is allocated "
                f"until it is fixed, or the pod would run without what {meant} asks for")
        hint = f" (did you mean {meant}?)" if meant is not None else ""
        warnings.append(f"{annotation_field(key)}: unknown annotation {key}{hint}: ignored")
    return tuple(warnings)


# --- value checks shared with the wire format -------------------------------------------


def show(value: object) -> str:
    """``repr`` of a value, cut short so a huge annotation cannot flood an event."""
    text = repr(value)
    return text if len(text) <= _MAX_SHOWN else text[: _MAX_SHOWN - 3] + "..."


def is_dns1123_label(value: str) -> bool:
    return _DNS1123_LABEL.fullmatch(value) is not None


_OCTET = r"(25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])"
#: a dotted quad exactly as ipaddress accepts one (no leading zeros), already in the form
#: ``str(ip_address(value))`` gives: checked without building an address object
IPV4 = re.compile(rf"{_OCTET}(\.{_OCTET}){{3}}")


def ipv4_int(value: str) -> int | None:
    """The IPv4 address ``value`` as an integer, or None when it is no dotted quad."""
    if IPV4.fullmatch(value) is None:
        return None
    a, b, c, d = value.split(".")
    return (int(a) << 24) | (int(b) << 16) | (int(c) << 8) | int(d)


def check_ip(value: str, version: int | None = None) -> str:
    """Validate one IP address (of ``version`` 4 or 6 if given); return it compressed."""
    if version != 6 and value.__class__ is str and IPV4.fullmatch(value) is not None:
        return value  # the common case: every provider answer, every record's address
    try:
        # ipaddress takes IPv6 scope ids ("fe80::1%eth0"); a pod address never has one.
        if "%" in value:
            raise ValueError
        ip = ipaddress.ip_address(value)
    except ValueError:
        raise ValueError(f"invalid IP address {show(value)}") from None
    if version is not None and ip.version != version:
        raise ValueError(f"{show(value)} is not an IPv{version} address")
    return str(ip)


def is_ip(value: str) -> bool:
    """Whether ``value`` is one IPv4 or IPv6 address (no scope id): for providers telling
    an address from a name (an IP pool entry, a subnet reference)."""
    try:
        check_ip(value)
    except ValueError:
        return False
    return True


def check_ip_address(value: str) -> str:
    """One IP, or a dual-stack pair ``v4,v6`` (either order); returned as ``v4,v6``."""
    parts = [p.strip() for p in value.split(",")]
    if len(parts) == 1:
        return check_ip(parts[0])
    if len(parts) != 2 or not all(parts):
        raise ValueError(f"expected one IP or an IPv4,IPv6 pair, got {show(value)}")
    ips = [ipaddress.ip_address(check_ip(p)) for p in parts]
    if {ip.version for ip in ips} != {4, 6}:
        raise ValueError(f"a pair must be one IPv4 and one IPv6 address, got {show(value)}")
    ips.sort(key=lambda ip: ip.version)
    return f"{ips[0]},{ips[1]}"


def check_mac(value: str) -> str:
    """Six colon-separated hex octets, unicast and not all zeros; returned lower-case."""
    if _MAC.fullmatch(value) is None:
        raise ValueError(
            f"invalid MAC address {show(value)}: expected 6 colon-separated hex octets"
        )
    octets = [int(o, 16) for o in value.split(":")]
    if octets[0] & 1:
        raise ValueError(f"MAC address {show(value)} is multicast; a unicast address is required")
    if not any(octets):
        raise ValueError(f"MAC address {show(value)} is all zeros")
    return value.lower()


def check_unique(items: Iterable[str]) -> tuple[str, ...]:
    """Refuse empty and duplicate entries; keep the order given."""
    seen: set[str] = set()
    out: list[str] = []
    for item in items:
        if not item:
            raise ValueError("empty list element")
        if item in seen:
            raise ValueError(f"duplicate entry {show(item)}")
        seen.add(item)
        out.append(item)
    return tuple(out)


def check_references(items: Iterable[str]) -> tuple[str, ...]:
    """Subnet or security-group ids/names: non-empty, no whitespace, no duplicates."""
    refs = check_unique(items)
    for ref in refs:
        if _REFERENCE.fullmatch(ref) is None:
            raise ValueError(f"invalid reference {show(ref)}: no whitespace, at most 255 chars")
    return refs


def check_ip_pool(items: Iterable[str]) -> tuple[str, ...]:
    """Either IP addresses or exactly one pool name (a DNS-1123 label), never both."""
    entries = check_unique(items)
    names = [e for e in entries if is_dns1123_label(e)]
    if not names:
        if len(entries) == 1:
            try:
                return (check_ip(entries[0]),)
            except ValueError:
                raise ValueError(
                    f"{show(entries[0])} is neither an IP address nor a pool name (DNS-1123 label)"
                ) from None
        return check_unique(check_ip(e) for e in entries)
    if len(entries) > 1:
        ips = [e for e in entries if e not in names]
        if ips:
            raise ValueError(
                f"mixes pool name {show(names[0])} with IP {show(ips[0])}: give one or the other"
            )
        raise ValueError(f"only one pool name allowed, got {show(','.join(entries))}")
    return entries


def check_ips(items: Iterable[str]) -> tuple[str, ...]:
    return check_unique(check_ip(i) for i in check_unique(items))


_IFNAME_BAD = re.compile(r"[/:\s]")


def check_interface_name(name: str) -> str:
    """A pod interface name the kernel takes: 1-15 bytes, no ``/``, ``:`` or white space,
    not ``.`` or ``..``."""
    if not name or len(name.encode()) > 15 or _IFNAME_BAD.search(name) or name in (".", ".."):
        raise ValueError(f"invalid interface name {show(name)}: 1-15 bytes, no '/', ':' "
                         "or white space")
    return name


def check_attachments(items: Iterable[str]) -> tuple[tuple[str, str | None], ...]:
    """``network`` or ``network@interface`` items: each network once, each interface
    name once."""
    pairs: list[tuple[str, str | None]] = []
    for item in items:
        network, at, interface = item.partition("@")
        network = network.strip()
        pairs.append((network, check_interface_name(interface.strip()) if at else None))
    check_networks(network for network, _ in pairs)
    check_unique(interface for _, interface in pairs if interface is not None)
    return tuple(pairs)


def check_networks(items: Iterable[str]) -> tuple[str, ...]:
    names = check_unique(items)
    for name in names:
        if name == DEFAULT_NETWORK:
            raise ValueError(f"{name!r} is implicit and cannot be listed")
        if not is_dns1123_label(name):
            raise ValueError(f"invalid network name {show(name)}: must be a DNS-1123 label")
    return names


# --- parsing ------------------------------------------------------------------------------


def _split(value: str) -> list[str]:
    # An annotation set to "" is almost always a templating slip: say so instead of ignoring it.
    if not value.strip():
        raise ValueError(f"empty value {show(value)}")
    return [part.strip() for part in value.split(",")]


def _bool(value: str) -> bool:
    text = value.strip().lower()
    if text == "true":
        return True
    if text == "false":
        return False
    raise ValueError(f"invalid boolean {show(value)}: expected 'true' or 'false'")


def _single(value: str) -> str:
    text = value.strip()
    if not text:
        raise ValueError(f"empty value {show(value)}")
    return text


def _get(annotations: Mapping[str, str], key: str, parse: Callable[[str], T], default: T) -> T:
    if key not in annotations:
        return default
    raw = annotations[key]
    try:
        return parse(raw)
    except ValueError as exc:
        message = str(exc)
        # Name the whole annotation when the message quotes only a part of it.
        if show(raw) not in message:
            message = f"{message} in {show(raw)}"
        raise InvalidRequest(annotation_field(key), message) from None


def parse_network_request(annotations: Mapping[str, str]) -> NetworkRequest:
    """Read the ``podnet.io/*`` request annotations; absent keys mean "no preference"."""
    a = annotations
    request = NetworkRequest(
        subnets=_get(a, SUBNETS, lambda v: check_references(_split(v)), _NONE),
        ip_address=_get(a, IP_ADDRESS, lambda v: check_ip_address(_single(v)), None),
        ip_pool=_get(a, IP_POOL, lambda v: check_ip_pool(_split(v)), _NONE),
        mac_address=_get(a, MAC_ADDRESS, lambda v: check_mac(_single(v)), None),
        security_groups=_get(a, SECURITY_GROUPS, lambda v: check_references(_split(v)), _NONE),
        port_security=_get(a, PORT_SECURITY, _bool, False),
        vips=_get(a, VIPS, lambda v: check_ips(_split(v)), _NONE),
        eip=_get(a, EIP, lambda v: check_ip(_single(v)), None),
        snat=_get(a, SNAT, _bool, False),
    )
    # Both are fine alone; together the pod would ask for two different addresses.
    if IP_ADDRESS in a and IP_POOL in a:
        raise InvalidRequest(
            annotation_field(IP_POOL),
            f"{IP_POOL}={show(a[IP_POOL])} conflicts with {IP_ADDRESS}={show(a[IP_ADDRESS])}:"
            " set only one of them",
        )
    return request


def parse_attachments(annotations: Mapping[str, str]) -> tuple[tuple[str, str | None], ...]:
    """Extra networks the pod joins besides the implicit default one, in order, each with
    the interface name the annotation gives it (``storage@data0``), or None."""
    return _get(annotations, NETWORKS, lambda v: check_attachments(_split(v)), ())


def parse_networks(annotations: Mapping[str, str]) -> tuple[str, ...]:
    """Extra networks the pod joins besides the implicit default one."""
    return tuple(network for network, _ in parse_attachments(annotations))
