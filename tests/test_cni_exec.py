"""The CNI specification's rules, executed by the agent (``podnet.node.cniexec``): the
static ``podnet-cni`` forwards its name, its ``CNI_*`` environment and its stdin
(``POST /v1/cni/exec``), and what it prints and exits with is what ``execute`` answers.

Most tests run ``execute`` in this process against :class:`FakeAgent`, the agent's side
of the protocol as data (attachments keyed by container and interface, the requests it
received, answers a test forces): every rule the Python plugin held. The last ones speak
the exec wire format over the agent's real unix socket (percent-encoded values, repeated
``CNI-Env`` headers, the exit code in ``CNI-Exit-Code``): to the agent's server with a
fake agent behind it, and to a real agent (the node bed's processes) when this host can
make network namespaces.
"""

from __future__ import annotations

import http.client
import json
import os
import shutil
import socket
import tempfile
import threading
from collections.abc import Iterator, Mapping
from typing import Any

import pytest

from podnet.node import cniexec
from podnet.node.cniexec import execute
from podnet.node.protocol import CniError
from podnet.testing.cni import CniResult as Answer
from podnet.testing.netns import netns_unavailable
from podnet.testing.nodebed import (
    NODE,
    AgentClient,
    Host,
    NodeNamespace,
    Stack,
    Underlay,
    addresses_in,
    links_in,
    node_object,
    pod,
)
from podnet.testing.waiting import wait_for

pytest_plugins = ["podnet.testing"]

VERSIONS = ["0.3.1", "0.4.0", "1.0.0", "1.1.0"]
CONTAINER = "c0ffee01"
NETNS = "/run/netns/pod-a"
POD_ARGS = "IgnoreUnknown=1;K8S_POD_NAMESPACE=default;K8S_POD_NAME=pod-a;K8S_POD_UID=uid-a"

#: what the fake agent answers for an ADD: a 1.1.0 result, dual stack, with 1.1.0-only fields
RESULT = {
    "cniVersion": "1.1.0",
    "interfaces": [{"name": "eth0", "mac": "02:00:0a:00:00:05", "sandbox": "", "mtu": 1450}],
    "ips": [{"address": "10.0.0.5/24", "gateway": "10.0.0.1", "interface": 0},
            {"address": "fd00::5/64", "gateway": "fd00::1", "interface": 0}],
    "routes": [{"dst": "0.0.0.0/0", "gw": "10.0.0.1", "priority": 100},
               {"dst": "::/0", "gw": "fd00::1"}],
    "dns": {},
}
#: what it answers for an IPAM ADD: addresses and routes, no interfaces
IPAM_RESULT = {
    "cniVersion": "1.1.0",
    "ips": [{"address": "10.0.0.5/24", "gateway": "10.0.0.1"},
            {"address": "fd00::5/64", "gateway": "fd00::1"}],
    "routes": [{"dst": "0.0.0.0/0", "gw": "10.0.0.1"}],
    "dns": {},
}


class FakeAgent:
    """The agent's side of the protocol as data (a :class:`cniexec.Backend`): it plumbs
    nothing, keeps attachments by (container, interface) and every request it got; a
    test may force the answer of a method (a value to return, or an exception to raise)."""

    def __init__(self) -> None:
        self.requests: list[tuple[str, Any]] = []
        self.attachments: dict[tuple[str, str], dict[str, Any]] = {}
        self.forced: dict[str, Any] = {}

    def _got(self, method: str, body: Any) -> Any:
        self.requests.append((method, body))
        forced = self.forced.get(method)
        if isinstance(forced, BaseException):
            raise forced
        return forced

    def add(self, body: Mapping[str, Any]) -> dict[str, Any]:
        if (forced := self._got("add", body)) is not None:
            return forced  # type: ignore[no-any-return]
        result = json.loads(json.dumps(RESULT))
        result["interfaces"][0]["name"] = body["ifName"]
        result["interfaces"][0]["sandbox"] = body["netns"]
        self.attachments[(body["containerId"], body["ifName"])] = result
        return result  # type: ignore[no-any-return]

    def delete(self, body: Mapping[str, Any]) -> dict[str, Any]:
        self._got("delete", body)
        self.attachments.pop((body["containerId"], body["ifName"]), None)
        return {}

    def check(self, body: Mapping[str, Any]) -> dict[str, Any]:
        self._got("check", body)
        if (body["containerId"], body["ifName"]) not in self.attachments:
            raise CniError(3, f"containerId {body['containerId']}: no attachment "
                              f"{body['ifName']}")
        return {}

    def gc(self, body: Mapping[str, Any]) -> dict[str, Any]:
        self._got("gc", body)
        valid = {(a["containerID"], a["ifname"]) for a in body["validAttachments"]}
        for gone in [k for k in self.attachments if k not in valid]:
            del self.attachments[gone]
        return {}

    def status(self) -> dict[str, Any]:
        self._got("status", None)
        return {}

    def ipam_add(self, body: Mapping[str, Any]) -> dict[str, Any]:
        forced = self._got("ipam_add", body)
        return forced if forced is not None else json.loads(json.dumps(IPAM_RESULT))  # type: ignore[no-any-return]

    def ipam_del(self, body: Mapping[str, Any]) -> dict[str, Any]:
        self._got("ipam_del", body)
        return {}

    def ipam_check(self, body: Mapping[str, Any]) -> dict[str, Any]:
        self._got("ipam_check", body)
        return {}

    @property
    def asked(self) -> list[str]:
        return [method for method, _ in self.requests]


def run(agent: FakeAgent, command: str, config: Mapping[str, Any] | str | bytes | None,
        env: Mapping[str, str | None] | None = None, *, program: str = ""
        ) -> Answer:
    """``execute`` as the program forwards a runtime's invocation (under a name that is
    neither of podnet's unless ``program`` says: the configuration picks the role):
    ``CNI_COMMAND``, and
    ``CNI_PATH`` and for ADD, DEL and CHECK ``CNI_IFNAME=eth0`` as runtimes set them;
    ``env`` adds to them (None removes one)."""
    full: dict[str, str | None] = {"CNI_COMMAND": command, "CNI_PATH": "/opt/cni/bin"}
    if command in ("ADD", "DEL", "CHECK"):
        full["CNI_IFNAME"] = "eth0"
    full.update(env or {})
    clean = {k: v for k, v in full.items() if v is not None}
    return Answer(*execute(program, clean, _stdin(config), agent))


def _stdin(config: Mapping[str, Any] | str | bytes | None) -> bytes:
    if config is None:
        return b""
    if isinstance(config, bytes):
        return config
    if isinstance(config, str):
        return config.encode()
    return json.dumps(config).encode()


def conf(version: str = "1.1.0", **extra: Any) -> dict[str, Any]:
    return {"cniVersion": version, "name": "podnet", "type": "podnet-cni",
            "agentSocket": "/run/podnet/agent.sock", **extra}


