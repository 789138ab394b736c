"""Kubernetes timestamps: the one formatter and parser in ``podnet.core.clock``."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import pytest

from podnet.core.clock import format_micro_time, format_time, parse_time

AT = datetime(2026, 1, 2, 3, 4, 5, 678901, tzinfo=UTC)


def test_times_are_written_in_utc_with_seconds_or_microseconds() -> None:
    assert format_time(AT) == "2026-01-02T03:04:05Z"
    assert format_micro_time(AT) == "2026-01-02T03:04:05.678901Z"
    plus_two = AT.astimezone(timezone(timedelta(hours=2)))
    assert format_time(plus_two) == "2026-01-02T03:04:05Z"
    assert format_time(AT.replace(tzinfo=None)) == "2026-01-02T03:04:05Z"  # naive: UTC


@pytest.mark.parametrize("text", [
    "2026-01-02T03:04:05Z", "2026-01-02T03:04:05.678901Z", "2026-01-02T05:04:05+02:00",
    "2026-01-02t03:04:05z", "2026-01-02T03:04:05"])
def test_rfc3339_is_read_as_utc(text: str) -> None:
    parsed = parse_time(text)
    assert parsed.tzinfo is UTC
    assert parsed.replace(microsecond=0) == AT.replace(microsecond=0)


@pytest.mark.parametrize("text", ["2026-01-02", "20260102T030405Z", "yesterday", ""])
def test_other_shapes_are_refused(text: str) -> None:
    with pytest.raises(ValueError):
        parse_time(text)


def test_what_is_written_reads_back() -> None:
    assert parse_time(format_time(AT)) == AT.replace(microsecond=0)
    assert parse_time(format_micro_time(AT)) == AT
