"""The config file: good ones load, bad ones name the offending key."""

from __future__ import annotations

from pathlib import Path

import pytest

from podnet.core.config import load_config, parse_config
from podnet.core.errors import ConfigError


def test_full_config_loads(tmp_path: Path) -> None:
    path = tmp_path / "podnet.yaml"
    path.write_text(
        "defaultProvider: reference\n"
        "providers:\n  reference:\n    latency_ms: 1\n"
        "policies:\n  reference:\n    minIdle: 1\n    maxIdle: 3\n"
        "    cloudRate: {rate: 5, burst: 2}\n"
        "workers: 2\nlisten: 127.0.0.1:9090\n"
        "leaderElection: {namespace: podnet, leaseDurationSeconds: 6, renewDeadlineSeconds: 4,"
        " retryPeriodSeconds: 1}\n"
    )
    cfg = load_config(path)
    assert cfg.default_provider == "reference"
    assert cfg.providers["reference"] == {"latency_ms": 1}
    assert cfg.policies["reference"]["min_idle"] == 1
    assert cfg.policies["reference"]["cloud_rate"].rate == 5
    assert cfg.workers == 2 and cfg.listen == "127.0.0.1:9090"
    assert cfg.leader_election.namespace == "podnet"
    assert cfg.leader_election.lease_duration == 6.0


@pytest.mark.parametrize("data, key", [
    ({"bogus": 1}, "bogus"),
    ([1, 2], "(top level)"),
    ({"providers": [1]}, "providers"),
    ({"providers": {"reference": 3}}, "providers.reference"),
    ({"defaultProvider": 7}, "defaultProvider"),
    ({"policies": {"r": {"minIdle": 9, "maxIdle": 2}}}, "policies.r.min_idle"),
    ({"policies": {"r": {"minIdle": "x"}}}, "policies.r.minIdle"),
    ({"policies": {"r": {"nope": 1}}}, "policies.r.nope"),
    ({"policies": {"r": {"batchSize": -1}}}, "policies.r.batch_size"),
    ({"policies": {"r": {"cloudRate": {"rate": 0}}}}, "policies.r.cloudRate.rate"),
    ({"policies": {"r": {"cloudRate": {"qps": 3}}}}, "policies.r.cloudRate.qps"),
    ({"policies": {"r": {"haveBatchOnQuota": True}}}, "policies.r.haveBatchOnQuota"),
    ({"workers": 0}, "workers"),
    ({"workers": True}, "workers"),
    ({"listen": "8080"}, "listen"),
    ({"listen": "127.0.0.1:99999"}, "listen"),
    ({"leaderElection": {"retryPeriodSeconds": 20}}, "leaderElection"),
    ({"leaderElection": {"enabled": "yes"}}, "leaderElection.enabled"),
    ({"leaderElection": {"leaseDuration": 5}}, "leaderElection.leaseDuration"),
])
def test_bad_config_names_the_key(data: object, key: str) -> None:
    with pytest.raises(ConfigError) as info:
        parse_config(data)
    assert info.value.key == key, str(info.value)


def test_unreadable_and_malformed_files(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read"):
        load_config(tmp_path / "missing.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("providers: [\n")
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_config(bad)


def test_node_rules_and_networks_parse_in_order() -> None:
    cfg = parse_config({
        "defaultProvider": "ecs",
        "nodeProviders": [
            {"provider": "bbc",
             "nodeSelector": "node.kubernetes.io/instance-type in (bbc.a, bbc.b)"},
            {"provider": "ecs", "nodeSelector": "pool=ecs"},
        ],
        "networks": {"overlay": {"provider": "ovn"}},
    })
    assert [r.provider for r in cfg.node_providers] == ["bbc", "ecs"]
    first = cfg.node_providers[0].selector
    assert first.matches({"node.kubernetes.io/instance-type": "bbc.b"})
    assert not first.matches({"node.kubernetes.io/instance-type": "ecs.g7"})
    assert cfg.networks == {"overlay": "ovn"}


@pytest.mark.parametrize(("data", "key"), [
    ({"nodeProviders": {"provider": "bbc"}}, "nodeProviders"),
    ({"nodeProviders": [{"provider": "bbc", "nodeSelector": "a=b", "x": 1}]},
     "nodeProviders[0].x"),
    ({"nodeProviders": [{"nodeSelector": "a=b"}]}, "nodeProviders[0].provider"),
    ({"networks": ["overlay"]}, "networks"),
    ({"networks": {"default": {"provider": "ovn"}}}, "networks.default"),
    ({"networks": {"overlay": {"provider": "ovn", "subnet": "x"}}}, "networks.overlay.subnet"),
])
def test_bad_node_rules_and_networks_name_the_key(data: dict[str, object], key: str) -> None:
    with pytest.raises(ConfigError) as info:
        parse_config(data)
    assert info.value.key == key
