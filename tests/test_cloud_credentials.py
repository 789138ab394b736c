"""Cloud credentials through each SDK's own credential sources, against loopback stand-ins
of the metadata and token services (``podnet.sim.cloudauth``) and simulators that check
the key and token of every request.

ECS: a RAM user's access key, the SDK's default chain (from the environment, in a process
of its own: the SDK reads its environment once, on import), the instance's RAM role from
the metadata service (IMDSv2 token required), RRSA's AssumeRoleWithOIDC. BBC: an access
key, a temporary one with its session token, session tokens from BCE STS, the instance's
IAM role from BCC's metadata service. Each renews a
temporary key before it expires without a failed call; a bad setting names its key; no
secret reaches a log line, a span, the cluster (what ``podnet status`` shows), an error
or a repr.
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from podnet.app.audit import audit
from podnet.app.records import read_records
from podnet.app.status import status_report
from podnet.core.cluster.port import NODE as NODE_KIND
from podnet.hookspecs.errors import ConfigError, ErrorKind, ProviderError
from podnet.hookspecs.models import NodeInfo
from podnet.hookspecs.types import NodeContext
from podnet.plugins.bbc.credentials import StsKeys
from podnet.plugins.bbc.provider import BbcProvider
from podnet.plugins.bbc.sim import BbcSimulator
from podnet.plugins.ecs.demo import KIT_POLICY, instance_id_for, provider_config
from podnet.plugins.ecs.provider import EcsProvider
from podnet.plugins.ecs.sim import EcsSimulator
from podnet.sim.cloudauth import CredentialAuthority, CredentialServices, Issued, Verdict
from podnet.testing.harness import World
from tests import test_bbc_conformance, test_ecs_conformance

pytest_plugins = ["podnet.testing"]

ROLE_ARN = "acs:ram::1234567890123456:role/podnet-controller"
OIDC_ARN = "acs:ram::1234567890123456:oidc-provider/ack-rrsa-c1"
OIDC_TOKEN = "eyJhbGciOiJSUzI1NiJ9.sim-service-account-token.c2ln"
STATIC_ID, STATIC_SECRET = "LTAI5tSimStaticKey", "static-SECRET-never-shown"
#: the Alibaba SDK renews a temporary key 15 minutes before its Expiration: keys that
#: live this long are due for renewal two seconds after they were issued
ALIBABA_LIFETIME = 902.0
ECS_CREDENTIAL_ENV = ("ALIBABA_CLOUD_ACCESS_KEY_ID", "ALIBABA_CLOUD_ACCESS_KEY_SECRET",
                      "ALIBABA_CLOUD_SECURITY_TOKEN", "ALIBABA_CLOUD_ROLE_ARN",
                      "ALIBABA_CLOUD_OIDC_PROVIDER_ARN", "ALIBABA_CLOUD_OIDC_TOKEN_FILE",
                      "ALIBABA_CLOUD_ECS_METADATA")


@pytest.fixture(autouse=True)
def _no_credentials_in_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in (*ECS_CREDENTIAL_ENV, "BCE_ACCESS_KEY_ID", "BCE_SECRET_ACCESS_KEY",
                 "BCE_SESSION_TOKEN"):
        monkeypatch.delenv(name, raising=False)


@pytest.fixture
def authority() -> CredentialAuthority:
    auth = CredentialAuthority(lifetime=ALIBABA_LIFETIME)
    auth.add_key(STATIC_ID, STATIC_SECRET)
    return auth


@pytest.fixture
def services(authority: CredentialAuthority) -> Iterator[CredentialServices]:
    with CredentialServices(authority, require_token=True,
                            oidc=(ROLE_ARN, OIDC_ARN, OIDC_TOKEN)) as svc:
        yield svc


@pytest.fixture
def ecs_sim(authority: CredentialAuthority) -> Iterator[EcsSimulator]:
    sim = EcsSimulator(auth=authority, secret_of=authority.secret_of)
    sim.add_vswitch("vsw-sim-a", "10.20.0.0/24")
    sim.add_instance(instance_id_for("node-0000"), "ecs.g7.large", "vsw-sim-a")
    with sim:
        yield sim


@pytest.fixture
def token_file(tmp_path: Path) -> Path:
    path = tmp_path / "token"
    path.write_text(OIDC_TOKEN)
    return path


def ecs_section(sim: EcsSimulator, **overrides: Any) -> dict[str, Any]:
    section = provider_config(sim, instance_ids={"node-0000": instance_id_for("node-0000")})
    del section["access_key_id"], section["access_key_secret"]
    section.update(overrides)
    return section


MODES: dict[str, Callable[[EcsSimulator, CredentialServices, Path], dict[str, Any]]] = {
    "access_key": lambda sim, svc, tf: ecs_section(
        sim, access_key_id=STATIC_ID, access_key_secret=STATIC_SECRET),
    "ecs_ram_role": lambda sim, svc, tf: ecs_section(
        sim, credentials="ecs_ram_role", credentials_proxy=svc.url),
    "ecs_ram_role_named": lambda sim, svc, tf: ecs_section(
        sim, credentials="ecs_ram_role", role_name=svc.role, credentials_proxy=svc.url),
    "oidc_role_arn": lambda sim, svc, tf: ecs_section(
        sim, credentials="oidc_role_arn", role_arn=ROLE_ARN, oidc_provider_arn=OIDC_ARN,
        oidc_token_file=str(tf), sts_endpoint=svc.url),
}


def configured(section: Mapping[str, Any]) -> EcsProvider:
    provider = EcsProvider()
    provider.podnet_configure("ecs", section)
    return provider


def describe(provider: EcsProvider) -> None:
    assert provider.describe_enis(instance=instance_id_for("node-0000"))


def sdk_call_with(sim: EcsSimulator, cred: Issued) -> None:
    """One DescribeNetworkInterfaces through the SDK with exactly this temporary key."""
    from alibabacloud_ecs20140526 import models
    from alibabacloud_ecs20140526.client import Client
    from alibabacloud_tea_openapi import models as open_api_models

    client = Client(open_api_models.Config(
        access_key_id=cred.access_key_id, access_key_secret=cred.secret,
        security_token=cred.token, endpoint=sim.endpoint, protocol="http",
        region_id="cn-hangzhou"))
    client.describe_network_interfaces(models.DescribeNetworkInterfacesRequest(
        region_id="cn-hangzhou", instance_id=instance_id_for("node-0000")))


def wait_until_due(cred: Issued, margin: float) -> None:
    """Let the wall clock pass the moment the SDK renews ``cred`` (``margin`` before its
    expiry); the simulator still takes it."""
    due = cred.expires - margin
    while time.time() <= due + 0.05:
        time.sleep(min(0.2, max(0.01, due + 0.05 - time.time())))


# --- ECS: every mode reaches the simulator -------------------------------------------------


@pytest.mark.parametrize("mode", sorted(MODES))
def test_ecs_each_mode_reaches_the_simulator(mode: str, ecs_sim: EcsSimulator,
                                             services: CredentialServices,
                                             authority: CredentialAuthority,
                                             token_file: Path) -> None:
    provider = configured(MODES[mode](ecs_sim, services, token_file))
    describe(provider)
    describe(provider)
    if mode == "access_key":
        assert ecs_sim.callers == [STATIC_ID, STATIC_ID]
        assert not authority.issued
        return
    # one temporary key, asked for once and used for both calls
    [cred] = authority.issued
    assert ecs_sim.callers == [cred.access_key_id] * 2
    if mode.startswith("ecs_ram_role"):
        assert cred.source == "ecs-metadata"
        # IMDSv2: a token first (the service refuses a read without one)
        asked = [what for service, what in services.requests if service == "ecs-metadata"]
        assert asked[0] == "token" and asked[-1] == "credentials"
        assert ("role" in asked) is (mode == "ecs_ram_role")
    else:
        assert cred.source == "sts-oidc"
        assert services.requests == [("sts", "AssumeRoleWithOIDC")]


def test_ecs_simulator_refuses_an_unknown_key(ecs_sim: EcsSimulator) -> None:
    provider = configured(ecs_section(ecs_sim, access_key_id="LTAI5tNobodysKey",
                                      access_key_secret=STATIC_SECRET))
    with pytest.raises(ProviderError) as info:
        describe(provider)
    assert "InvalidAccessKeyId.NotFound" in str(info.value)
    assert ecs_sim.callers == []


def test_ecs_simulator_checks_the_signature(ecs_sim: EcsSimulator,
                                            authority: CredentialAuthority) -> None:
    """The secret signs: the right key id with another secret is refused, a temporary
    key's too."""
    provider = configured(ecs_section(ecs_sim, access_key_id=STATIC_ID,
                                      access_key_secret="not-the-secret"))
    with pytest.raises(ProviderError, match="SignatureDoesNotMatch"):
        describe(provider)
    cred = authority.issue("operator")
    sdk_call_with(ecs_sim, cred)
    with pytest.raises(Exception) as info:
        sdk_call_with(ecs_sim, Issued(access_key_id=cred.access_key_id, secret="wrong",
                                      token=cred.token, expires=cred.expires,
                                      source=cred.source))
    assert getattr(info.value, "code", None) == "SignatureDoesNotMatch"
    assert ecs_sim.callers == [cred.access_key_id]


