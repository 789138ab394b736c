"""``k8s.v1.cni.cncf.io/networks`` read as Multus reads it, and NetworkAttachmentDefinition
configs read for what podnet serves (``podnet.core.attachments``)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from podnet.core.attachments import (
    FIELD,
    MULTUS_NETWORKS,
    NadInfo,
    Selection,
    is_nad_network,
    parse_selections,
    podnet_request,
    read_nad,
    selected_networks,
)
from podnet.core.errors import InvalidRequest

NS = "team-a"


def parse(value: str) -> tuple[Selection, ...]:
    return parse_selections({MULTUS_NETWORKS: value}, NS)


def brief(value: str) -> list[tuple[str, str, str]]:
    return [(s.namespace, s.name, s.interface) for s in parse(value)]


# --- the comma form ---------------------------------------------------------------------


@pytest.mark.parametrize(("value", "expected"), [
    ("blue", [(NS, "blue", "net1")]),
    ("blue,green", [(NS, "blue", "net1"), (NS, "green", "net2")]),
    (" blue , green ", [(NS, "blue", "net1"), (NS, "green", "net2")]),
    ("other/blue", [("other", "blue", "net1")]),
    ("other / blue", [("other", "blue", "net1")]),
    ("blue@data0", [(NS, "blue", "data0")]),
    ("blue @ data0", [(NS, "blue", "data0")]),
    ("other/blue@data0", [("other", "blue", "data0")]),
    # Multus names by position, whatever the other entries ask
    ("blue@x0,green", [(NS, "blue", "x0"), (NS, "green", "net2")]),
    # an empty namespace is the pod's, an empty interface none (as Multus reads them)
    ("/blue", [(NS, "blue", "net1")]),
    ("blue@", [(NS, "blue", "net1")]),
    ("blue,blue", [(NS, "blue", "net1"), (NS, "blue", "net2")]),
])
def test_the_comma_form(value: str, expected: list[tuple[str, str, str]]) -> None:
    assert brief(value) == expected


def test_absent_or_empty_is_no_attachment_as_multus_reads_it() -> None:
    assert parse_selections({}, NS) == ()
    assert parse("") == ()
    # a value without '[', '{' or '"' is the comma form: "null" is a NAD's name
    assert brief("null") == [(NS, "null", "net1")]


def test_the_json_form() -> None:
    value = json.dumps([
        {"name": "blue"},
        {"name": "green", "namespace": "other", "interface": "data0",
         "ips": ["10.1.0.5/24", "fd00::5"], "mac": "02:00:00:00:00:05",
         "default-route": ["10.1.0.1"], "cni-args": {"x": 1}, "portMappings": []},
        {"name": "red.v2", "interfaceRequest": "old0"},
    ])
    blue, green, red = parse(value)
    assert (blue.namespace, blue.name, blue.interface, blue.position) == (NS, "blue", "net1", 1)
    assert blue.network == f"{NS}/blue" and is_nad_network(blue.network)
    assert (green.namespace, green.interface) == ("other", "data0")
    assert green.ips == ("10.1.0.5/24", "fd00::5") and green.mac == "02:00:00:00:00:05"
    assert green.default_route == ("10.1.0.1",)
    assert (red.name, red.interface) == ("red.v2", "old0")
    assert parse(" [ ] ") == ()
    assert parse("[]") == ()


def test_selected_networks_never_fails() -> None:
    assert selected_networks({MULTUS_NETWORKS: "a,other/b"}, NS) == (f"{NS}/a", "other/b")
    assert selected_networks({MULTUS_NETWORKS: "A"}, NS) == ()
    assert not is_nad_network("blue")


def test_podnet_request_of_an_entry() -> None:
    (s,) = parse(json.dumps([{"name": "b", "ips": ["fd00::5/64", "10.0.0.5/24"],
                              "mac": "02-AA-BB-CC-DD-EE"}]))
    assert podnet_request(s) == ("10.0.0.5,fd00::5", "02:aa:bb:cc:dd:ee")
    (plain,) = parse("b")
    assert podnet_request(plain) == (None, None)


@pytest.mark.parametrize(("entry", "names"), [
    ({"name": "b", "ips": ["10.0.0.1", "10.0.0.2"]}, ["ips"]),
    ({"name": "b", "ips": ["10.0.0.1", "10.0.0.2", "fd00::1"]}, ["ips"]),
    ({"name": "b", "mac": "01:00:5e:00:00:01"}, ["mac", "multicast"]),
    ({"name": "b", "mac": "00:00:00:00:00:00"}, ["mac", "zeros"]),
    ({"name": "b", "mac": "02:00:00:00:00:00:00:01"}, ["mac"]),
    ({"name": "b", "default-route": ["10.0.0.1"]}, ["default-route"]),
])
def test_what_podnet_cannot_serve_of_an_entry(entry: dict[str, Any], names: list[str]) -> None:
    (s,) = parse(json.dumps([entry]))
    with pytest.raises(ValueError) as info:
        podnet_request(s)
    for name in names:
        assert name in str(info.value)


# --- bad input: InvalidRequest naming the annotation and the entry ---------------------------

BAD: list[tuple[str, str]] = [
    # (value, what the message must name)
    (" ", "entry 1"),
    ("blue,", "entry 2"),
    (",blue", "entry 1"),
    ("blue,,green", "entry 2"),
    ("a/b/c", "entry 1"),
    ("blue@a@b", "entry 1"),
    ("Blue", "entry 1"),
    ("blue_net", "entry 1"),
    ("-blue", "entry 1"),
    ("blue-", "entry 1"),
    ("blue.net", "entry 1"),  # the comma form takes labels only
    ("Other/blue", "entry 1"),
    ("other/", "entry 1"),
    ("other/@eth1", "entry 1"),
    ("@eth1", "entry 1"),
    ("blue@this-is-far-too-long0", "entry 1"),
    ("blue@a:b", "entry 1"),
    ("blue@..", "entry 1"),
    ("ok,blue@net1", "entry 2"),  # net1 is entry 1's
    ("a@x0,b@x0", "entry 2"),
    ("x" * 64, "entry 1"),
    # the JSON form
    ("[", "JSON"),
    ('{"name": "blue"}', "list"),
    ('"blue"', "list"),
    ("[1]", "entry 1"),
    ('[{"name": "a"}, null]', "entry 2"),
    ('[{}]', "entry 1"),
    ('[{"name": ""}]', "entry 1"),
    ('[{"name": 5}]', "entry 1"),
    ('[{"name": "Blue"}]', "entry 1"),
    ('[{"name": "blue", "namespace": "a.b"}]', "entry 1"),
    ('[{"name": "blue", "namespace": 3}]', "entry 1"),
    ('[{"name": "blue", "interface": 7}]', "entry 1"),
    ('[{"name": "blue", "interface": "a/b"}]', "entry 1"),
    ('[{"name": "blue", "interface": "has space"}]', "entry 1"),
    ('[{"name": "blue", "ips": "10.0.0.1"}]', "ips"),
    ('[{"name": "blue", "ips": [10]}]', "ips"),
    ('[{"name": "blue", "ips": ["10.0.0.300"]}]', "ips"),
    ('[{"name": "blue", "ips": ["10.0.0.1/33"]}]', "ips"),
    ('[{"name": "blue", "mac": "02:00:00:00:00"}]', "mac"),
    ('[{"name": "blue", "mac": 2}]', "mac"),
    ('[{"name": "blue", "default-route": ["gw"]}]', "default-route"),
    ('[{"name": "blue", "default-route": "10.0.0.1"}]', "default-route"),
    ('[{"name": "blue", "interfce": "x"}]', "interface"),  # a misspelling: refused
    ('[{"name": "a", "interface": "x"}, {"name": "b", "interface": "x"}]', "entry 2"),
]


@pytest.mark.parametrize(("value", "named"), BAD)
def test_bad_input_names_the_annotation_and_the_entry(value: str, named: str) -> None:
    with pytest.raises(InvalidRequest) as info:
        parse(value)
    assert info.value.field == FIELD == f"metadata.annotations[{MULTUS_NETWORKS}]"
    assert named in str(info.value), str(info.value)


def test_the_bad_cases_are_many() -> None:
    assert len(BAD) >= 30


def test_an_unknown_key_that_is_no_misspelling_is_left_to_multus() -> None:
    (s,) = parse('[{"name": "blue", "some-future-key": {"a": 1}}]')
    assert s.name == "blue"


# --- NetworkAttachmentDefinition configs ------------------------------------------------------


def nad(config: Any, name: str = "blue") -> dict[str, Any]:
    text = config if isinstance(config, str) else json.dumps(config)
    return {"metadata": {"name": name, "namespace": NS}, "spec": {"config": text}}


def test_podnet_cni_and_podnet_ipam_configs() -> None:
    info = read_nad(nad({"cniVersion": "1.0.0", "name": "blue-net", "type": "podnet-cni",
                         "subnet": "blue", "provider": "ovn"}))
    assert info == NadInfo(NS, "blue", podnet=True, role="cni", subnet="blue",
                           provider="ovn", config_name="blue-net")
    assert info.key == f"{NS}/blue"
    conflist = read_nad(nad({"cniVersion": "1.0.0", "name": "g", "plugins": [
        {"type": "bridge", "ipam": {"type": "podnet-ipam", "subnet": "green"}},
        {"type": "tuning"}]}))
    assert (conflist.podnet, conflist.role, conflist.subnet, conflist.problem) == (
        True, "ipam", "green", None)
    # podnet-ipam without a subnet: the provider's default; a config without a name is
    # called with the NAD's (as Multus names it)
    bare = read_nad(nad({"type": "macvlan", "ipam": {"type": "podnet-ipam"}}))
    assert (bare.podnet, bare.subnet, bare.problem, bare.config_name) == (
        True, None, None, "blue")


@pytest.mark.parametrize("config", [
    {"cniVersion": "1.0.0", "name": "m", "type": "macvlan", "ipam": {"type": "host-local"}},
    {"cniVersion": "1.0.0", "name": "m", "plugins": [{"type": "bridge"}]},
    "not json at all",
    "[1, 2]",
    "",
])
def test_other_plugins_nads_are_not_podnets(config: Any) -> None:
    info = read_nad(nad(config))
    assert not info.podnet and info.problem is None
    assert not read_nad({"metadata": {"name": "x", "namespace": NS}}).podnet


@pytest.mark.parametrize(("config", "named"), [
    ({"type": "podnet-cni"}, "spec.config: subnet: missing"),
    ({"type": "podnet-cni", "subnet": ""}, "spec.config: subnet"),
    ({"type": "podnet-cni", "subnet": "has space"}, "spec.config: subnet"),
    ({"type": "podnet-cni", "subnet": 3}, "spec.config: subnet: must be a string"),
    ({"type": "podnet-cni", "subnet": "a", "provider": ""}, "spec.config: provider"),
    ({"type": "podnet-cni", "subnet": "a", "provider": 1}, "spec.config: provider"),
    ({"type": "x", "ipam": {"type": "podnet-ipam", "subnet": ["a"]}},
     "spec.config: ipam.subnet"),
    ({"plugins": [{"type": "podnet-cni"}]}, "spec.config: plugins[0].subnet: missing"),
    ({"plugins": [{"type": "podnet-cni", "subnet": "a"}, {"type": "podnet-cni"}]},
     "plugins[0] and plugins[1] both name podnet"),
    ({"plugins": {"type": "podnet-cni"}}, "spec.config: plugins: must be a list"),
    ('{"type": "podnet-cni", ', "spec.config: not valid JSON"),
    ('["podnet-cni"]', "spec.config: not a JSON object"),
])
def test_a_podnet_nad_podnet_cannot_read_says_which_field(config: Any, named: str) -> None:
    info = read_nad(nad(config))
    assert info.podnet
    assert info.problem is not None and named in info.problem, info.problem


# --- the two forms agree ------------------------------------------------------------------

_label = st.from_regex(r"[a-z0-9]([-a-z0-9]{0,10}[a-z0-9])?", fullmatch=True)
_entry = st.tuples(st.one_of(st.none(), _label), _label,
                   st.one_of(st.none(), st.from_regex(r"[a-z][a-z0-9]{0,6}", fullmatch=True)))


@settings(max_examples=200, deadline=None)
@given(st.lists(_entry, min_size=1, max_size=6))
def test_the_comma_and_json_forms_of_one_list_read_alike(
        entries: list[tuple[str | None, str, str | None]]) -> None:
    comma = ", ".join(f"{ns + '/' if ns else ''}{name}{'@' + itf if itf else ''}"
                      for ns, name, itf in entries)
    as_json = json.dumps([{"name": name, **({"namespace": ns} if ns else {}),
                           **({"interface": itf} if itf else {})}
                          for ns, name, itf in entries])
    wanted = [(ns or NS, name, itf or f"net{i}")
              for i, (ns, name, itf) in enumerate(entries, 1)]
    names = [w[2] for w in wanted]
    if len(set(names)) < len(names):  # two entries on one interface: both forms refuse
        for value in (comma, as_json):
            with pytest.raises(InvalidRequest):
                parse(value)
        return
    assert brief(comma) == wanted
    assert brief(as_json) == wanted
