"""Pod annotations parsed into a NetworkRequest: every mistake names its key and value."""

from __future__ import annotations

import pytest

from podnet.core import annotations as a
from podnet.core.errors import ErrorKind, InvalidRequest
from podnet.core.models import NetworkRequest


def test_constants() -> None:
    assert a.PREFIX == "podnet.io/"
    assert a.IP_ADDRESS == "podnet.io/ip-address"
    assert a.SECURITY_GROUPS == "podnet.io/security-groups"
    assert a.annotation_field(a.IP_ADDRESS) == "metadata.annotations[podnet.io/ip-address]"
    assert a.annotation_field("ip-pool") == "metadata.annotations[podnet.io/ip-pool]"


def test_no_annotations_means_no_preference() -> None:
    assert a.parse_network_request({}) == NetworkRequest()
    assert a.parse_network_request({"other.io/x": "1", "app": "web"}) == NetworkRequest()
    assert a.parse_networks({}) == ()


@pytest.mark.parametrize(
    ("annotations", "expected"),
    [
        ({a.SUBNETS: "vsw-1"}, NetworkRequest(subnets=("vsw-1",))),
        (
            {a.SUBNETS: " vsw-1 , vsw-2,subnet-0abc "},
            NetworkRequest(subnets=("vsw-1", "vsw-2", "subnet-0abc")),
        ),
        ({a.IP_ADDRESS: "10.0.0.5"}, NetworkRequest(ip_address="10.0.0.5")),
        ({a.IP_ADDRESS: " 10.0.0.5 "}, NetworkRequest(ip_address="10.0.0.5")),
        ({a.IP_ADDRESS: "FD00:0::5"}, NetworkRequest(ip_address="fd00::5")),
        ({a.IP_ADDRESS: "10.0.0.5, fd00::5"}, NetworkRequest(ip_address="10.0.0.5,fd00::5")),
        ({a.IP_ADDRESS: "fd00::5,10.0.0.5"}, NetworkRequest(ip_address="10.0.0.5,fd00::5")),
        (
            {a.IP_POOL: "10.0.0.5,10.0.0.6, fd00::7"},
            NetworkRequest(ip_pool=("10.0.0.5", "10.0.0.6", "fd00::7")),
        ),
        ({a.IP_POOL: "web-pool"}, NetworkRequest(ip_pool=("web-pool",))),
        ({a.MAC_ADDRESS: "02:42:AC:11:00:02"}, NetworkRequest(mac_address="02:42:ac:11:00:02")),
        (
            {a.SECURITY_GROUPS: "sg-abc, web-frontend"},
            NetworkRequest(security_groups=("sg-abc", "web-frontend")),
        ),
        ({a.PORT_SECURITY: "true"}, NetworkRequest(port_security=True)),
        ({a.PORT_SECURITY: "False"}, NetworkRequest(port_security=False)),
        ({a.VIPS: "10.0.0.100, 10.0.0.101"}, NetworkRequest(vips=("10.0.0.100", "10.0.0.101"))),
        ({a.EIP: "203.0.113.7"}, NetworkRequest(eip="203.0.113.7")),
        ({a.EIP: "203.0.113.7", a.SNAT: "false"}, NetworkRequest(eip="203.0.113.7")),
        ({a.SNAT: "true"}, NetworkRequest(snat=True)),
        ({a.EIP: "203.0.113.7", a.SNAT: "TRUE"}, NetworkRequest(eip="203.0.113.7", snat=True)),
    ],
)
def test_good_annotations(annotations: dict[str, str], expected: NetworkRequest) -> None:
    assert a.parse_network_request(annotations) == expected


