"""The service's one ISO 8601 time parser and one ISO 8601 duration parser
(service/timeparse.py)."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from service.timeparse import format_duration, parse_duration, parse_timestamp

NOON = datetime(2026, 1, 31, 12, tzinfo=UTC).timestamp()


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("1769860800", 1769860800.0),
        ("1769860800.5", 1769860800.5),
        ("2026-01-31T12:00", NOON),
        ("2026-01-31T12:00:00Z", NOON),
        ("2026-01-31T13:00:00+01:00", NOON),
        ("2026-01-31", NOON - 12 * 3600),
    ],
)
def test_timestamps_are_unix_seconds_or_iso_times_in_utc_unless_offset(
    text: str, seconds: float
) -> None:
    assert parse_timestamp(text) == seconds


@pytest.mark.parametrize("text", ["yesterday", "", "nan", "inf", "2026-13-01"])
def test_bad_timestamps_quote_the_text(text: str) -> None:
    with pytest.raises(ValueError, match="expected unix seconds or an ISO 8601 time") as caught:
        parse_timestamp(text)
    assert repr(text) in str(caught.value)


@pytest.mark.parametrize(
    ("text", "seconds"), [("PT10M", 600.0), ("P1DT1S", 86401.0), ("PT0.25S", 0.25)]
)
def test_durations_round_trip_through_their_format(text: str, seconds: float) -> None:
    assert parse_duration(text, "wait") == seconds
    assert parse_duration(format_duration(seconds), "wait") == seconds


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("ten minutes", "must be an ISO 8601 duration"),
        ("P1M", "must use days or smaller units"),
        ("P2Y", "years"),
    ],
)
def test_bad_durations_start_with_the_name(text: str, reason: str) -> None:
    with pytest.raises(ValueError, match=reason) as caught:
        parse_duration(text, "rewardWaitTime")
    assert str(caught.value).startswith("rewardWaitTime ")
