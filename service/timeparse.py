"""The one parser of ISO 8601 times and the one parser of ISO 8601 durations of the
service: the command line's ``--since``/``--until`` options read times with
:func:`parse_timestamp`; the Personalizer configuration's ``rewardWaitTime`` and
``modelExportFrequency`` are durations read with :func:`parse_duration`
(docs/personalizer.md, "Learning settings and the model").

Both raise :class:`ValueError` with a message naming what was expected and what was
given; each caller turns it into its own error naming the bad argument or field (an
argparse error, a 400 with the field's location).
"""

from __future__ import annotations

import functools
import math
import re
from datetime import UTC, datetime, timedelta

import isodate

# the fraction of the seconds in an ISO 8601 time (after hh:mm:ss)
_FRACTION = re.compile(r"(?<=:\d\d)[.,]\d+")
# a UTC time to the second as logs write it (2026-01-31T12:00:00.250Z): its minute,
# its seconds and their fraction
_UTC_SECONDS = re.compile(r"(\d{4}-\d\d-\d\dT\d\d:\d\d):([0-5]\d)(?:[.,](\d+))?(?:Z|[+-]00:00)?")


@functools.lru_cache(maxsize=1024)
def _minute(text: str) -> float:
    """Unix seconds of the UTC minute ``text`` (``2026-01-31T12:00``), read once for the
    times of a log that share it."""
    return datetime.fromisoformat(text).replace(tzinfo=UTC).timestamp()


def parse_timestamp(text: str) -> float:
    """Unix seconds of ``text``: a finite number of unix seconds, or an ISO 8601 date or
    time (``2026-01-31``, ``2026-01-31T12:00``, ``2026-01-31T12:00:00+01:00``), in UTC
    unless it names an offset."""
    # the fraction of a second is added as written: datetime keeps 6 digits, Azure's
    # logs write 7 and format_timestamp 9
    utc = _UTC_SECONDS.fullmatch(text)
    if utc is not None:
        minute, second, digits = utc.groups()
        try:
            start = _minute(minute)
        except ValueError:  # a day or hour out of range: the error below
            pass
        else:
            return start + int(second) + (float("0." + digits) if digits else 0.0)
    # a date's two dashes (YYYY-MM-DD) are no number: a log's import reads a million
    # such times, and float()'s ValueError costs about 1 us of each
    if text[4:5] != "-" or text[7:8] != "-":
        try:
            seconds = float(text)
        except ValueError:
            pass
        else:
            if math.isfinite(seconds):
                return seconds
    whole, fraction = text, 0.0
    match = _FRACTION.search(text)
    if match is not None:
        whole = text[: match.start()] + text[match.end() :]
        fraction = float("0." + match.group()[1:])
    try:
        moment = datetime.fromisoformat(whole)
    except ValueError:
        raise ValueError(
            f"expected unix seconds or an ISO 8601 time such as 2026-01-31T12:00, but got {text!r}"
        ) from None
    return (moment if moment.tzinfo else moment.replace(tzinfo=UTC)).timestamp() + fraction


def format_timestamp(seconds: float) -> str:
    """The ISO 8601 UTC time of unix ``seconds`` with 9 digits of fraction
    (``2026-01-31T12:00:00.250000000Z``), which :func:`parse_timestamp` reads back to
    the same float for any time from 2001 on (unix 1e9, where a double's spacing is
    1.2e-7 s, far above the 1e-9 s of the text)."""
    whole = math.floor(seconds)
    carry, nanoseconds = divmod(round((seconds - whole) * 1e9), 10**9)
    whole += carry
    moment = datetime.fromtimestamp(whole, UTC).replace(tzinfo=None)
    return f"{moment.isoformat()}.{nanoseconds:09d}Z"


def parse_duration(text: str, name: str) -> float:
    """Seconds of the ISO 8601 duration ``text`` (``PT10M`` -> 600.0). A text that is no
    such duration, or one in years or months (which have no fixed length), is a
    :class:`ValueError` whose message starts with ``name``."""
    try:
        duration = isodate.parse_duration(text)
    except (isodate.ISO8601Error, ValueError):
        raise ValueError(
            f"{name} must be an ISO 8601 duration such as PT10M, but got {text!r}"
        ) from None
    if isinstance(duration, timedelta):
        return duration.total_seconds()
    raise ValueError(
        f"{name} must use days or smaller units (years and months vary), but got {text!r}"
    )


def format_duration(seconds: float) -> str:
    """The ISO 8601 duration of ``seconds`` (``600.0`` -> ``PT10M``), which
    :func:`parse_duration` reads back."""
    return str(isodate.duration_isoformat(timedelta(seconds=seconds)))