def test_everything_at_once() -> None:
    annotations = {
        a.SUBNETS: "vsw-1,vsw-2",
        a.IP_ADDRESS: "10.0.0.5",
        a.MAC_ADDRESS: "02:42:ac:11:00:02",
        a.NETWORKS: "storage",
        a.SECURITY_GROUPS: "sg-a,sg-b",
        a.PORT_SECURITY: "true",
        a.VIPS: "10.0.0.100",
        a.EIP: "203.0.113.7",
        a.SNAT: "true",
        "podnet.io/future-thing": "x",
        "kubectl.kubernetes.io/last-applied-configuration": "{}",
    }
    assert a.parse_network_request(annotations) == NetworkRequest(
        subnets=("vsw-1", "vsw-2"),
        ip_address="10.0.0.5",
        mac_address="02:42:ac:11:00:02",
        security_groups=("sg-a", "sg-b"),
        port_security=True,
        vips=("10.0.0.100",),
        eip="203.0.113.7",
        snat=True,
    )
    assert a.parse_networks(annotations) == ("storage",)
    assert a.unknown_keys(annotations) == ("podnet.io/future-thing",)


def test_networks() -> None:
    assert a.parse_networks({a.NETWORKS: "storage, backup"}) == ("storage", "backup")


def test_networks_name_their_interfaces() -> None:
    value = "storage@data0, backup, red@net1"
    assert a.parse_attachments({a.NETWORKS: value}) == (
        ("storage", "data0"), ("backup", None), ("red", "net1"))
    assert a.parse_networks({a.NETWORKS: value}) == ("storage", "backup", "red")


def test_unknown_keys_sorted_and_prefix_only() -> None:
    annotations = {
        "podnet.io/zeta": "1",
        "podnet.io/alpha": "2",
        "other.io/x": "3",
        a.EIP: "1.1.1.1",
    }
    assert a.unknown_keys(annotations) == ("podnet.io/alpha", "podnet.io/zeta")
    assert a.unknown_keys({}) == ()


# (key, value, text the message must contain besides the value)
BAD = [
    (a.IP_ADDRESS, "10.0.0.300", "invalid IP address"),
    (a.IP_ADDRESS, "not-an-ip", "invalid IP address"),
    (a.IP_ADDRESS, "fe80::1%eth0", "invalid IP address"),
    (a.IP_ADDRESS, "", "empty"),
    (a.IP_ADDRESS, "10.0.0.5,10.0.0.6", "one IPv4 and one IPv6"),
    (a.IP_ADDRESS, "fd00::5,fd00::6", "one IPv4 and one IPv6"),
    (a.IP_ADDRESS, "10.0.0.5,fd00::5,10.0.0.6", "pair"),
    (a.IP_ADDRESS, "10.0.0.5,", "pair"),
    (a.IP_ADDRESS, "10.0.0.5,fd00::zz", "invalid IP address"),
    (a.MAC_ADDRESS, "02:42:ac:11:00", "6 colon-separated hex octets"),
    (a.MAC_ADDRESS, "02-42-ac-11-00-02", "6 colon-separated hex octets"),
    (a.MAC_ADDRESS, "02:42:ac:11:00:zz", "6 colon-separated hex octets"),
    (a.MAC_ADDRESS, "0242.ac11.0002", "6 colon-separated hex octets"),
    (a.MAC_ADDRESS, "01:00:5e:00:00:01", "unicast"),
    (a.MAC_ADDRESS, "ff:ff:ff:ff:ff:ff", "unicast"),
    (a.MAC_ADDRESS, "00:00:00:00:00:00", "all zeros"),
    (a.SUBNETS, "vsw-1,,vsw-2", "empty list element"),
    (a.SUBNETS, "vsw-1,", "empty list element"),
    (a.SUBNETS, "vsw-1,vsw-1", "duplicate entry 'vsw-1'"),
    (a.SUBNETS, "   ", "empty"),
    (a.SUBNETS, "vsw 1", "no whitespace"),
    (a.SECURITY_GROUPS, "sg-a, sg-b, sg-a", "duplicate entry 'sg-a'"),
    (a.SECURITY_GROUPS, ",sg-a", "empty list element"),
    (a.PORT_SECURITY, "yes", "invalid boolean"),
    (a.PORT_SECURITY, "1", "invalid boolean"),
    (a.PORT_SECURITY, "", "invalid boolean"),
    (a.SNAT, "enabled", "invalid boolean"),
    (a.VIPS, "10.0.0.1,vip", "invalid IP address 'vip'"),
    (a.VIPS, "10.0.0.1, 10.0.0.1", "duplicate entry '10.0.0.1'"),
    (a.VIPS, "10.0.0.1,,10.0.0.2", "empty list element"),
    (a.EIP, "203.0.113", "invalid IP address"),
    (a.EIP, "203.0.113.7,203.0.113.8", "invalid IP address"),
    (a.IP_POOL, "pool-a,10.0.0.5", "mixes pool name 'pool-a'"),
    (a.IP_POOL, "10.0.0.5,pool-a", "mixes pool name 'pool-a'"),
    (a.IP_POOL, "pool-a,pool-b", "only one pool name"),
    (a.IP_POOL, "10.0.0.5,10.0.0.256", "invalid IP address '10.0.0.256'"),
    (a.IP_POOL, "Pool_A", "neither an IP address nor a pool name"),
    (a.IP_POOL, "10.0.0.5,10.0.0.5", "duplicate entry"),
    (a.IP_POOL, "10.0.0.5,,10.0.0.6", "empty list element"),
]


