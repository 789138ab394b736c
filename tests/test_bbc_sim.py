"""bce-python-sdk against the BBC simulator: every route on the SDK's own wire, the error
codes and shapes, throttling, faults, and the simulator's CLI."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Iterator

import pytest
from baidubce.auth.bce_credentials import BceCredentials
from baidubce.bce_client_configuration import BceClientConfiguration
from baidubce.exception import BceHttpClientError, BceServerError
from baidubce.http import http_methods
from baidubce.retry.retry_policy import NoRetryPolicy
from baidubce.services.bbc.bbc_client import BbcClient
from baidubce.services.subnet.subnet_client import SubnetClient

from podnet.core.errors import ErrorKind
from podnet.plugins.bbc.api import BbcApi, classify
from podnet.plugins.bbc.credentials import error_code
from podnet.plugins.bbc.sim import API_ADD, API_DEL, API_PORT, BbcSimulator


@pytest.fixture
def sim() -> Iterator[BbcSimulator]:
    s = BbcSimulator()
    s.add_subnet("sbn-a", "10.1.0.0/24")
    s.add_subnet("sbn-b", "10.2.0.0/29")
    s.add_instance("i-1", "sbn-a", ip_cap=5)
    s.add_instance("i-2", "sbn-a", ip_cap=5)
    s.start()
    yield s
    s.stop()


def _config(sim: BbcSimulator) -> BceClientConfiguration:
    return BceClientConfiguration(credentials=BceCredentials("ak", "sk"),
                                  endpoint=sim.endpoint, retry_policy=NoRetryPolicy())


@pytest.fixture
def client(sim: BbcSimulator) -> BbcClient:
    return BbcClient(_config(sim))


@pytest.fixture
def api(sim: BbcSimulator) -> BbcApi:
    return BbcApi(sim.endpoint, "ak", "sk")


def _error(call: object) -> BceServerError:
    assert callable(call)
    with pytest.raises(BceHttpClientError) as info:
        call()
    inner = info.value.last_error
    assert isinstance(inner, BceServerError)
    return inner


def test_batch_add_and_delete_through_the_sdk(sim: BbcSimulator, client: BbcClient) -> None:
    reply = client.batch_add_ip("i-1", secondary_private_ip_address_count=2)
    assert reply.private_ips == ["10.1.0.4", "10.1.0.5"]  # .2/.3 are the instances' primaries
    reply = client.batch_add_ip("i-1", private_ips=["10.1.0.9"])
    assert reply.private_ips == ["10.1.0.9"]
    assert sim.addresses() == {"10.1.0.4": "i-1", "10.1.0.5": "i-1", "10.1.0.9": "i-1"}
    client.batch_delete_ip("i-1", ["10.1.0.4", "10.1.0.9"])
    assert sim.addresses() == {"10.1.0.5": "i-1"}
    assert sim.calls[API_ADD] == 2 and sim.calls[API_DEL] == 1


def test_routes_missing_from_the_sdk_go_through_its_signed_path(
        sim: BbcSimulator, client: BbcClient, api: BbcApi) -> None:
    eni = sim.eni_of("i-1")
    body = {"instanceId": "i-1", "singleEniAndSubentIps": [
        {"eniId": eni, "subnetId": "sbn-b", "secondaryPrivateIpAddressCount": 2}]}
    reply = client._send_request(http_methods.PUT, b"/instance/batchAddIpCrossSubnet",
                                 json.dumps(body))
    assert json.loads(reply.raw_data) == {"privateIps": ["10.2.0.2", "10.2.0.3"]}
    port = api.port("i-1")
    assert port.eni_id == eni and port.subnet == "sbn-a"
    assert [(ip.address, ip.subnet, ip.primary) for ip in port.ips] == [
        ("10.1.0.2", "sbn-a", True), ("10.2.0.2", "sbn-b", False), ("10.2.0.3", "sbn-b", False)]
    assert api.add_ips_cross_subnet("i-1", eni, "sbn-b", 1) == ["10.2.0.4"]
    assert sim.calls[API_PORT] == 1


def test_subnet_api_as_the_sdk_sends_it(sim: BbcSimulator, api: BbcApi) -> None:
    subnets = SubnetClient(_config(sim))
    reply = subnets.get_subnet("sbn-b")
    assert reply.subnet.cidr == "10.2.0.0/29" and reply.subnet.available_ip == 5
    listed = subnets.list_subnets(subnet_ids=["sbn-a"])
    assert [s.subnet_id for s in listed.subnets] == ["sbn-a"]
    assert api.subnet("sbn-a").available == 253 - 2
    inner = _error(lambda: subnets.get_subnet("sbn-zz"))
    assert inner.code == "NoSuchObject" and inner.status_code == 404


@pytest.mark.parametrize(("setup", "call", "code", "kind"), [
    (lambda s: None, lambda c: c.batch_add_ip("i-1", secondary_private_ip_address_count=6),
     "ExceedLimitException", ErrorKind.QUOTA_EXCEEDED),
    (lambda s: s.add_instance("i-3", "sbn-b", ip_cap=40),
     lambda c: c.batch_add_ip("i-3", secondary_private_ip_address_count=5),
     "SubnetHasNoMoreIpException", ErrorKind.SUBNET_EXHAUSTED),
    (lambda s: s.add_outside("i-2", "10.1.0.50"),
     lambda c: c.batch_add_ip("i-1", private_ips=["10.1.0.50"]),
     "PrivateIpInUseException", ErrorKind.CONFLICT),
    (lambda s: None, lambda c: c.batch_delete_ip("i-1", ["10.1.0.77"]),
     "PrivateIPNotExistException", ErrorKind.NOT_FOUND),
    (lambda s: None, lambda c: c._send_request(
        http_methods.PUT, b"/instance/batchAddIpCrossSubnet", json.dumps(
            {"instanceId": "i-1", "singleEniAndSubentIps": [
                {"eniId": "eni-wrong", "subnetId": "sbn-a",
                 "secondaryPrivateIpAddressCount": 1}]})),
     "EniIdException", ErrorKind.CONFLICT),
    (lambda s: s.script(API_ADD, "VmMemoryCanNotAttachMoreIpException"),
     lambda c: c.batch_add_ip("i-1", secondary_private_ip_address_count=1),
     "VmMemoryCanNotAttachMoreIpException", ErrorKind.QUOTA_EXCEEDED),
    (lambda s: s.script(API_ADD, "QuotaLimitExceeded"),
     lambda c: c.batch_add_ip("i-1", secondary_private_ip_address_count=1),
     "QuotaLimitExceeded", ErrorKind.QUOTA_EXCEEDED),
    (lambda s: s.script(API_ADD, "InternalError", status=500),
     lambda c: c.batch_add_ip("i-1", secondary_private_ip_address_count=1),
     "InternalError", ErrorKind.TRANSIENT),
])
def test_error_codes_and_shape(sim: BbcSimulator, client: BbcClient, setup: object,
                               call: object, code: str, kind: ErrorKind) -> None:
    assert callable(setup) and callable(call)
    setup(sim)
    before = sim.addresses()
    with pytest.raises(BceHttpClientError) as info:
        call(client)
    inner = info.value.last_error
    assert isinstance(inner, BceServerError)
    assert inner.code == code and inner.request_id
    assert inner.status_code == (500 if code == "InternalError" else 400)
    assert classify(info.value) is kind
    assert sim.addresses() == before, "a refused call changed nothing"


def test_unknown_instance_is_not_found(client: BbcClient) -> None:
    inner = _error(lambda: client.batch_add_ip("i-nope", secondary_private_ip_address_count=1))
    assert inner.status_code == 404 and inner.code == "InstanceNotFound"


def test_throttling_per_api(sim: BbcSimulator, client: BbcClient) -> None:
    sim.rate = 2.0  # burst 2, then RateLimit until tokens come back
    outcomes = []
    for _ in range(4):
        try:
            client._send_request(http_methods.GET, b"/vpcPort/i-1")
            outcomes.append("ok")
        except BceHttpClientError as exc:
            outcomes.append(error_code(exc)[0] or "?")
            assert classify(exc) is ErrorKind.THROTTLED
            assert exc.last_error.status_code == 429
    assert outcomes[:2] == ["ok", "ok"] and "RateLimit" in outcomes[2:]
    # another API has its own bucket
    client.batch_add_ip("i-1", secondary_private_ip_address_count=1)
    time.sleep(0.6)
    client._send_request(http_methods.GET, b"/vpcPort/i-1")


def test_random_faults_and_latency(sim: BbcSimulator, client: BbcClient) -> None:
    sim.fault_rate = 1.0
    inner = _error(lambda: client.batch_add_ip("i-1", secondary_private_ip_address_count=1))
    assert inner.code in ("RateLimit", "InternalError")
    assert sim.addresses() == {}
    sim.fault_rate, sim.latency = 0.0, 0.05
    start = time.monotonic()
    client._send_request(http_methods.GET, b"/vpcPort/i-1")
    assert time.monotonic() - start >= 0.05


def test_outside_address_and_removed_instance(sim: BbcSimulator) -> None:
    ip = sim.add_outside("i-1")
    assert sim.addresses() == {ip: "i-1"}
    sim.remove_instance("i-1")
    assert sim.addresses() == {}


def test_cli_prints_the_url() -> None:
    proc = subprocess.Popen([sys.executable, "-m", "podnet.plugins.bbc.sim", "--port", "0"],
                            stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        url = proc.stdout.readline().strip()
        assert url.startswith("http://127.0.0.1:")
        client = BbcClient(BceClientConfiguration(
            credentials=BceCredentials("ak", "sk"), endpoint=url.removeprefix("http://"),
            retry_policy=NoRetryPolicy()))
        reply = client.batch_add_ip("i-0000", secondary_private_ip_address_count=1)
        assert len(reply.private_ips) == 1
    finally:
        proc.terminate()
        proc.wait(timeout=10)