def env(netns: str | None = NETNS, container: str = CONTAINER, **extra: str | None
        ) -> dict[str, str | None]:
    return {"CNI_CONTAINERID": container, "CNI_NETNS": netns, "CNI_ARGS": POD_ARGS, **extra}


@pytest.fixture
def agent() -> FakeAgent:
    return FakeAgent()


# --- VERSION ---------------------------------------------------------------------------------


def test_version_answers_the_supported_versions(agent: FakeAgent) -> None:
    result = run(agent, "VERSION", {"cniVersion": "1.1.0"})
    assert result.exit_code == 0
    assert result.output == {"cniVersion": "1.1.0", "supportedVersions": VERSIONS}
    assert agent.requests == []


# --- ADD, DEL, CHECK ---------------------------------------------------------------------------


@pytest.mark.parametrize("version", VERSIONS)
def test_add_converts_the_result_to_the_requested_version(agent: FakeAgent, version: str
                                                          ) -> None:
    result = run(agent, "ADD", conf(version), env())
    assert result.exit_code == 0, result
    out = result.output
    assert out["cniVersion"] == version
    assert set(out) <= {"cniVersion", "interfaces", "ips", "routes", "dns"}
    assert out["interfaces"][0]["name"] == "eth0"
    assert out["interfaces"][0]["sandbox"] == NETNS
    assert [ip["address"] for ip in out["ips"]] == ["10.0.0.5/24", "fd00::5/64"]
    assert all(ip["interface"] == 0 for ip in out["ips"])
    if version in ("0.3.1", "0.4.0"):
        assert [ip["version"] for ip in out["ips"]] == ["4", "6"]
    else:
        assert all("version" not in ip for ip in out["ips"])
    if version == "1.1.0":
        assert out["interfaces"][0]["mtu"] == 1450 and out["routes"][0]["priority"] == 100
    else:
        assert "mtu" not in out["interfaces"][0] and "priority" not in out["routes"][0]
    (method, body), = agent.requests
    assert method == "add"
    assert body == {"cniVersion": version, "containerId": CONTAINER, "netns": NETNS,
                    "ifName": "eth0", "podNamespace": "default", "podName": "pod-a",
                    "podUid": "uid-a", "network": "podnet", "config": conf(version)}


def test_a_chained_add_keeps_the_previous_result(agent: FakeAgent) -> None:
    prev = {"cniVersion": "0.4.0",
            "interfaces": [{"name": "lo0", "sandbox": NETNS}],
            "ips": [{"version": "4", "address": "192.168.9.9/32", "interface": 0}],
            "dns": {"nameservers": ["10.96.0.10"]}}
    out = run(agent, "ADD", conf("0.4.0", prevResult=prev), env()).output
    assert [i["name"] for i in out["interfaces"]] == ["lo0", "eth0"]
    assert [(ip["address"], ip["interface"], ip["version"]) for ip in out["ips"]] == [
        ("192.168.9.9/32", 0, "4"), ("10.0.0.5/24", 1, "4"), ("fd00::5/64", 1, "6")]
    assert out["dns"] == {"nameservers": ["10.96.0.10"]}


def test_pod_identity_from_runtime_config(agent: FakeAgent) -> None:
    config = conf(runtimeConfig={"podnet.io/pod": {
        "namespace": "ns1", "name": "web-0", "uid": "u-1"}})
    result = run(agent, "ADD", config, env(CNI_ARGS=None))
    assert result.ok, result
    body = agent.requests[-1][1]
    assert (body["podNamespace"], body["podName"], body["podUid"]) == ("ns1", "web-0", "u-1")


def test_del_is_idempotent_and_outputs_nothing(agent: FakeAgent) -> None:
    assert run(agent, "ADD", conf(), env()).ok
    for _ in range(2):
        result = run(agent, "DEL", conf(), env())
        assert (result.exit_code, result.stdout) == (0, "")
    assert agent.attachments == {}
    assert agent.asked == ["add", "delete", "delete"]


def test_del_with_the_netns_gone_asks_the_agent(agent: FakeAgent) -> None:
    for netns in ("/run/netns/gone", None):  # a path that no longer exists, or none given
        result = run(agent, "DEL", conf(), env(netns))
        assert (result.exit_code, result.stdout) == (0, "")
    assert [b["netns"] for _, b in agent.requests] == ["/run/netns/gone", None]


def test_del_failing_in_the_agent_is_its_error_even_with_the_netns_gone(
        agent: FakeAgent) -> None:
    """Only an agent that cannot be reached makes a DEL with the namespace gone succeed
    (the program's rule): an agent that answers its own failure is heard."""
    agent.forced["delete"] = CniError(11, "PodNetwork default/pod-a: the API is away")
    for netns in ("/run/netns/gone", None):
        run(agent, "DEL", conf(), env(netns)).check_error(11, "the API is away")


def test_check(agent: FakeAgent) -> None:
    assert run(agent, "ADD", conf(), env()).ok
    prev = json.loads(json.dumps(RESULT))
    result = run(agent, "CHECK", conf(prevResult=prev), env())
    assert (result.exit_code, result.stdout) == (0, "")
    assert agent.requests[-1][1]["config"]["prevResult"] == prev
    # a container the agent does not know: the agent's error, passed through
    run(agent, "CHECK", conf(), env(container="other")).check_error(3, "other")


def test_check_is_not_defined_for_0_3_1(agent: FakeAgent) -> None:
    run(agent, "CHECK", conf("0.3.1"), env()).check_error(1, "CHECK", "0.3.1")
    assert agent.requests == []


# --- GC and STATUS ---------------------------------------------------------------------------


def test_gc_keeps_the_valid_attachments(agent: FakeAgent) -> None:
    for container in ("keep", "drop"):
        assert run(agent, "ADD", conf(), env(container=container)).ok
    valid = [{"containerID": "keep", "ifname": "eth0", "extra": 1}]
    result = run(agent, "GC", {**conf(), "cni.dev/valid-attachments": valid},
                 {"CNI_IFNAME": None})
    assert (result.exit_code, result.stdout) == (0, "")
    assert set(agent.attachments) == {("keep", "eth0")}
    method, body = agent.requests[-1]
    assert (method, body["validAttachments"], body["network"]) == (
        "gc", [{"containerID": "keep", "ifname": "eth0"}], "podnet")
    # the earlier draft's name of the list
    assert run(agent, "GC", {**conf(), "cni.dev/attachments": []}).ok
    assert agent.attachments == {}


def test_gc_without_the_list_removes_nothing(agent: FakeAgent) -> None:
    run(agent, "GC", conf()).check_error(7, "cni.dev/valid-attachments")
    run(agent, "GC", {**conf(), "cni.dev/valid-attachments": [{"ifname": "eth0"}]}
        ).check_error(7, "cni.dev/valid-attachments[0]")
    run(agent, "GC", {**conf(), "cni.dev/valid-attachments": {}}).check_error(
        7, "cni.dev/valid-attachments", "list")
    run(agent, "GC", conf("1.0.0", **{"cni.dev/valid-attachments": []})).check_error(
        1, "GC", "1.1.0")
    assert agent.requests == []