@pytest.mark.parametrize(
    ("key", "value", "needle"), BAD, ids=[f"{k[10:]}={v!r}" for k, v, _ in BAD]
)
def test_bad_annotation(key: str, value: str, needle: str) -> None:
    with pytest.raises(InvalidRequest) as info:
        a.parse_network_request({key: value})
    err = info.value
    assert err.field == a.annotation_field(key)
    assert err.kind is ErrorKind.INVALID
    assert needle in err.message
    assert repr(value) in err.message  # the whole value, as the user wrote it
    assert str(err) == f"{a.annotation_field(key)}: {err.message}"


BAD_NETWORKS = [
    ("storage@", "invalid interface name ''"),
    ("storage@data/0", "invalid interface name 'data/0'"),
    ("storage@" + "x" * 16, "invalid interface name"),
    ("storage@..", "invalid interface name '..'"),
    ("storage@d0,backup@d0", "duplicate entry 'd0'"),
    ("storage@d0,storage@d1", "duplicate entry 'storage'"),
    ("Storage@d0", "DNS-1123"),
    ("storage,default", "'default'"),
    ("storage,storage", "duplicate entry 'storage'"),
    ("Storage", "DNS-1123"),
    ("storage,,backup", "empty list element"),
    ("net_1", "DNS-1123"),
    ("-net", "DNS-1123"),
    ("x" * 64, "DNS-1123"),
    ("", "empty"),
]


@pytest.mark.parametrize(("value", "needle"), BAD_NETWORKS)
def test_bad_networks(value: str, needle: str) -> None:
    with pytest.raises(InvalidRequest) as info:
        a.parse_networks({a.NETWORKS: value})
    assert info.value.field == "metadata.annotations[podnet.io/networks]"
    assert needle in info.value.message
    assert a.show(value) in info.value.message


def test_ip_address_with_ip_pool_conflicts() -> None:
    with pytest.raises(InvalidRequest) as info:
        a.parse_network_request({a.IP_ADDRESS: "10.0.0.5", a.IP_POOL: "10.0.0.6,10.0.0.7"})
    err = info.value
    assert err.field == a.annotation_field(a.IP_POOL)
    assert a.IP_ADDRESS in err.message and a.IP_POOL in err.message
    assert "'10.0.0.5'" in err.message


def test_bad_value_reported_before_conflict() -> None:
    with pytest.raises(InvalidRequest) as info:
        a.parse_network_request({a.IP_ADDRESS: "10.0.0.500", a.IP_POOL: "pool-a"})
    assert info.value.field == a.annotation_field(a.IP_ADDRESS)


def test_networks_do_not_affect_request() -> None:
    # parse_network_request ignores podnet.io/networks, even when malformed
    assert a.parse_network_request({a.NETWORKS: "default"}) == NetworkRequest()


def test_long_values_are_cut_short() -> None:
    value = "x" * 1000
    with pytest.raises(InvalidRequest) as info:
        a.parse_network_request({a.EIP: value})
    assert len(info.value.message) < 200
    assert "xxx..." in info.value.message
