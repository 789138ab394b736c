"""What the node agent accepts as a request's fields, and the names podnet derives from
them: the longest names Kubernetes and the CNI spec allow fit every encoding (a link's
name, its alias, a grant's file name), and no two different inputs share one."""

from __future__ import annotations

import json
from typing import Any

import pytest

from podnet.hookspecs.types import OWNER_DIGEST_PREFIX, owner_digest
from podnet.linux.veth import IFALIASZ, IFNAMSIZ
from podnet.node import CniError, CniRequest
from podnet.node.grants import IpamGrants
from podnet.plugins.reference.dataplane import ALIAS_MARK, bridge_name, host_alias

#: the longest a namespace (a DNS-1123 label), a pod's name (a subdomain), a record's name
NAMESPACE = "n" * 63
RECORD = ".".join(["r" * 63] * 4)[:253]
CONTAINER = "c" * 64


def _body(**fields: Any) -> dict[str, Any]:
    return {"cniVersion": "1.1.0", "containerId": CONTAINER, "netns": "/run/netns/x",
            "ifName": "eth0", "podNamespace": NAMESPACE, "podName": RECORD,
            "podUid": "0b6c4f53-2f0e-4c1c-9f0b-0d1f0a8e2a11", "network": "podnet",
            "config": {}, **fields}


def test_the_longest_names_kubernetes_allows_are_a_valid_request() -> None:
    req = CniRequest.parse(_body(ifName="x" * IFNAMSIZ))
    assert (req.namespace, req.pod, req.if_name) == (NAMESPACE, RECORD, "x" * IFNAMSIZ)


@pytest.mark.parametrize(("field", "value"), [
    ("ifName", "x" * 16), ("ifName", "é" * 8), ("ifName", "a/b"), ("ifName", "a:b"),
    ("ifName", "a b"), ("ifName", "a\tb"), ("ifName", "."), ("ifName", ".."),
    ("ifName", "a\x00b"),
    ("containerId", "c" * 65), ("containerId", "a/b"), ("containerId", ".hidden"),
    ("containerId", "a:b"),
    ("netns", "netns/x"),
    ("podNamespace", "n" * 64), ("podNamespace", "Caps"), ("podName", "r" * 254),
    ("podName", "a/b"), ("podName", "a..b"), ("podUid", "a/b"),
    ("config", "not an object"),
])
def test_a_field_podnet_cannot_use_is_error_7_naming_it(field: str, value: Any) -> None:
    with pytest.raises(CniError) as err:
        CniRequest.parse(_body(**{field: value}))
    assert err.value.code == 7 and err.value.msg.startswith(field), err.value.msg


def test_bridges_of_networks_with_one_prefix_are_different_links() -> None:
    long = [f"attachment-{c}" for c in "ab"] + ["x" * 63, "x" * 62 + "y"]
    names = [bridge_name(n) for n in long]
    assert len(set(names)) == len(names), names
    assert all(len(n.encode()) <= IFNAMSIZ for n in names), names
    assert bridge_name("default") == "pnbr-default"  # a name that fits is kept


def test_a_host_ends_alias_fits_the_kernels_limit_and_names_its_record() -> None:
    key = f"{NAMESPACE}/{RECORD}"
    alias = host_alias(CONTAINER, "x" * IFNAMSIZ, "n" * 63, key)
    assert len(alias.encode()) <= IFALIASZ, len(alias.encode())
    mark = json.loads(alias[len(ALIAS_MARK):])
    assert mark["c"] == CONTAINER and mark["k"] == owner_digest(key)
    assert mark["k"].startswith(OWNER_DIGEST_PREFIX) and not key.startswith("#")
    short = json.loads(host_alias("c1", "eth0", "default", "ns/pod.default.1")[7:])
    assert short["k"] == "ns/pod.default.1"


def test_grants_of_dotted_containers_and_interfaces_do_not_share_a_file(tmp_path: Any
                                                                         ) -> None:
    """``a.b`` + ``c`` and ``a`` + ``b.c``: two grants, each revoked on its own."""
    grants = IpamGrants(str(tmp_path))
    grants.grant("a.b", "c", "ns/one")
    grants.grant("a", "b.c", "ns/two")
    assert grants.owners() == {"ns/one", "ns/two"}
    grants.revoke("a", "b.c")
    assert grants.owners() == {"ns/one"}
    grants.revoke("a.b", "c")
    assert grants.owners() == set()


def test_an_ovn_host_ends_alias_fits_the_kernels_limit() -> None:
    from podnet.plugins.ovn.dataplane import (
        CONTAINER_ID,
        IFNAME_ID,
        NETWORK_ID,
        OWNER_ID,
        _alias,
    )

    key = f"{NAMESPACE}/{RECORD}"
    for network in ("default", "n" * 63):
        alias = _alias({CONTAINER_ID: CONTAINER, IFNAME_ID: "x" * IFNAMSIZ,
                        NETWORK_ID: network, OWNER_ID: key})
        assert len(alias.encode()) <= IFALIASZ, (network, len(alias.encode()))
    assert owner_digest(key) in _alias({CONTAINER_ID: CONTAINER, IFNAME_ID: "eth0",
                                        NETWORK_ID: "default", OWNER_ID: key})


def test_only_a_network_namespace_is_a_sandbox_and_nothing_else_is_opened(
        tmp_path: Any) -> None:
    """A FIFO (whose open would block the handler for ever), a device, a plain file, a
    namespace of another kind: none is a sandbox; one namespace by two paths is one."""
    import os

    from podnet.linux.netns import network_namespace_id

    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    plain = tmp_path / "plain"
    plain.write_text("")
    for path in (str(fifo), "/dev/null", str(plain), str(tmp_path), "/proc/self/ns/mnt"):
        with pytest.raises(ValueError, match=r"not a namespace|another kind"):
            network_namespace_id(path)
    assert network_namespace_id("/proc/self/ns/net") == network_namespace_id(
        f"/proc/{os.getpid()}/ns/net")