def test_status(agent: FakeAgent) -> None:
    result = run(agent, "STATUS", conf())
    assert (result.exit_code, result.stdout) == (0, "")
    assert agent.requests == [("status", None)]
    agent.forced["status"] = CniError(50, "agent: caches not synced")
    run(agent, "STATUS", conf()).check_error(50, "caches not synced")
    run(agent, "STATUS", conf("1.0.0")).check_error(1, "STATUS")


# --- bad input -------------------------------------------------------------------------------


def test_malformed_config_is_a_decoding_failure(agent: FakeAgent) -> None:
    run(agent, "ADD", '{"cniVersion": "1.1.0", ', env()).check_error(
        6, "network configuration", "not valid JSON")
    run(agent, "ADD", "[1, 2]", env()).check_error(6, "not a JSON object")
    run(agent, "ADD", b"\xff\xfe", env()).check_error(6, "not valid JSON")
    run(agent, "ADD", None, env()).check_error(6, "network configuration")
    assert agent.requests == []


@pytest.mark.parametrize("version", ["0.2.0", "1.2.0", "2.0.0"])
def test_unknown_cni_version(agent: FakeAgent, version: str) -> None:
    out = run(agent, "ADD", conf(version), env()).check_error(1, "cniVersion", version)
    assert out["cniVersion"] == "1.1.0"  # not one podnet speaks: its own
    assert agent.requests == []


def test_missing_or_wrong_config_fields(agent: FakeAgent) -> None:
    config = conf()
    del config["cniVersion"]
    run(agent, "ADD", config, env()).check_error(7, "cniVersion")
    run(agent, "ADD", conf(version=1), env()).check_error(7, "cniVersion")  # type: ignore[arg-type]
    config = conf()
    del config["name"]
    run(agent, "ADD", config, env()).check_error(7, "name")
    run(agent, "ADD", {**conf(), "agentSocket": 42}, env()).check_error(7, "agentSocket")
    for socket_path in ("", None):
        run(agent, "ADD", {**conf(), "agentSocket": socket_path}, env()).check_error(
            7, "agentSocket")
    for timeout in (0, -1, "soon", True, None):
        run(agent, "ADD", conf(agentTimeout=timeout), env()).check_error(7, "agentTimeout")
    assert agent.requests == []
    assert run(agent, "ADD", conf(agentTimeout=2.5), env()).ok


def test_missing_environment_is_error_4(agent: FakeAgent) -> None:
    for command in ("ADD", "CHECK"):
        run(agent, command, conf(), env(None)).check_error(4, "CNI_NETNS", command)
    run(agent, "ADD", conf(), env(container="")).check_error(4, "CNI_CONTAINERID")
    run(agent, "ADD", conf(), env(container="a/b")).check_error(4, "CNI_CONTAINERID")
    run(agent, "ADD", conf(), env(CNI_IFNAME=None)).check_error(4, "CNI_IFNAME")
    run(agent, "ADD", conf(), env(CNI_IFNAME="x" * 16)).check_error(4, "CNI_IFNAME")
    run(agent, "ADD", conf(), env(CNI_ARGS="K8S_POD_NAME")).check_error(4, "CNI_ARGS")
    run(agent, "ADD", conf(), env(CNI_ARGS="FOO=1;K8S_POD_NAME=a")).check_error(
        4, "CNI_ARGS", "FOO")
    run(agent, "FROB", conf(), env()).check_error(4, "CNI_COMMAND", "FROB")
    run(agent, "", conf(), env()).check_error(4, "CNI_COMMAND")
    assert agent.requests == []


def test_the_environment_is_checked_by_the_agents_own_field_rules(agent: FakeAgent) -> None:
    """One rule per field: what the agent's requests refuse (``podnet.node.protocol``)
    the environment is refused for, named as the runtime set it; the Python plugin let
    these through to the agent, which named its body's fields instead."""
    for container in ("_leading", "x" * 65):
        run(agent, "ADD", conf(), env(container=container)).check_error(4, "CNI_CONTAINERID")
    run(agent, "ADD", conf(), env(CNI_IFNAME="tab\there")).check_error(4, "CNI_IFNAME")
    run(agent, "ADD", conf(), env("relative/ns")).check_error(4, "CNI_NETNS", "absolute")
    run(agent, "ADD", conf(), env(CNI_ARGS="K8S_POD_NAMESPACE=Bad_NS;K8S_POD_NAME=a")
        ).check_error(7, "K8S_POD_NAMESPACE", "Bad_NS")
    run(agent, "ADD", conf(), env(CNI_ARGS="K8S_POD_NAMESPACE=ns;K8S_POD_NAME=a;"
                                          "K8S_POD_UID=u/1")).check_error(7, "K8S_POD_UID")
    config = conf(runtimeConfig={"podnet.io/pod": {"namespace": "ns", "name": "Web..0"}})
    run(agent, "ADD", config, env(CNI_ARGS=None)).check_error(
        7, "runtimeConfig.podnet.io/pod.name")
    assert agent.requests == []
    # a DEL passes on a namespace it cannot use (the agent takes it as none)
    assert run(agent, "DEL", conf(), env("relative/ns")).ok
    assert agent.requests[-1][1]["netns"] == "relative/ns"


def test_missing_pod_identity_is_error_7(agent: FakeAgent) -> None:
    args = "IgnoreUnknown=1;K8S_POD_NAMESPACE=default"
    run(agent, "ADD", conf(), env(CNI_ARGS=args)).check_error(
        7, "K8S_POD_NAME", "CNI_ARGS", "runtimeConfig.podnet.io/pod")
    args = "IgnoreUnknown=1;K8S_POD_NAME=a"
    run(agent, "ADD", conf(), env(CNI_ARGS=args)).check_error(7, "K8S_POD_NAMESPACE")
    run(agent, "DEL", conf(), env(CNI_ARGS=args)).check_error(7, "K8S_POD_NAMESPACE")
    assert agent.requests == []


def test_agent_errors_are_passed_through(agent: FakeAgent) -> None:
    agent.forced["add"] = CniError(11, "PodNetwork default/pod-a: not Routed within 30 s",
                                   details="phase Allocating", status=503)
    out = run(agent, "ADD", conf("1.0.0"), env()).check_error(11, "PodNetwork default/pod-a")
    assert out == {"cniVersion": "1.0.0", "code": 11, "details": "phase Allocating",
                   "msg": "PodNetwork default/pod-a: not Routed within 30 s"}


def test_an_agent_method_that_breaks_is_try_again_later(agent: FakeAgent) -> None:
    """As the protocol's routes answer an exception of the agent's (HTTP 500, code 11):
    the agent's fault, not the caller's and not podnet-cni's own (100)."""
    agent.forced["add"] = RuntimeError("netlink dump interrupted")
    out = run(agent, "ADD", conf("0.4.0"), env()).check_error(
        11, "podnet node agent", "netlink dump interrupted")
    assert out["details"] == "RuntimeError" and out["cniVersion"] == "0.4.0"


