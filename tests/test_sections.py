"""Provider config sections read by their converter (``podnet.hookspecs.sections``): every
error names the whole key path, the same way for every provider."""

from __future__ import annotations

from typing import Any

import attrs
import pytest

from podnet.core.errors import ConfigError
from podnet.hookspecs.sections import (
    between,
    cidrs,
    config_key,
    ids,
    invalid,
    one_of,
    read_section,
    section,
    text,
)


@section()
@attrs.frozen
class Router:
    name: str = attrs.field(metadata=text())
    hops: int = attrs.field(default=1, metadata=between(1, 8))


def _check(cfg: Example) -> None:
    if cfg.low > cfg.high:
        raise invalid(f"{cfg.low} is above high {cfg.high}", "low")


@section(camel=True, check=_check)
@attrs.frozen
class Example:
    attach_timeout: float = attrs.field(default=30.0, metadata=between(0, 3600))
    mode: str = attrs.field(default="a", metadata=one_of("a", "b"))
    name: str | None = attrs.field(default=None, metadata=text(strip=True))
    token: str | None = attrs.field(default=None, repr=False, metadata=text(secret=True))
    zones: tuple[str, ...] = attrs.field(default=(), metadata=ids(comma=True))
    ranges: tuple[str, ...] = attrs.field(default=("10.0.0.0/8",),
                                          metadata=cidrs(disjoint=True))
    routers: tuple[Router, ...] = ()
    labels: dict[str, str] = attrs.field(factory=dict)
    low: int = 0
    high: int = 10
    flag: bool = False


def read(data: Any, base: Example | None = None) -> Example:
    return read_section(Example, "demo", data, base)


def error(data: Any) -> ConfigError:
    with pytest.raises(ConfigError) as info:
        read(data)
    return info.value


def test_defaults_and_values_read_strictly() -> None:
    assert read({}) == Example()
    cfg = read({"attachTimeout": 5, "mode": "b", "name": "  x ", "zones": "z1, z2",
                "routers": [{"name": "r1"}], "labels": {"a": "b"}, "flag": True})
    assert cfg.attach_timeout == 5.0 and isinstance(cfg.attach_timeout, float)
    assert (cfg.mode, cfg.name, cfg.zones) == ("b", "x", ("z1", "z2"))
    assert cfg.routers == (Router("r1"),) and cfg.labels == {"a": "b"} and cfg.flag


@pytest.mark.parametrize(("data", "key", "says"), [
    ({"attachTimeout": 5000}, "providers.demo.attachTimeout",
     "must be between 0 and 3600, got 5000"),
    ({"attachTimeout": True}, "providers.demo.attachTimeout", "expected number"),
    ({"attachTimeout": "30"}, "providers.demo.attachTimeout", "expected number"),
    ({"mode": "c"}, "providers.demo.mode", "expected one of a, b, got 'c'"),
    ({"name": " "}, "providers.demo.name", "expected a non-empty string"),
    ({"zones": 3}, "providers.demo.zones", "expected a list of ids"),
    ({"ranges": ["10.0.0.0/8", "10.1.0.0/16"]}, "providers.demo.ranges[1]",
     "10.1.0.0/16 overlaps 10.0.0.0/8"),
    ({"ranges": ["10.0.0.1/8"]}, "providers.demo.ranges[0]", "has host bits set"),
    ({"routers": [{"name": "r1"}, {"name": "r2", "hops": 9}]},
     "providers.demo.routers[1].hops", "must be between 1 and 8, got 9"),
    ({"routers": [{"hops": 2}]}, "providers.demo.routers[0].name", "required field missing"),
    ({"labels": {"a": 1}}, "providers.demo.labels[a]", "expected string"),
    ({"low": 11}, "providers.demo.low", "11 is above high 10"),
    ({"flag": "yes"}, "providers.demo.flag", "expected boolean"),
    ({"colour": "blue"}, "providers.demo.colour", "unknown key 'colour' (known: "),
    ({"attach_timeout": 3}, "providers.demo.attach_timeout", "known: attachTimeout, "),
])
def test_a_bad_value_names_its_key_path(data: dict[str, Any], key: str, says: str) -> None:
    err = error(data)
    assert err.key == key, str(err)
    assert says in str(err)
    assert str(err).startswith(f"config {key}: ")


def test_a_section_that_is_not_a_mapping_names_the_provider() -> None:
    assert error(["a"]).key == "providers.demo" == config_key("demo")


def test_a_secret_is_never_repeated() -> None:
    for value in ("", 12345, ["s3cr3t"]):
        err = error({"token": value})
        assert err.key == "providers.demo.token"
        assert "s3cr3t" not in str(err) and "12345" not in str(err)
    assert "s3cr3t" not in repr(read({"token": "s3cr3t"}))


def test_keys_left_out_keep_the_base_values() -> None:
    base = Example(attach_timeout=7.0, zones=("z9",), routers=(Router("r", 3),))
    cfg = read({"mode": "b"}, base)
    assert cfg == attrs.evolve(base, mode="b")
    assert read({"zones": []}, base).zones == ()
    with pytest.raises(ConfigError, match="above high"):
        read({"high": -1}, base)  # checked on what results, base values included