def test_ecs_oidc_fields_from_the_environment(ecs_sim: EcsSimulator,
                                              services: CredentialServices,
                                              authority: CredentialAuthority,
                                              token_file: Path,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """What RRSA's webhook injects: the three ALIBABA_CLOUD_* variables stand in for the
    keys left out."""
    monkeypatch.setenv("ALIBABA_CLOUD_ROLE_ARN", ROLE_ARN)
    monkeypatch.setenv("ALIBABA_CLOUD_OIDC_PROVIDER_ARN", OIDC_ARN)
    monkeypatch.setenv("ALIBABA_CLOUD_OIDC_TOKEN_FILE", str(token_file))
    describe(configured(ecs_section(ecs_sim, credentials="oidc_role_arn",
                                    sts_endpoint=services.url)))
    assert [c.source for c in authority.issued] == ["sts-oidc"]


def test_ecs_default_chain_reads_the_environment(ecs_sim: EcsSimulator,
                                                 authority: CredentialAuthority,
                                                 tmp_path: Path) -> None:
    """``credentials: default``: the SDK's chain, here its first link (a temporary key in
    ALIBABA_CLOUD_ACCESS_KEY_ID / _SECRET / ALIBABA_CLOUD_SECURITY_TOKEN), in a process of
    its own. The metadata link is switched off: nothing is asked of a real address."""
    cred = authority.issue("operator")
    script = textwrap.dedent(f"""
        import json
        from podnet.plugins.ecs.provider import EcsProvider
        p = EcsProvider()
        p.podnet_configure("ecs", json.loads({json.dumps(json.dumps(ecs_section(
            ecs_sim, credentials="default")))}))
        print(len(p.describe_enis(instance={instance_id_for("node-0000")!r})))
    """)
    env = {k: v for k, v in os.environ.items() if not k.startswith("ALIBABA_CLOUD_")}
    env.update(ALIBABA_CLOUD_ACCESS_KEY_ID=cred.access_key_id,
               ALIBABA_CLOUD_ACCESS_KEY_SECRET=cred.secret,
               ALIBABA_CLOUD_SECURITY_TOKEN=cred.token,
               ALIBABA_CLOUD_ECS_METADATA_DISABLED="true",
               ALIBABA_CLOUD_CLI_PROFILE_DISABLED="true", HOME=str(tmp_path))
    done = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "1"
    assert ecs_sim.callers == [cred.access_key_id]
    assert cred.secret not in done.stdout + done.stderr
    assert cred.token not in done.stdout + done.stderr


# --- ECS: renewal across an expiry -----------------------------------------------------


@pytest.mark.parametrize("mode", ["ecs_ram_role", "oidc_role_arn"])
def test_ecs_temporary_key_renewed_across_its_expiry(mode: str, ecs_sim: EcsSimulator,
                                                     services: CredentialServices,
                                                     authority: CredentialAuthority,
                                                     token_file: Path) -> None:
    provider = configured(MODES[mode](ecs_sim, services, token_file))
    describe(provider)
    [first] = authority.issued
    wait_until_due(first, 900)
    authority.lifetime = 3600.0  # the next key outlives the test
    describe(provider)  # renewed here, while the first key is still good
    assert len(authority.issued) == 2
    assert authority.check(first.access_key_id, first.token) is Verdict.OK
    authority.advance(first.expires - authority.now() + 1)  # the first key expires
    assert authority.check(first.access_key_id, first.token) is Verdict.EXPIRED
    for _ in range(3):
        describe(provider)  # no call fails
    second = authority.issued[1]
    assert ecs_sim.callers == [first.access_key_id] + [second.access_key_id] * 4
    # and the cloud does refuse the first one now, with ECS's code, through the SDK
    with pytest.raises(Exception) as info:
        sdk_call_with(ecs_sim, first)
    assert getattr(info.value, "code", None) == "InvalidSecurityToken.Expired"


def test_ecs_expired_key_is_a_transient_error(ecs_sim: EcsSimulator,
                                              services: CredentialServices,
                                              authority: CredentialAuthority,
                                              token_file: Path) -> None:
    """A key the cloud calls expired (clocks apart) fails the call, transiently: the
    next one, after renewal, goes through."""
    provider = configured(MODES["oidc_role_arn"](ecs_sim, services, token_file))
    describe(provider)
    authority.advance(ALIBABA_LIFETIME)
    with pytest.raises(ProviderError) as info:
        describe(provider)
    assert info.value.kind is ErrorKind.TRANSIENT
    assert "InvalidSecurityToken.Expired" in str(info.value)


def test_ecs_token_service_refusing_is_an_error_naming_the_source(
        ecs_sim: EcsSimulator, services: CredentialServices, token_file: Path) -> None:
    token_file.write_text("a-token-sts-does-not-take")
    provider = configured(MODES["oidc_role_arn"](ecs_sim, services, token_file))
    with pytest.raises(ProviderError) as info:
        describe(provider)
    assert info.value.kind is ErrorKind.TRANSIENT
    assert "no credentials (oidc_role_arn)" in str(info.value)
    assert "AuthenticationFail.OIDCToken.Invalid" in str(info.value)
    assert ecs_sim.callers == []


# --- ECS: bad settings name their key ----------------------------------------------------


def _missing_file(sim: EcsSimulator, tmp: Path) -> dict[str, Any]:
    return ecs_section(sim, credentials="oidc_role_arn", role_arn=ROLE_ARN,
                       oidc_provider_arn=OIDC_ARN, oidc_token_file=str(tmp / "nothing"))


BAD_ECS: dict[str, tuple[Callable[[EcsSimulator, Path], dict[str, Any]], str]] = {
    "unknown mode": (lambda s, t: ecs_section(s, credentials="instance_profile"),
                     "providers.ecs.credentials"),
    "no access key": (lambda s, t: ecs_section(s, access_key_id=STATIC_ID),
                      "providers.ecs.access_key_secret"),
    "a key beside a role": (lambda s, t: ecs_section(
        s, credentials="ecs_ram_role", access_key_id=STATIC_ID), "providers.ecs.access_key_id"),
    "a role name beside a key": (lambda s, t: ecs_section(
        s, role_name="r", access_key_id="a", access_key_secret="b"), "providers.ecs.role_name"),
    "a bad role name": (lambda s, t: ecs_section(
        s, credentials="ecs_ram_role", role_name="no spaces"), "providers.ecs.role_name"),
    "no role arn": (lambda s, t: ecs_section(
        s, credentials="oidc_role_arn", oidc_provider_arn=OIDC_ARN,
        oidc_token_file=str(t)), "providers.ecs.role_arn"),
    "a bad role arn": (lambda s, t: ecs_section(
        s, credentials="oidc_role_arn", role_arn="arn:aws:iam::1:role/x"),
        "providers.ecs.role_arn"),
    "no provider arn": (lambda s, t: ecs_section(
        s, credentials="oidc_role_arn", role_arn=ROLE_ARN, oidc_token_file=str(t)),
        "providers.ecs.oidc_provider_arn"),
    "no token file": (_missing_file, "providers.ecs.oidc_token_file"),
    "a short session": (lambda s, t: ecs_section(
        s, credentials="oidc_role_arn", session_duration=60), "providers.ecs.session_duration"),
    "a bad proxy": (lambda s, t: ecs_section(
        s, credentials="ecs_ram_role", credentials_proxy="127.0.0.1:3128"),
        "providers.ecs.credentials_proxy"),
    "an endpoint beside a role": (lambda s, t: ecs_section(
        s, credentials="ecs_ram_role", sts_endpoint="sts.aliyuncs.com"),
        "providers.ecs.sts_endpoint"),
}


@pytest.mark.parametrize("case", sorted(BAD_ECS))
def test_ecs_bad_credentials_setting_names_its_key(case: str, ecs_sim: EcsSimulator,
                                                   tmp_path: Path) -> None:
    build, key = BAD_ECS[case]
    provider = EcsProvider()
    with pytest.raises(ConfigError) as info:
        provider.podnet_configure("ecs", build(ecs_sim, tmp_path))
    assert info.value.key == key, str(info.value)
    assert STATIC_SECRET not in str(info.value)


def test_ecs_metadata_switched_off_names_the_mode(ecs_sim: EcsSimulator,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """The SDK's own switch (read on import): a process started with
    ALIBABA_CLOUD_ECS_METADATA_DISABLED=true refuses the mode at configure."""
    import alibabacloud_credentials.utils.auth_util as au

    monkeypatch.setattr(au, "environment_ecs_metadata_disabled", "true")
    with pytest.raises(ConfigError) as info:
        configured(ecs_section(ecs_sim, credentials="ecs_ram_role"))
    assert info.value.key == "providers.ecs.credentials"


# --- BBC -------------------------------------------------------------------------------


BCE_ID, BCE_SECRET = "bce-long-term-ak", "bce-long-term-SECRET-sk"


@pytest.fixture
def bbc_sim(authority: CredentialAuthority) -> Iterator[BbcSimulator]:
    authority.add_key(BCE_ID, BCE_SECRET)
    sim = BbcSimulator(auth=authority, secret_of=authority.secret_of)
    sim.add_subnet("sbn-a", "10.30.0.0/24")
    sim.add_instance("i-bbc0", "sbn-a")
    with sim:
        yield sim


def bbc(sim: BbcSimulator, **section: Any) -> BbcProvider:
    provider = BbcProvider()
    provider.podnet_configure("bbc", {"endpoint": sim.endpoint, "subnets": ["sbn-a"],
                                      **section})
    return provider


def bbc_calls(provider: BbcProvider) -> None:
    assert provider.api.port("i-bbc0").eni_id
    assert provider.api.subnet("sbn-a").cidr == "10.30.0.0/24"


def test_bbc_access_key_and_session_token(bbc_sim: BbcSimulator,
                                          authority: CredentialAuthority) -> None:
    bbc_calls(bbc(bbc_sim, accessKeyId=BCE_ID, secretAccessKey=BCE_SECRET))
    temporary = authority.issue("bce-sts", prefix="")
    bbc_calls(bbc(bbc_sim, accessKeyId=temporary.access_key_id,
                  secretAccessKey=temporary.secret, sessionToken=temporary.token))
    assert bbc_sim.callers == [BCE_ID] * 2 + [temporary.access_key_id] * 2
    # the simulator refuses a temporary key without its token
    with pytest.raises(Exception, match=r"AccessDenied|not the access key"):
        bbc(bbc_sim, accessKeyId=temporary.access_key_id,
            secretAccessKey=temporary.secret).api.port("i-bbc0")


def test_bbc_simulator_checks_the_signature(bbc_sim: BbcSimulator,
                                            authority: CredentialAuthority) -> None:
    temporary = authority.issue("bce-sts", prefix="")
    for key, secret, token in ((BCE_ID, "not-the-secret", None),
                               (temporary.access_key_id, "wrong", temporary.token)):
        with pytest.raises(Exception, match="signature does not match"):
            bbc(bbc_sim, accessKeyId=key, secretAccessKey=secret,
                sessionToken=token).api.port("i-bbc0")
    assert bbc_sim.callers == []


def test_bbc_session_token_from_the_environment(bbc_sim: BbcSimulator,
                                                authority: CredentialAuthority,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    temporary = authority.issue("bce-sts", prefix="")
    monkeypatch.setenv("BCE_ACCESS_KEY_ID", temporary.access_key_id)
    monkeypatch.setenv("BCE_SECRET_ACCESS_KEY", temporary.secret)
    monkeypatch.setenv("BCE_SESSION_TOKEN", temporary.token)
    bbc_calls(bbc(bbc_sim))
    assert bbc_sim.callers == [temporary.access_key_id] * 2


def test_bbc_sts_renews_across_an_expiry(bbc_sim: BbcSimulator,
                                         services: CredentialServices,
                                         authority: CredentialAuthority) -> None:
    authority.lifetime = 4.0  # renewed a quarter of its life, 1 s, before it expires
    provider = bbc(bbc_sim, credentials="sts", accessKeyId=BCE_ID, secretAccessKey=BCE_SECRET,
                   stsEndpoint=services.endpoint, stsSessionDuration=3600)
    bbc_calls(provider)
    [first] = authority.issued
    wait_until_due(first, 1.0)
    authority.lifetime = 3600.0  # the next key outlives the test
    bbc_calls(provider)  # renewed here, while the first key is still good
    assert len(authority.issued) == 2
    assert authority.check(first.access_key_id, first.token) is Verdict.OK
    authority.advance(first.expires - authority.now() + 1)  # the first key expires
    assert authority.check(first.access_key_id, first.token) is Verdict.EXPIRED
    for _ in range(2):
        bbc_calls(provider)
    second = authority.issued[1]
    assert bbc_sim.callers == [first.access_key_id] * 2 + [second.access_key_id] * 6
    assert BCE_ID not in bbc_sim.callers  # the long-term key signs STS requests only
    assert services.requests == [("bce-sts", "sessionToken")] * 2
    # the first key is refused now
    with pytest.raises(Exception, match="expired"):
        bbc(bbc_sim, accessKeyId=first.access_key_id, secretAccessKey=first.secret,
            sessionToken=first.token).api.port("i-bbc0")


def test_bbc_instance_role_renews_across_an_expiry(bbc_sim: BbcSimulator,
                                                  services: CredentialServices,
                                                  authority: CredentialAuthority) -> None:
    """``credentials: instance_role``: the bound IAM role's key from BCC's metadata
    service (the stand-in here, by ``metadataEndpoint``), renewed before it expires."""
    authority.lifetime = 4.0
    provider = bbc(bbc_sim, credentials="instance_role", metadataEndpoint=services.endpoint)
    bbc_calls(provider)
    [first] = authority.issued
    assert first.source == "bcc-metadata"
    wait_until_due(first, 1.0)
    authority.lifetime = 3600.0
    bbc_calls(provider)
    assert authority.check(first.access_key_id, first.token) is Verdict.OK
    authority.advance(first.expires - authority.now() + 1)
    bbc_calls(provider)
    second = authority.issued[1]
    assert bbc_sim.callers == [first.access_key_id] * 2 + [second.access_key_id] * 4
    assert services.requests == [("bcc-metadata", "sts-credential")] * 2


def test_bbc_instance_without_a_role_is_a_transient_error(bbc_sim: BbcSimulator,
                                                          services: CredentialServices
                                                          ) -> None:
    services.bcc_role = None
    provider = bbc(bbc_sim, credentials="instance_role", metadataEndpoint=services.endpoint)
    with pytest.raises(ProviderError) as info:
        provider.api.port("i-bbc0")
    assert info.value.kind is ErrorKind.TRANSIENT
    assert "no key from the instance metadata service: HTTP 404" in str(info.value)
    assert bbc_sim.callers == []


def test_bbc_sts_refusing_is_a_transient_error(bbc_sim: BbcSimulator,
                                               services: CredentialServices) -> None:
    provider = bbc(bbc_sim, credentials="sts", accessKeyId="nobody", secretAccessKey="x",
                   stsEndpoint=services.endpoint)
    with pytest.raises(ProviderError) as info:
        provider.api.port("i-bbc0")
    assert info.value.kind is ErrorKind.TRANSIENT
    assert "no session token from BCE STS: InvalidAccessKeyId" in str(info.value)


BAD_BBC: dict[str, tuple[dict[str, Any], str]] = {
    "unknown mode": ({"credentials": "metadata", "accessKeyId": "a", "secretAccessKey": "b"},
                     "providers.bbc.credentials"),
    "no secret": ({"accessKeyId": "a"}, "providers.bbc.secretAccessKey"),
    "no key": ({"secretAccessKey": "b"}, "providers.bbc.accessKeyId"),
    "a token beside sts": ({"credentials": "sts", "accessKeyId": "a", "secretAccessKey": "b",
                            "sessionToken": "SECRET-token"}, "providers.bbc.sessionToken"),
    "an sts endpoint beside a key": ({"accessKeyId": "a", "secretAccessKey": "b",
                                      "stsEndpoint": "sts.bj.baidubce.com"},
                                     "providers.bbc.stsEndpoint"),
    "a zero session": ({"credentials": "sts", "accessKeyId": "a", "secretAccessKey": "b",
                        "stsSessionDuration": 0}, "providers.bbc.stsSessionDuration"),
    "a key beside the role": ({"credentials": "instance_role", "accessKeyId": "a"},
                              "providers.bbc.accessKeyId"),
    "a metadata endpoint beside a key": ({"accessKeyId": "a", "secretAccessKey": "b",
                                          "metadataEndpoint": "127.0.0.1:1"},
                                         "providers.bbc.metadataEndpoint"),
}


@pytest.mark.parametrize("case", sorted(BAD_BBC))
def test_bbc_bad_credentials_setting_names_its_key(case: str, bbc_sim: BbcSimulator) -> None:
    section, key = BAD_BBC[case]
    with pytest.raises(ConfigError) as info:
        bbc(bbc_sim, **section)
    assert info.value.key == key, str(info.value)
    assert "SECRET-token" not in str(info.value)


def test_bbc_keys_never_shown(bbc_sim: BbcSimulator, services: CredentialServices,
                              authority: CredentialAuthority,
                              caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    shown = []
    for section in ({"credentials": "sts", "accessKeyId": BCE_ID,
                     "secretAccessKey": BCE_SECRET, "stsEndpoint": services.endpoint},
                    {"credentials": "instance_role", "metadataEndpoint": services.endpoint}):
        provider = bbc(bbc_sim, **section)
        bbc_calls(provider)
        authority.advance(authority.lifetime + 1)  # the key expires: calls are refused
        try:
            provider.podnet_node_inventory("bbc", NodeContext(node=NodeInfo(
                name="n0", uid="u", provider_id="bbc://i-bbc0")))
        except Exception as exc:
            shown.append(f"{exc!s} {exc!r}")
        shown += [repr(provider), repr(provider.api), repr(provider.api.bbc.keys)]
    assert len(authority.issued) == 2
    assert sum("expired" in x for x in shown) == 2, shown
    secrets = [BCE_SECRET] + [s for c in authority.issued for s in (c.secret, c.token)]
    text = caplog.text + "\n".join(shown)
    for secret in secrets:
        assert secret not in text


def test_bbc_key_sources_show_no_key() -> None:
    keys = StsKeys(BCE_ID, BCE_SECRET, endpoint="127.0.0.1:1", duration=900)
    assert BCE_SECRET not in repr(keys) and BCE_ID not in repr(keys)


# --- no secret anywhere ------------------------------------------------------------------


class TestNoSecretLeaks:
    """The controller, its provider on temporary keys (ECS RAM role): pods get their
    networks; no key, secret or token is in a log line, a span, the cluster, an error
    or a repr."""

    @pytest.fixture
    def provider_plugin(self, ecs_sim: EcsSimulator, services: CredentialServices
                        ) -> EcsProvider:
        plugin = EcsProvider(policy=KIT_POLICY)
        plugin.podnet_configure("ecs", ecs_section(
            ecs_sim, credentials="ecs_ram_role", credentials_proxy=services.url,
            vswitches=["vsw-sim-a"]))
        return plugin

    @pytest.fixture
    def ground_truth(self, ecs_sim: EcsSimulator) -> Callable[[], Mapping[str, str]]:
        def truth() -> Mapping[str, str]:
            return {ip: "node-0000" for ip in ecs_sim.addresses()}

        return truth

    def test_nothing_secret_leaves_the_provider(
            self, world: World, span_exporter: InMemorySpanExporter,
            provider_plugin: EcsProvider, authority: CredentialAuthority,
            ecs_sim: EcsSimulator, caplog: pytest.LogCaptureFixture) -> None:
        caplog.set_level(logging.DEBUG)
        world.add_node(0)
        for i in range(3):
            world.add_pod(f"p{i}", 0)
        world.settle(advance=5.0)
        assert world.cloud_addresses(), "no pod got an address"
        # then the key expires on the cloud's side: calls fail until it is renewed
        authority.advance(ALIBABA_LIFETIME)
        errors = []
        try:
            provider_plugin.describe_enis(instance=instance_id_for("node-0000"))
        except ProviderError as exc:
            errors.append(f"{exc!s} {exc!r}")
        assert errors and "InvalidSecurityToken.Expired" in errors[0]
        # what ``podnet status`` and ``podnet audit`` print (the audit meets the expiry)
        records = read_records(world.cluster)
        nodes = {n["metadata"]["name"]: n for n in world.cluster.list(NODE_KIND).items}
        audited = repr(audit(records, nodes, world.engine.providers))
        status = json.dumps(status_report(records), default=str)
        assert len(json.loads(status)["pods"]) == 3
        secrets = [s for cred in authority.issued for s in (cred.secret, cred.token)]
        assert secrets
        spans = json.dumps([json.loads(s.to_json()) for s in span_exporter.get_finished_spans()])
        assert span_exporter.get_finished_spans()
        # what status and audit read
        store = json.dumps({str(k): v for k, v in world.cluster._store.items()}, default=str)
        shown = {"logs": caplog.text, "spans": spans, "cluster": store,
                 "errors": "\n".join(errors), "repr": repr(provider_plugin)
                 + repr(provider_plugin.config) + repr(provider_plugin._credentials),
                 "calls": repr(ecs_sim.callers), "audit": audited, "status": status}
        for where, text in shown.items():
            for secret in secrets:
                assert secret not in text, f"a secret in the {where}"


class TestEcsConformanceOnARoleKey(test_ecs_conformance.TestEcsConformance):
    """The provider conformance suite, the provider on the instance's RAM role: a key
    that is due for renewal a second after it was issued, the simulator checking every
    request's key, token and signature. No call fails for its key."""

    @pytest.fixture
    def ecs(self) -> Iterator[Any]:
        authority = CredentialAuthority(lifetime=901.0)
        with CredentialServices(authority, require_token=True) as svc:
            world = test_ecs_conformance.ecs_world(
                auth=authority, secret_of=authority.secret_of, credentials="ecs_ram_role",
                credentials_proxy=svc.url, access_key_id=None, access_key_secret=None)
            self.sim_world = world
            yield world
            world.close()
            refused = [v for _, v in authority.checked if v is not Verdict.OK]
            assert not refused, refused


class TestBbcConformanceOnSessionTokens(test_bbc_conformance.TestBbcConformance):
    """The provider conformance suite, the provider on BCE STS session tokens renewed
    every few seconds, the simulator checking every request's key, token and signature."""

    @pytest.fixture
    def provider_plugin(self) -> Iterator[BbcProvider]:
        from podnet.plugins.bbc import demo
        from podnet.plugins.bbc.provider import default_policy

        authority = CredentialAuthority(lifetime=4.0)  # renewed 1 s before it expires
        authority.add_key(BCE_ID, BCE_SECRET)
        with CredentialServices(authority) as svc:
            sim = BbcSimulator(auth=authority, secret_of=authority.secret_of)
            for subnet, cidr in demo.SUBNETS.items():
                sim.add_subnet(subnet, cidr)
            demo.register_nodes(sim, [World.node_name(i)
                                      for i in range(test_bbc_conformance.NODES)])
            with sim:
                provider = BbcProvider(policy=default_policy())
                provider.podnet_configure("bbc", {
                    "endpoint": sim.endpoint, "credentials": "sts", "accessKeyId": BCE_ID,
                    "secretAccessKey": BCE_SECRET, "stsEndpoint": svc.endpoint})
                provider.sim = sim  # type: ignore[attr-defined]
                yield provider
            refused = [v for _, v in authority.checked if v is not Verdict.OK]
            assert not refused, refused
            assert BCE_ID not in sim.callers
