"""The official SDK (alibabacloud_ecs20140526) against the loopback ECS simulator: every
API, error codes with their HTTP status, throttling, ENI states, faults, ground truth."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

import pytest
from alibabacloud_ecs20140526 import models as m
from alibabacloud_ecs20140526.client import Client
from alibabacloud_tea_openapi import models as open_api_models
from alibabacloud_tea_openapi.exceptions import ClientException, ServerException

from podnet.plugins.ecs.sim import EcsSimulator, main

REGION = "cn-hangzhou"


@pytest.fixture
def sim() -> Iterator[EcsSimulator]:
    s = EcsSimulator()
    s.add_vswitch("vsw-a", "10.0.0.0/24")
    s.add_vswitch("vsw-b", "10.0.1.0/28")
    s.add_instance("i-1", "ecs.g7.large", "vsw-a")
    with s:
        yield s


@pytest.fixture
def client(sim: EcsSimulator) -> Client:
    return Client(open_api_models.Config(access_key_id="id", access_key_secret="secret",
                                         region_id=REGION, endpoint=sim.endpoint,
                                         protocol="http"))


def create(client: Client, vsw: str = "vsw-a", count: int = 2) -> Any:
    return client.create_network_interface(m.CreateNetworkInterfaceRequest(
        region_id=REGION, v_switch_id=vsw, security_group_ids=["sg-1", "sg-2"],
        secondary_private_ip_address_count=count, description="podnet:i-1")).body


def enis(client: Client, **kw: Any) -> list[Any]:
    body = client.describe_network_interfaces(m.DescribeNetworkInterfacesRequest(
        region_id=REGION, **kw)).body
    return list(body.network_interface_sets.network_interface_set)


def error_of(call: Any) -> ClientException | ServerException:
    with pytest.raises((ClientException, ServerException)) as info:
        call()
    err = info.value
    assert isinstance(err, ClientException | ServerException)
    return err


def test_url_and_endpoint(sim: EcsSimulator) -> None:
    assert sim.port > 0
    assert sim.url == f"http://127.0.0.1:{sim.port}" and sim.endpoint.endswith(str(sim.port))


def test_instance_types_carry_eni_limits(client: Client) -> None:
    body = client.describe_instance_types(m.DescribeInstanceTypesRequest(
        instance_types=["ecs.g7.large"])).body
    [t] = body.instance_types.instance_type
    assert (t.instance_type_id, t.eni_quantity, t.eni_private_ip_address_quantity) == (
        "ecs.g7.large", 3, 10)


def test_primary_eni_of_an_instance(client: Client) -> None:
    [eni] = enis(client, instance_id="i-1")
    assert eni.type == "Primary" and eni.status == "InUse"
    [ip] = eni.private_ip_sets.private_ip_set
    assert ip.primary and ip.private_ip_address == eni.private_ip_address


def test_eni_lifecycle_through_the_sdk(client: Client, sim: EcsSimulator) -> None:
    made = create(client)
    assert made.status == "Available" and made.v_switch_id == "vsw-a"
    assert len(made.private_ip_sets.private_ip_set) == 3  # primary + 2
    assert made.security_group_ids.security_group_id == ["sg-1", "sg-2"]
    eni_id = made.network_interface_id
    client.attach_network_interface(m.AttachNetworkInterfaceRequest(
        region_id=REGION, network_interface_id=eni_id, instance_id="i-1"))
    assert {e.network_interface_id: e.status for e in enis(client, instance_id="i-1")}[
        eni_id] == "InUse"
    got = client.assign_private_ip_addresses(m.AssignPrivateIpAddressesRequest(
        region_id=REGION, network_interface_id=eni_id,
        secondary_private_ip_address_count=3)).body
    new = got.assigned_private_ip_addresses_set.private_ip_set.private_ip_address
    assert len(new) == 3
    explicit = client.assign_private_ip_addresses(m.AssignPrivateIpAddressesRequest(
        region_id=REGION, network_interface_id=eni_id, private_ip_address=["10.0.0.200"]
    )).body.assigned_private_ip_addresses_set.private_ip_set.private_ip_address
    assert explicit == ["10.0.0.200"]
    truth = sim.addresses()
    assert set(new) | {"10.0.0.200"} <= set(truth) and truth["10.0.0.200"] == "i-1"
    client.unassign_private_ip_addresses(m.UnassignPrivateIpAddressesRequest(
        region_id=REGION, network_interface_id=eni_id, private_ip_address=new[:2]))
    assert not set(new[:2]) & set(sim.addresses())
    client.detach_network_interface(m.DetachNetworkInterfaceRequest(
        region_id=REGION, network_interface_id=eni_id, instance_id="i-1"))
    assert sim.eni_states()[eni_id] == "Available"
    client.delete_network_interface(m.DeleteNetworkInterfaceRequest(
        region_id=REGION, network_interface_id=eni_id))
    assert eni_id not in sim.eni_states()
    assert sim.addresses() == {}
    assert sim.calls["AssignPrivateIpAddresses"] == 2


def test_vswitches_report_free_addresses(client: Client, sim: EcsSimulator) -> None:
    def free() -> dict[str, int]:
        body = client.describe_vswitches(m.DescribeVSwitchesRequest(region_id=REGION)).body
        return {v.v_switch_id: v.available_ip_address_count for v in body.v_switches.v_switch}

    before = free()
    assert before["vsw-b"] == 13
    create(client, "vsw-b", 4)
    assert free()["vsw-b"] == 8
    sim.exhaust("vsw-b")
    assert free()["vsw-b"] == 0


@pytest.mark.parametrize(("code", "status", "call"), [
    ("InvalidEniId.NotFound", 404, lambda c: c.delete_network_interface(
        m.DeleteNetworkInterfaceRequest(region_id=REGION, network_interface_id="eni-nope"))),
    ("InvalidEcsId.NotFound", 404, lambda c: c.attach_network_interface(
        m.AttachNetworkInterfaceRequest(region_id=REGION, instance_id="i-nope",
                                        network_interface_id=create(c).network_interface_id))),
    ("InvalidVSwitchId.IpNotEnough", 403, lambda c: create(c, "vsw-b", 20)),
    ("InvalidOperation.Ipv4CountExceeded", 403, lambda c: c.assign_private_ip_addresses(
        m.AssignPrivateIpAddressesRequest(
            region_id=REGION, network_interface_id=enis(c, instance_id="i-1")[0]
            .network_interface_id, secondary_private_ip_address_count=10))),
    ("InvalidIp.IpUnassigned", 400, lambda c: c.unassign_private_ip_addresses(
        m.UnassignPrivateIpAddressesRequest(
            region_id=REGION, network_interface_id=enis(c, instance_id="i-1")[0]
            .network_interface_id, private_ip_address=["10.0.0.99"]))),
    ("InvalidOperation.InvalidEniState", 400, lambda c: c.delete_network_interface(
        m.DeleteNetworkInterfaceRequest(
            region_id=REGION, network_interface_id=_attached(c)))),
])
def test_errors_carry_code_and_status(client: Client, code: str, status: int,
                                      call: Any) -> None:
    err = error_of(lambda: call(client))
    assert (err.code, err.status_code) == (code, status)


def _attached(client: Client) -> str:
    eni_id: str = create(client).network_interface_id
    client.attach_network_interface(m.AttachNetworkInterfaceRequest(
        region_id=REGION, network_interface_id=eni_id, instance_id="i-1"))
    return eni_id


def test_eni_limit_per_instance(client: Client) -> None:
    _attached(client)
    _attached(client)  # the primary and two secondaries: ecs.g7.large's 3
    err = error_of(lambda: _attached(client))
    assert (err.code, err.status_code) == ("EniPerInstanceLimitExceeded", 403)


def test_eni_states_take_their_latency(client: Client, sim: EcsSimulator) -> None:
    sim.state_latency = 0.2
    eni_id = _attached(client)
    assert sim.eni_states()[eni_id] == "Attaching"
    err = error_of(lambda: client.assign_private_ip_addresses(
        m.AssignPrivateIpAddressesRequest(region_id=REGION, network_interface_id=eni_id,
                                          secondary_private_ip_address_count=1)))
    assert err.code == "InvalidOperation.InvalidEniState"
    time.sleep(0.25)
    assert sim.eni_states()[eni_id] == "InUse"
    client.detach_network_interface(m.DetachNetworkInterfaceRequest(
        region_id=REGION, network_interface_id=eni_id, instance_id="i-1"))
    assert sim.eni_states()[eni_id] == "Detaching"
    time.sleep(0.25)
    assert sim.eni_states()[eni_id] == "Available"


def test_primary_eni_is_never_detached(client: Client) -> None:
    primary = enis(client, instance_id="i-1")[0].network_interface_id
    err = error_of(lambda: client.detach_network_interface(m.DetachNetworkInterfaceRequest(
        region_id=REGION, network_interface_id=primary, instance_id="i-1")))
    assert err.status_code == 400


def test_rate_limit_answers_throttling(sim: EcsSimulator, client: Client) -> None:
    sim.set_rate({"DescribeVSwitches": 2})
    codes = []
    for _ in range(6):
        try:
            client.describe_vswitches(m.DescribeVSwitchesRequest(region_id=REGION))
            codes.append("ok")
        except ClientException as exc:
            codes.append(f"{exc.status_code} {exc.code}")
    assert "400 Throttling" in codes and codes[0] == "ok"
    assert sim.throttled["DescribeVSwitches"] >= 1
    # other APIs are not limited
    client.describe_instance_types(m.DescribeInstanceTypesRequest())


def test_scripted_and_random_faults_no_sdk_retry(sim: EcsSimulator, client: Client) -> None:
    sim.fail_next("DescribeVSwitches", "InternalError")
    err = error_of(lambda: client.describe_vswitches(m.DescribeVSwitchesRequest(
        region_id=REGION)))
    assert isinstance(err, ServerException) and err.status_code == 500
    assert sim.calls["DescribeVSwitches"] == 1  # the SDK did not retry
    sim.fault_rate = 1.0
    error_of(lambda: client.describe_instance_types(m.DescribeInstanceTypesRequest()))
    sim.clear_faults()
    client.describe_instance_types(m.DescribeInstanceTypesRequest())


def test_malformed_reply(sim: EcsSimulator, client: Client) -> None:
    sim.malform_next("DescribeNetworkInterfaces", "PrivateIpSets")
    [eni] = enis(client, instance_id="i-1")
    assert eni.private_ip_sets is None
    [eni] = enis(client, instance_id="i-1")
    assert eni.private_ip_sets is not None


def test_wire_is_post_with_action_header(sim: EcsSimulator) -> None:
    import json
    import urllib.request

    req = urllib.request.Request(
        f"{sim.url}/?RegionId={REGION}&InstanceTypes.1=ecs.g7.large", method="POST",
        headers={"x-acs-action": "DescribeInstanceTypes", "x-acs-version": "2014-05-26"})
    with urllib.request.urlopen(req) as resp:
        body = json.loads(resp.read())
    assert body["RequestId"] and body["InstanceTypes"]["InstanceType"][0]["EniQuantity"] == 3
    bad = urllib.request.Request(f"{sim.url}/", method="POST",
                                 headers={"x-acs-action": "RunInstances"})
    with pytest.raises(urllib.error.HTTPError) as info:
        urllib.request.urlopen(bad)
    assert info.value.code == 400
    assert json.loads(info.value.read())["Code"] == "InvalidAction"


def test_cli_prints_the_url(capsys: pytest.CaptureFixture[str],
                            monkeypatch: pytest.MonkeyPatch) -> None:
    from podnet.plugins.ecs import sim as sim_module

    def interrupted() -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(sim_module, "_serve_until_interrupted", interrupted)
    assert main(["--port", "0", "--instance", "i-9=ecs.g7.xlarge"]) == 0
    out = capsys.readouterr().out.strip()
    assert out.startswith("http://127.0.0.1:") and not out.endswith(":0")


def tagged(client: Client, tags: list[tuple[str, str]], vsw: str = "vsw-a") -> Any:
    return client.create_network_interface(m.CreateNetworkInterfaceRequest(
        region_id=REGION, v_switch_id=vsw, security_group_ids=["sg-1"],
        tag=[m.CreateNetworkInterfaceRequestTag(key=k, value=v) for k, v in tags])).body


def tag_filter(*pairs: tuple[str, str | None]) -> list[Any]:
    return [m.DescribeNetworkInterfacesRequestTag(key=k, value=v) for k, v in pairs]


def test_tags_are_kept_returned_and_filtered(client: Client, sim: EcsSimulator) -> None:
    a = tagged(client, [("podnet.io/instance", "i-1"), ("team", "net")]).network_interface_id
    b = tagged(client, [("podnet.io/instance", "i-2")]).network_interface_id
    plain = create(client).network_interface_id
    [seen] = enis(client, network_interface_id=[a])
    assert [(t.tag_key, t.tag_value) for t in seen.tags.tag] == [
        ("podnet.io/instance", "i-1"), ("team", "net")]
    assert seen.creation_time.endswith("Z")
    [bare] = enis(client, network_interface_id=[plain])
    assert bare.tags.tag == []

    def ids(**kw: Any) -> set[str]:
        return {e.network_interface_id for e in enis(client, **kw)}

    assert ids(tag=tag_filter(("podnet.io/instance", None))) == {a, b}
    assert ids(tag=tag_filter(("podnet.io/instance", "i-2"))) == {b}
    # every filter must match
    assert ids(tag=tag_filter(("podnet.io/instance", None), ("team", "net"))) == {a}
    assert ids(tag=tag_filter(("podnet.io/instance", "i-3"))) == set()
    assert ids(status="Available", type="Secondary") == {a, b, plain}
    assert ids(type="Primary") == {sim.instances["i-1"].primary_eni}
    # the ground truth knows whom a tagged ENI was made for
    assert sim.enis[b].owner == "i-2"


@pytest.mark.parametrize(("tags", "code"), [
    ([("", "x")], "InvalidTagKey.Malformed"),
    ([("aliyun-x", "x")], "InvalidTagKey.Malformed"),
    ([("acs:owner", "x")], "InvalidTagKey.Malformed"),
    ([("k" * 129, "x")], "InvalidTagKey.Malformed"),
    ([("see", "https://x")], "InvalidTagValue.Malformed"),
    ([("k", "v" * 129)], "InvalidTagValue.Malformed"),
    ([("k", "1"), ("k", "2")], "Duplicate.TagKey"),
    ([(f"k{i}", "v") for i in range(21)], "InvalidTagCount"),
])
def test_tags_are_checked_as_ecs_does(client: Client, sim: EcsSimulator,
                                      tags: list[tuple[str, str]], code: str) -> None:
    before = set(sim.enis)
    err = error_of(lambda: tagged(client, tags))
    assert err.code == code and err.status_code == 400
    assert set(sim.enis) == before  # nothing made
    # the longest allowed key and value, and twenty tags, are fine
    tagged(client, [("k" * 128, "v" * 128)])
    tagged(client, [(f"k{i}", "") for i in range(20)])


def test_a_tag_filter_is_checked_too(client: Client) -> None:
    err = error_of(lambda: enis(client, tag=tag_filter(*[(f"k{i}", None)
                                                         for i in range(21)])))
    assert err.code == "InvalidTagCount"


def _pages(call: Any, pick: Any, **kw: Any) -> list[list[str]]:
    """Every page of a paged Describe, through NextToken: the ids of each."""
    pages: list[list[str]] = []
    token = None
    while True:
        body = call(next_token=token, **kw).body
        pages.append(pick(body))
        token = body.next_token or None
        if not token:
            return pages


def test_describe_network_interfaces_pages_with_next_token(client: Client,
                                                           sim: EcsSimulator) -> None:
    made = {create(client, count=0).network_interface_id for _ in range(24)}
    made.add(sim.instances["i-1"].primary_eni)

    def describe(**kw: Any) -> Any:
        return client.describe_network_interfaces(m.DescribeNetworkInterfacesRequest(
            region_id=REGION, **kw))

    def ids(body: Any) -> list[str]:
        return [e.network_interface_id for e in body.network_interface_sets.network_interface_set]

    pages = _pages(describe, ids, max_results=10)
    assert [len(p) for p in pages] == [10, 10, 5]
    assert {i for p in pages for i in p} == made  # each once
    assert describe(max_results=10).body.total_count == 25
    # fewer than 10, or none: 10 a page; more than 500: 500
    assert [len(p) for p in _pages(describe, ids, max_results=3)] == [10, 10, 5]
    assert [len(p) for p in _pages(describe, ids)] == [10, 10, 5]
    assert [len(p) for p in _pages(describe, ids, max_results=900)] == [25]
    # the older PageNumber / PageSize
    assert ids(describe(page_number=3, page_size=10).body) == pages[2]
    err = error_of(lambda: describe(max_results=10, next_token="forged"))
    assert (err.code, err.status_code) == ("InvalidParameter", 400)


def test_describe_instances_pages_and_filters_by_id(client: Client,
                                                    sim: EcsSimulator) -> None:
    for i in range(2, 24):
        sim.add_instance(f"i-{i}", "ecs.c7.large", "vsw-a")
    eni_id = _attached(client)

    def describe(**kw: Any) -> Any:
        return client.describe_instances(m.DescribeInstancesRequest(region_id=REGION, **kw))

    def ids(body: Any) -> list[str]:
        return [i.instance_id for i in body.instances.instance]

    pages = _pages(describe, ids, max_results=10)
    assert [len(p) for p in pages] == [10, 10, 3]
    assert sorted(i for p in pages for i in p) == sorted(sim.instances)
    # at most 100 a page
    assert [len(p) for p in _pages(describe, ids, max_results=1000)] == [23]
    # InstanceIds: a JSON array; an id ECS does not know is left out
    [one] = describe(instance_ids='["i-1", "i-gone"]').body.instances.instance
    assert (one.instance_id, one.instance_type, one.status) == ("i-1", "ecs.g7.large",
                                                                 "Running")
    attached = one.network_interfaces.network_interface
    assert [(e.network_interface_id, e.type) for e in attached] == [
        (sim.instances["i-1"].primary_eni, "Primary"), (eni_id, "Secondary")]
    assert describe(instance_ids='["i-gone"]').body.instances.instance == []
    for bad in (json.dumps([f"i-{n}" for n in range(101)]), "i-1"):
        err = error_of(lambda bad=bad: describe(instance_ids=bad))
        assert (err.code, err.status_code) == ("InvalidParameter", 400)
    # its own rate limit and faults, as every API
    sim.set_rate({"DescribeInstances": 1})
    codes = []
    for _ in range(3):
        try:
            describe()
            codes.append("ok")
        except ClientException as exc:
            codes.append(exc.code)
    assert codes[0] == "ok" and "Throttling" in codes
    sim.set_rate(None)
    sim.fail_next("DescribeInstances", "InternalError")
    assert error_of(describe).status_code == 500
