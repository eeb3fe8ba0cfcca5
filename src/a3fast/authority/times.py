"""Instants as RFC 3339 text, compared exactly as integer microseconds since the Unix epoch.

Descriptors carry expiry and issue times, connections a revocation time. Parsing is strict (a
date, `T`, a time with seconds, an optional fraction, and `Z` or a numeric offset; no leap second),
and comparisons are done on integers so that an instant near year 1 or 9999 cannot overflow a
datetime when a clock-skew allowance is added to it.
"""
from __future__ import annotations

import re
from datetime import datetime, timedelta, timezone

__all__ = ["parse_instant", "format_instant", "to_micros", "now_micros", "current_instant", "check_skew",
           "DEFAULT_SKEW_SECONDS"]

#: How far ahead of this host's clock a descriptor's `issued_at` may be (another host's clock may
#: run ahead of ours). Never applied to `expires` or `revoked_at`: skew must not extend authority.
DEFAULT_SKEW_SECONDS = 30

_RFC3339 = re.compile(
    r"([0-9]{4})-([0-9]{2})-([0-9]{2})[Tt]([0-9]{2}):([0-9]{2}):([0-9]{2})(?:\.([0-9]+))?"
    r"(?:([Zz])|([+-])([0-9]{2}):([0-9]{2}))")
_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)
_MICROSECOND = timedelta(microseconds=1)


def parse_instant(text: object) -> datetime | None:
    """An RFC 3339 date-time with an offset -> an aware UTC datetime (fraction kept to the
    microsecond, further digits truncated), or one in its own offset when the instant lies in UTC
    outside years 1 to 9999 (`9999-12-31T23:30:00-01:00`); None when `text` is not one."""
    if not isinstance(text, str):
        return None
    m = _RFC3339.fullmatch(text)
    if m is None:
        return None
    year, month, day, hour, minute, second = (int(g) for g in m.groups()[:6])
    micro = int((m.group(7) or "0")[:6].ljust(6, "0"))
    try:
        if m.group(8):
            tz = timezone.utc
        else:
            off_h, off_m = int(m.group(10)), int(m.group(11))
            if off_h > 23 or off_m > 59:
                return None
            sign = 1 if m.group(9) == "+" else -1
            tz = timezone(sign * timedelta(hours=off_h, minutes=off_m))
        instant = datetime(year, month, day, hour, minute, second, micro, tzinfo=tz)
    except ValueError:
        return None  # day 31 of a 30-day month, second 60…
    try:
        return instant.astimezone(timezone.utc)
    except OverflowError:
        return instant   # the same instant, which comparisons and `to_micros` take as they take any


def format_instant(instant: datetime) -> str:
    """RFC 3339 in UTC with `Z`, seconds always, a fraction only when there is one; in its own
    offset when the instant lies in UTC outside years 1 to 9999."""
    try:
        instant = instant.astimezone(timezone.utc)
        suffix = "Z"
    except OverflowError:
        offset = instant.utcoffset() or timedelta(0)
        seconds = int(abs(offset).total_seconds())
        suffix = f"{'-' if offset < timedelta(0) else '+'}{seconds // 3600:02d}:{seconds // 60 % 60:02d}"
        if seconds % 60:      # a caller's offset RFC 3339 has no words for: kept, so the instant is
            suffix += f":{seconds % 60:02d}"
    # written out rather than by strftime, whose %Y does not pad a year before 1000 to four digits
    text = (f"{instant.year:04d}-{instant.month:02d}-{instant.day:02d}"
            f"T{instant.hour:02d}:{instant.minute:02d}:{instant.second:02d}")
    if instant.microsecond:
        text += f".{instant.microsecond:06d}".rstrip("0")
    return text + suffix


def to_micros(instant: datetime) -> int:
    """Exact microseconds since the Unix epoch of an aware datetime."""
    return (instant - _EPOCH) // _MICROSECOND


def current_instant(now: datetime | str | None = None) -> datetime:
    """`now` as an aware datetime: as given, parsed from RFC 3339 text, or this host's clock (None).
    ValueError for naive datetimes, unparsable text and any other type: a caller's mistake, not a
    document's."""
    if now is None:
        return datetime.now(timezone.utc)
    if isinstance(now, str):
        parsed = parse_instant(now)
        if parsed is None:
            raise ValueError(f"not an RFC 3339 instant: {now!r}")
        return parsed
    if not isinstance(now, datetime):
        raise ValueError(f"now must be a timezone-aware datetime, RFC 3339 text or None, "
                         f"not {type(now).__name__}")
    if now.tzinfo is None or now.utcoffset() is None:
        raise ValueError("now must be timezone-aware")
    return now


def check_skew(skew_seconds: object) -> int:
    """`skew_seconds` if it is a non-negative integer; ValueError otherwise (a caller's mistake)."""
    if isinstance(skew_seconds, bool) or not isinstance(skew_seconds, int) or skew_seconds < 0:
        raise ValueError(f"skew_seconds must be a non-negative integer, not {skew_seconds!r}")
    return skew_seconds


def now_micros(now: datetime | str | None = None) -> int:
    """`now` (see `current_instant`) in epoch microseconds."""
    return to_micros(current_instant(now))
