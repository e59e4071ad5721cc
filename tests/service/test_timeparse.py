"""The service's one ISO 8601 time parser and one ISO 8601 duration parser
(service/timeparse.py)."""

from __future__ import annotations

from datetime import UTC, datetime

import numpy as np
import pytest

from service.timeparse import format_duration, format_timestamp, parse_duration, parse_timestamp

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


@pytest.mark.parametrize(
    ("text", "fraction"),
    [
        ("2026-01-31T12:00:00Z", 0.0),
        ("2026-01-31T12:00:00.1250000Z", 0.125),
        ("2026-01-31T12:00:00,5+00:00", 0.5),
        ("2026-01-31T12:00:00.123456789-00:00", 0.123456789),
        ("2026-01-31T12:00:00.1", 0.1),
    ],
)
def test_a_logs_utc_times_read_by_the_minute_are_the_ones_datetime_reads(
    text: str, fraction: float
) -> None:
    """Times to the second in UTC are read from their minute (cached) and seconds: the
    same float as datetime gives for the whole time plus the fraction as written."""
    for second in (0, 7, 59):
        shifted = text[:17] + f"{second:02d}" + text[19:]
        assert parse_timestamp(shifted) == NOON + second + fraction


@pytest.mark.parametrize(
    "text",
    [
        "yesterday",
        "",
        "nan",
        "inf",
        "2026-13-01",
        "2026-02-30T10:00:00Z",
        "2026-01-01T24:00:00Z",
        "2026-01-01T10:00:60Z",
    ],
)
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


def test_every_digit_of_the_fraction_counts_and_formatted_times_read_back_exactly() -> None:
    # datetime keeps 6 digits; Azure's logs write 7
    assert parse_timestamp("2026-01-31T12:00:00.1234567Z") == NOON + 0.1234567
    assert parse_timestamp("2026-01-31T12:00:00,25+00:00") == NOON + 0.25
    assert format_timestamp(NOON + 0.25) == "2026-01-31T12:00:00.250000000Z"
    assert format_timestamp(NOON + 0.9999999999) == "2026-01-31T12:00:01.000000000Z"
    rng = np.random.default_rng(2)
    for seconds in rng.uniform(1e9, 4e9, 10_000):  # 2001 to 2096
        assert parse_timestamp(format_timestamp(float(seconds))) == float(seconds)