def test_errors_are_answered_in_the_configs_version(agent: FakeAgent) -> None:
    """The error object carries the configuration's cniVersion whenever it is one podnet
    speaks, whatever failed (the Python plugin answered errors found before the version
    was checked as 1.1.0)."""
    assert run(agent, "FROB", conf("0.4.0"), env()).check_error(4)["cniVersion"] == "0.4.0"
    assert run(agent, "CHECK", conf("0.3.1"), env()).check_error(1)["cniVersion"] == "0.3.1"
    assert run(agent, "ADD", "nope", env()).check_error(6)["cniVersion"] == "1.1.0"


def test_a_failure_of_execute_itself_is_still_an_error_object(
        agent: FakeAgent, monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(*args: Any) -> None:
        raise KeyError("ips")

    monkeypatch.setattr(cniexec, "_dispatch", broken)
    answer = run(agent, "ADD", {"cniVersion": "1.0.0", "name": "n"})
    assert answer.exit_code == 1
    assert answer.output == {"cniVersion": "1.0.0", "code": 100,
                             "msg": "podnet-cni internal error: KeyError: 'ips'"}
    monkeypatch.setattr(cniexec, "_dispatch_ipam", broken)
    answer = run(agent, "ADD", {"cniVersion": "1.0.0", "name": "n"}, program="podnet-ipam")
    assert answer.output["msg"] == "podnet-ipam internal error: KeyError: 'ips'"


# --- the rules' functions ----------------------------------------------------------------------


def test_cni_args_parsing() -> None:
    assert cniexec.parse_cni_args("") == {}
    assert cniexec.parse_cni_args(" IgnoreUnknown=1 ; K8S_POD_NAME=a ;X=y=z;") == {
        "IgnoreUnknown": "1", "K8S_POD_NAME": "a", "X": "y=z"}
    assert cniexec.parse_cni_args("IgnoreUnknown=true;FOO=") == {"IgnoreUnknown": "true",
                                                                 "FOO": ""}
    for bad in ("=1", "K8S_POD_NAME", "FOO=1", "IgnoreUnknown=0;FOO=1"):
        with pytest.raises(CniError) as caught:
            cniexec.parse_cni_args(bad)
        assert caught.value.code == 4 and "CNI_ARGS" in caught.value.msg


def test_cni_args_win_over_runtime_config() -> None:
    config = {"runtimeConfig": {"podnet.io/pod": {"namespace": "rt", "name": "rt-pod",
                                                  "uid": "rt-uid"}}}
    assert cniexec.pod_identity({"K8S_POD_NAME": "args-pod"}, config) == (
        "rt", "args-pod", "rt-uid")
    assert cniexec.pod_identity({"K8S_POD_NAMESPACE": "ns", "K8S_POD_NAME": "p"}, {}) == (
        "ns", "p", None)
    with pytest.raises(CniError, match=r"runtimeConfig\.podnet\.io/pod"):
        cniexec.pod_identity({}, {"runtimeConfig": {"podnet.io/pod": "web"}})
    with pytest.raises(CniError, match=r"runtimeConfig\.podnet\.io/pod\.uid: must be a string"):
        cniexec.pod_identity({"K8S_POD_NAMESPACE": "ns", "K8S_POD_NAME": "p"},
                             {"runtimeConfig": {"podnet.io/pod": {"uid": 5}}})


def test_conversion_keeps_what_each_version_defines() -> None:
    full = {"cniVersion": "1.1.0", "extra": 1,
            "interfaces": [{"name": "eth0", "mac": "m", "mtu": 9000, "socketPath": "/s",
                            "pciID": "0000:00:01.0"}],
            "ips": [{"address": "fd00::2/64", "interface": 0}],
            "routes": [{"dst": "::/0", "table": 5, "scope": 0, "advmss": 1400}]}
    assert cniexec.convert_result(full, "1.1.0") == {k: v for k, v in full.items()
                                                     if k != "extra"}
    assert cniexec.convert_result(full, "1.0.0") == {
        "cniVersion": "1.0.0", "interfaces": [{"name": "eth0", "mac": "m"}],
        "ips": [{"address": "fd00::2/64", "interface": 0}], "routes": [{"dst": "::/0"}]}
    assert cniexec.convert_result(full, "0.3.1")["ips"] == [
        {"version": "6", "address": "fd00::2/64", "interface": 0}]
    # a 0.x result read back (a chained prevResult) loses its version fields first
    old = cniexec.convert_result(full, "0.4.0")
    assert cniexec.convert_result(old, "1.1.0")["ips"] == [
        {"address": "fd00::2/64", "interface": 0}]


@pytest.mark.parametrize(("attachments", "names"), [
    ((("default", None),), ["eth0"]),
    ((("default", None), ("blue", None), ("red", None)), ["eth0", "net1", "net2"]),
    # a name the annotation gives is kept, and the numbered ones step around it
    ((("default", None), ("blue", "net1"), ("red", None)), ["eth0", "net1", "net2"]),
    ((("default", None), ("blue", None), ("red", "net1")), ["eth0", "net2", "net1"]),
    ((("default", None), ("blue", "data0"), ("red", None)), ["eth0", "data0", "net1"]),
])
def test_the_agent_names_a_pods_interfaces(attachments: Any, names: list[str]) -> None:
    from podnet.node import interface_names

    assert interface_names("eth0", attachments) == names


# --- podnet-ipam: the same program as another plugin's IPAM -------------------------------------


def ipam_conf(version: str = "1.0.0", **ipam: Any) -> dict[str, Any]:
    """A bridge plugin's configuration with podnet-ipam as its IPAM (the role comes from
    it under a name that is neither of podnet's: type is not podnet-cni, there is an ipam
    section)."""
    return {"cniVersion": version, "name": "bridged", "type": "bridge", "bridge": "cni0",
            "ipam": {"type": "podnet-ipam", "agentSocket": "/run/podnet/agent.sock", **ipam}}


@pytest.mark.parametrize("version", VERSIONS)
def test_ipam_add_asks_for_its_network_and_prints_an_ipam_result(
        agent: FakeAgent, version: str) -> None:
    config = ipam_conf(version, network="blue")
    result = run(agent, "ADD", config, env(None))  # an IPAM plugin needs no netns
    assert result.ok, result
    out = result.output
    assert out["cniVersion"] == version
    assert set(out) == {"cniVersion", "ips", "routes", "dns"}
    assert [ip["address"] for ip in out["ips"]] == ["10.0.0.5/24", "fd00::5/64"]
    assert all("interface" not in ip for ip in out["ips"])
    if version in ("0.3.1", "0.4.0"):
        assert [ip["version"] for ip in out["ips"]] == ["4", "6"]
    else:
        assert all("version" not in ip for ip in out["ips"])
    (method, body), = agent.requests
    assert method == "ipam_add"
    assert body == {"cniVersion": version, "containerId": CONTAINER, "netns": None,
                    "ifName": "eth0", "podNamespace": "default", "podName": "pod-a",
                    "podUid": "uid-a", "network": "blue", "config": config}


def test_ipam_network_is_default_unless_given(agent: FakeAgent) -> None:
    assert run(agent, "ADD", ipam_conf(), env(), program="/opt/cni/bin/podnet-ipam").ok
    assert agent.requests[-1][1]["network"] == "default"


def test_ipam_del_check_gc(agent: FakeAgent) -> None:
    result = run(agent, "DEL", ipam_conf(), env())
    assert (result.exit_code, result.stdout) == (0, "")
    prev = {"cniVersion": "1.0.0", "ips": [{"address": "10.0.0.5/24", "interface": 0}]}
    result = run(agent, "CHECK", {**ipam_conf(), "prevResult": prev}, env())
    assert (result.exit_code, result.stdout) == (0, "")
    assert agent.asked == ["ipam_del", "ipam_check"]
    assert agent.requests[-1][1]["config"]["prevResult"] == prev
    # GC: the IPAM role holds nothing on the host, so it asks nothing
    assert run(agent, "GC", ipam_conf(version="1.1.0")).ok
    assert run(agent, "STATUS", ipam_conf(version="1.1.0")).ok
    assert agent.asked == ["ipam_del", "ipam_check", "status"]
    # the agent's own failure of a DEL is heard (only an unreachable one is success)
    agent.forced["ipam_del"] = CniError(7, "containerId: 'x': bad")
    run(agent, "DEL", ipam_conf(), env()).check_error(7, "containerId")


def test_ipam_bad_section_names_the_field(agent: FakeAgent) -> None:
    base = ipam_conf()
    for section, field in (({"type": "podnet-ipam", "network": 5}, "ipam.network"),
                           ({"type": "podnet-ipam", "network": ""}, "ipam.network"),
                           ({"type": "podnet-ipam", "agentSocket": ""}, "ipam.agentSocket"),
                           ({"type": "podnet-ipam", "agentSocket": 3}, "ipam.agentSocket"),
                           ({"type": "podnet-ipam", "agentTimeout": 0}, "ipam.agentTimeout"),
                           ({"type": "podnet-ipam", "agentTimeout": "soon"},
                            "ipam.agentTimeout")):
        run(agent, "ADD", {**base, "ipam": section}, env()).check_error(7, field)
    # under the name podnet-ipam, an ipam section that is missing or no object
    for config in ({k: v for k, v in base.items() if k != "ipam"}, {**base, "ipam": "x"}):
        run(agent, "ADD", config, env(), program="podnet-ipam").check_error(7, "ipam")
    assert agent.requests == []


def test_the_role_comes_from_the_name_else_the_config(agent: FakeAgent) -> None:
    as_ipam = ipam_conf()
    as_cni = conf("1.0.0")
    # the installed names decide, whatever the config says
    assert cniexec.acts_as_ipam("/opt/cni/bin/podnet-ipam", as_cni)
    assert not cniexec.acts_as_ipam("podnet-cni", as_ipam)
    # any other name: the config
    assert cniexec.acts_as_ipam("", as_ipam)
    assert cniexec.acts_as_ipam("my-ipam", as_ipam)
    assert not cniexec.acts_as_ipam("", as_cni)
    assert not cniexec.acts_as_ipam("", {"name": "n"})
    assert not cniexec.acts_as_ipam("", {**as_ipam, "type": "podnet-cni"})
    # a type that is no string is no other plugin's (the static plugin's rule too)
    assert not cniexec.acts_as_ipam("", {**as_ipam, "type": None})
    assert not cniexec.acts_as_ipam("", {**as_ipam, "type": 3})
    # so the same request is a plugin's ADD or an IPAM ADD by the name alone
    assert run(agent, "ADD", as_ipam, env(), program="podnet-cni").ok
    assert run(agent, "ADD", as_ipam, env(), program="podnet-ipam").ok
    assert agent.asked == ["add", "ipam_add"]
    assert agent.requests[0][1]["network"] == "bridged"
    assert agent.requests[1][1]["network"] == "default"


# --- the wire format of POST /v1/cni/exec ---------------------------------------------------------


def test_percent_encoding_round_trips_every_byte() -> None:
    every = bytes(range(256)).decode("utf-8", "surrogateescape")
    encoded = cniexec.percent_encode(every)
    assert all(0x21 <= ord(c) <= 0x7E for c in encoded)
    assert cniexec.percent_decode(encoded, "x") == every
    assert cniexec.percent_encode("a b%c=é") == "a%20b%25c=%C3%A9"
    assert cniexec.percent_decode("%2f%2F", "x") == "//"  # either case of hex


@pytest.mark.parametrize(("value", "why"), [
    ("50%", "two hex digits"), ("%zz", "two hex digits"), ("%4", "two hex digits"),
    ("a b", "not percent-encoded"), ("tab\t", "not percent-encoded"),
    ("caf\xe9", "not percent-encoded"),
])
def test_a_value_not_percent_encoded_is_refused(value: str, why: str) -> None:
    with pytest.raises(CniError) as caught:
        cniexec.percent_decode(value, "CNI-Env CNI_ARGS")
    assert caught.value.code == 4
    assert "CNI-Env CNI_ARGS" in caught.value.msg and why in caught.value.msg


def test_the_exec_headers_decode_to_the_environment() -> None:
    program, decoded = cniexec.decode_exec_headers(
        "podnet%2Dipam", ["CNI_COMMAND=ADD", "CNI_NETNS=", "CNI_ARGS=A=1;B=%20x",
                          "CNI_PATH=/opt/cni/bin:/usr/lib/cni"])
    assert program == "podnet-ipam"
    assert decoded == {"CNI_COMMAND": "ADD", "CNI_NETNS": "", "CNI_ARGS": "A=1;B= x",
                       "CNI_PATH": "/opt/cni/bin:/usr/lib/cni"}
    assert cniexec.decode_exec_headers(None, []) == ("", {})
    for bad, named in ((["CNI_COMMAND"], "CNI_NAME=value"), (["PATH=/bin"], "CNI_"),
                       (["CNI_COMMAND=ADD", "CNI_COMMAND=DEL"], "twice"),
                       (["CNI_ARGS=%"], "CNI-Env CNI_ARGS")):
        with pytest.raises(CniError) as caught:
            cniexec.decode_exec_headers("podnet-cni", bad)
        assert caught.value.code == 4 and named in caught.value.msg, caught.value.msg


def test_a_malformed_exec_request_is_still_an_error_object(agent: FakeAgent) -> None:
    code, out = cniexec.exec_request("podnet-cni", ["CNI_COMMAND=ADD", "CNI_ARGS=%g0"],
                                     json.dumps(conf("0.4.0")).encode(), agent)
    answer = Answer(code, out)
    assert answer.check_error(4, "CNI-Env CNI_ARGS")["cniVersion"] == "0.4.0"
    # no CNI_COMMAND header at all: the command is missing
    Answer(*cniexec.exec_request("podnet-cni", [], b"{}", agent)).check_error(
        4, "CNI_COMMAND")
    assert agent.requests == []


# --- over the agent's socket ---------------------------------------------------------------------


def exec_over(path: str, program: str, env: Mapping[str, str | None], stdin: bytes,
              timeout: float = 90.0) -> tuple[int, Answer, http.client.HTTPResponse]:
    """One exec request as the static program sends it (docs/node.md): the program's
    name and each ``CNI_*`` variable percent-encoded, one ``CNI-Env`` header each, stdin
    as the body. (HTTP status, what the program would print and exit with, the answer)."""
    head = [b"POST /v1/cni/exec HTTP/1.1", b"Host: podnet-agent",
            b"User-Agent: podnet-cni/test", b"Connection: close",
            b"Content-Type: application/json", b"Content-Length: %d" % len(stdin),
            b"CNI-Program: " + cniexec.percent_encode(program).encode()]
    for name, value in env.items():
        if value is not None:
            head.append(f"CNI-Env: {name}={cniexec.percent_encode(value)}".encode())
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.settimeout(timeout)
        sock.connect(path)
        sock.sendall(b"\r\n".join(head) + b"\r\n\r\n" + stdin)
        response = http.client.HTTPResponse(sock)
        response.begin()
        body = response.read().decode()
    exit_code = response.getheader("CNI-Exit-Code")
    return response.status, Answer(int(exit_code) if exit_code is not None else -1, body), \
        response


class _ServedFake(FakeAgent):
    """The fake agent behind the agent's real server (its routes need a little more)."""

    grants = None

    def report_body(self) -> dict[str, Any]:
        return {}


@pytest.fixture
def served() -> Iterator[tuple[str, _ServedFake]]:
    """The agent's server (``podnet.node.server``) on a unix socket, a fake agent behind."""
    from podnet.node.server import bind

    directory = tempfile.mkdtemp(prefix="pnexec")  # short: a socket path has a limit
    fake = _ServedFake()
    path = os.path.join(directory, "agent.sock")
    server, where = bind(fake, path)  # type: ignore[arg-type]
    where.place()
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield path, fake
    finally:
        server.shutdown()
        server.server_close()
        where.release()
        shutil.rmtree(directory, ignore_errors=True)


def test_exec_over_the_socket_answers_the_exit_code_and_stdout(
        served: tuple[str, _ServedFake]) -> None:
    path, fake = served
    status, answer, response = exec_over(
        path, "/opt/cni/bin/podnet-cni",
        {"CNI_COMMAND": "ADD", "CNI_CONTAINERID": CONTAINER, "CNI_NETNS": NETNS,
         "CNI_IFNAME": "eth0", "CNI_ARGS": POD_ARGS, "CNI_PATH": "/opt/cni/bin"},
        json.dumps(conf("0.4.0")).encode())
    assert status == 200 and answer.ok, answer
    assert int(response.getheader("Content-Length") or -1) == len(answer.stdout.encode())
    assert answer.output["cniVersion"] == "0.4.0"
    assert [ip["version"] for ip in answer.output["ips"]] == ["4", "6"]
    assert fake.requests[-1][1]["podName"] == "pod-a"
    # an error: still HTTP 200, the exit code in its header, the error object the body
    status, answer, _ = exec_over(path, "podnet-cni", {"CNI_COMMAND": "ADD"},
                                  json.dumps(conf("1.0.0")).encode())
    assert status == 200
    assert answer.check_error(4, "CNI_CONTAINERID")["cniVersion"] == "1.0.0"


def test_exec_over_the_socket_decodes_what_the_program_encoded(
        served: tuple[str, _ServedFake]) -> None:
    """Values with spaces, '%', '=' and bytes that are not UTF-8 arrive as they were
    set; an empty variable arrives empty; the program's name picks the role."""
    path, fake = served
    odd_args = "IgnoreUnknown=1;K8S_POD_NAMESPACE=default;K8S_POD_NAME=pod-a;X= 50% =ok"
    odd_path = "/opt/cni/bin:/weird dir/\udcff"
    status, answer, _ = exec_over(
        path, "podnet-ipam",
        {"CNI_COMMAND": "DEL", "CNI_CONTAINERID": CONTAINER, "CNI_NETNS": "",
         "CNI_IFNAME": "eth0", "CNI_ARGS": odd_args, "CNI_PATH": odd_path},
        json.dumps(ipam_conf()).encode())
    assert (status, answer.exit_code, answer.stdout) == (200, 0, ""), answer
    (method, body), = fake.requests
    assert method == "ipam_del" and body["netns"] is None and body["podUid"] is None


def test_exec_over_the_socket_refuses_malformed_requests_as_error_objects(
        served: tuple[str, _ServedFake]) -> None:
    path, fake = served
    raw_env = {"CNI_COMMAND": "ADD", "CNI_CONTAINERID": CONTAINER}
    config = json.dumps(conf("0.4.0")).encode()
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.settimeout(30)
        sock.connect(path)
        head = (b"POST /v1/cni/exec HTTP/1.1\r\nContent-Length: %d\r\nCNI-Program: podnet-cni"
                b"\r\nCNI-Env: CNI_COMMAND=ADD\r\nCNI-Env: CNI_ARGS=50%%\r\n"
                b"Connection: close\r\n\r\n" % len(config))
        sock.sendall(head + config)
        response = http.client.HTTPResponse(sock)
        response.begin()
        answer = Answer(int(response.getheader("CNI-Exit-Code") or -1),
                        response.read().decode())
    assert response.status == 200
    assert answer.check_error(4, "CNI-Env CNI_ARGS")["cniVersion"] == "0.4.0"
    # the next request on the socket is served as usual
    status, answer, _ = exec_over(path, "podnet-cni", {**raw_env, "CNI_COMMAND": "STATUS"},
                                  json.dumps(conf()).encode())
    assert (status, answer.exit_code) == (200, 0)
    assert fake.asked == ["status"]
    # and the routes of earlier plugins beside it (an update's skew)
    legacy = AgentClient(path)
    assert legacy.status() == (200, {})
    assert legacy.delete(CONTAINER, None, "pod-a") == (200, {})
    assert fake.asked == ["status", "status", "delete"]


def test_exec_over_the_socket_bounds_the_configuration(
        served: tuple[str, _ServedFake], monkeypatch: pytest.MonkeyPatch) -> None:
    path, fake = served
    monkeypatch.setattr("podnet.node.server.MAX_STDIN", 64)
    status, answer, _ = exec_over(path, "podnet-cni", {"CNI_COMMAND": "ADD"},
                                  json.dumps(conf(padding="x" * 100)).encode())
    assert status == 200
    answer.check_error(6, "network configuration", "64")
    assert fake.requests == []


# --- the agent's wait says why (an ADD that gives up names the record's Ready) -------------------

NODE_NAME = "node-a"


@pytest.fixture
def node_agent() -> Iterator[Any]:
    """The real agent in this process, on the in-memory cluster, ready (its records
    listed, its first report written), its ADD wait zero: one look at the records."""
    from podnet.core.cluster.port import NAMESPACE, NODE
    from podnet.core.plugin import Providers, new_plugin_manager
    from podnet.node import DEFAULT_NAMESPACE, NodeAgent
    from podnet.sim.memory import InMemoryCluster

    cluster = InMemoryCluster()
    for ns in (DEFAULT_NAMESPACE, "default"):
        cluster.create(NAMESPACE, {"metadata": {"name": ns}})
    cluster.create(NODE, {"metadata": {"name": NODE_NAME}})
    made = NodeAgent(cluster, Providers(new_plugin_manager()), NODE_NAME, add_timeout=0)
    made.records.start()
    try:
        made.reporter.flush()
        assert made.ready
        yield made
    finally:
        made.records.stop()


def _bound_pod(agent: Any, name: str, node: str | None = NODE_NAME) -> None:
    from podnet.core.cluster.port import POD

    agent.cluster.create(POD, {"metadata": {"name": name, "namespace": "default",
                                            "uid": f"uid-{name}"},
                               "spec": {"nodeName": node, "containers": []}})


def _record(agent: Any, pod: str, phase: str, ready: tuple[str, str, str] | None) -> str:
    """A PodNetwork of ``pod`` on the agent's node in ``phase``, its Ready condition
    (status, reason, message) as the controller writes it; its key."""
    from podnet.core.cluster.port import POD_NETWORK
    from podnet.core.convert import to_wire
    from podnet.core.models import (
        LABEL_NODE,
        Condition,
        ObjectMeta,
        Phase,
        PodNetwork,
        PodNetworkSpec,
        PodNetworkStatus,
    )

    conditions = () if ready is None else (
        Condition(type="Ready", status=ready[0], reason=ready[1], message=ready[2]),)
    record = PodNetwork(
        metadata=ObjectMeta(name=f"{pod}-default", namespace="default",
                            labels={LABEL_NODE: NODE_NAME}),
        spec=PodNetworkSpec(pod_name=pod, pod_uid=f"uid-{pod}", node_name=NODE_NAME,
                            provider="reference"),
        status=PodNetworkStatus(phase=Phase(phase), conditions=conditions))
    created = agent.cluster.create(POD_NETWORK, to_wire(record))
    agent.cluster.update_status(POD_NETWORK, {**created, "status": to_wire(record)["status"]})
    agent.records.pump()
    key = f"default/{pod}-default"
    assert agent.records.get(key) is not None, "the agent's cache has the record"
    return key


def _ipam_add(agent: Any, pod: str) -> Answer:
    """podnet-ipam's ADD for the pod, executed against the real agent in this process."""
    return Answer(*execute("podnet-ipam", {
        "CNI_COMMAND": "ADD", "CNI_CONTAINERID": CONTAINER, "CNI_IFNAME": "eth0",
        "CNI_ARGS": f"K8S_POD_NAMESPACE=default;K8S_POD_NAME={pod}"},
        json.dumps(ipam_conf()).encode(), agent))


def test_the_add_that_gives_up_names_the_records_ready_condition(node_agent: Any) -> None:
    _bound_pod(node_agent, "starved")
    key = _record(node_agent, "starved", "Pending", (
        "False", "WaitingForAddress", "waiting for an address: 10.93.0.0/30 has no address "
        "left"))
    out = _ipam_add(node_agent, "starved").check_error(
        11, "pod default/starved", "not Routed within 0 s", "network default",
        f"PodNetwork {key} is Pending", "Ready=False WaitingForAddress",
        "10.93.0.0/30 has no address left")
    assert out["details"] == "WaitingForAddress"


def test_the_add_that_gives_up_says_no_record_exists_yet(node_agent: Any) -> None:
    _bound_pod(node_agent, "early")
    out = _ipam_add(node_agent, "early").check_error(
        11, "pod default/early", "not Routed within 0 s", "network default",
        "no PodNetwork yet")
    assert out["details"] == "NoPodNetwork"


def test_the_add_that_gives_up_names_a_record_without_a_ready_condition(
        node_agent: Any) -> None:
    _bound_pod(node_agent, "fresh")
    key = _record(node_agent, "fresh", "Allocated", None)
    _ipam_add(node_agent, "fresh").check_error(
        11, f"PodNetwork {key} is Allocated, no Ready condition yet")


def test_the_add_that_gives_up_says_why_the_pod_is_not_known(node_agent: Any) -> None:
    _ipam_add(node_agent, "absent").check_error(
        11, "not Routed within 0 s", "pod default/absent not found")
    _bound_pod(node_agent, "unbound", node=None)
    _ipam_add(node_agent, "unbound").check_error(
        11, "not Routed within 0 s", "not bound to a node yet")


@pytest.mark.skipif(netns_unavailable() is not None, reason=netns_unavailable() or "")
def test_the_plugins_add_that_gives_up_says_why_too(node_agent: Any) -> None:
    """The runtime's ADD (a real network namespace: the agent checks it is one) waits as
    the IPAM ADD does and says the same."""
    import subprocess
    import uuid

    _bound_pod(node_agent, "starved")
    _record(node_agent, "starved", "Pending", ("False", "WaitingForAddress", "pool empty"))
    name = f"pnexec-{uuid.uuid4().hex[:8]}"
    subprocess.run(["ip", "netns", "add", name], check=True)
    try:
        answer = Answer(*execute("podnet-cni", {
            "CNI_COMMAND": "ADD", "CNI_CONTAINERID": CONTAINER, "CNI_IFNAME": "eth0",
            "CNI_NETNS": f"/run/netns/{name}",
            "CNI_ARGS": "K8S_POD_NAMESPACE=default;K8S_POD_NAME=starved"},
            json.dumps(conf("1.0.0")).encode(), node_agent))
    finally:
        subprocess.run(["ip", "netns", "del", name], check=False)
    out = answer.check_error(11, "not Routed within 0 s", "WaitingForAddress: pool empty")
    assert out["cniVersion"] == "1.0.0"


# --- a real agent: the node bed's processes, the exec request over its socket -------------------

def _bed_missing() -> str | None:
    return netns_unavailable() or (None if shutil.which("kubectl")
                                   else "kubectl is not installed")


_WHY_NO_BED = _bed_missing()
needs_bed = pytest.mark.skipif(_WHY_NO_BED is not None, reason=_WHY_NO_BED or "")


def _ready(path: str) -> bool:
    if not os.path.exists(path):
        return False
    try:
        _, answer, _ = exec_over(path, "podnet-cni", {"CNI_COMMAND": "STATUS"},
                                 json.dumps(conf()).encode(), timeout=5)
    except OSError:
        return False
    return answer.ok


def _pod_env(command: str, container: str, netns: str | None, pod: str,
             **extra: str) -> dict[str, str | None]:
    return {"CNI_COMMAND": command, "CNI_CONTAINERID": container, "CNI_NETNS": netns,
            "CNI_IFNAME": "eth0", "CNI_PATH": "/opt/cni/bin",
            "CNI_ARGS": f"IgnoreUnknown=1;K8S_POD_NAMESPACE=default;K8S_POD_NAME={pod}",
            **extra}


@pytest.mark.slow
@needs_bed
def test_the_real_agent_executes_what_the_program_forwards(
        stack: Stack, node: NodeNamespace, host: Host) -> None:
    """ADD (an older cniVersion), CHECK, DEL twice, GC, the IPAM role's ADD and DEL, and
    a bad environment, each as one exec request to ``podnet node``'s socket."""
    stack.agent(NODE, netns=node.netns, add_timeout=30)
    wait_for("the agent ready", lambda: _ready(stack.socket), 60, interval=0.3)
    stack.create([pod("a")])
    _, path = host.netns()
    cid = host.container()
    config = json.dumps({**conf("0.4.0"), "agentSocket": stack.socket}).encode()

    status, added, _ = exec_over(stack.socket, "podnet-cni", _pod_env("ADD", cid, path, "a"),
                                 config)
    assert status == 200 and added.ok, added
    st = stack.records()["a"]["status"]
    assert added.output["cniVersion"] == "0.4.0"
    assert added.output["interfaces"] == [{"name": "eth0", "mac": st["mac"], "sandbox": path}]
    assert added.output["ips"] == [{"version": "4", "address": f"{st['ip']}/24",
                                    "gateway": st["gateway"], "interface": 0}]
    assert addresses_in(path)["eth0"] == [f"{st['ip']}/24"]
    checked = exec_over(stack.socket, "podnet-cni", _pod_env("CHECK", cid, path, "a"),
                        config)[1]
    assert (checked.exit_code, checked.stdout) == (0, ""), checked
    # the agent's own rule for an interface name, named as the runtime set it
    bad = exec_over(stack.socket, "podnet-cni",
                    _pod_env("ADD", cid, path, "a", CNI_IFNAME="x" * 16), config)[1]
    bad.check_error(4, "CNI_IFNAME")
    for _ in range(2):
        deleted = exec_over(stack.socket, "podnet-cni", _pod_env("DEL", cid, path, "a"),
                            config)[1]
        assert (deleted.exit_code, deleted.stdout) == (0, ""), deleted
    assert "eth0" not in addresses_in(path)
    gc = json.dumps({**conf(), "cni.dev/valid-attachments": []}).encode()
    assert exec_over(stack.socket, "podnet-cni", {"CNI_COMMAND": "GC"}, gc)[1].ok
    assert not [n for n in links_in(node.netns) if cid[:8] in n]

    # podnet-ipam: the record's address for another plugin's interface, nothing plugged
    ipam = json.dumps({**ipam_conf(), "ipam": {"type": "podnet-ipam",
                                               "agentSocket": stack.socket}}).encode()
    other = host.container()
    granted = exec_over(stack.socket, "podnet-ipam", _pod_env("ADD", other, None, "a"),
                        ipam)[1]
    assert granted.ok, granted
    assert granted.output == {"cniVersion": "1.0.0", "ips": [
        {"address": f"{st['ip']}/24", "gateway": st["gateway"]}],
        "routes": [{"dst": "0.0.0.0/0", "gw": st["gateway"]}], "dns": {}}
    released = exec_over(stack.socket, "podnet-ipam", _pod_env("DEL", other, None, "a"),
                         ipam)[1]
    assert (released.exit_code, released.stdout) == (0, "")


#: a podCIDR of one pod address (.1 is the gateway): a second pod waits for one
ONE_ADDRESS = "10.93.0.0/30"


@pytest.mark.slow
@needs_bed
def test_the_add_that_gives_up_names_the_pools_reason(
        stack: Stack, underlay: Underlay, host: Host) -> None:
    """A record held not Routed by something real: the node's pool has no address left.
    The controller says so on the record (Ready=False, WaitingForAddress); the ADD that
    gives up waiting says what the record says."""
    node = underlay.add_node(NODE, ONE_ADDRESS)
    stack.create([node_object(NODE, ONE_ADDRESS, node.address)])
    stack.agent(NODE, netns=node.netns, add_timeout=1)
    wait_for("the agent ready", lambda: _ready(stack.socket), 60, interval=0.3)
    stack.create([pod("first"), pod("second")])

    def waiting() -> str | None:
        for name, record in stack.records().items():
            ready = [c for c in record.get("status", {}).get("conditions", [])
                     if c["type"] == "Ready"]
            if ready and ready[0]["reason"] == "WaitingForAddress":
                return name
        return None

    wait_for("a record waiting for an address", lambda: waiting() is not None, 90,
             interval=0.5)
    starved = waiting()
    assert starved is not None
    _, path = host.netns()
    config = json.dumps({**conf(), "agentSocket": stack.socket}).encode()
    answer = exec_over(stack.socket, "podnet-cni",
                       _pod_env("ADD", host.container(), path, starved), config)[1]
    out = answer.check_error(11, f"pod default/{starved}", "not Routed within 1 s",
                             "network default", "Ready=False WaitingForAddress",
                             "waiting for an address")
    assert out["details"] == "WaitingForAddress"


def test_the_agent_checks_gcs_list_as_execute_does(node_agent: Any) -> None:
    """One rule for the list of attachments GC keeps, whether it comes from the
    configuration (exec) or the request's body (``/v1/cni/gc``)."""
    for body, named in (({}, "validAttachments: missing"),
                        ({"validAttachments": {}}, "validAttachments: must be a list"),
                        ({"validAttachments": [{"containerID": "c1"}]}, "validAttachments[0]")):
        with pytest.raises(CniError) as caught:
            node_agent.gc(body)
        assert caught.value.code == 7 and named in caught.value.msg, caught.value.msg
    assert node_agent.gc({"validAttachments": [{"containerID": "c1", "ifname": "eth0"}]}) == {}


def test_a_check_of_a_record_not_routed_says_why(node_agent: Any) -> None:
    _bound_pod(node_agent, "starved")
    key = _record(node_agent, "starved", "Allocated", ("False", "RouteFailed",
                                                       "route: the cloud said no"))
    prev = {"cniVersion": "1.0.0", "ips": [{"address": "10.0.0.5/24", "interface": 0}]}
    answer = Answer(*execute("podnet-ipam", {
        "CNI_COMMAND": "CHECK", "CNI_CONTAINERID": CONTAINER, "CNI_IFNAME": "eth0",
        "CNI_ARGS": "K8S_POD_NAMESPACE=default;K8S_POD_NAME=starved"},
        json.dumps({**ipam_conf(), "prevResult": prev}).encode(), node_agent))
    answer.check_error(100, "network default of default/starved is not Routed",
                       f"PodNetwork {key} is Allocated, Ready=False RouteFailed: route: "
                       "the cloud said no")
