"""``podnet demo`` declares its networks as Subnet objects in its cluster before any pod
(the OVN provider's config names none), and reports each Subnet's usage at the end as
``podnet status`` shows it."""

from __future__ import annotations

import shutil

import pytest

from podnet.app.demo import DemoOptions, run_demo

needs_ovn = pytest.mark.skipif(shutil.which("ovsdb-server") is None,
                               reason="ovsdb-server is not installed (Debian ovn-central)")


@needs_ovn
def test_the_mixed_overlay_is_a_subnet_object_and_its_usage_is_reported() -> None:
    report = run_demo(DemoOptions(provider="mixed", nodes=4, pods=30, node_stage=False,
                                  timeout_s=120))
    assert report.ok, report.as_json()
    rows = {r["name"]: r for r in report.subnets}
    assert set(rows) == {"bbc-demo", "ecs-demo", "ovn-default", "ovn-overlay"}
    assert all(r["phase"] == "Ready" for r in rows.values())
    # the clouds' pods take their provider's default Subnet, which counts them
    for name, provider in (("bbc-demo", "bbc"), ("ecs-demo", "ecs")):
        assert rows[name]["default"] and rows[name]["provider"] == provider
        assert rows[name]["v4_using"] == report.providers[provider].routed == 15
    overlay = rows["ovn-overlay"]
    assert (overlay["provider"], overlay["cidr"], overlay["phase"]) == \
        ("ovn", "10.20.0.0/16", "Ready")
    # every third pod attaches to the overlay: 10 of 30, each holding one of its addresses
    assert overlay["v4_using"] == report.providers["ovn"].routed == 10
    assert overlay["v4_available"] == 2**16 - 3 - 10
    assert rows["ovn-default"]["v4_using"] == 0 and rows["ovn-default"]["default"]


@pytest.mark.parametrize(("provider", "subnet"), [
    pytest.param("ovn", "ovn-default", marks=needs_ovn), ("ecs", "ecs-demo"),
    ("bbc", "bbc-demo")])
def test_a_one_provider_demo_takes_its_default_subnet_object(provider: str, subnet: str
                                                             ) -> None:
    report = run_demo(DemoOptions(provider=provider, nodes=2, pods=12, node_stage=False,
                                  timeout_s=120))
    assert report.ok, report.as_json()
    (row,) = report.subnets
    assert (row["name"], row["phase"], row["v4_using"]) == (subnet, "Ready", 12)


def test_a_provider_without_subnet_objects_reports_none() -> None:
    report = run_demo(DemoOptions(provider="reference", nodes=2, pods=4, node_stage=False,
                                  timeout_s=120))
    assert report.ok and report.subnets == []
